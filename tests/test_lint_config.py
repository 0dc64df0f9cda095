"""The lint configuration keeps covering the code: every package folder is in pyright's include (each by one path),
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
    """The top-level folders the wheel maps into ray_efa (ray_efa.core -> core/)."""
    return set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())


def test_every_subpackage_is_a_top_level_folder_that_refuses_a_second_name():
    # GIVEN the packages the wheel holds THEN each subpackage of ray_efa is mapped onto a top-level folder of its name
    packages = PYPROJECT["tool"]["setuptools"]["packages"]
    mapped = PYPROJECT["tool"]["setuptools"]["package-dir"]
    assert mapped == {name: name.split(".")[1] for name in packages if name.count(".") == 1}
    for folder in _package_folders():
        init = ROOT / folder / "__init__.py"
        assert init.is_file() and not init.is_symlink(), folder
        # whose __init__ refuses to load under any name but ray_efa.<folder> (no module twice: core.x and ray_efa.core.x)
        assert f'if __name__ != "ray_efa.{folder}":' in init.read_text(), folder
    # and ray_efa/ in the repository holds no links (a Windows checkout has none): only its own files
    assert sorted(path.name for path in (ROOT / "ray_efa").iterdir() if path.name != "__pycache__") == [
        "__init__.py", "py.typed"]


def test_pyright_includes_every_package_folder_once():
    include = set(PYRIGHT["include"])
    # THEN each package folder is checked under its top-level path, ray_efa/__init__.py beside them
    assert _package_folders() | {"ray_efa/__init__.py"} <= include
    # and the tests, the type checker's reading of their doubles and assertions too (issue 49)
    assert "tests" in include
    # and never also through ray_efa/: pyright would report each file twice, once per path
    assert not {entry for entry in include if entry.rstrip("/") == "ray_efa" or entry.startswith("ray_efa/")} - {
        "ray_efa/__init__.py"}
    # and no exclude takes a package folder (or a file in one) back out
    for pattern in PYRIGHT.get("exclude", []):
        assert pattern.split("/")[0] not in _package_folders(), pattern


def test_pyright_checks_at_least_standard_mode_with_the_project_venv():
    assert PYRIGHT["typeCheckingMode"] in ("standard", "strict")
    assert (PYRIGHT["venvPath"], PYRIGHT["venv"]) == (".", ".venv")


def test_lint_tools_are_pinned_exactly():
    pyright = json.loads((ROOT / "package.json").read_text())["devDependencies"]["pyright"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", pyright), pyright
    (ruff,) = [spec for spec in PYPROJECT["project"]["optional-dependencies"]["dev"] if spec.startswith("ruff")]
    assert ruff in (ROOT / "requirements.lock").read_text().splitlines()
