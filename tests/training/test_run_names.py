"""`ray-efa train --name`: the name of an existing run folder is refused before Ray starts (a second run would restore
the first one's checkpoint, print its numbers as its own and replace its settings.json) unless `--resume`, which says
what it continues from and refuses other training settings. Nothing in the earlier run's folder changes.

The earlier run's folder is laid out here as driver.run leaves one (settings.json, metrics.jsonl, a checkpoint
folder); tests/training/test_train_cli.py refuses a second run over a real one (ray-marked).
"""

from __future__ import annotations

import json

import pytest

from ray_efa.training import driver
from ray_efa.training.local import local_settings
from tests.training.test_train_cli import run_cli, tree_bytes


@pytest.fixture
def earlier_run(tmp_path):
    """A finished local run `killtest` under storagePath tmp_path/storage, with the settings it ran with."""
    storage = tmp_path / "storage"
    folder = storage / "killtest"
    (folder / "checkpoint_000010").mkdir(parents=True)
    (folder / "checkpoint_000010" / "train_state.json").write_text(json.dumps({"step": 10}))
    (folder / "checkpoint_000005").mkdir()
    (folder / "metrics.jsonl").write_text('{"step": 10, "loss": 3.2}\n')
    settings = local_settings().replace(storagePath=str(storage), steps=10)
    (folder / "settings.json").write_text(settings.to_json())
    return folder


def train(tmp_path, *argv: str) -> int:
    return run_cli(
        "--local",
        "--logs-dir",
        str(tmp_path / "nccl"),
        "-c",
        f"storagePath={tmp_path / 'storage'}",
        "-c",
        "steps=10",
        *argv,
    )


def test_a_second_run_of_the_same_name_is_refused_and_changes_nothing(tmp_path, earlier_run, capsys):
    import ray

    before = tree_bytes(earlier_run)
    # WHEN `ray-efa train --local --name killtest` runs again
    assert train(tmp_path, "--name", "killtest") == 2
    # THEN exit 2, naming the folder and the way out, before Ray starts; the earlier run's files are byte-identical
    err = capsys.readouterr().err
    assert f"--name: the run folder {earlier_run} exists (an earlier run of that name)" in err
    assert "add --resume to continue that run with the same settings, got 'killtest'" in err
    assert not ray.is_initialized()
    assert tree_bytes(earlier_run) == before


def test_resume_refuses_other_training_settings(tmp_path, earlier_run, capsys):
    import ray

    before = tree_bytes(earlier_run)
    # WHEN it is resumed with more steps (the new run would silently continue the old one)
    assert train(tmp_path, "--name", "killtest", "--resume", "-c", "steps=40", "-c", "learningRate=0.01") == 2
    # THEN refused, naming each changed setting with its two values
    err = capsys.readouterr().err
    assert "was trained with other settings (learningRate:" in err and "steps: 10 then, 40 now" in err
    assert not ray.is_initialized() and tree_bytes(earlier_run) == before


def test_resume_needs_a_run_to_resume(tmp_path, capsys):
    assert train(tmp_path, "--name", "never-ran", "--resume") == 2
    assert f"there is no run folder {tmp_path / 'storage' / 'never-ran'} to resume" in capsys.readouterr().err
    assert not (tmp_path / "storage" / "never-ran").exists()
    assert train(tmp_path, "--resume") == 2
    assert "--resume needs --name" in capsys.readouterr().err


def test_resume_with_the_same_settings_says_what_it_continues_from(tmp_path, earlier_run, capsys):
    settings = local_settings().replace(storagePath=str(tmp_path / "storage"), steps=10)
    # a new split of the same global batch may change (the workers check it against the checkpoint)
    folder = driver.claim_run_folder(settings.replace(microBatch=1), "killtest", resume=True)
    assert folder is not None and folder.local_path() == earlier_run
    assert capsys.readouterr().out == f"resuming {earlier_run} from checkpoint_000010\n"


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".hidden", "/tmp/x", "a b", "x" * 201])
def test_a_run_name_that_is_not_one_safe_folder_name_is_exit_2_and_writes_nothing(tmp_path, capsys, monkeypatch, name):
    import ray

    # GIVEN an empty working folder, storage folder and model cache (the tiny model would be made on first use)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_EFA_MODEL_CACHE", str(tmp_path / "model-cache"))
    # WHEN a local run is named with a path, a hidden or dotted name, a space, or 201 characters
    code = train(tmp_path, "--name", name)
    # THEN exit 2 naming --name and the value, before Ray starts, and nothing written anywhere under tmp_path
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("ray-efa train: --name ") and repr(name) in err and len(err.splitlines()) == 1
    assert not ray.is_initialized()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["killtest-2", "local-tiny-20261207-055212", "Run_1.v2"])
def test_a_safe_run_name_is_one_folder_under_storage_path(name):
    from ray_efa.training.run_folder import RunFolder, run_name_problem

    assert run_name_problem(name) is None
    assert RunFolder.of("/runs", name).path == f"/runs/{name}"


def test_the_driver_refuses_a_run_name_that_is_a_path_too(tmp_path, capsys):
    # `python -m ray_efa.training.driver` and any caller of driver.run: the same check, before anything is written
    settings = local_settings().replace(storagePath=str(tmp_path / "storage"))
    assert driver.run(settings, local=True, name="../escape", logs_dir=tmp_path / "nccl") == 2
    assert "--name: must be one folder name under storagePath, not a path" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
