"""`make install` shows progress on its long steps (the first one moves gigabytes for minutes)."""

from __future__ import annotations

import os
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
    # setuptools' strict editable mode: a tree of links to the package's files, which a type checker reads (the default
    # mode's import hook it cannot: tests/test_wheel.py); the tree misses a module added later, so the install depends
    # on the list of the package's files, besides the metadata (pyproject.toml) and the venv itself
    (editable,) = [c for c in _recipe("install") if "pip install" in c and " -e ." in c]
    assert "--config-settings editable_mode=strict" in editable, editable
    database = subprocess.run(
        ["make", "-p", "-n", "-B", ".venv/.editable"], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout.splitlines()
    (rule,) = [line for line in database if line.startswith(".venv/.editable:")]
    assert rule.split(":", 1)[1].split() == [".venv/.installed", "pyproject.toml", ".venv/.package-files"]


def test_the_list_of_package_files_changes_only_with_a_module_added_or_removed(tmp_path):
    # GIVEN a package folder and make's list of its files
    (tmp_path / "ray_efa" / "core").mkdir(parents=True)
    for name in ("__init__.py", "core/__init__.py", "core/models.py"):
        (tmp_path / "ray_efa" / name).write_text("")
    listed = tmp_path / "venv" / ".package-files"

    def make() -> float:
        result = subprocess.run(
            ["make", "-f", str(ROOT / "Makefile"), f"VENV={tmp_path / 'venv'}", str(listed)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return listed.stat().st_mtime

    make()
    assert listed.read_text().split() == ["ray_efa/__init__.py", "ray_efa/core/__init__.py", "ray_efa/core/models.py"]
    os.utime(listed, (1, 1))
    # WHEN a file is edited, or its bytecode written THEN the list keeps its date: nothing is reinstalled
    (tmp_path / "ray_efa" / "core" / "models.py").write_text("X = 1\n")
    (tmp_path / "ray_efa" / "core" / "__pycache__").mkdir()
    (tmp_path / "ray_efa" / "core" / "__pycache__" / "models.cpython-311.pyc").write_bytes(b"")
    assert make() == 1
    # WHEN a module is added THEN the list is newer (the editable install is made again, its tree with the module)
    (tmp_path / "ray_efa" / "core" / "added.py").write_text("")
    assert make() > 1 and "ray_efa/core/added.py" in listed.read_text().split()
