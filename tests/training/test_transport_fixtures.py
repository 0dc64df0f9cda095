"""Every NCCL log fixture gets the verdict its row in fixtures/nccl/expected.csv states.

Adding a fixture (synthetic or recorded on a GPU machine) is one file plus one row in expected.csv.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from ray_efa.training.transport import classify_paths
from tests.load_script import load_script

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"


def _rows() -> list[dict[str, str]]:
    text = (FIXTURES / "expected.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(line for line in text.splitlines() if line and not line.startswith("#")))


ROWS = _rows()


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['files']}->{r['expect']}" for r in ROWS])
def test_fixture_gets_its_expected_verdict(row):
    # GIVEN the logs of one job and the transport its row expects
    paths = [FIXTURES / f for f in row["files"].split(";")]
    # WHEN the gate judges them
    verdict = classify_paths(paths).verdict(row["expect"])
    # THEN the exit code and the cause are the ones recorded, and the summary says the same
    assert verdict.exit_code == int(row["exit_code"]), f"{row['note']}\n{verdict.summary}\n{verdict.render_table()}"
    assert verdict.cause == row["cause"], f"{row['note']}\n{verdict.summary}"
    assert verdict.summary.startswith({0: "PASS", 1: "FAIL", 3: "NO PROOF"}[verdict.exit_code])


# The verdicts of jobs whose host count the caller knows (`check-transport --hosts N`, the driver): (files, hosts,
# expect, exit code, cause, note). A caller's count may be lower than NCCL's nNodes (pods on one machine) and higher
# than the hosts the logs show.
HOSTS_ROWS = [
    (
        "synthetic/efa_two_pods_one_host_socket_cut.log",
        1,
        "efa",
        1,
        "plugin-not-found",
        "--hosts 1, but NCCL's nNodes 2: the rank that chose Socket (shape not logged) spans the pods, not single-node",
    ),
    (
        "synthetic/efa_ray_driver_one_rank_folded.log",
        2,
        "efa",
        0,
        "traffic",
        "--hosts 2 and one rank's lines folded for all 8: the folded ranks count as present",
    ),
    ("synthetic/efa_provider_with_suffix.log", 2, "efa", 0, "traffic", "--hosts 2: efa;ofi_rxr on both hosts"),
]


@pytest.mark.parametrize(
    ("files", "hosts", "expect", "exit_code", "cause", "note"),
    HOSTS_ROWS,
    ids=[f"{r[0]}--hosts-{r[1]}->{r[2]}" for r in HOSTS_ROWS],
)
def test_fixture_with_the_callers_host_count_gets_its_verdict(files, hosts, expect, exit_code, cause, note):
    verdict = classify_paths([FIXTURES / f for f in files.split(";")]).verdict(expect, hosts=hosts)
    assert (verdict.exit_code, verdict.cause) == (exit_code, cause), f"{note}\n{verdict.summary}"


def test_every_fixture_log_has_a_row():
    # GIVEN every log under fixtures/nccl/synthetic, real and public (any name: .log, .out, .gz...)
    logs = {
        p.relative_to(FIXTURES).as_posix()
        for d in ("synthetic", "real", "public")
        for p in (FIXTURES / d).rglob("*")
        if p.is_file() and p.name != "README.md" and not p.name.startswith(".")
    }
    # WHEN compared with the files named in expected.csv
    listed = {f for r in ROWS for f in r["files"].split(";")}
    # THEN none is left without an expected verdict, and no row names a missing file
    assert logs - listed == set()
    assert listed - logs == set()


def test_every_row_is_well_formed():
    # GIVEN the rows of expected.csv
    # THEN each names a known transport, a gate exit code and why
    for row in ROWS:
        assert row["expect"] in ("efa", "ib", "socket"), row
        assert row["exit_code"] in ("0", "1", "3"), row
        assert row["cause"], row
        assert row["note"], row
        assert None not in row, f"a note with a comma must be quoted: {row}"


def test_synthetic_fixtures_equal_what_the_generator_writes():
    # GIVEN the generator that builds the synthetic logs from the documented line patterns
    module = load_script(FIXTURES / "make_synthetic.py")
    # WHEN it renders every fixture
    expected = {name: module.render(lines) for name, lines in module.fixtures().items()}
    # THEN the committed files are exactly its output (edit the generator, never the files)
    committed = {p.name: p.read_text(encoding="utf-8") for p in (FIXTURES / "synthetic").glob("*.log")}
    assert committed.keys() == expected.keys()
    for name, text in expected.items():
        assert committed[name] == text, f"{name} differs from make_synthetic.py's output; rerun it"


def test_every_public_fixture_names_its_source():
    # GIVEN the logs taken from public issues
    # THEN each one's first line is its source URL, and the README's table lists it with the same URL
    readme = (FIXTURES / "public" / "README.md").read_text(encoding="utf-8")
    for log in sorted((FIXTURES / "public").glob("*.log")):
        first = log.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# source: https://github.com/"), log.name
        url = first.split()[2]
        assert f"| {log.name} | {url} |" in readme, log.name
