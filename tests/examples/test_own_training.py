"""examples/own-training: a Ray Train function in its own package, run by `ray-efa train --local` through the
driver on a real local Ray cluster (2 CPU workers, gloo): the process group works, the loss falls, the summary holds
what it reported, and the gate says what a gloo run can prove."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ray_efa.training.run_summary import find_summaries

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [
    sys.executable,
    "-m",
    "ray_efa.cli",
    "train",
    "--local",
    "-c",
    "trainFunction=own_training.train:train_func",
    "-c",
    "codeDir=examples/own-training/src",
]


def _env() -> dict[str, str]:
    # The README's command, from the repository root; own_training is importable only through codeDir.
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    # RAY_DEDUP_LOGS=0: Ray folds lines that differ only in their numbers when they come from different processes
    # within 5 s ("epoch 2/4 ..." from the lost worker, "epoch 3/4 ..." from its replacement), and the tests read
    # every epoch line
    env.update(RAY_TRAIN_HEALTH_CHECK_INTERVAL_S="0.5", COLUMNS="200", RAY_DEDUP_LOGS="0")
    return env


@pytest.mark.ray
def test_own_package_trains_on_the_local_cluster_through_the_driver(tmp_path):
    # WHEN the README's local command runs, with a short trainConfig
    result = subprocess.run(
        [
            *COMMAND,
            "-c",
            'trainConfig={"epochs": 6, "lr": 0.01}',
            "--logs-dir",
            str(tmp_path / "nccl"),
            "-c",
            f"storagePath={tmp_path}",
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = result.stdout
    # THEN it succeeds: the preflight ran before the function, both workers trained in one process group
    assert result.returncode == 0, (out[-3000:], result.stderr[-3000:])
    assert "all_reduce (sum, float32) over 2 ranks" in out
    assert out.index("all_reduce (sum") < out.index("epoch 1/6")
    assert "epoch 6/6" in out and "(2 workers)" in out
    # the summary holds what the function reported last, and where it ran
    (summary,) = find_summaries(out.splitlines())
    assert (summary["epoch"], summary["world_size"], summary["devices"], summary["instance_type"]) == (6, 2, 2, "local")
    assert summary["loss"] < 0.5 * summary["first_loss"]
    # what it was given is recorded (compare names the trainConfig keys two runs differ in), nothing else of it
    assert (summary["training"]["train_function"], summary["training"]["train_config"]) == (
        "own_training.train:train_func",
        {"epochs": 6, "lr": 0.01},
    )
    assert "own_training" not in json.dumps({k: v for k, v in summary.items() if k not in ("name", "training")})
    # a line per report it made, as it made it (training.progress), and a first line at once
    reports = [line for line in out.splitlines() if "report " in line and ": step " in line]
    assert len(reports) == 6 and "epoch 6 | " in reports[-1] and "loss " in reports[-1], reports
    assert out.splitlines()[0] == "[ray-efa] loading torch and Ray for a local run"
    # and the gate's verdict is honest about gloo
    assert "proves nothing about EFA (exit 3)" in out
    # every report is in the run's metrics history, as the built-in's are (ray-efa report reads it)
    history = [json.loads(line) for line in (tmp_path / summary["name"] / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["epoch"]) for r in history] == [(e, e) for e in range(1, 7)]
    assert history[-1]["loss"] == summary["loss"]


def test_a_missing_function_is_exit_2_naming_train_function_before_ray_starts():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ray_efa.cli",
            "train",
            "--local",
            "-c",
            "trainFunction=own_training.train:fit",
            "-c",
            "codeDir=examples/own-training/src",
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert "trainFunction: must name a function of own_training.train" in result.stderr
    assert "(it defines train_func)" in result.stderr and "Traceback" not in result.stderr
    assert "ray" not in result.stdout.lower()  # nothing started


LOSE_A_WORKER = """
import os
import time

import ray.train

from own_training import train as own


def train_func(config):
    # The example, with one lost worker: rank 1's process ends right after the epoch-2 report (a checkpoint), once.
    report = ray.train.report
    rank = ray.train.get_context().get_world_rank()

    def report_then_lose_a_worker(metrics, *args, **kwargs):
        report(metrics, *args, **kwargs)
        if metrics["epoch"] == 2 and rank == 1 and not os.path.exists({marker!r}):
            open({marker!r}, "w").close()
            time.sleep(3)  # past a few controller polls (0.5 s here): the epoch-2 checkpoint is registered
            os._exit(1)  # no exception, no cleanup: the process is gone, as on a lost node

    ray.train.report = report_then_lose_a_worker
    try:
        return own.train_func(config)
    finally:
        ray.train.report = report
"""


@pytest.mark.ray
def test_a_lost_worker_resumes_from_the_last_checkpoint_the_function_reported(tmp_path):
    # GIVEN the example's package beside a function that runs it and loses a worker after the epoch-2 checkpoint
    src = tmp_path / "src"
    shutil.copytree(ROOT / "examples" / "own-training" / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    (src / "lose_a_worker.py").write_text(textwrap.dedent(LOSE_A_WORKER.format(marker=str(tmp_path / "lost"))))
    # WHEN it runs locally with maxFailures 1
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ray_efa.cli",
            "train",
            "--local",
            "--name",
            "resume",
            "-c",
            "trainFunction=lose_a_worker:train_func",
            "-c",
            f"codeDir={src}",
            "-c",
            "maxFailures=1",
            "-c",
            "preflight=false",
            "-c",
            'trainConfig={"epochs": 4, "samples": 256}',
            "-c",
            f"storagePath={tmp_path}",
            "--logs-dir",
            str(tmp_path / "nccl"),
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = result.stdout
    # THEN the worker was lost once, and the second attempt went on from epoch 3 with the checkpoint's weights
    assert result.returncode == 0, (out[-3000:], result.stderr[-3000:])
    assert (tmp_path / "lost").exists() and "retrying from the last checkpoint, attempt 2 of 2" in out + result.stderr
    assert "resumed from the checkpoint of epoch 2" in out
    assert out.count("epoch 1/4") == 1 and out.count("epoch 2/4") == 1 and "epoch 4/4" in out
    assert out.index("resumed from the checkpoint of epoch 2") < out.index("epoch 3/4")
    # and the run's history is one run: epochs 1-4, each once, the loss still falling across the restart
    history = [json.loads(line) for line in (tmp_path / "resume" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in history] == [1, 2, 3, 4]
    assert history[-1]["loss"] < history[0]["loss"] and history[-1]["first_loss"] == history[0]["loss"]


def test_a_local_run_says_what_it_does_within_5_seconds():
    import signal
    import time

    started = time.monotonic()
    process = subprocess.Popen(
        [*COMMAND, "-c", 'trainConfig={"epochs": 1}'],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        elapsed = time.monotonic() - started
    finally:
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the run ends (Ray, if it had started, with it)
        process.wait(timeout=120)
    assert first.strip() == "[ray-efa] loading torch and Ray for a local run" and elapsed < 5, (first, elapsed)
