"""The installed pytest and pytest-xdist keep an `xdist_group` on one worker, as `make test` relies on.

`make test` runs `pytest -n 2 --dist loadgroup`; the groups keep apart what must not overlap (local Ray clusters,
spawned gloo ranks). pytest 9.2 with pytest-xdist 3.8 silently stopped grouping (pytest-dev/pytest-xdist#1386),
which this test catches by running a small suite of its own through the real plugin.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

GROUPED_MODULE = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("i", range(6))
def test_records_its_worker(i):
    with open(os.environ["WORKERS_FILE"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


def test_loadgroup_runs_a_group_on_one_worker(tmp_path):
    # GIVEN two modules whose 12 tests share one xdist_group, and a worker free for each
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("test_a.py", "test_b.py"):
        (suite / name).write_text(GROUPED_MODULE)
    # WHEN they run the way `make test` runs
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-q",
            "-p",
            "no:cacheprovider",
            "--basetemp",
            str(tmp_path / "basetemp"),
            "--rootdir",
            str(suite),
            str(suite),
        ],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "WORKERS_FILE": str(tmp_path / "workers")},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    # THEN every test ran, all on the same worker
    workers = (tmp_path / "workers").read_text().split()
    assert len(workers) == 12
    assert len(set(workers)) == 1, f"the group was spread over {sorted(set(workers))}"


ORDER_SUITE = {
    "test_quick.py": """
import os
import pytest

pytestmark = pytest.mark.xdist_group("quick")


@pytest.mark.parametrize("i", range(3))
def test_quick(i):
    with open(os.environ["ORDER_FILE"], "a") as f:
        f.write("quick\\n")
""",
    "test_slow.py": """
import os
import pytest


@pytest.mark.ray
def test_slow():
    with open(os.environ["ORDER_FILE"], "a") as f:
        f.write("slow\\n")
""",
}


def test_the_suite_hands_out_the_longest_unit_first(tmp_path):
    # GIVEN a group of three quick tests collected before a module of one Ray test (xdist's own order, by the number of
    # tests a unit holds, would run the three first), and the project's conftest as a plugin
    suite = tmp_path / "suite"
    suite.mkdir()
    for name, text in ORDER_SUITE.items():
        (suite / name).write_text(text)
    # WHEN one worker runs them the way `make test` runs (one worker: it runs the units in the order handed out)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "1",
            "--dist",
            "loadgroup",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.conftest",
            "--basetemp",
            str(tmp_path / "basetemp"),
            "--rootdir",
            str(suite),
            str(suite / "test_quick.py"),
            str(suite / "test_slow.py"),
        ],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ORDER_FILE": str(tmp_path / "order"), "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    # THEN the Ray test, the longest by its mark, ran first
    assert (tmp_path / "order").read_text().split() == ["slow", "quick", "quick", "quick"]
