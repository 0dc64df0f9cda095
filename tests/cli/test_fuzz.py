"""Fuzzing the CLI's edges with hypothesis, in bounded time (max_examples, no per-example deadline; under 60 s here).

- Random context keys and values never raise anything but SettingsError.
- Random bytes, and random NCCL-like lines, fed to the transport gate never raise and never PASS.
- Every subcommand, run with a table of bad arguments and bad files, exits 2 (or its documented code) with one
  message and no traceback, and writes nothing.
"""

from __future__ import annotations

import gzip
import io
import json
import string
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ray_efa.cli import main
from ray_efa.core.context import parse_overrides, resolve_settings
from ray_efa.core.settings import Settings, SettingsError, setting_keys
from ray_efa.training import transport

FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None
)
"""Bounded: a fixed number of examples, no shrinking database left behind in the repository."""

KEYS = sorted(setting_keys())

# -- settings -------------------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=8,
)
context_keys = st.sampled_from(KEYS) | st.text(max_size=30)


@FUZZ
@given(st.dictionaries(context_keys, json_values, max_size=6))
def test_random_context_raises_only_settings_error(context):
    try:
        Settings.from_context(context)
    except SettingsError as error:
        assert error.problems  # a SettingsError always names at least one problem
        for problem in error.problems:
            assert problem.message and isinstance(problem.key, str)


@FUZZ
@given(st.lists(st.text(alphabet=string.printable + "é€\x00", max_size=40), max_size=5))
def test_random_overrides_raise_only_settings_error(pairs):
    # `-c` strings, as typed: parse them, then resolve them over the project's cdk.json
    try:
        resolve_settings(parse_overrides(pairs))
    except SettingsError as error:
        assert error.problems


@FUZZ
@given(st.sampled_from(KEYS), st.text(max_size=30))
def test_any_string_for_any_key_raises_only_settings_error(key, value):
    try:
        resolve_settings(parse_overrides([f"{key}={value}"]))
    except SettingsError as error:
        assert error.problems


# -- the transport gate ---------------------------------------------------------------------------------------------

PREFIXES = [
    "",
    "ip-10-0-1-1:4100:4200 [0] NCCL INFO ",
    "ip-10-0-1-2:4100:4200 [1] NCCL INFO ",
    "(RayTrainWorker pid=4100, ip=10.0.1.1) ip-10-0-1-1:4100:4200 [0] NCCL INFO ",
    "ip-10-0-1-1:4100:4200 [0] NCCL WARN ",
    "NCCL INFO ",
    "2026-11-29T10:00:00Z stdout F ",
]
WORDS = [
    "NET/OFI",
    "Selected",
    "provider",
    "is",
    "efa",
    "Using",
    "network",
    "Socket",
    "IB",
    "Libfabric",
    "comm",
    "0x55d0",
    "rank",
    "nRanks",
    "nNodes",
    "localRanks",
    "localRank",
    "Channel",
    "00/0",
    ":",
    "0[0]",
    "->",
    "1[1]",
    "via",
    "NET/Socket/0",
    "NET/IB/0",
    "P2P/CUMEM",
    "SHM/direct/direct",
    "[send]",
    "[receive]",
    "NCCL_NET_PLUGIN",
    "libnccl-net-ofi.so",
    "Init",
    "COMPLETE",
    "version",
    "2.29.7+cuda12.9",
    "Failed",
    "Bootstrap",
    "NET/Plugin",
    "Loaded",
    "plugin",
    "aws-ofi-nccl",
    "1.20.0",
    "0",
    "1",
    "2",
    "8",
    "-1",
    "\t",
]
nccl_like_lines = st.builds(
    lambda prefix, words, tail: prefix + " ".join(words) + tail,
    st.sampled_from(PREFIXES),
    st.lists(st.sampled_from(WORDS), max_size=12),
    st.text(max_size=10),
)


def _judge_all(lines: list[str]) -> None:
    report = transport.classify(lines)
    for expect in transport.EXPECTS:
        verdict = report.verdict(expect)
        assert verdict.exit_code != transport.EXIT_PASS, (expect, lines)
        assert verdict.exit_code in (transport.EXIT_CONTRADICTED, transport.EXIT_NO_PROOF)
        verdict.render_table()
        verdict.render_table(width=80)
        json.dumps(verdict.to_json())


@FUZZ
@given(st.lists(nccl_like_lines, max_size=40))
def test_random_nccl_like_lines_never_raise_and_never_pass(lines):
    _judge_all(lines)


@FUZZ
@given(st.binary(max_size=2048), st.booleans())
def test_random_bytes_never_raise_and_never_pass(tmp_path_factory, data, compressed):
    # as a file (plain, or named .gz: then most bytes are not gzip at all, and exit 2 is the only right answer)
    log = tmp_path_factory.mktemp("fuzz") / ("x.log.gz" if compressed else "x.log")
    log.write_bytes(data)
    try:
        report = transport.classify_paths([log])
    except OSError:
        assert compressed  # unreadable compressed input: the CLI turns this into exit 2
        return
    for expect in transport.EXPECTS:
        assert report.verdict(expect).exit_code != transport.EXIT_PASS


