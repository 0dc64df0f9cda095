"""A control plane's processes die with the process that started them (tests/cluster/lifetime.py): a pytest killed
with SIGKILL, which runs no teardown, leaves none of them running. One test starts a whole plane in a Python of its
own and kills that Python (about as long as a module's plane takes to start); two use a sleeping child, one of them
without the death signal, to show the first could fail."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ray_efa.core.context import PROJECT_ROOT
from tests.cluster.conftest import served_crds
from tests.cluster.lifetime import die_with_parent

pytestmark = pytest.mark.spawn  # a Python of its own, which it kills

# A parent that starts a child the way ControlPlane starts etcd or the API server (ControlPlane._spawn, from its main
# thread), prints the child's pid and waits to be killed. With argv[2] == "off" it spawns without the death signal.
PARENT = """
import sys, time
from pathlib import Path
from tests.cluster import controlplane
if sys.argv[2] == "off":
    controlplane.die_with_parent = lambda: None
workdir = Path(sys.argv[1])
plane = controlplane.ControlPlane(workdir, "https://127.0.0.1:1", workdir / "kubeconfig", pki=None)
print(plane._spawn("sleeper", ["sleep", "300"]).popen.pid, flush=True)
time.sleep(300)
"""

# A parent that starts a whole control plane (ControlPlane.start, from its main thread, as the module fixture does),
# prints each process's name and pid, and waits to be killed.
PLANE_PARENT = """
import sys, time
from pathlib import Path
from tests.cluster.controlplane import ControlPlane
plane = ControlPlane.start(Path(sys.argv[1]), crds=[Path(arg) for arg in sys.argv[2:]])
print(" ".join(f"{name}={process.popen.pid}" for name, process in plane.processes.items()), flush=True)
time.sleep(600)
"""


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie has died: it only waits for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _spawn_and_kill_parent(tmp_path: Path, death_signal: str) -> int:
    """Starts PARENT, SIGKILLs it once its child runs; the child's pid."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path), death_signal], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 5  # (under load /proc may show the command line a moment after exec)
        while b"sleep" not in Path(f"/proc/{child}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _running(child) and b"sleep" in Path(f"/proc/{child}/cmdline").read_bytes()
    finally:
        parent.kill()  # SIGKILL: no atexit, no finally, no fixture teardown in the parent
        parent.wait()
    return child


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _running(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_every_process_of_a_control_plane_dies_within_seconds_of_a_killed_pytest(tmp_path: Path):
    crds = served_crds()
    parent = subprocess.Popen(
        [sys.executable, "-c", PLANE_PARENT, str(tmp_path), *map(str, crds)],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        pids = {name: int(pid) for name, pid in (item.split("=") for item in parent.stdout.readline().split())}
        assert set(pids) == {
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
            "kuberay-operator",
        }, f"the plane did not start: {pids} (parent exit {parent.poll()})"
        assert all(_running(pid) for pid in pids.values())
    finally:
        parent.kill()  # as a CI timeout or the OOM killer ends pytest: no teardown runs
        parent.wait()
    left = {name: pid for name, pid in pids.items() if not _gone_within(pid, 10)}
    for pid in left.values():
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running 10 s after the parent was killed: {left}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_control_plane_process_dies_within_seconds_of_a_killed_parent(tmp_path: Path):
    child = _spawn_and_kill_parent(tmp_path, "on")
    assert _gone_within(child, 5), f"pid {child} still runs 5 s after its parent was killed"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_without_the_death_signal_the_child_outlives_its_killed_parent(tmp_path: Path):
    # the same parent without die_with_parent: what the test above would see if the preexec_fn did nothing
    child = _spawn_and_kill_parent(tmp_path, "off")
    try:
        assert not _gone_within(child, 2), "the child died without the death signal: the test above proves nothing"
    finally:
        os.kill(child, signal.SIGKILL)


def test_off_the_main_thread_no_death_signal_is_asked_for():
    # the kernel signals when the *thread* that forked ends: a child started from a short-lived thread would die
    # with that thread, so die_with_parent asks for nothing there
    results = []
    worker = threading.Thread(target=lambda: results.append(die_with_parent()))
    worker.start()
    worker.join()
    assert results == [None]
    assert (die_with_parent() is not None) == sys.platform.startswith("linux")
