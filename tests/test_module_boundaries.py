"""Module boundaries (tools/module_boundaries.py, which `make lint` runs): no private name crosses a module, and no
package folder's modules import each other in a circle.

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

cycles, import_graph, private_uses = boundaries.cycles, boundaries.import_graph, boundaries.private_uses


def _run(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "module_boundaries.py"), str(root)],
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_package_keeps_both_rules():
    # GIVEN every module of core/, infra/, k8s/, training/, ops/, cli/ WHEN the tool reads them
    uses, found_cycles = boundaries.check(ROOT)
    # THEN no private name crosses a module and no folder has an import cycle
    assert not uses and not found_cycles, boundaries.report(uses, found_cycles)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the six package folders, which the tool reads as it reads the checkout."""
    for subpackage in boundaries.SUBPACKAGES:
        shutil.copytree(boundaries.package_folder(subpackage), tmp_path / subpackage,
                        ignore=shutil.ignore_patterns("__pycache__"))
    assert boundaries.check(tmp_path) == ([], [])
    return tmp_path


def _plant(checkout: Path, module: str, line: str) -> None:
    path = checkout / module
    path.write_text(path.read_text() + "\n" + line + "\n")


@pytest.mark.parametrize(("module", "line", "where", "what"), [
    ("ops/report.py", "from ray_efa.training.transport_lines import _HOST",
     "ray_efa.ops.report:", "uses ray_efa.training.transport_lines's private _HOST"),
    ("training/transport_parse.py", "from . import transport_lines as lines\nHOST = lines._HOST",
     "ray_efa.training.transport_parse:", "uses ray_efa.training.transport_lines's private _HOST"),
    ("cli/plan.py", "import ray_efa.core.settings\nRULES = ray_efa.core.settings._RULES",
     "ray_efa.cli.plan:", "uses ray_efa.core.settings's private _RULES"),
    ("ops/plan.py", "from ray_efa.infra._private import *",
     "ray_efa.ops.plan:", "uses ray_efa.infra's private module _private"),
], ids=["from-import", "module-attribute", "dotted-path", "private-module"])
def test_a_planted_private_use_fails_the_tool(checkout, module, line, where, what):
    # GIVEN one module that reaches into another's private name WHEN the tool reads the copy
    _plant(checkout, module, line)
    found = boundaries.report(*boundaries.check(checkout))
    # THEN it fails, naming the module and the name
    assert where in found and what in found, found


@pytest.mark.spawn
def test_a_planted_function_level_cycle_fails_the_command(checkout):
    # GIVEN core/problems.py (imported by core/settings.py) importing core.settings back, inside a function
    _plant(checkout, "core/problems.py", "def _late():\n    from ray_efa.core import settings\n    return settings")
    result = _run(checkout)
    # THEN the command fails (make lint with it), reporting the cycle with the function that hides it
    assert result.returncode == 1
    assert "ray_efa.core.problems:" in result.stdout and "(in _late) imports ray_efa.core.settings" in result.stdout


@pytest.mark.parametrize("source", [
    "from pkg.a import _x\n",  # from-import
    "from .a import _x\n",  # relative
    "import pkg.a as a\ny = a._x\n",  # attribute of an aliased module
    "from pkg import a\ny = a._x\n",  # attribute of a module imported from its package
    "import pkg.a\ny = pkg.a._x\n",  # the dotted path
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import _x\n",  # for the type checker: counts
], ids=["from", "relative", "alias", "from-package", "dotted", "type-checking"])
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
        "other.d:1 uses pkg's private module _impl"]


def test_the_scan_reads_core_imports_of_every_form():
    # GIVEN the graph of core/ as it is: it must see what it claims to, or an empty graph would pass the tests above
    by_package, packages = boundaries.package_modules()
    edges = {(e.source, e.target) for e in import_graph(by_package["core"], packages)}
    assert ("ray_efa.core.settings_checks", "ray_efa.core.catalog") in edges  # from ray_efa.core import catalog
    assert ("ray_efa.core.strategy", "ray_efa.core.memory") in edges  # from ray_efa.core.memory import ...
    assert ("ray_efa.core.calibrate", "ray_efa.core.strategy") in edges  # inside a function
    # and settings -> settings_checks -> model_source runs one way: model_source reads the settings through protocols
    assert {("ray_efa.core.settings", "ray_efa.core.settings_checks"),
            ("ray_efa.core.settings_checks", "ray_efa.core.model_source")} <= edges
    assert not {edge for edge in edges if edge[0] == "ray_efa.core.model_source" and "settings" in edge[1]}