@FUZZ
@given(st.binary(min_size=1, max_size=4096), st.integers(min_value=0, max_value=4096))
def test_cut_gzip_of_random_bytes_is_exit_2_or_a_verdict_never_a_crash(tmp_path_factory, data, cut):
    whole = gzip.compress(data)
    log = tmp_path_factory.mktemp("fuzz") / "x.log.gz"
    log.write_bytes(whole[: min(cut, len(whole))])
    code, out, err = _cli("check-transport", str(log))
    assert code in (2, 3) and "Traceback" not in err
    if code == 2:
        assert err.count("\n") == 1 and str(log) in err


# -- EFA counter snapshots given to the gate ----------------------------------------------------------------------

COUNTERS = Path(__file__).resolve().parents[1] / "training" / "fixtures" / "efa_counters" / "g6_2node_efa"


@FUZZ
@given(st.binary(max_size=2048) | json_values.map(lambda v: json.dumps(v).encode()))
def test_random_counter_files_never_raise_and_never_pass(tmp_path_factory, data):
    # a random file named as a snapshot, alone or beside one node's real pair: exit 2 naming it, or a verdict that
    # is not a pass (one node's counters never prove a job)
    folder = tmp_path_factory.mktemp("fuzz")
    bad = folder / "efa-counters-x-after-1.json"
    bad.write_bytes(data)
    pair = sorted(str(p) for p in COUNTERS.glob("*ip-10-0-1-1-*.json"))
    for argv in ([str(bad)], ["--counters", str(folder)], [*pair, str(bad)]):
        code, out, err = _cli("check-transport", *argv)
        assert code in (1, 2, 3) and "Traceback" not in err, (argv, out, err)
        if code == 2:
            assert err.count("\n") == 1 and str(bad) in err


@FUZZ
@given(
    st.sampled_from(sorted(COUNTERS.glob("*.json"))),
    st.integers(min_value=0, max_value=4096),
    st.sampled_from(["cut", "flip", "negate"]),
)
def test_damaged_snapshots_of_a_passing_job_are_exit_2_or_a_named_verdict(tmp_path_factory, victim, at, how):
    # GIVEN the four snapshots of a job that passes on counters alone, one of them damaged
    folder = tmp_path_factory.mktemp("fuzz")
    for path in COUNTERS.glob("*.json"):
        folder.joinpath(path.name).write_bytes(path.read_bytes())
    target = folder / victim.name
    text = target.read_text()
    at = min(at, len(text.rstrip()) - 1)  # a cut that keeps the whole object is no damage
    if how == "cut":
        target.write_text(text[:at])
    elif how == "flip":
        target.write_text(text[:at] + ("x" if text[at] != "x" else "y") + text[at + 1 :])
    else:  # a counter that went down: the device was reset
        data = json.loads(text)
        device = next(iter(data["devices"]))
        data["devices"][device]["1"]["tx_bytes"] = 0 if data["phase"] == "after" else 10**15
        target.write_text(json.dumps(data))
    code, out, err = _cli("check-transport", "--counters", str(folder))
    # THEN no traceback; a file cut short or a reset never passes; unreadable input is exit 2 naming the file
    assert code in (0, 1, 2, 3) and "Traceback" not in err, (out, err)
    if how == "negate":
        assert code == 3 and "went down" in out
    if how == "cut":
        assert code == 2 and str(target) in err
    if code == 2:
        assert err.count("\n") == 1


# -- every subcommand, bad arguments and bad files ------------------------------------------------------------------


def _cli(*argv: str) -> tuple[int, str, str]:
    """`ray-efa ARGV...` in this process: (exit code, stdout, stderr). An escaping exception fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exit_:
            code = int(exit_.code or 0) if not isinstance(exit_.code, str) else 1
    return code, out.getvalue(), err.getvalue()


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes()) for p in sorted(folder.rglob("*"))}


@pytest.fixture
def bad_files(tmp_path, monkeypatch):
    """A working directory of the user's, with files that no command can use."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mywork.py").write_text("print('mine')\n")
    foreign = tmp_path / "deploy"
    foreign.mkdir()
    (foreign / "kustomization.yaml").write_text("resources: []\n")
    (tmp_path / "truncated.log.gz").write_bytes(gzip.compress(b"NCCL INFO Using network Libfabric\n" * 500)[:60])
    (tmp_path / "garbage.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "zero.log").write_text(
        'RAY_EFA_RUN_SUMMARY {"name": "t", "network": "tcp", '
        '"throughput/tokens_per_s": 0}\nRAY_EFA_RUN_SUMMARY {"name": "e", '
        '"network": "efa", "throughput/tokens_per_s": 5}\n'
    )
    (tmp_path / "nokey.log").write_text('RAY_EFA_RUN_SUMMARY {"network": "tcp"}\n')
    (tmp_path / "kubeconfig").write_text("clusters: [this is: not, a kubeconfig\n")
    (tmp_path / "kubeconfig-list").write_text("- 1\n- 2\n")
    (tmp_path / "a-dir").mkdir()
    return tmp_path


