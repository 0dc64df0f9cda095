"""A checkout imports as itself, with no install and no links: ray_efa/__init__.py makes the top-level folders its
subpackages, a module added to a folder imports at once, and each folder refuses a second name (`import core`), so no
module loads twice. Real interpreters in a copy of the checkout, run from its root as a user runs a command there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "infra", "k8s", "training", "ops", "cli")


@pytest.fixture
def checkout(tmp_path) -> Path:
    """ray_efa/ and the package folders of this checkout, copied (so that a test can add a module)."""
    copy = tmp_path / "checkout"
    for name in ("ray_efa", *PACKAGES):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _python(cwd: Path, code: str) -> subprocess.CompletedProcess[str]:
    # `-c` puts the working directory first on sys.path: the copy's ray_efa, never an installed one
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_folders_are_ray_efas_subpackages_and_a_new_module_imports_at_once(checkout):
    # GIVEN a module added to core/ after the checkout (no install redone)
    (checkout / "core" / "added_here.py").write_text("ANSWER = 42\n")
    # WHEN the checkout's ray_efa imports it and a module that already was there
    result = _python(checkout, "import json, ray_efa.core.added_here as a, ray_efa.training.transport as t; "
                               "print(json.dumps([a.ANSWER, a.__file__, t.__file__]))")
    assert result.returncode == 0, result.stderr[-3000:]
    answer, added, transport = json.loads(result.stdout)
    # THEN both load from the checkout's own folders
    assert answer == 42 and Path(added) == checkout / "core" / "added_here.py"
    assert Path(transport) == checkout / "training" / "transport.py"


@pytest.mark.parametrize("package", PACKAGES)
def test_a_folder_refuses_its_top_level_name(checkout, package):
    # WHEN a module is imported by its folder's bare name from the repository root
    result = _python(checkout, f"import {package}")
    # THEN the import fails, naming the one name it has, before any of its modules loaded
    assert result.returncode == 1
    assert f"ImportError: {package}: this folder is the package ray_efa.{package}; import it as ray_efa.{package}" in (
        result.stderr)


def test_a_module_loads_once_under_one_name(checkout):
    # the checkout's modules by file: a file loaded under two names would count twice
    code = ("import sys, ray_efa.core.catalog, ray_efa.k8s.names\n"
            "try:\n    import core.catalog\nexcept ImportError:\n    pass\n"
            "files = [f for m in list(sys.modules.values()) if (f := getattr(m, '__file__', None))\n"
            f"         and f.startswith({str(checkout)!r})]\n"
            "print(len(files) - len(set(files)), 'core' in sys.modules, 'core.catalog' in sys.modules, len(files))")
    result = _python(checkout, code)
    assert result.returncode == 0, result.stderr[-3000:]
    duplicates, core, core_catalog, loaded = result.stdout.split()
    assert duplicates == "0" and core == "False" and core_catalog == "False" and int(loaded) > 5


def test_an_installed_layout_is_left_as_it_is(tmp_path, checkout):
    # GIVEN the wheel's layout (ray_efa/core/... beside ray_efa/__init__.py), beside another package named core
    installed = tmp_path / "site"
    (installed / "ray_efa").mkdir(parents=True)
    shutil.copy(checkout / "ray_efa" / "__init__.py", installed / "ray_efa")
    for package in PACKAGES:
        shutil.copytree(checkout / package, installed / "ray_efa" / package)
    shutil.copytree(checkout / "core", installed / "core")
    # WHEN it is imported THEN its own subpackages load, and ray_efa's path is its folder alone
    result = _python(installed, "import json, ray_efa, ray_efa.core.catalog as c; "
                                "print(json.dumps([ray_efa.__path__, c.__file__]))")
    assert result.returncode == 0, result.stderr[-3000:]
    path, catalog = json.loads(result.stdout)
    assert path == [str(installed / "ray_efa")] and Path(catalog) == installed / "ray_efa" / "core" / "catalog.py"
