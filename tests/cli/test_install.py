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


def test_the_editable_install_is_redone_only_for_what_it_depends_on():
    # setuptools' default editable mode: `ray_efa` maps to the checkout's ray_efa/ folder, whose links are the
    # subpackages, so a module added to a folder imports at once (tests/test_checkout_imports.py) and only the metadata
    # (pyproject.toml) or the venv itself makes `make lint` and `make test-fast` reinstall; a folder's mtime does not.
    (editable,) = [c for c in _recipe("install") if "pip install" in c and " -e ." in c]
    assert "editable_mode" not in editable, editable
    database = subprocess.run(["make", "-p", "-n", "-B", ".venv/.editable"], cwd=ROOT, capture_output=True, text=True,
                              timeout=60).stdout.splitlines()
    (rule,) = [line for line in database if line.startswith(".venv/.editable:")]
    assert rule.split(":", 1)[1].split() == [".venv/.installed", "pyproject.toml"]
