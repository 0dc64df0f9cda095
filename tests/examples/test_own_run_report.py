"""A training function of its own, written here (not in this repository): an MLP on DDP over gloo reporting an L1
`loss`, `accuracy` and `samples_per_s`, run once by `ray-efa train --local` on a real local Ray cluster (2 CPU
workers), then `ray-efa report` of its run folder: a chart per reported metric, named after it, labelled with its
key (no cross-entropy for an L1 loss), and a summary from what it reported.

The runs whose outcome the driver itself prints (the run, a function that never reports, a syntax error) go through
`ray-efa train --local`'s own code in this process, on one local Ray cluster for the module (the driver joins a
cluster its process already runs: training.driver.init_ray), not a Python process and a cluster each; those whose
proof is in what the workers print (a traceback printed once, the history kept aside) or in the process (no
traceback before Ray starts) run the CLI as a process of its own."""

from __future__ import annotations

import argparse
import html
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

OWN_FUNCTION = """
import time

import ray.train
import torch
from ray.train.torch import prepare_model


def train_func(config):
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    model = prepare_model(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 6):
        started = time.perf_counter()
        out = model(x)
        loss = torch.nn.functional.l1_loss(torch.sigmoid(out), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        accuracy = ((out > 0).float() == y).float().mean().item()
        ray.train.report({"step": step, "loss": loss.item(), "accuracy": accuracy,
                          "samples_per_s": len(x) / (time.perf_counter() - started)})
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TRAIN_HEALTH_CHECK_INTERVAL_S="0.5", COLUMNS="200")
    return env


def _cli(*args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ray_efa.cli", *args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def ray_cluster():
    """The module's local Ray cluster, for the runs made in this process (`_train_here`)."""
    import ray

    from ray_efa.training import driver

    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")  # as _env() gives the CLI processes
        # the local driver sets these for its workers; the context puts this process's values back afterwards
        env.setenv("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
        env.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        driver.init_ray(local=True)
        yield
        ray.shutdown()


def _train_here(*args: str) -> int:
    """`ray-efa train ARGS` in this process, on the module's Ray cluster: the exit code the process would have."""
    from ray_efa.cli import train

    parser = argparse.ArgumentParser(prog="ray-efa")
    train.register(parser.add_subparsers(dest="command", required=True).add_parser, "train")
    try:
        parsed = parser.parse_args(["train", *args])
        return int(parsed.run(parsed) or 0)
    except SystemExit as exit_:  # resolve_or_exit's bad settings
        return int(exit_.code or 0)


@pytest.fixture(scope="module")
def own_run(tmp_path_factory, ray_cluster) -> Path:
    """The run folder of one local run of the function above."""
    root = tmp_path_factory.mktemp("own")
    (root / "src" / "mlp_l1").mkdir(parents=True)
    (root / "src" / "mlp_l1" / "__init__.py").write_text("")
    (root / "src" / "mlp_l1" / "train.py").write_text(textwrap.dedent(OWN_FUNCTION))
    code = _train_here(
        "--local",
        "--name",
        "mlp-l1",
        "-c",
        "trainFunction=mlp_l1.train:train_func",
        "-c",
        f"codeDir={root / 'src'}",
        "-c",
        f"storagePath={root / 'runs'}",
        "-c",
        "preflight=false",
        "--logs-dir",
        str(root / "nccl"),
    )
    assert code == 0  # its output is the first test's
    return root / "runs" / "mlp-l1"


@pytest.mark.ray
@pytest.mark.xdist_group("own-run")  # one run of the function for the three, one Ray cluster for the module
def test_the_report_draws_each_reported_metric_and_summarizes_it(own_run, tmp_path):
    out = tmp_path / "report"
    result = _cli("report", str(own_run), "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stderr
    assert {"loss.png", "accuracy.png", "samples_per_s.png"} <= {p.name for p in out.glob("*.png")}
    page = (out / "index.html").read_text()
    assert "cross-entropy" not in page
    rows = {k: html.unescape(v) for k, v in re.findall(r"<tr><td>([^<]+)</td><td>([^<]*)</td></tr>", page)}
    assert re.fullmatch(r"[0-9.]+ \(step 1\) -> [0-9.]+ \(step 5\)", rows["loss"]), rows
    assert rows["reports"] == "5, steps 1..5" and "accuracy" in rows and "samples_per_s" in rows
    assert "steps 1..-" not in page and "(step ?)" not in page


@pytest.mark.ray
@pytest.mark.xdist_group("own-run")  # one run of the function for the three, one Ray cluster for the module
def test_an_l1_loss_is_labelled_with_its_key(own_run):
    from ray_efa.ops.report import charts, read_run

    figures = charts(read_run(str(own_run)))
    assert figures["loss"].axes[0].get_ylabel() == "loss"
    assert figures["accuracy"].axes[0].get_ylabel() == "accuracy"


@pytest.mark.ray
@pytest.mark.xdist_group("own-run")  # one run of the function for the three, one Ray cluster for the module
def test_a_rerun_under_the_same_name_is_refused_and_a_resume_with_nothing_to_resume_keeps_the_old_history_aside(
    own_run,
):
    import json

    before = (own_run / "metrics.jsonl").read_bytes()
    src = own_run.parent.parent / "src"
    args = (
        "train",
        "--local",
        "--name",
        "mlp-l1",
        "-c",
        "trainFunction=mlp_l1.train:train_func",
        "-c",
        f"codeDir={src}",
        "-c",
        f"storagePath={own_run.parent}",
        "-c",
        "preflight=false",
        "--logs-dir",
        str(own_run.parent.parent / "nccl2"),
    )
    files = sorted(p.name for p in own_run.iterdir())
    # WHEN the same run is started again under the same name: refused before anything is written (exit 2, settings)
    refused = _cli(*args)
    assert refused.returncode == 2, (refused.stdout[-3000:], refused.stderr[-3000:])
    assert "--name" in refused.stderr and "--resume" in refused.stderr and "Traceback" not in refused.stderr
    assert sorted(p.name for p in own_run.iterdir()) == files and (own_run / "metrics.jsonl").read_bytes() == before
    # WHEN it is resumed: the function checkpoints nothing, so it starts over with one run in the file, the old aside
    result = _cli(*args, "--resume")
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    steps = [json.loads(line)["step"] for line in (own_run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5]
    (aside,) = own_run.glob("metrics.*.jsonl")
    assert aside.read_bytes() == before and aside.name in result.stderr + result.stdout


def _own_args(
    tmp_path: Path, source: str, *, max_failures: int = 0, modules: dict[str, str] | None = None
) -> tuple[str, ...]:
    """The arguments of `ray-efa train` for a run of `source` (its package own_fn written under tmp_path)."""
    (tmp_path / "src" / "own_fn").mkdir(parents=True)
    (tmp_path / "src" / "own_fn" / "__init__.py").write_text("")
    (tmp_path / "src" / "own_fn" / "train.py").write_text(textwrap.dedent(source))
    for name, text in (modules or {}).items():  # more modules of the package
        (tmp_path / "src" / "own_fn" / f"{name}.py").write_text(textwrap.dedent(text))
    return (
        "--local",
        "--name",
        "own-fn",
        "-c",
        "trainFunction=own_fn.train:train_func",
        "-c",
        f"codeDir={tmp_path / 'src'}",
        "-c",
        f"storagePath={tmp_path / 'runs'}",
        "-c",
        "preflight=false",
        "-c",
        f"maxFailures={max_failures}",
        "--logs-dir",
        str(tmp_path / "nccl"),
    )


def _run_own(tmp_path: Path, source: str, **own: Any) -> subprocess.CompletedProcess[str]:
    """`ray-efa train` of `source` (see _own_args) as a process of its own, with a cluster of its own."""
    return _cli("train", *_own_args(tmp_path, source, **own))


@pytest.mark.ray
@pytest.mark.xdist_group("own-run")  # on the module's Ray cluster
def test_a_function_that_never_reports_is_warned_about(tmp_path, ray_cluster, capfd):
    code = _train_here(*_own_args(tmp_path, "def train_func(config):\n    return 1\n"))
    err = capfd.readouterr().err
    assert code == 0, err[-3000:]
    assert "returned without calling ray.train.report" in err


@pytest.mark.ray
def test_a_missing_import_names_pip_packages(tmp_path):
    result = _run_own(tmp_path, "import no_such_package_here\n\ndef train_func(config):\n    pass\n")
    assert result.returncode == 2  # a settings problem, found before Ray starts
    assert "no_such_package_here" in result.stderr
    assert "pipPackages" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.ray
def test_an_exception_of_the_function_runs_once_and_its_traceback_is_printed_once(tmp_path):
    # GIVEN a function whose rank 0 raises ValueError on every attempt, counting its attempts, and maxFailures 2
    attempts = tmp_path / "attempts"
    result = _run_own(
        tmp_path,
        f"""
        import ray.train

        def train_func(config):
            if ray.train.get_context().get_world_rank() == 0:
                with open({str(attempts)!r}, "a") as f:
                    f.write("attempt\\n")
                raise ValueError("bad-shape-7f3a: a deterministic bug")
        """,
        max_failures=2,
    )
    # THEN it failed once, not three times: an exception of the code is not retried
    assert result.returncode == 1, result.stderr[-3000:]
    assert attempts.read_text().splitlines() == ["attempt"]
    output = result.stdout + result.stderr
    # with its own traceback (the function's file and line), printed once, and why it was not retried
    assert output.count("ValueError: bad-shape-7f3a: a deterministic bug") == 1, output[-6000:]
    assert f'File "{tmp_path / "src" / "own_fn" / "train.py"}", line 8, in train_func' in output
    assert "not retried: ValueError on rank 0" in result.stderr
    assert "retrying" not in output


@pytest.mark.ray
@pytest.mark.xdist_group("own-run")  # on the module's Ray cluster
def test_a_syntax_error_in_a_module_the_function_imports_names_its_file_and_line(tmp_path, ray_cluster, capfd):
    # GIVEN a train module that parses, importing a module of the package with a syntax error on its line 3
    code = _train_here(
        *_own_args(
            tmp_path,
            "from own_fn import helpers\n\ndef train_func(config):\n    helpers.go()\n",
            modules={"helpers": "def go():\n    pass\nx = (1,\n"},
        )
    )
    # THEN the run fails naming that file and line
    out, err = capfd.readouterr()
    assert code == 1, err[-3000:]
    assert f"syntax error in {tmp_path / 'src' / 'own_fn' / 'helpers.py'}, line 3" in out + err


# -- the report of a run of yours, from a run folder written by the driver's own writers (no Ray: fast) -------------


def _own_run_folder(tmp_path: Path, records: list[dict], *, function: str = "mlp_l1.train:train_func") -> Path:
    """A finished local run of `function` as the driver leaves it: the history (training.history's writer), the
    settings of `ray-efa train --local` (its preset below -c) and the summary record."""
    from ray_efa.core.settings import Settings
    from ray_efa.training.history import History
    from ray_efa.training.local import LOCAL_PRESET
    from ray_efa.training.run_folder import RunFolder
    from ray_efa.training.run_summary import LOCAL, summary_record

    settings = Settings.from_context(
        {**LOCAL_PRESET, "trainFunction": function, "trainConfig": {"epochs": 3}, "storagePath": str(tmp_path)}
    )
    folder = RunFolder.of(str(tmp_path), "own-run")
    history = History(folder, keep_through=None)
    for record in records:
        history.log(record, record["step"])
    history.close()
    folder.write_bytes("settings.json", settings.to_json().encode())
    folder.write_json(
        "summary.json",
        summary_record(
            name="own-run",
            network="efa",
            instance_type=LOCAL,
            nodes=1,
            summary={**records[-1], "devices": 2, "hosts": 1, "device": "cpu"},
        ),
    )
    return tmp_path / "own-run"


def test_an_own_runs_loss_and_eval_loss_share_one_chart_labelled_with_their_keys(tmp_path):
    from ray_efa.ops.report import charts, read_run

    records = [
        {"step": s, "loss": 1.0 / s, **({"eval_loss": 1.2 / s} if s % 2 == 0 else {}), "accuracy": 0.1 * s}
        for s in range(1, 7)
    ]
    figures = charts(read_run(str(_own_run_folder(tmp_path, records))))
    # THEN one loss chart holds both, each line named by its key, no unit guessed; no chart of eval_loss alone
    assert "eval_loss" not in figures and "accuracy" in figures
    ax = figures["loss"].axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["loss", "eval_loss"]
    assert ax.get_ylabel() == "loss" and list(ax.get_lines()[1].get_xdata()) == [2, 4, 6]


def test_an_own_runs_page_shows_its_settings_and_where_it_ran_not_the_builtins(tmp_path):
    from ray_efa.ops.report import read_run, render_html

    page = render_html(read_run(str(_own_run_folder(tmp_path, [{"step": 1, "loss": 0.5}]))), {})
    rows = {
        k: html.unescape(v)
        for k, v in re.findall(
            r"<tr><td>(?:training|workload|nodes|cluster|addons)</td>"
            r"<td>([^<]+)</td><td>([^<]*)</td></tr>",
            page,
        )
    }
    # the settings the stack used for it are there; the built-in's knobs of the local preset (steps 60, lr 0.005) not
    assert rows["trainFunction"] == "mlp_l1.train:train_func" and rows["trainConfig"] == '{"epochs": 3}'
    assert "steps" not in rows and "learningRate" not in rows and "model" not in rows
    assert "learningRate" in page and "config[&quot;settings&quot;]" in page  # named as left out, and why
    # and a local run's network is gloo over loopback, not the network setting's efa
    summary = {k: html.unescape(v) for k, v in re.findall(r"<tr><td>([^<]+)</td><td>([^<]*)</td></tr>", page)}
    assert summary["network"].startswith("gloo over loopback")