BAD = [
    # (argv, expected exit code); 2 everywhere: bad usage or input that cannot be read
    (["plan", "-c", "gpuNodeCount=65"], 2),
    (["plan", "-c", "noSuchKey=1"], 2),
    (["plan", "-c", "no-equals-sign"], 2),
    (["plan", "-c", "gpuInstanceType=g6.xlarge"], 2),
    (["plan", "--bogus"], 2),
    (["manifests", "--out", "."], 2),
    (["manifests", "--out", "deploy"], 2),
    (["manifests", "--out", "mywork.py"], 2),
    (["manifests", "--out", "..", "--json"], 2),
    (["manifests", "-c", "gpuNodeCount=abc"], 2),
    (["demo", "--dist", "deploy"], 2),
    (["demo", "--cdk-out", "."], 2),
    (["demo", "-c", "steps=0"], 2),
    (["demo", "--json"], 2),
    (["train", "--local", "-c", "steps=-1"], 2),
    (["train", "--local", "--logs-dir", "deploy"], 2),
    (["train", "--local", "--logs-dir", "."], 2),
    (["train", "--json"], 2),
    (["check-transport"], 2),
    (["check-transport", "missing.log"], 2),
    (["check-transport", "a-dir"], 2),
    (["check-transport", "truncated.log.gz"], 2),
    (["check-transport", "--json", "truncated.log.gz"], 2),
    (["check-transport", "--expect", "carrier-pigeon", "garbage.bin"], 2),
    (["check-transport", "-", "-"], 2),
    (["check-transport", "--hosts", "0", "garbage.bin"], 2),
    (["check-transport", "--counters", "missing-dir", "garbage.bin"], 2),
    (["check-transport", "--counters", "a-dir", "garbage.bin"], 2),
    (["check-transport", "--json", "--counters", "garbage.bin"], 2),
    (["check-transport", "--predicted-bytes", "lots", "garbage.bin"], 2),
    (["compare"], 2),
    (["compare", "missing.log"], 2),
    (["compare", "a-dir"], 2),
    (["compare", "zero.log"], 2),
    (["compare", "nokey.log", "zero.log"], 2),
    (["compare", "garbage.bin", "truncated.log.gz"], 2),
    (["compare", "--json", "zero.log"], 2),
    (["capacity", "--count", "0"], 2),
    (["capacity", "--count", "many"], 2),
    (["capacity", "--region", "nowhere-1", "--json"], 2),
    (["capacity", "--instance-type", "m7i.xlarge"], 2),
    (["verify", "--kubeconfig", "missing"], 2),
    (["verify", "--kubeconfig", "kubeconfig"], 2),
    (["verify", "--kubeconfig", "kubeconfig-list"], 2),
    (["verify", "--kubeconfig", "garbage.bin", "--json"], 2),
    (["verify", "--kubeconfig", "a-dir"], 2),
    (["verify", "--wait", "-1"], 2),
    (["verify", "--request-timeout", "0"], 2),
    (["capacity", "--request-timeout", "nan"], 2),
    (["follow", "j", "--request-timeout", "soon"], 2),
    (["verify", "--wait", "soon"], 2),
    (["verify", "--context", "my-cluster"], 2),
    (["plan", "--plot", "mywork.py"], 2),
    (["plan", "--plot", "a-dir"], 2),
    (["plan", "--plot", "mywork.py/chart.png"], 2),
    (["plan", "--json", "--plot", "mywork.py"], 2),
    (["compare", "zero.log", "--plot", "mywork.py"], 2),
    (["report"], 2),
    (["report", "missing"], 2),
    (["report", "a-dir"], 2),
    (["report", "mywork.py"], 2),
    (["report", "garbage.bin"], 2),
    (["report", "a-dir", "--out", "deploy"], 2),
    (["report", "a-dir", "--out", "."], 2),
    (["nosuchcommand"], 2),
]


@pytest.mark.parametrize("argv, code", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_arguments_and_files_exit_2_without_a_traceback_and_write_nothing(argv, code, bad_files):
    before = _snapshot(bad_files)
    got, out, err = _cli(*argv)
    assert got == code, (out, err)
    assert "Traceback" not in out + err and err.strip(), err
    # one message: argparse's usage line plus its error, or one `ray-efa ...:` line (plus one line per setting)
    assert err.rstrip().splitlines()[-1].startswith(("ray-efa", "  - ", "usage:", "ray_efa")) or "error:" in err
    if "--json" in argv and not err.startswith("usage:") and "error: " not in err:
        assert json.loads(out)["exit_code"] == code
    assert _snapshot(bad_files) == before


@FUZZ
@given(st.lists(st.text(alphabet=string.ascii_letters + string.digits + "-=./_ ", max_size=20), max_size=4))
def test_random_arguments_to_the_reading_commands_never_crash(bad_files, argv):
    # the commands that only read: random arguments end in a documented exit code, never a traceback
    for command in ("check-transport", "compare", "plan"):
        code, out, err = _cli(command, *argv)
        assert code in (0, 1, 2, 3) and "Traceback" not in err
