"""The layer contracts (pyproject [tool.importlinter]), checked by import-linter on the package as the wheel lays it out.

    python tools/lint_imports.py          # `make lint` runs it; exit 0 all kept, 1 one broken

import-linter finds `ray_efa` where Python would and reads the files under its folder. In a checkout that folder holds
only ray_efa/__init__.py (its subpackages are the top-level folders, mapped by [tool.setuptools.package-dir]), so this
copies the package's .py files into a temporary ray_efa/ tree, laid out as in the wheel, and runs import-linter there.
The copy is removed afterwards; nothing is written elsewhere (no import-linter cache either).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_tree(out: Path, root: Path = ROOT) -> Path:
    """Copy every package of pyproject's [tool.setuptools] (each from its package-dir folder) to `out`, as the wheel
    holds them (out/ray_efa/core/...); returns `out`."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders: dict[str, str] = setuptools.get("package-dir", {})
    for package in setuptools["packages"]:
        source = root / (folders.get(package) or package.replace(".", "/"))
        target = out.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for module in source.glob("*.py"):
            shutil.copyfile(module, target / module.name)
    return out


def main() -> int:
    from importlinter.cli import lint_imports

    with tempfile.TemporaryDirectory(prefix="ray-efa-layers-") as tmp:
        package_tree(Path(tmp))
        os.chdir(tmp)  # import-linter puts the working directory first on sys.path: the copy, not the checkout
        return lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)


if __name__ == "__main__":
    sys.exit(main())
