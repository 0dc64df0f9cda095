"""Module boundaries (tools/module_boundaries.py, which `make lint` runs): no private name crosses a module. (No import
cycle between a package's modules is import-linter's acyclic_siblings contract: tests/test_layers.py.)

Real: the tool on this checkout, and on a copy of its package folders with one offender planted, where it must fail.
The modules are parsed with `ast`, never imported, so one run names every offender.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.load_script import load_script

ROOT = Path(__file__).resolve().parents[1]
boundaries = load_script(ROOT / "tools" / "module_boundaries.py")

private_uses = boundaries.private_uses


def _run(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "module_boundaries.py"), str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_package_keeps_the_rule():
    # GIVEN every module of core/, infra/, k8s/, training/, ops/, cli/ WHEN the tool reads them
    uses = boundaries.check(ROOT)
    # THEN no private name crosses a module
    assert not uses, boundaries.report(uses)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the six package folders, which the tool reads as it reads the checkout."""
    for subpackage in boundaries.SUBPACKAGES:
        shutil.copytree(
            boundaries.package_folder(subpackage), tmp_path / subpackage, ignore=shutil.ignore_patterns("__pycache__")
        )
    assert boundaries.check(tmp_path) == []
    return tmp_path


def _plant(checkout: Path, module: str, line: str) -> None:
    path = checkout / module
    path.write_text(path.read_text() + "\n" + line + "\n")


@pytest.mark.parametrize(
    ("module", "line", "where", "what"),
    [
        (
            "ops/report.py",
            "from ray_efa.training.transport.lines import _HOST",
            "ray_efa.ops.report:",
            "uses ray_efa.training.transport.lines's private _HOST",
        ),
        (
            "training/transport/parse.py",
            "from . import lines\nHOST = lines._HOST",
            "ray_efa.training.transport.parse:",
            "uses ray_efa.training.transport.lines's private _HOST",
        ),
        (
            "cli/plan.py",
            "import ray_efa.core.settings\nRULES = ray_efa.core.settings._RULES",
            "ray_efa.cli.plan:",
            "uses ray_efa.core.settings's private _RULES",
        ),
        (
            "ops/plan.py",
            "from ray_efa.infra._private import *",
            "ray_efa.ops.plan:",
            "uses ray_efa.infra's private module _private",
        ),
    ],
    ids=["from-import", "module-attribute", "dotted-path", "private-module"],
)
def test_a_planted_private_use_fails_the_tool(checkout, module, line, where, what):
    # GIVEN one module that reaches into another's private name WHEN the tool reads the copy
    _plant(checkout, module, line)
    found = boundaries.report(boundaries.check(checkout))
    # THEN it fails, naming the module and the name
    assert where in found and what in found, found


@pytest.mark.spawn
def test_a_planted_private_use_fails_the_command(checkout):
    # GIVEN ops/plan.py reaching into core.settings' private _RULES, inside a function
    _plant(checkout, "ops/plan.py", "def _late():\n    from ray_efa.core.settings import _RULES\n    return _RULES")
    result = _run(checkout)
    # THEN the command fails (make lint with it), naming the module, the line and the name
    assert result.returncode == 1
    assert "ray_efa.ops.plan:" in result.stdout and "uses ray_efa.core.settings's private _RULES" in result.stdout


@pytest.mark.parametrize(
    "source",
    [
        "from pkg.a import _x\n",  # from-import
        "from .a import _x\n",  # relative
        "import pkg.a as a\ny = a._x\n",  # attribute of an aliased module
        "from pkg import a\ny = a._x\n",  # attribute of a module imported from its package
        "import pkg.a\ny = pkg.a._x\n",  # the dotted path
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import _x\n",  # for the type checker: counts
    ],
    ids=["from", "relative", "alias", "from-package", "dotted", "type-checking"],
)
def test_every_form_of_a_private_use_is_found(source):
    modules = {"pkg": "", "pkg.a": "_x = 1\n", "pkg.b": source}
    (use,) = private_uses(modules, frozenset({"pkg"}))
    assert (use.source, use.owner, use.name) == ("pkg.b", "pkg.a", "_x")


def test_what_stays_allowed():
    modules = {
        "pkg": "from pkg._impl import thing\n",  # a package's own private module, from its __init__
        "pkg._impl": "thing = 1\n",
        "pkg.a": "_x = 1\ny = _x\nclass C:\n    _z = 2\n",  # a module's own private names
        "pkg.b": "from pkg._impl import thing\nfrom pkg.a import C\nfrom pkg import a\n"
        "n = a.__name__\nv = C._z\n",  # a sibling's private module, dunders, a class's attribute
        "pkg.c": "from collections import _chain_from_iterable\n",  # outside the package: not this rule's business
    }
    assert private_uses(modules, frozenset({"pkg"})) == []
    # but the private module from another package is not its own
    modules["other.d"] = "from pkg._impl import thing\n"
    assert [str(use) for use in private_uses(modules, frozenset({"pkg"}))] == [
        "other.d:1 uses pkg's private module _impl"
    ]


def test_settings_still_exports_what_moved_out_of_it():
    # GIVEN Problem and SettingsError in core.problems and the field helper in core.settings.framework
    from ray_efa.core import problems, settings
    from ray_efa.core.settings import Problem, SettingsError, framework, setting

    # THEN the old import path gives the same objects (an `except SettingsError` anywhere catches them all)
    assert (Problem, SettingsError, setting) == (problems.Problem, problems.SettingsError, framework.setting)
    assert {"Problem", "SettingsError"} <= set(settings.__all__)
