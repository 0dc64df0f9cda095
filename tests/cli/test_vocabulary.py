"""One vocabulary across the CLI: flags, JSON key style, rounded numbers, 80-column tables, the command table of
docs/commands.md."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa.cli import SUBCOMMANDS, build_parser, main


def run_cli(*argv: str) -> int:
    """`ray-efa ARGV...` in this process, through the whole parser: the exit code the process would have."""
    try:
        return main(list(argv))
    except SystemExit as exit_:
        return int(exit_.code or 0)


ROOT = Path(__file__).resolve().parents[2]
NCCL = ROOT / "tests" / "training" / "fixtures" / "nccl" / "synthetic"
SNAKE = re.compile(r"[a-z][a-z0-9_]*(/[a-z0-9_]+)?")
"""snake_case, the CLI's one key style; metric names keep their `group/name` form (time/step_s)."""


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _bad_keys(data, path: str = "", exempt: tuple[str, ...] = ()) -> list[str]:
    bad = []
    if isinstance(data, dict):
        for key, value in data.items():
            here = f"{path}/{key}"
            if path not in exempt and not SNAKE.fullmatch(str(key)):
                bad.append(here)
            bad += _bad_keys(value, here, exempt)
    elif isinstance(data, list):
        for value in data:
            bad += _bad_keys(value, path + "[]", exempt)
    return bad


def _long_floats(data) -> list[float]:
    if isinstance(data, float):
        text = repr(data).replace("-", "").removesuffix(".0")  # 109252.0 has six significant digits, not seven
        return [data] if len(text.replace(".", "").lstrip("0")) > 6 else []
    if isinstance(data, dict):
        return [f for v in data.values() for f in _long_floats(v)]
    if isinstance(data, list):
        return [f for v in data for f in _long_floats(v)]
    return []


# -- flags --------------------------------------------------------------------------------------------------------


def test_context_means_settings_everywhere_and_kube_context_is_the_kubeconfigs():
    for name, parser in _subparsers().items():
        by_option = {o: a for a in parser._actions for o in a.option_strings}
        if "--context" in by_option:
            assert by_option["--context"].dest == "context" and "-c" in by_option["--context"].option_strings, name
        if "--kube-context" in by_option:
            assert by_option["--kube-context"].dest == "kube_context", name
    assert "--kube-context" in _options(_subparsers()["verify"])


# -- JSON: one key style, rounded numbers -------------------------------------------------------------------------


