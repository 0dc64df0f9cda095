"""Ctrl-C during `ray-efa train --local`: exit 130 and one line "interrupted" that says how to go on (`--name NAME
--resume`), the run's folder and its history kept, no traceback. A real CLI process in a session of its own, sent
SIGINT as a terminal sends it: to the whole foreground process group."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _wait_for_line(process: subprocess.Popen[str], words: str, timeout_s: float) -> list[str]:
    """stdout lines up to the first that holds `words`; the test fails with what came if none did in time."""
    seen: list[str] = []
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        if selector.select(timeout=1.0):
            line = process.stdout.readline()
            seen.append(line)
            if words in line:
                return seen
    pytest.fail(f"no line with {words!r} in {timeout_s} s: {''.join(seen)[-3000:]}")


@pytest.mark.ray
@pytest.mark.spawn
def test_ctrl_c_during_a_local_run_is_exit_130_with_one_line_and_the_resume_command(tmp_path):
    # GIVEN `ray-efa train --local` on random tokens with a long run ahead of it, in a process group of its own
    storage = tmp_path / "storage"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_EFA_MODEL_CACHE": str(tmp_path / "model-cache")}
    env.pop("RAY_ADDRESS", None)
    err_file = tmp_path / "stderr"
    with err_file.open("w") as sink:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ray_efa.cli",
                "train",
                "--local",
                "--name",
                "interrupted-run",
                "--logs-dir",
                str(tmp_path / "nccl"),
                "-c",
                f"storagePath={storage}",
                "-c",
                "dataPoolSize=8",
                "-c",
                "steps=100000",
                "-c",
                "reportEvery=1",
                "-c",
                "checkpointEvery=0",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=sink,
            text=True,
            start_new_session=True,
        )
    try:
        # WHEN it has trained a few steps and Ctrl-C reaches its process group
        _wait_for_line(process, "step ", timeout_s=240)
        time.sleep(2)
        before = err_file.stat().st_size
        os.killpg(process.pid, signal.SIGINT)
        process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    # THEN exit 130, one line saying it was interrupted and how to continue, and no traceback after the Ctrl-C (a
    # loaded machine may have logged Ray's own "Failed to send resource request" warning, with its trace, before)
    err = err_file.read_bytes()[before:].decode()
    assert process.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    said = [line for line in err.splitlines() if "interrupted" in line]
    assert len(said) == 1, err[-3000:]
    assert "ray-efa train --local --name interrupted-run --resume" in said[0]
    # and the run's folder keeps what it wrote: its settings and the history of the steps trained
    folder = storage / "interrupted-run"
    assert str(folder) in said[0]
    assert (folder / "settings.json").is_file()
    assert (folder / "metrics.jsonl").is_file() and (folder / "metrics.jsonl").read_text().strip()
