"""Safe output folders (core/output_dir.py): a command writes only its own files and never a user's or the project's.

The commands are run for real (`ray-efa manifests` synthesizes with cdk8s); nothing is mocked.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from ray_efa.core import output_dir
from ray_efa.core.output_dir import RECORD_NAME, OutputDirError, check_output_dir, publish
from tests.ops.cli_helpers import run_cli

ROOT = output_dir.PROJECT_ROOT


def _tree(folder):
    """Every path under `folder` with its bytes (None for folders): what a refused command must leave alone."""
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes()) for p in sorted(folder.rglob("*"))}


def test_manifests_refuses_a_folder_holding_the_users_files(tmp_path, capsys):
    # GIVEN deploy/ray holding the user's kustomization and notes (the report: both were deleted)
    out = tmp_path / "deploy" / "ray"
    out.mkdir(parents=True)
    (out / "kustomization.yaml").write_text("resources: []\n")
    (out / "NOTES.md").write_text("mine\n")
    before = _tree(tmp_path)
    # WHEN manifests is asked to write there THEN exit 2 names the files, and nothing changed
    assert run_cli("manifests", "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert "did not write (NOTES.md, kustomization.yaml)" in err and "Traceback" not in err
    assert _tree(tmp_path) == before


def test_manifests_refuses_the_working_directory(tmp_path, monkeypatch, capsys):
    # GIVEN a folder holding the user's code, as the working directory
    (tmp_path / "mywork.py").write_text("print('mine')\n")
    monkeypatch.chdir(tmp_path)
    for out in (".", str(tmp_path), ".."):
        assert run_cli("manifests", "--out", out) == 2
        assert "refusing to write into" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mywork.py"]
    # even an empty working directory is refused: `--out .` is never what was meant
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    assert run_cli("manifests", "--out", ".") == 2
    assert "it is the working directory" in capsys.readouterr().err
    assert list(empty.iterdir()) == []


@pytest.mark.parametrize(
    "relative", ["", "k8s", "core", "infra", "training", "ops", "cli", "tests", "ray_efa", "k8s/generated", "tests/out"]
)
def test_manifests_refuses_the_repository_and_its_source_folders(relative, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # not the cause of the refusal
    target = ROOT / relative if relative else ROOT
    existed = target.exists()
    assert run_cli("manifests", "--out", str(target)) == 2
    err = capsys.readouterr().err
    assert "refusing to write into" in err and ("repository" in err or "source folder" in err)
    assert target.exists() == existed  # not even created


@pytest.mark.parametrize(("umask", "folders", "files"), [(0o077, 0o700, 0o600), (0o022, 0o755, 0o644)])
def test_new_folders_and_files_follow_the_umask(tmp_path, umask, folders, files):
    old = os.umask(umask)
    try:
        assert run_cli("manifests", "--allow-no-storage", "--out", str(tmp_path / "a" / "dist")) == 0
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "dist"):
        assert stat.S_IMODE(folder.stat().st_mode) == folders
    assert {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "a" / "dist").iterdir()} == {files}


def test_a_second_run_replaces_its_own_files_and_refuses_a_file_added_since(tmp_path, capsys):
    out = tmp_path / "dist"
    assert run_cli("manifests", "--allow-no-storage", "--out", str(out)) == 0
    assert (
        run_cli("manifests", "--allow-no-storage", "--out", str(out), "-c", "gpuNodeCount=3") == 0
    )  # its own files: replaced
    assert "replicas: 3" in (out / "0001-raycluster.yaml").read_text()
    (out / "kustomization.yaml").write_text("resources: []\n")
    capsys.readouterr()
    assert run_cli("manifests", "--out", str(out)) == 2
    assert "kustomization.yaml" in capsys.readouterr().err
    assert (out / "kustomization.yaml").read_text() == "resources: []\n"


def test_an_empty_existing_folder_is_fine_and_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert run_cli("manifests", "--allow-no-storage", "--out", str(tmp_path / "empty")) == 0
    (tmp_path / "afile").write_text("x")
    assert run_cli("manifests", "--out", str(tmp_path / "afile")) == 2
    assert "it is a file" in capsys.readouterr().err and (tmp_path / "afile").read_text() == "x"


def test_publish_is_all_or_nothing_and_removes_the_folders_it_created(tmp_path):
    def broken(staging):
        (staging / "half.yaml").write_text("half")
        raise RuntimeError("synthesis failed")

    with pytest.raises(RuntimeError):
        publish(tmp_path / "new" / "out", broken, command="test")
    assert list(tmp_path.iterdir()) == []
    # an existing folder of an earlier run keeps its files
    out = tmp_path / "out"
    publish(out, lambda staging: (staging / "a.yaml").write_text("a"), command="test")
    before = _tree(out)
    with pytest.raises(RuntimeError):
        publish(out, broken, command="test")
    assert _tree(out) == before


def test_publish_removes_only_recorded_entries_and_a_record_cannot_reach_outside(tmp_path):
    out = tmp_path / "out"
    publish(out, lambda s: [(s / n).write_text(n) for n in ("a", "b")], command="test")
    (tmp_path / "outside").write_text("keep")
    record = json.loads((out / RECORD_NAME).read_text())
    # a record edited to name a path outside the folder: never followed
    (out / RECORD_NAME).write_text(json.dumps({**record, "entries": ["a", "b", "../outside", "/etc/passwd"]}))
    assert publish(out, lambda s: (s / "a").write_text("new"), command="test") == [out / "a"]
    assert sorted(p.name for p in out.iterdir()) == [RECORD_NAME, "a"]
    assert (tmp_path / "outside").read_text() == "keep"


def test_a_corrupt_record_refuses_rather_than_guessing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / RECORD_NAME).write_text("{not json")
    with pytest.raises(OutputDirError, match="record .* is unreadable"):
        check_output_dir(out)


def test_demo_checks_both_folders_before_any_step(tmp_path, capsys):
    # GIVEN a --dist holding a user's file: demo must refuse before it plans, synthesizes or trains (seconds, not minutes)
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "mine.txt").write_text("mine")
    assert run_cli("demo", "--cdk-out", str(tmp_path / "cdk.out"), "--dist", str(dist)) == 2
    captured = capsys.readouterr()
    assert "mine.txt" in captured.err and "1/5 plan" not in captured.out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dist"]
    assert run_cli("demo", "--cdk-out", str(ROOT / "infra"), "--dist", str(tmp_path / "d")) == 2
    assert "source folder infra/" in capsys.readouterr().err


def test_a_cloud_assembly_of_cdk_synth_counts_as_the_cdks_own(tmp_path):
    from ray_efa.cli.demo import is_cloud_assembly_entry

    out = tmp_path / "cdk.out"
    out.mkdir()
    for name in ("cdk.out", "manifest.json", "tree.json", "ray-train-gpu.template.json", "asset.0123"):
        (out / name).write_text("{}")
    assert check_output_dir(out, accept=is_cloud_assembly_entry) == out
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputDirError, match="notes.txt"):
        check_output_dir(out, accept=is_cloud_assembly_entry)


def test_train_refuses_a_logs_dir_with_foreign_files_before_ray_starts(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "mine.log").write_text("mine")
    assert run_cli("train", "--local", "--logs-dir", str(logs)) == 2
    assert "mine.log" in capsys.readouterr().err
    assert [p.name for p in logs.iterdir()] == ["mine.log"]
