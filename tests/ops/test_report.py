"""`ray-efa report`: charts and a self-contained HTML page from a real local run's folder (2 CPU workers, gloo), a run
killed mid-way, bad run folders, an S3 run folder (moto: the S3 API cannot exist here) and a missing matplotlib.

One real run for the module (the driver's `run`: training, summary, transport gate), about 20 seconds on 2 cores.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from ray_efa.core.settings import Settings
from ray_efa.ops import plots
from ray_efa.ops.report import ReportError, charts, read_run
from ray_efa.training import driver
from tests.ops.cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ["loss.png", "memory.png", "optimizer.png", "step_time.png", "throughput.png"]
# A global batch of one micro-batch a rank (2 ranks x 2 x 32 tokens): the report reads the run's records, not how the
# batch was split, and the default globalBatchTokens would be 4,096 micro-batches a step (minutes a step on 2 cores).
# Eager: inductor's C++ build on CPU would cost more than the run (tests/training/test_train_ray.py compiles).
RUN = {
    "model": "tiny",
    "steps": 8,
    "seqLen": 32,
    "microBatch": 2,
    "globalBatchTokens": 128,
    "compile": False,
    "learningRate": 3e-3,
    "warmupSteps": 2,
    "checkpointEvery": 4,
    "reportEvery": 1,
    "preflight": False,
    "dataPoolSize": 4,
}


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """The folder of a finished local run: history, settings, summary and verdict, as the driver leaves them."""
    import ray

    storage = tmp_path_factory.mktemp("ray_results")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")
        env.setenv("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
        env.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        try:
            code = driver.run(
                Settings.from_context({**RUN, "storagePath": str(storage)}),
                local=True,
                name="viz-run",
                logs_dir=storage / "nccl",
            )
        finally:
            ray.shutdown()
    assert code == 0
    return storage / "viz-run"


def _history(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def _assert_png(path: Path) -> None:
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.size[0] >= 800 and image.size[1] >= 400
    assert path.stat().st_size > 10_000  # a drawn chart, not an empty canvas
    assert plots.is_ray_efa_png(path)


pytestmark = [pytest.mark.ray, pytest.mark.xdist_group("ray-report")]  # run_folder: one real run for the module


def test_the_driver_leaves_settings_summary_and_verdict_in_the_run_folder(run_folder):
    settings = Settings.from_json((run_folder / "settings.json").read_text())
    assert settings.training.steps == 8 and settings.workload.storage_path == str(run_folder.parent)
    summary = json.loads((run_folder / "summary.json").read_text())
    assert (summary["name"], summary["steps"], summary["instance_type"], summary["devices"]) == (
        "viz-run",
        8,
        "local",
        2,
    )
    verdict = json.loads((run_folder / "verdict.json").read_text())
    assert verdict["status"] == "no-proof" and verdict["driver_exit_code"] == 0 and "PROCESS" in verdict["table"]


def test_report_of_a_real_run_has_every_chart_and_a_self_contained_page(run_folder, tmp_path, capsys):
    # WHEN the report of the run is written
    out = tmp_path / "report"
    assert run_cli("report", str(run_folder), "--out", str(out)) == 0
    printed = capsys.readouterr().out
    # THEN every chart is a real PNG that ray-efa drew, next to index.html and the folder's record
    assert sorted(p.name for p in out.iterdir()) == [".ray-efa-output.json", "index.html", *CHARTS]
    for name in CHARTS:
        _assert_png(out / name)
    assert f"open {out.resolve() / 'index.html'}" in printed and "no prediction line: the run ran on cpu" in printed
    # and the page carries each chart inline, the summary, the verdict and the settings, and fetches nothing
    page = (out / "index.html").read_text()
    for name in CHARTS:
        assert base64.b64encode((out / name).read_bytes()).decode() in page
    references = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]*)""", page)
    assert len(references) == len(CHARTS) and all(r.startswith("data:image/png;base64,") for r in references)
    assert "<script" not in page and "<link" not in page and "@import" not in page
    summary = json.loads((run_folder / "summary.json").read_text())
    assert f"{summary['final_loss']:.4f}" in page and "this machine, 2 x cpu" in page
    assert "no-proof" in page and "NO PROOF" in page
    assert "<td>gradClip</td><td>1.0</td>" in page and "<td>steps</td><td>8</td>" in page


