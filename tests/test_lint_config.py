"""The lint configuration keeps covering the code: every package is in pyright's include (each by one path),
and the tools are pinned. pyright itself runs once, in `make lint` (CI), not here: this checks what it is told to read.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PYRIGHT = PYPROJECT["tool"]["pyright"]


def _package_folders() -> set[str]:
    """The top-level folders that are ray_efa's subpackages: ray_efa/'s links (ray_efa/core -> ../core)."""
    return {path.name for path in (ROOT / "ray_efa").iterdir() if path.is_symlink()}


def test_the_wheel_finds_the_packages_through_ray_efas_links():
    # setuptools finds ray_efa and its subpackages where Python does (through the links): no second map of folder to
    # package in pyproject (tests/test_checkout_imports.py checks the links, tests/test_wheel.py what the wheel holds)
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert setuptools == {
        "packages": {"find": {"include": ["ray_efa", "ray_efa.*"]}},
        "package-data": setuptools["package-data"],
    }


def test_pyright_includes_every_package_once_by_its_import_path():
    include = set(PYRIGHT["include"])
    # THEN each package is checked through its link, ray_efa/<name> (pyright walks into a link named in include, and
    # reads its files under the names Python imports them by), ray_efa/__init__.py beside them
    assert {f"ray_efa/{name}" for name in _package_folders()} | {"ray_efa/__init__.py"} <= include
    # and never also by its top-level folder: the same file would be a second module (core.settings beside
    # ray_efa.core.settings), and a class that comes back to its own module a second type; nor ray_efa/ as a whole,
    # which pyright reads without the links
    assert not {entry.split("/")[0] for entry in include} & _package_folders()
    assert "ray_efa" not in {entry.rstrip("/") for entry in include}
    # and the tests, the type checker's reading of their doubles and assertions too (issue 49)
    assert "tests" in include
    # and no exclude takes a package (or a file in one) back out, nor any of the tests (tests/cluster included: the
    # kubernetes client's stubs, a dev dependency, type it)
    for pattern in PYRIGHT.get("exclude", []):
        assert pattern.split("/")[0] not in _package_folders() | {"ray_efa", "tests"}, pattern


def test_pyright_checks_at_least_standard_mode_with_the_project_venv():
    assert PYRIGHT["typeCheckingMode"] in ("standard", "strict")
    assert (PYRIGHT["venvPath"], PYRIGHT["venv"]) == (".", ".venv")


def test_lint_tools_are_pinned_exactly():
    pyright = json.loads((ROOT / "package.json").read_text())["devDependencies"]["pyright"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", pyright), pyright
    (ruff,) = [spec for spec in PYPROJECT["project"]["optional-dependencies"]["dev"] if spec.startswith("ruff")]
    assert ruff in (ROOT / "requirements.lock").read_text().splitlines()


def test_the_pre_commit_hooks_run_the_pinned_ruff():
    # .pre-commit-config.yaml's ruff is the one make lint runs: the same findings before a commit as in CI
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    (rev,) = re.findall(r"repo: https://github.com/astral-sh/ruff-pre-commit\n\s+rev: v(\S+)", config)
    assert f"ruff=={rev}" in (ROOT / "requirements.lock").read_text().splitlines()
    assert re.findall(r"- id: (\S+)", config) == ["ruff-check", "ruff-format"]
