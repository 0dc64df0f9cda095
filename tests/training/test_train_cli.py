"""`ray-efa train`: bad settings and plans that cannot fit end before Ray starts; `--local` trains end to end and
says honestly that a gloo run proves nothing about EFA."""

import argparse
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from ray_efa.cli import train
from ray_efa.core.context import parse_overrides, resolve_settings
from ray_efa.training.dataset import EVAL, ROW_COLUMN
from ray_efa.training.inputs import driver_datasets
from ray_efa.training.local import LOCAL_PRESET, local_settings
from ray_efa.training.run_summary import find_summaries
from ray_efa.training.tiny_model import MODEL_FOLDER
from tests.ci import unavailable


def tree_bytes(folder) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder`: its bytes and modification time (ns), by relative path."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def run_cli(*argv: str) -> int:
    """The exit code the process would have (resolve_or_exit raises SystemExit for bad settings)."""
    parser = argparse.ArgumentParser(prog="ray-efa")
    train.register(parser.add_subparsers(dest="command", required=True).add_parser, "train")
    try:
        args = parser.parse_args(["train", *argv])
        return int(args.run(args) or 0)
    except SystemExit as exit_:
        return int(exit_.code or 0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--local", "-c", "seqLen=40000"], "seqLen: must be <= 32768"),
        (["--local", "-c", "microBatch=0"], "microBatch: must be auto or an integer >= 1"),
        (["--local", "-c", "model=llama"], "model: must be one of"),
        (["--local", "-c", "learningRate=-0.1"], "learningRate: must be > 0"),
        (["--local", "-c", "stepz=3"], "stepz: unknown setting (did you mean steps?)"),
        # the cluster path also plans memory: 32 x 8192 tokens of Qwen2.5-1.5B fit an L4 with no auto lever
        (["-c", "microBatch=32", "-c", "seqLen=8192", "-c", "storagePath=s3://b/p"], "GiB per GPU"),
    ],
    ids=["seq-len", "micro-batch", "preset", "learning-rate", "typo", "memory"],
)
def test_bad_settings_exit_2_before_ray_starts(capsys, argv, message):
    import ray

    assert run_cli(*argv) == 2
    assert message in capsys.readouterr().err
    assert not ray.is_initialized()


def test_local_preset_sits_below_dash_c():
    # GIVEN the --local preset layer and `-c steps=3`
    resolved = resolve_settings(parse_overrides(["steps=3"]), extra_layers=[("--local preset", LOCAL_PRESET)])
    # THEN -c wins where both set a value, and the preset supplies the rest
    assert resolved.settings.training.steps == 3 and resolved.sources["steps"] == "-c"
    assert resolved.settings.training.model == "tiny" and resolved.sources["model"] == "--local preset"


@pytest.mark.ray
def test_local_run_trains_prints_the_table_and_passes_the_gate_honestly(tmp_path, capsys, monkeypatch):
    import ray

    # the local driver sets these for its workers; monkeypatch puts this process's values back afterwards
    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")
    monkeypatch.setenv("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("RAY_EFA_MODEL_CACHE", str(tmp_path / "model-cache"))  # an empty one: the tiny model is made
    try:
        # WHEN `ray-efa train --local` runs a short version of the preset, with no inputs given
        code = run_cli(
            "--local",
            "--name",
            "cli-local",
            "--logs-dir",
            str(tmp_path / "nccl"),
            "-c",
            f"storagePath={tmp_path}",
            "-c",
            "steps=10",
            "-c",
            "checkpointEvery=0",
        )
        # the held-out split the run evaluated, read again here from the same inputs while its cluster is up
        held_out = driver_datasets(local_settings().replace(storagePath=str(tmp_path)))[EVAL]
        rows = (
            np.concatenate([b[ROW_COLUMN] for b in held_out.iter_batches(batch_format="numpy")]) if code == 0 else None
        )
    finally:
        ray.shutdown()
    out = capsys.readouterr().out
    # THEN it succeeds, with the final table, the checkpoint in storagePath, and a gate that proves nothing locally
    assert code == 0
    assert "training summary: cli-local" in out and "steps        1..10" in out
    assert f"last checkpoint: {tmp_path}/cli-local/checkpoint_000010" in out
    assert "proves nothing about EFA (exit 3)" in out
    # having fine-tuned the tiny model folder it made in the model cache, on a data set it names, with an eval loss
    (root,) = (tmp_path / "model-cache" / "tiny-model").iterdir()
    assert f"tiny model: fine-tuning modelPath {root / MODEL_FOLDER} on dataset {root / 'data'}" in out
    assert f"data: {root / 'data'}, 0.1 of its documents held out" in out
    assert "| eval loss " in out and "unigram " in out
    # and the machine-readable summary that `ray-efa compare` reads from two runs' logs
    (summary,) = find_summaries(out.splitlines())
    assert (summary["name"], summary["network"], summary["steps"]) == ("cli-local", "efa", 10)
    assert summary["dataset"] == str(root / "data") and math.isfinite(summary["eval_loss"])
    assert summary["eval_step"] == 10 and math.isfinite(summary["eval_unigram_entropy"])
    # over every held-out row, once (none of the world-size remainder dropped), its baseline the entropy of those
    # rows' target tokens as counted here
    assert rows is not None  # read whenever the run succeeded, which the test asserted above
    counts = np.bincount(rows[:, 1:].reshape(-1))
    p = counts[counts > 0] / counts.sum()
    assert summary["eval_tokens"] == counts.sum()
    assert summary["eval_unigram_entropy"] == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-9)
    # naming where it ran: this machine, 2 CPU workers on 1 host; never the settings' 2 x g6.12xlarge
    assert (summary["instance_type"], summary["hosts"], summary["nodes"]) == ("local", 1, 1)
    assert (summary["device"], summary["devices"]) == ("cpu", 2)
    # in the precision it trained in: fp32 on CPU (no mixed precision), whatever the precision setting says of a GPU
    assert (summary["precision"], summary["grad_reduce_dtype"]) == ("fp32", "fp32")
    # and the gate's logs went into a safe output folder, with its record
    assert (tmp_path / "nccl" / ".ray-efa-output.json").is_file()
    # WHEN the same command runs again: THEN it is refused before Ray starts, and the first run's files are unchanged
    before = tree_bytes(tmp_path / "cli-local")
    assert (
        run_cli(
            "--local",
            "--name",
            "cli-local",
            "--logs-dir",
            str(tmp_path / "nccl"),
            "-c",
            f"storagePath={tmp_path}",
            "-c",
            "steps=10",
            "-c",
            "checkpointEvery=0",
        )
        == 2
    )
    assert f"the run folder {tmp_path}/cli-local exists" in capsys.readouterr().err
    assert not ray.is_initialized() and tree_bytes(tmp_path / "cli-local") == before


@pytest.mark.ray
def test_local_run_trains_a_random_initialization_of_a_llama_config_json(tmp_path, capsys, monkeypatch):
    import ray

    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")
    monkeypatch.setenv("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    # GIVEN a tiny Llama's config.json (llama3 RoPE, tied embeddings, as Llama 3.2's) and nothing else: no weights
    config = os.path.join(os.path.dirname(__file__), "fixtures", "families", "llama.json")
    try:
        # WHEN `ray-efa train --local -c modelConfig=<it>` runs
        code = run_cli(
            "--local",
            "--name",
            "cli-llama",
            "--logs-dir",
            str(tmp_path / "nccl"),
            "-c",
            f"modelConfig={config}",
            "-c",
            f"storagePath={tmp_path}",
            "-c",
            "steps=4",
            "-c",
            "reportEvery=2",
            "-c",
            "checkpointEvery=0",
        )
    finally:
        ray.shutdown()
    out = capsys.readouterr().out
    # THEN it trains a random initialization of that Llama (no tiny model folder, no modelPath), and says so
    assert code == 0, out[-3000:]
    assert "training summary: cli-llama" in out and "tiny model:" not in out
    (summary,) = find_summaries(out.splitlines())
    assert (summary["model_type"], summary["steps"], summary["decoder_block"]) == ("llama", 4, "lean")
    assert summary["architecture"] == "llama"  # the config.json's, not the `model` preset's name
    # and whose post-backward its gradients took (training.one_rank where a rank is alone in its shard group)
    assert summary["gradient_path"] == ("one-rank" if summary["devices"] == 1 else "fsdp2"), summary["devices"]


def _alone_on_the_machine() -> list[str]:
    """A command prefix that runs a process in a PID namespace of its own, as in a fresh container: it sees no other
    process, so no Ray cluster another test (on the other xdist worker) runs. Root gets it directly; anyone else
    through a user namespace. Empty when neither is allowed here."""
    for prefix in (
        ["unshare", "--pid", "--fork", "--mount-proc"],
        ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"],
    ):
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0:
                return prefix
        except (OSError, subprocess.TimeoutExpired):
            pass
    return []


@pytest.mark.ray
def test_cluster_run_away_from_a_cluster_says_so(tmp_path):
    # `address="auto"` joins ANY Ray cluster it sees running on the machine: the run goes where it sees none
    alone = _alone_on_the_machine()
    if not alone:
        unavailable(
            "unshare cannot make a PID namespace here (needs root or user namespaces); without one, "
            "address=auto would join the Ray cluster of another test"
        )
    # GIVEN no Ray cluster (and an empty temp dir as Ray's record of the last one) and settings that plan fine
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = str(tmp_path)
    # WHEN `ray-efa train` runs without --local
    done = subprocess.run(
        [*alone, sys.executable, "-m", "ray_efa.cli", "train", "-c", "gpuNodeCount=1", "-c", "microBatch=1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # THEN it fails with a sentence, not a traceback, and points at --local
    assert done.returncode == 1, done.stderr[-3000:]
    assert "no Ray cluster to join" in done.stderr and "--local" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.ray
def test_a_local_run_starts_its_own_cluster_whatever_ray_address_names(monkeypatch):
    import ray

    from ray_efa.training import driver

    # GIVEN RAY_ADDRESS naming another cluster: here an address where nothing listens, so joining it would fail
    # (a joined cluster would also be another Ray instance on the machine, and its jobs' workers)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    for name in (
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S",
        "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER",
        "RAY_TRAIN_ENABLE_PRINT_PATCH",
    ):
        monkeypatch.setenv(name, os.environ.get(name, "0.2" if name.endswith("_S") else "0"))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    try:
        # WHEN the local driver starts Ray
        driver.init_ray(local=True)
        # THEN it is the run's own cluster, started here, not the one RAY_ADDRESS named
        assert ray.is_initialized()
        assert ray.get_runtime_context().gcs_address != "127.0.0.1:1"
        assert os.environ.get("RAY_ADDRESS") != "127.0.0.1:1"
    finally:
        ray.shutdown()


def test_a_train_function_whose_import_is_missing_is_exit_2_before_ray_starts(tmp_path, capsys):
    import ray

    # GIVEN your function in codeDir, whose module imports a package this machine does not have
    (tmp_path / "my_train.py").write_text(
        "import json\nimport wandb_not_installed_here\n\n\ndef fit(config):\n    pass\n"
    )
    # WHEN `ray-efa train --local` runs it
    code = run_cli(
        "--local",
        "-c",
        "trainFunction=my_train:fit",
        "-c",
        f"codeDir={tmp_path}",
        "-c",
        f"storagePath={tmp_path / 'storage'}",
    )
    # THEN exit 2 in seconds, naming trainFunction, the file, the line and codeDir, before Ray starts (the workers
    # would otherwise each fail to import it, with three tracebacks, after Ray started)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "trainFunction: must name a module whose imports are there" in err
    assert (
        f"{tmp_path / 'my_train.py'} (line 2: import wandb_not_installed_here)" in err and f"codeDir {tmp_path}" in err
    )
    assert "Traceback" not in err and not ray.is_initialized()
    assert not (tmp_path / "storage").exists()
