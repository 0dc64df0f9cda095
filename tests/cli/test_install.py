"""`make install` shows progress on its long steps (the first one moves gigabytes for minutes)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _recipe(target: str) -> list[str]:
    """The commands of a Makefile target, as make would run them (-n: printed, not run; -B: even if up to date)."""
    result = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_the_long_install_steps_show_progress():
    commands = _recipe("install")
    pip = [c for c in commands if "pip install" in c and "requirements.lock" in c]
    npm = [c for c in commands if c.startswith("npm ci")]
    assert pip and npm
    # pip prints each package it collects and a progress bar; -q would hide both
    assert all(not re.search(r"\s-q\b|--quiet", c) for c in pip), pip
    assert all("--progress-bar on" in c for c in pip), pip
    # npm ci with its progress and fetches shown, not only errors
    assert all("--loglevel=error" not in c and "--progress=true" in c for c in npm), npm
    # and a line saying what is about to take long
    assert any(c.startswith("echo") and "several GB" in c for c in commands)


def test_the_editable_install_is_a_path_entry_static_tools_follow():
    # setuptools' default editable mode puts ray_efa on sys.path through an import-hook finder, which pyright and
    # Pylance never run: from a folder beside the checkout `import ray_efa` would not resolve for them. Strict mode
    # writes a .pth path entry to a tree of links instead, which they read.
    (editable,) = [c for c in _recipe("install") if "pip install" in c and " -e ." in c]
    assert "--config-settings editable_mode=strict" in editable, editable