def test_plan_json_is_snake_case_and_rounded(capsys):
    assert run_cli("plan", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    # settings keep their own names (they are the settings' keys, as in cdk.json)
    assert _bad_keys(data, exempt=("/settings",)) == []
    assert _long_floats({k: v for k, v in data.items() if k != "settings"}) == []
    assert data["usd_per_hour"]["total"] == 9.5498  # was 9.549800000000001


def test_check_transport_json_is_snake_case(capsys):
    assert run_cli("check-transport", "--json", str(NCCL / "efa_g6_2node_nccl2.29.log")) == 0
    data = json.loads(capsys.readouterr().out)
    # channels maps NCCL's transport names (data, not field names) to counts
    assert _bad_keys(data, exempt=("/processes[]/channels",)) == [] and data["exit_code"] == 0
    assert (
        data["processes"][0]["channels"] and data["processes"][0]["n_ranks"]
        if "n_ranks" in data["processes"][0]
        else data["processes"][0]["comms"][0]["n_ranks"] == 8
    )


@pytest.mark.parametrize(
    "argv",
    [
        ("plan", "--json", "-c", "gpuNodeCount=65"),
        ("manifests", "--json", "--out", "."),
        ("check-transport", "--json", "/nonexistent.log"),
        ("compare", "--json", "/nonexistent.log"),
        ("report", "--json", "/nonexistent-run"),
        ("plan", "--json", "--plot", "/"),
        ("verify", "--json", "--kubeconfig", "/nonexistent"),
        ("verify", "--json", "--wait", "-1"),
        ("capacity", "--json", "--count", "0"),
    ],
)
def test_errors_under_json_are_json_with_the_exit_code(argv, capsys):
    code = run_cli(*argv)
    captured = capsys.readouterr()
    error = json.loads(captured.out)
    assert code == error["exit_code"] == 2 and error["error"] and _bad_keys(error, exempt=("/problems[]",)) == []
    assert "Traceback" not in captured.err and captured.err.startswith("ray-efa")


# -- tables at 80 columns -------------------------------------------------------------------------------------------


def _at_80(*argv: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "ray_efa.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "COLUMNS": "80"},
        timeout=300,
    )
    assert result.returncode in (0, 1), result.stderr
    return result.stdout


def _fits_80(out: str) -> None:
    assert "…" not in out, [line for line in out.splitlines() if "…" in line]
    assert max(len(line) for line in out.splitlines()) <= 80


def test_plan_at_80_columns_cuts_nothing():
    out = _at_80("plan")
    _fits_80(out)
    # every number whole: the instance type, the prices, the image
    for whole in ("g6.12xlarge", "m7i.xlarge", "$4.602", "$0.202", "$9.550", "22.49 GiB", "40 Gbit/s"):
        assert whole in out, whole


def test_check_transport_at_80_columns_stacks_each_process():
    out = _at_80("check-transport", str(NCCL / "socket_fallback_plugin_missing.log"))
    table, verdict = out.rstrip().rsplit("\n", 1)  # the verdict stays one line, for grep in CI
    _fits_80(table)
    assert verdict.startswith("FAIL:")
    assert "ip-10-0-1-1:4100  FAIL" in out and "nRanks/nNodes/localRanks: 8/2/4" in out


def test_compare_and_verify_tables_at_80_columns(tmp_path):
    from rich.console import Console

    from ray_efa.ops.compare import Comparison
    from ray_efa.ops.verify import Check, VerifyReport, render_verify

    run = {
        "name": "ray-train-efa-with-a-long-name",
        "network": "efa",
        "instance_type": "p5en.48xlarge",
        "hosts": 16,
        "devices": 128,
        "device": "NVIDIA H200",
        "throughput/tokens_per_s": 12345678.9,
        "time/step_s": 0.123,
        "throughput/mfu_pct": 55.2,
    }
    console = Console(width=80, record=True, file=open(tmp_path / "out.txt", "w"))
    table_rows = Comparison(efa=run, tcp={**run, "network": "tcp"}).rows()
    from rich.table import Table

    table = Table()
    for column in ("", "EFA", "TCP"):
        table.add_column(column, overflow="fold")
    for row in table_rows:
        table.add_row(*row)
    console.print(table)
    render_verify(
        VerifyReport(
            checks=(
                Check(
                    id="gpu-nodes", name="GPU nodes Ready", ok=False, detail="0 Ready of 2 nodes labelled " + "x" * 120
                ),
            )
        ),
        console,
    )
    out = console.export_text()
    _fits_80(out)
    assert "12,345,679" in out and "0.123" in out and "55.2" in out


# -- the command table (docs/commands.md) ----------------------------------------------------------------------------


def _documented_commands() -> tuple[dict[str, str], str]:
    """{subcommand: its first cells in the command table of docs/commands.md}, and the page's text."""
    section = (ROOT / "docs" / "commands.md").read_text()
    rows: dict[str, str] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cell = line.split(" | ")[0]
        for name in re.findall(r"`ray-efa ([a-z-]+)", cell):
            rows[name] = rows.get(name, "") + " " + cell
    return rows, section


def test_documented_command_table_matches_the_cli():
    rows, section = _documented_commands()
    parsers = _subparsers()
    # every subcommand is in the table, and nothing else
    assert set(rows) == set(SUBCOMMANDS)
    # every flag the table shows exists on that subcommand
    for name, cell in rows.items():
        flags = set(re.findall(r"(--[a-z][a-z-]*|-c\b)", cell))
        assert flags <= _options(parsers[name]), (name, flags - _options(parsers[name]))
    # and the sentence on --json names exactly the subcommands that take it
    sentence = next(line for line in section.splitlines() if "`--json`" in line and line.startswith("`--json`"))
    named = set(re.findall(r"`([a-z][a-z-]*)`", sentence.split("reads.")[0]))
    assert named == {n for n, p in parsers.items() if "--json" in _options(p)}


def test_every_subcommand_whose_output_a_script_reads_takes_json():
    # demo and train print for people; train's machine-readable output is its RAY_EFA_RUN_SUMMARY line
    without = {n for n, p in _subparsers().items() if "--json" not in _options(p)}
    assert without == {"demo", "train"}


@pytest.mark.spawn
@pytest.mark.parametrize("argv", [["plan"], ["plan", "--json"]], ids=["plan-table", "plan-json"])
def test_a_reader_that_goes_away_ends_the_command_quietly(argv):
    import fcntl
    import os

    # GIVEN `ray-efa plan | head -1`: a reader that takes one line and closes the pipe, on a pipe of one page (the
    # 20 KB table and 45 KB of JSON cannot all be written before the reader goes)
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    process = subprocess.Popen(
        [sys.executable, "-m", "ray_efa.cli", *argv], cwd=ROOT, stdout=write_end, stderr=subprocess.PIPE, text=True
    )
    os.close(write_end)
    with os.fdopen(read_end) as reader:
        reader.readline()
    assert process.stderr is not None
    err = process.stderr.read()
    process.wait(timeout=120)
    # THEN the command ends as a killed writer does (128 + SIGPIPE), saying nothing: no error, no traceback
    assert process.returncode == 141, (process.returncode, err)
    assert err == ""
