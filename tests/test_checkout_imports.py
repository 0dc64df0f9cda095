"""One map of folder to subpackage: ray_efa/ holds a relative link to each top-level package folder (ray_efa/core ->
../core), and Python, the editable install (a tree of links to the package's files), the wheel (tests/test_wheel.py), pyright and import-linter
(tests/test_layers.py) all follow it (docs/development.md, "Layout"). Real interpreters in a copy of the checkout:
from its root as a user runs a command there, and from another folder through a real editable install.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.venvs import fresh_venv, run

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = tuple(sorted(path.name for path in (ROOT / "ray_efa").iterdir() if path.is_symlink()))
"""The subpackages: ray_efa/'s links."""


def test_ray_efa_holds_its_own_files_and_one_relative_link_per_package_folder():
    entries = {path.name: path for path in (ROOT / "ray_efa").iterdir() if path.name != "__pycache__"}
    assert set(entries) == {"__init__.py", "py.typed", *PACKAGES}
    assert set(PACKAGES) == {"core", "infra", "k8s", "training", "ops", "cli"}
    for name in PACKAGES:
        # a relative link (a clone anywhere keeps it) to the top-level folder of its name, which is a real folder
        assert os.readlink(entries[name]) == f"../{name}", name
        assert (ROOT / name / "__init__.py").is_file() and not (ROOT / name).is_symlink(), name


@pytest.fixture
def checkout(tmp_path) -> Path:
    """ray_efa/ (its links as links) and the package folders of this checkout, copied (so that a test can add a
    module), with the repository's other importable names beside them: tests/, tools/ and app.py."""
    copy = tmp_path / "checkout"
    for name in ("ray_efa", *PACKAGES):
        shutil.copytree(ROOT / name, copy / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    for folder in ("tests", "tools", "docs"):
        (copy / folder).mkdir()
        (copy / folder / "__init__.py").write_text("")
    (copy / "app.py").write_text("raise SystemExit('app.py ran: the CDK app is no module of ray_efa')\n")
    shutil.copy(ROOT / "pyproject.toml", copy)
    return copy


def _python(cwd: Path, code: str, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    # `-c` puts the working directory first on sys.path: from the copy's root, the copy's ray_efa
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([python, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_a_checkout_imports_the_six_packages_and_nothing_else_of_the_repository(checkout):
    # GIVEN a module added to core/ after the checkout (nothing installed or redone)
    (checkout / "core" / "added_here.py").write_text("ANSWER = 42\n")
    # WHEN the checkout's ray_efa imports it, a module that already was there, and the repository's other folders
    code = (
        "import importlib, json, ray_efa.core.added_here as a, ray_efa.training.transport as t\n"
        "def found(name):\n"
        "    try:\n        importlib.import_module(name)\n        return True\n"
        "    except ModuleNotFoundError:\n        return False\n"
        "print(json.dumps([a.ANSWER, a.__file__, t.__file__,\n"
        "                  {n: found('ray_efa.' + n) for n in ('tests', 'tools', 'docs', 'app', 'ray_efa')}]))"
    )
    result = _python(checkout, code)
    assert result.returncode == 0, result.stderr[-3000:]
    answer, added, transport, others = json.loads(result.stdout)
    # THEN both load through ray_efa/'s links, the new one at once
    assert answer == 42 and Path(added) == checkout / "ray_efa" / "core" / "added_here.py"
    assert Path(transport) == checkout / "ray_efa" / "training" / "transport" / "__init__.py"
    # and ray_efa holds nothing else: no tests, tools, docs, CDK app or ray_efa.ray_efa
    assert others == dict.fromkeys(("tests", "tools", "docs", "app", "ray_efa"), False)


def test_no_module_imports_a_package_folder_by_its_bare_name():
    # `import core` from the repository root would load core/ a second time (core.catalog beside
    # ray_efa.core.catalog, two copies of every class): every import names ray_efa. examples/platform is an app of its
    # own, whose `core` and `infra` are its own packages.
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    bare = []
    for name in listed:
        if name.startswith("examples/platform/") or not (ROOT / name).is_file():
            continue
        for node in ast.walk(ast.parse((ROOT / name).read_text(encoding="utf-8"), name)):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            bare += [f"{name}:{node.lineno}: {module}" for module in modules if module.split(".")[0] in PACKAGES]
    assert not bare, bare


@pytest.mark.wheel
def test_the_editable_install_gives_the_same_files_from_any_folder(tmp_path, checkout):
    # GIVEN the checkout installed editable as `make install` installs it (setuptools' strict mode: a tree of links to
    # the package's files, which a type checker reads too) into a fresh venv that has setuptools
    python, _ = fresh_venv(tmp_path / "venv", ["setuptools>=77"], pip=True)
    command = [
        str(python),
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-e",
        str(checkout),
        "--config-settings",
        "editable_mode=strict",
    ]
    install = run(command, cwd=tmp_path)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    # and a module added after the install
    (checkout / "training" / "added_later.py").write_text("ANSWER = 42\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # (ray_efa.infra's file by its spec: its constructs need aws_cdk, which this venv leaves out)
    code = (
        "import importlib.util, json\n"
        "added = importlib.util.find_spec('ray_efa.training.added_later')\n"
        "print(json.dumps([importlib.util.find_spec('ray_efa.infra').origin, added and added.origin,\n"
        "                  [importlib.util.find_spec(n) is not None for n in ('core', 'tests', 'app', 'tools')]]))"
    )
    folders = (checkout, checkout / "tests", elsewhere)

    def seen() -> list:
        results = [_python(folder, code, str(python)) for folder in folders]
        assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
        # each path as the file it is (the strict tree's entries are links to the checkout's files)
        return [
            [str(Path(s[0]).resolve()), s[1] and str(Path(s[1]).resolve()), s[2]]
            for s in (json.loads(r.stdout) for r in results)
        ]

    infra = str((checkout / "infra" / "__init__.py").resolve())
    added = str((checkout / "training" / "added_later.py").resolve())
    # WHEN ray_efa.infra is looked up from the checkout's root, from a folder of it and from a folder outside it
    before = seen()
    # THEN each loads the same files, and the install makes no other name of the repository importable (from the
    # root, Python's own first entry, the working folder, holds them all)
    assert [s[0] for s in before] == [infra] * 3
    assert before[1][2] == before[2][2] == [False, False, False, False]
    # the module added later imports at once from the root (ray_efa/ first on the path); elsewhere once the tree is
    # made again, which `make` does when the list of the package's files changes (tests/cli/test_install.py)
    assert [s[1] for s in before] == [added, None, None]
    again = run(command, cwd=tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert [s[1] for s in seen()] == [added] * 3
