"""`make demo`, end to end: plan, synth with cdk-nag, manifests, local training and the transport verdict."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa.training.run_summary import find_summaries

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_every_step_and_writes_stack_and_manifests(tmp_path):
    # GIVEN a machine without AWS credentials WHEN `ray-efa demo` runs (what `make demo` runs after installing)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE="/nonexistent",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
        RAY_TRAIN_HEALTH_CHECK_INTERVAL_S="0.5",
        COLUMNS="200",
        RAY_EFA_MODEL_CACHE=str(tmp_path / "model-cache"),
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ray_efa.cli",
            "demo",
            "--cdk-out",
            str(tmp_path / "cdk.out"),
            "--dist",
            str(tmp_path / "dist"),
            "--report",
            str(tmp_path / "report"),
            "-c",
            "gpuInstanceType=p5.48xlarge",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = result.stdout
    # THEN it succeeds, through all five steps, for the instance type given with -c
    assert result.returncode == 0, (out[-3000:], result.stderr[-3000:])
    for step in ("1/5 plan", "2/5 synth", "3/5 manifests", "4/5 train", "5/5 report"):
        assert step in out
    assert "p5.48xlarge" in out and "no unacknowledged findings" in out
    assert sorted(p.name for p in (tmp_path / "cdk.out").glob("*.template.json")) == [
        "ray-train-cluster.template.json",
        "ray-train-gpu.template.json",
    ]
    assert [p.name for p in sorted((tmp_path / "dist").glob("*.yaml"))] == [
        "0000-namespace.yaml",
        "0001-raycluster.yaml",
        "0002-rayjob-efa.yaml",
        "0003-rayjob-tcp.yaml",
    ]
    # the local run fine-tuned the tiny model folder on English text, with a held-out loss and its baseline, and the
    # gate said honestly what it can prove on a CPU
    assert "tiny model: fine-tuning modelPath" in out and "step 60/60" in out and "training summary" in out
    assert "| eval loss " in out and "unigram " in out
    assert "proves nothing about EFA" in out
    # and it learned: the loss fell from about ln(640) (a random model over the folder's 640 embeddings), and the
    # held-out loss, at steps 30 and 60, ends below the unigram baseline: context learned, not just which tokens are
    # common
    (summary,) = find_summaries(out.splitlines())
    assert summary["first_loss"] == pytest.approx(math.log(640), abs=0.15)
    assert summary["final_loss"] < 0.8 * summary["first_loss"]
    assert [line.split("|")[0].strip() for line in out.splitlines() if "| eval loss " in line] == [
        "step 30/60",
        "step 60/60",
    ]
    assert summary["eval_step"] == 60 and summary["eval_loss"] < summary["eval_unigram_entropy"] < math.log(512)
    assert summary["dataset"].startswith(str(tmp_path / "model-cache"))
    # with a checkpoint every checkpointEvery (30) steps and one at the end, in the run folder it names
    (folder,) = re.findall(r"^run folder: (\S+)", out, re.MULTILINE)
    assert sorted(p.name for p in Path(folder).glob("checkpoint_0*")) == ["checkpoint_000030", "checkpoint_000060"]
    # and it ends with the local run's report, its path printed
    report = tmp_path / "report"
    assert f"open {report / 'index.html'}" in out
    assert sorted(p.name for p in report.glob("*.png")) == [
        "loss.png",
        "memory.png",
        "optimizer.png",
        "step_time.png",
        "throughput.png",
    ]
    assert "Run report: local-tiny-" in (report / "index.html").read_text()