def test_function_level_and_relative_imports_make_a_cycle():
    # GIVEN a imports b at module level, b imports a inside a function (relatively), c imports a for the type checker
    modules = {
        "pkg": "",
        "pkg.a": "from pkg import b\n",
        "pkg.b": "def f():\n    from .a import thing\n    return thing\n",
        "pkg.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\nimport pkg.b\n",
    }
    # WHEN the cycles are found
    (cycle,) = cycles(import_graph(modules, frozenset({"pkg"})))
    # THEN the one cycle is a <-> b, naming the function of the hidden import
    assert [str(edge) for edge in cycle] == ["pkg.a:1 imports pkg.b", "pkg.b:2 (in f) imports pkg.a"]


def test_type_checking_imports_do_not_count_but_their_else_does():
    modules = {
        "pkg.a": "import pkg.b\n",
        "pkg.b": "import typing\nif typing.TYPE_CHECKING:\n    import pkg.a\n",
    }
    assert cycles(import_graph(modules)) == []
    modules["pkg.b"] += "else:\n    from pkg import a\n"
    assert [str(edge) for edge in cycles(import_graph(modules))[0]] == ["pkg.a:1 imports pkg.b", "pkg.b:5 imports pkg.a"]


def test_a_package_init_loaded_by_python_is_no_cycle():
    # GIVEN pkg/__init__ re-exporting from pkg.a, and pkg.a importing its sibling b by `from pkg import b`
    modules = {"pkg": "from pkg.a import x\n", "pkg.a": "from pkg import b\nx = b.y\n", "pkg.b": "y = 1\n"}
    # THEN that is the import of pkg.b, not of pkg's __init__ (which Python loads first, whatever the module imports)
    assert cycles(import_graph(modules, frozenset({"pkg"}))) == []


def test_a_planted_cycle_is_found_in_every_package_folder(checkout):
    # GIVEN a module-level cycle planted in each folder WHEN the tool reads the copy THEN each is reported
    for folder, (a, b) in {"infra": ("names_a", "names_b"), "k8s": ("x_a", "x_b"), "training": ("t_a", "t_b"),
                           "ops": ("o_a", "o_b"), "cli": ("c_a", "c_b")}.items():
        (checkout / folder / f"{a}.py").write_text(f"from ray_efa.{folder} import {b}\n")
        (checkout / folder / f"{b}.py").write_text(f"from ray_efa.{folder}.{a} import *\n")
    found = {cycle[0].source for cycle in boundaries.check(checkout)[1]}
    assert found == {f"ray_efa.{folder}.{a}" for folder, a in
                     [("infra", "names_a"), ("k8s", "x_a"), ("training", "t_a"), ("ops", "o_a"), ("cli", "c_a")]}


def test_three_modules_in_a_ring_are_one_cycle():
    modules = {"p.a": "from p.b import x\n", "p.b": "from p.c import y\n", "p.c": "class C:\n    def m(self):\n        import p.a\n"}
    (cycle,) = cycles(import_graph(modules))
    assert [edge.source for edge in cycle] == ["p.a", "p.b", "p.c"] and cycle[-1].function == "C.m"


def test_settings_still_exports_what_moved_out_of_it():
    # GIVEN Problem and SettingsError in core.problems and the field helper in core.settings_framework
    from ray_efa.core import problems, settings, settings_framework
    from ray_efa.core.settings import Problem, SettingsError, setting

    # THEN the old import path gives the same objects (an `except SettingsError` anywhere catches them all)
    assert (Problem, SettingsError, setting) == (problems.Problem, problems.SettingsError, settings_framework.setting)
    assert {"Problem", "SettingsError"} <= set(settings.__all__)
