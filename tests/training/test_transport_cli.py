"""`ray-efa check-transport` end to end: exit codes 0/1/3/2, table, JSON, stdin, unreadable files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa.cli import check_transport
from ray_efa.core.context import PROJECT_ROOT
from ray_efa.training import transport

SYNTHETIC = Path(__file__).parent / "fixtures" / "nccl" / "synthetic"
EFA_LOG = SYNTHETIC / "efa_g6_2node_nccl2.29.log"
FALLBACK_LOG = SYNTHETIC / "socket_fallback_plugin_missing.log"


def run_cli(*argv: str) -> int:
    return check_transport.main(list(argv))


@pytest.fixture(autouse=True)
def _no_terminal_width(monkeypatch):
    """These tests read the whole table, as a file or a pipe gets it; $COLUMNS (an 80-column CI log) would stack
    each process instead (tests/cli/test_vocabulary.py checks that form)."""
    monkeypatch.delenv("COLUMNS", raising=False)


def test_efa_log_passes_with_a_table_and_a_summary(capsys):
    # WHEN the EFA job's log is checked
    code = run_cli(str(EFA_LOG))
    out = capsys.readouterr().out
    # THEN it exits 0, prints one row per process and ends with the PASS line
    assert code == 0
    assert out.splitlines()[0].startswith("PROCESS")
    assert sum(line.startswith("ip-10-0-1-") for line in out.splitlines()) == 8
    assert out.rstrip().splitlines()[-1].startswith("PASS:")


def test_fallback_log_fails_and_names_the_cause(capsys):
    code = run_cli("--expect", "efa", str(FALLBACK_LOG))
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL: expected EFA" in out and "libnccl-net-ofi.so" in out


def test_socket_expectation_passes_the_fallback_log(capsys):
    assert run_cli("--expect", "socket", str(FALLBACK_LOG)) == 0


def test_an_empty_log_proves_nothing(capsys):
    assert run_cli(str(SYNTHETIC / "empty.log")) == 3
    assert "NO PROOF" in capsys.readouterr().out


def test_json_output_carries_the_verdict_and_the_logs(capsys):
    code = run_cli("--json", str(FALLBACK_LOG))
    data = json.loads(capsys.readouterr().out)
    assert code == data["exit_code"] == 1
    assert data["status"] == "fail" and data["logs"] == [str(FALLBACK_LOG)]
    assert {p["verdict"] for p in data["processes"]} == {"FAIL"}


@pytest.mark.parametrize(
    "make_bad, message",
    [
        (lambda tmp: str(tmp / "missing.log"), "no such file"),
        (lambda tmp: str(tmp), "it is a directory"),
    ],
    ids=["missing", "directory"],
)
def test_an_unreadable_log_is_a_usage_error(tmp_path, capsys, make_bad, message):
    # GIVEN a good log and a bad path
    bad = make_bad(tmp_path)
    # WHEN both are checked
    code = run_cli(str(EFA_LOG), bad)
    err = capsys.readouterr()
    # THEN it exits 2 naming the path, and prints no verdict
    assert code == 2
    assert bad in err.err and message in err.err
    assert err.out == ""


def test_a_log_that_cannot_be_read_is_a_usage_error_naming_it(capsys):
    # /proc/self/mem opens, but reading it at offset 0 fails with EIO, for root too (a chmod 0 file would not stop root)
    assert run_cli("/proc/self/mem") == 2
    assert "cannot read /proc/self/mem: Input/output error" in capsys.readouterr().err


def test_stdin_twice_is_a_usage_error(capsys):
    assert run_cli("-", "-") == 2
    assert "only once" in capsys.readouterr().err


def test_an_unknown_expectation_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli("--expect", "tcp", str(EFA_LOG))
    assert exit_info.value.code == 2
    assert "invalid choice: 'tcp'" in capsys.readouterr().err


def test_no_log_argument_is_a_usage_error(capsys):
    assert run_cli() == 2
    assert "give at least one NCCL log (LOG, '-' for stdin) or --counters PATH" in capsys.readouterr().err


def test_the_cli_choices_equal_the_classifiers():
    assert check_transport.EXPECTS == transport.EXPECTS


def _python_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}


def test_a_subprocess_reads_stdin_and_returns_the_exit_code():
    # GIVEN the fallback log piped into a separate process
    with FALLBACK_LOG.open("rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-m", "ray_efa.cli.check_transport", "--expect", "efa", "-"],
            stdin=stdin,
            capture_output=True,
            text=True,
            cwd=PROJECT_ROOT,
            env=_python_env(),
            timeout=60,
        )
    # THEN the shell sees exit 1 and the FAIL line
    assert done.returncode == 1, done.stderr
    assert "FAIL: expected EFA" in done.stdout


def test_the_full_cli_dispatches_check_transport(capsys):
    # GIVEN the whole `ray-efa` parser (it imports every subcommand module)
    import ray_efa.cli as cli

    parser = cli.build_parser()
    # WHEN check-transport runs through it
    args = parser.parse_args(["check-transport", "--expect", "socket", str(FALLBACK_LOG)])
    # THEN it is this module's run, with the same exit code
    assert args.run is check_transport.run
    assert cli.main(["check-transport", "--expect", "socket", str(FALLBACK_LOG)]) == 0


@pytest.mark.parametrize("damage", ["truncated", "corrupt", "not gzip", "empty"])
def test_a_damaged_gz_is_a_usage_error_never_contradicted(damage, tmp_path, capsys):
    # GIVEN a compressed EFA log cut short by a full disk, flipped in the middle, or not gzip at all
    import gzip

    whole = gzip.compress(EFA_LOG.read_bytes())
    data = {
        "truncated": whole[: len(whole) // 2],
        "corrupt": whole[:40] + bytes(b ^ 0xFF for b in whole[40:80]) + whole[80:],
        "not gzip": b"NCCL INFO this is plain text\n",
        "empty": b"",
    }[damage]
    log = tmp_path / "driver.log.gz"
    log.write_bytes(data)
    # WHEN the gate reads it
    code = run_cli(str(log))
    captured = capsys.readouterr()
    # THEN exit 2 (could not read), one line naming the file, no traceback; never 1, which means "another transport"
    if damage == "empty":  # an empty .gz is a valid empty stream: nothing to prove
        assert code == 3
        return
    assert code == 2, captured
    assert captured.err.count("\n") == 1 and str(log) in captured.err and "Traceback" not in captured.err
    assert run_cli("--json", str(log)) == 2
    assert json.loads(capsys.readouterr().out)["exit_code"] == 2


def test_the_classifier_raises_an_oserror_naming_a_truncated_gz(tmp_path):
    import gzip

    log = tmp_path / "x.gz"
    log.write_bytes(gzip.compress(b"NCCL INFO NET/OFI Selected provider is efa\n" * 1000)[:-30])
    with pytest.raises(OSError) as raised:
        transport.classify_paths([log])
    assert isinstance(raised.value, transport.LogReadError) and raised.value.filename == str(log)


def test_hosts_turns_a_chosen_socket_into_a_contradiction(tmp_path, capsys):
    # GIVEN one host's log of a job whose NCCL chose Socket without channel lines
    log = tmp_path / "node1.log"
    log.write_text("ip-10-0-1-11:4100:4101 [0] NCCL INFO Using network Socket\n")
    # WHEN checked alone, then with --hosts 2
    assert run_cli(str(log)) == 3
    capsys.readouterr()
    assert run_cli("--hosts", "2", "--json", str(log)) == 1
    data = json.loads(capsys.readouterr().out)
    # THEN the JSON says how many hosts and from where
    assert data["hosts"] == 2 and data["hosts_source"] == "2 hosts (given by the caller)"
    assert data["processes"][0]["basis"].startswith("chosen on a job of 2 hosts")


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_bad_host_count_is_a_usage_error(value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli("--hosts", value, str(EFA_LOG))
    assert exit_info.value.code == 2
    assert f"must be a whole number >= 1, got {value!r}" in capsys.readouterr().err


def test_two_hosts_with_one_nodes_logs_is_no_proof(capsys):
    # GIVEN --hosts 2 and only node 1's log of a 2-node EFA job (ranks 0-3 of 8)
    code = run_cli("--hosts", "2", str(SYNTHETIC / "efa_split_node1.log"))
    # THEN it does not pass, and names the ranks that logged nothing
    assert code == transport.EXIT_NO_PROOF
    assert "ranks 4-7 logged nothing" in capsys.readouterr().out