def test_report_json_names_the_files_and_the_gaps(run_folder, tmp_path, capsys):
    out = tmp_path / "report"
    assert run_cli("report", str(run_folder), "--out", str(out), "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["name"], data["reports"], data["first_step"], data["last_step"]) == ("viz-run", 8, 1, 8)
    assert data["index"] == str(out.resolve() / "index.html") and len(data["files"]) == 6
    assert any("no prediction line" in note for note in data["notes"])
    # and an error under --json is JSON too
    assert run_cli("report", str(tmp_path / "nothing"), "--json") == 2
    assert json.loads(capsys.readouterr().out)["exit_code"] == 2


def test_the_charts_hold_the_runs_series(run_folder):
    # GIVEN the run folder's history as written during the run
    history = _history(run_folder)
    steps = [r["step"] for r in history]
    assert steps == list(range(1, 9))
    # WHEN its charts are drawn
    figures = charts(read_run(str(run_folder)))
    assert sorted(figures) == ["loss", "memory", "optimizer", "step_time", "throughput"]

    def lines(name):
        return {line.get_label(): line for figure in [figures[name]] for ax in figure.axes for line in ax.get_lines()}

    # THEN each plots the recorded values against their steps, with units on the axes
    loss = lines("loss")["training loss"]
    assert list(loss.get_xdata()) == steps and list(loss.get_ydata()) == [r["loss"] for r in history]
    assert figures["loss"].axes[0].get_ylabel() == "loss (cross-entropy, nats)"
    tokens = lines("throughput")["tokens/s (all devices)"]
    assert list(tokens.get_ydata()) == pytest.approx([r["throughput/tokens_per_s"] for r in history])
    step_time = lines("step_time")["measured (mean over each report interval)"]
    assert figures["step_time"].axes[0].get_ylabel() in ("step time (ms)", "step time (s)")
    assert len(step_time.get_xdata()) == 8
    assert not [label for label in lines("step_time") if str(label).startswith("predicted")]  # a CPU run: none
    assert list(lines("memory")["peak resident (CPU)"].get_ydata()) == [r["memory/peak_rss_gib"] for r in history]
    norms = lines("optimizer")["gradient norm (before clipping)"]
    assert list(norms.get_ydata()) == [r["grad_norm"] for r in history]
    assert list(lines("optimizer")["learning rate"].get_ydata()) == [r["lr"] for r in history]


def test_a_gpu_run_gets_the_prediction_and_the_capacity_lines(run_folder):
    # GIVEN the real run's records, as if they came from 2 x p5en.48xlarge (H200) with those settings
    run = read_run(str(run_folder))
    run.settings = Settings.from_context({"gpuInstanceType": "p5en.48xlarge", "gpuNodeCount": 2})
    run.summary = {**(run.summary or {}), "device": "NVIDIA H200"}
    for record in run.history:
        record["memory/peak_allocated_gib"], record["memory/peak_reserved_gib"] = 60.0, 70.0
    # WHEN the charts are drawn
    figures = charts(run)
    # THEN the step time has core.perf's prediction for those settings as a line
    from ray_efa.core.strategy import choose

    predicted = [
        line for line in figures["step_time"].axes[0].get_lines() if str(line.get_label()).startswith("predicted")
    ]
    assert len(predicted) == 1
    scale = 1000.0 if figures["step_time"].axes[0].get_ylabel() == "step time (ms)" else 1.0
    assert predicted[0].get_ydata()[0] == pytest.approx(choose(run.settings).prediction.step_time_s * scale)
    # and memory is drawn against the H200's capacity and the planner's estimate
    labels = [str(line.get_label()) for line in figures["memory"].axes[0].get_lines()]
    assert "capacity of one NVIDIA H200: 139.8 GiB" in labels
    assert any(label.startswith("planner's estimate") for label in labels)
    assert {"peak allocated", "peak reserved"} <= set(labels)


def test_a_fine_tunes_eval_loss_is_drawn_and_summarized_against_its_unigram_baseline(run_folder):
    from ray_efa.ops.report import _summary_rows

    # GIVEN the real run's records, as if it had evaluated a held-out split of a data set at its last step
    run = read_run(str(run_folder))
    last = run.history[-1]
    last.update(eval_loss=4.9, eval_unigram_entropy=5.2)
    run.summary = {
        **(run.summary or {}),
        "dataset": "/data/text",
        "eval_loss": 4.9,
        "eval_step": last["step"],
        "eval_unigram_entropy": 5.2,
    }
    # WHEN the charts and the summary are made
    lines = {str(line.get_label()): line for line in charts(run)["loss"].axes[0].get_lines()}
    rows = dict(_summary_rows(run))
    # THEN the loss chart has the eval loss and the baseline as a level line, and the summary names both and the data
    assert list(lines["eval_loss"].get_ydata()) == [4.9]
    assert set(lines["unigram baseline (held out), 5.20"].get_ydata()) == {5.2}
    assert rows["data"] == "/data/text"
    assert rows["eval loss (held out)"] == (
        f"4.9000 at step {last['step']}; unigram baseline 5.2000 (a model that ignores context)"
    )


def _copy(run_folder: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "runs" / "viz-run"
    shutil.copytree(run_folder, copy)
    return copy


def test_a_run_killed_mid_way_is_reported_with_its_gaps_named(run_folder, tmp_path, capsys):
    # GIVEN a run killed while writing its sixth report: no summary, no verdict, a cut last line
    folder = _copy(run_folder, tmp_path)
    lines = (folder / "metrics.jsonl").read_text().splitlines(keepends=True)
    (folder / "metrics.jsonl").write_text("".join(lines[:5]) + lines[5][:40])
    (folder / "summary.json").unlink()
    (folder / "verdict.json").unlink()
    # WHEN it is reported
    out = tmp_path / "report"
    assert run_cli("report", str(folder), "--out", str(out)) == 0
    printed = capsys.readouterr().out
    # THEN the report holds the five complete reports and names each gap
    assert "5 reports, steps 1..5" in printed
    for gap in (
        "the last line of metrics.jsonl is cut short",
        "no summary.json: the run has not finished",
        "no verdict.json",
    ):
        assert gap in printed
    page = (out / "index.html").read_text()
    assert "not finished: no summary.json" in page and "No verdict" in page
    assert list(charts(read_run(str(folder)))["loss"].axes[0].get_lines()[0].get_xdata()) == [1, 2, 3, 4, 5]


def test_steps_of_a_resumed_attempt_replace_the_earlier_ones(run_folder, tmp_path):
    # GIVEN a history where a second attempt, resumed from step 6, reported steps 7 and 8 again
    folder = _copy(run_folder, tmp_path)
    history = _history(folder)
    again = [{**r, "loss": 99.0} for r in history if r["step"] in (7, 8)]
    with open(folder / "metrics.jsonl", "a") as stream:
        stream.write('{"step": 9, "lo\n')  # and a line the killed attempt left cut, before the resumed one appended
        stream.writelines(json.dumps(r) + "\n" for r in again)
    # WHEN it is read THEN each step appears once, the latest attempt's, and both oddities are named
    run = read_run(str(folder))
    assert [r["step"] for r in run.history] == list(range(1, 9))
    assert [r["loss"] for r in run.history][-2:] == [99.0, 99.0]
    assert any("steps 7-8 were reported by more than one attempt" in n for n in run.notes)
    assert any("1 line(s) of metrics.jsonl could not be read (line 9" in n for n in run.notes)


@pytest.mark.parametrize("case", ["missing", "no-history", "garbage", "file"])
def test_a_folder_that_cannot_be_reported_is_exit_2_naming_it(run_folder, tmp_path, capsys, case):
    folder = tmp_path / "run"
    if case == "no-history":
        shutil.copytree(run_folder, folder)
        (folder / "metrics.jsonl").unlink()
    elif case == "garbage":
        folder.mkdir()
        (folder / "metrics.jsonl").write_text('not json\n{"no": "step"}\n')
    elif case == "file":
        folder.write_text("x")
    out = tmp_path / "report"
    assert run_cli("report", str(folder), "--out", str(out)) == 2
    err = capsys.readouterr().err
    expected = {
        "missing": f"no such run folder: {folder}",
        "no-history": "has no metrics history (metrics.jsonl); it holds checkpoint_000004, checkpoint_000008",
        "garbage": "holds no complete report",
        "file": "is a file; give the run folder",
    }[case]
    assert expected in err and "Traceback" not in err
    assert not out.exists()


def test_an_output_folder_holding_a_users_files_is_refused(run_folder, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert run_cli("report", str(run_folder), "--out", str(out)) == 2
    assert "holds files ray-efa did not write (notes.txt)" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"


def test_an_s3_run_folder_is_reported(run_folder, tmp_path, capsys):
    # GIVEN the run folder in S3, as a cluster run's storagePath s3://... leaves it (moto: no real AWS here)
    import boto3
    from moto import mock_aws

    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-2")
        s3.create_bucket(Bucket="ray-efa-runs", CreateBucketConfiguration={"LocationConstraint": "us-east-2"})
        for path in run_folder.rglob("*"):
            if path.is_file():
                s3.put_object(
                    Bucket="ray-efa-runs", Key=f"runs/viz-run/{path.relative_to(run_folder)}", Body=path.read_bytes()
                )
        # WHEN it is reported THEN the same charts are written
        out = tmp_path / "report"
        assert run_cli("report", "s3://ray-efa-runs/runs/viz-run", "--out", str(out)) == 0
        assert sorted(p.name for p in out.glob("*.png")) == CHARTS
        # and a run name that is not there, or a bucket that is not, is exit 2 naming what was found
        assert run_cli("report", "s3://ray-efa-runs/runs/other", "--out", str(tmp_path / "r2")) == 2
        assert (
            "s3://ray-efa-runs/runs/other has no metrics history (metrics.jsonl); it holds nothing"
            in capsys.readouterr().err
        )
        assert run_cli("report", "s3://no-such-bucket-here/runs/x", "--out", str(tmp_path / "r3")) == 2
        assert "cannot read s3://no-such-bucket-here/runs/x: NoSuchBucket" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv", [["report", "somewhere"], ["plan", "--plot", "x.png"], ["compare", "a.log", "b.log", "--plot", "x.png"]]
)
def test_charts_without_matplotlib_are_exit_4_naming_the_extra(argv, tmp_path):
    # GIVEN an install without matplotlib (hidden from this process) WHEN a charting command runs
    code = "import sys; sys.modules['matplotlib'] = None; from ray_efa.cli import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    # THEN exit 4 with how to install the extra, and nothing written
    assert result.returncode == 4, result.stderr
    assert "pip install 'ray-efa-stack[plots]'" in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_read_run_refuses_an_s3_uri_without_a_run_name():
    with pytest.raises(ReportError, match="give the run folder, s3://BUCKET/PREFIX/RUN-NAME"):
        read_run("s3://bucket")
