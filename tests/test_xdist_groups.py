"""The installed pytest and pytest-xdist keep an `xdist_group` on one worker, as `make test` relies on.

`make test` runs `pytest -n 2 --dist loadgroup`; the groups keep apart what must not overlap (local Ray clusters,
spawned gloo ranks). pytest 9.2 with pytest-xdist 3.8 silently stopped grouping (pytest-dev/pytest-xdist#1386),
which this test catches by running a small suite of its own through the real plugin.
"""

import os
import subprocess
import sys

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
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q", "-p", "no:cacheprovider",
         "--basetemp", str(tmp_path / "basetemp"), "--rootdir", str(suite), str(suite)],
        cwd=suite, capture_output=True, text=True, timeout=300,
        env={**os.environ, "WORKERS_FILE": str(tmp_path / "workers")},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    # THEN every test ran, all on the same worker
    workers = (tmp_path / "workers").read_text().split()
    assert len(workers) == 12
    assert len(set(workers)) == 1, f"the group was spread over {sorted(set(workers))}"
