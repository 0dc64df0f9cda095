"""The layers are contracts a tool checks (pyproject [tool.importlinter], `make lint`): the code keeps them, every
subpackage sits in one, and an import against them breaks the check, naming the module and the line.

Real: import-linter on this checkout (`lint-imports`, as `make lint` runs it), and on a copy with one import added.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONTRACTS = {contract["id"]: contract for contract in PYPROJECT["tool"]["importlinter"]["contracts"]}
PACKAGES = tuple(sorted(path.name for path in (ROOT / "ray_efa").iterdir() if path.is_symlink()))
"""The subpackages: ray_efa/'s links to the top-level folders (docs/development.md, "Layout")."""
LINT_IMPORTS = (
    "import sys; from importlinter.cli import lint_imports_command; "
    "sys.argv[0] = 'lint-imports'; sys.exit(lint_imports_command())"
)


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports --no-cache --no-logo` as `make lint` runs it, from `root` (import-linter puts it first on sys.path,
    so its ray_efa/ is what the contracts read)."""
    return subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache", "--no-logo"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy(tmp_path: Path) -> Path:
    """pyproject.toml and the package's sources (ray_efa/ with its links), as they are in this checkout."""
    copy = tmp_path / "checkout"
    copy.mkdir()
    shutil.copy(ROOT / "pyproject.toml", copy)
    for name in ("ray_efa", *PACKAGES):
        shutil.copytree(ROOT / name, copy / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_every_subpackage_is_in_one_layer():
    layers = [{name.strip() for name in layer.split("|")} for layer in CONTRACTS["layers"]["layers"]]
    assert sorted(name for layer in layers for name in layer) == sorted(f"ray_efa.{p}" for p in PACKAGES)
    # core at the bottom, cli on top, and k8s and training side by side: neither may import the other
    assert layers[-1] == {"ray_efa.core"} and layers[0] == {"ray_efa.cli"}
    assert {"ray_efa.k8s", "ray_efa.training"} in layers


def test_the_code_keeps_its_layer_contracts():
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout
    # and it read the whole package through ray_efa/'s links, not an empty ray_efa/
    analyzed = int(result.stdout.split("Analyzed ")[1].split()[0])
    assert analyzed >= sum(len(list((ROOT / p).glob("*.py"))) for p in PACKAGES)


@pytest.mark.parametrize(
    ("module", "added", "broken"),
    [
        # a lazy import counts like one at the top: it runs on the first call
        (
            "k8s/names.py",
            "def _gate():\n    from ray_efa.training import transport\n",
            "ray_efa.k8s.names -> ray_efa.training.transport",
        ),
        ("core/catalog/__init__.py", "from ray_efa.infra import nag\n", "ray_efa.core.catalog -> ray_efa.infra.nag"),
        ("training/history.py", "import aws_cdk\n", "ray_efa.training.history -> aws_cdk"),
        ("core/perf.py", "def _probe():\n    import torch\n", "ray_efa.core.perf -> torch"),
        # the base install (no `train` extra): infra/, k8s/ and ops/ reach no training dependency, directly or through
        # training/
        ("infra/network.py", "def _probe():\n    import numpy\n", "ray_efa.infra.network -> numpy"),
        ("k8s/dist.py", "import transformers\n", "ray_efa.k8s.dist -> transformers"),
        (
            "ops/plan.py",
            "def _probe():\n    from ray_efa.training import model\n",
            "ray_efa.ops.plan -> ray_efa.training.model",
        ),
    ],
)
def test_an_import_against_the_layers_breaks_the_check(tmp_path, module, added, broken):
    # GIVEN a copy of the checkout with one import against a contract
    copy = _copy(tmp_path)
    path = copy / module
    path.write_text(path.read_text() + "\n\n" + added)
    # WHEN the contracts are checked THEN the check fails and names the import
    result = _lint_imports(copy)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert broken in result.stdout and " BROKEN" in result.stdout


@pytest.mark.parametrize(
    ("module", "added", "cycle"),
    [
        # two modules of core/: problems is imported by the settings, and would import them back, lazily
        (
            "core/problems.py",
            "def _late():\n    from ray_efa.core import settings\n    return settings\n",
            ("No cycles are allowed in ray_efa.core.", ".problems -> .settings"),
        ),
        # two modules of one subpackage folder (core/settings/): the framework importing the sections that build on it
        (
            "core/settings/framework.py",
            "def _late():\n    from ray_efa.core.settings import sections\n",
            ("No cycles are allowed in ray_efa.core.settings.", ".framework -> .sections"),
        ),
        # a module of training/ and a subpackage of it: the gate's verdict reads the counters, which would read it back
        (
            "training/efa_counters/counter_verdict.py",
            "from ray_efa.training.transport import verdict\n",
            ("No cycles are allowed in ray_efa.training.", ".efa_counters -> .transport"),
        ),
    ],
)
def test_an_import_cycle_between_siblings_breaks_the_check(tmp_path, module, added, cycle):
    # GIVEN a copy of the checkout with one import that closes a cycle inside a package
    copy = _copy(tmp_path)
    path = copy / module
    path.write_text(path.read_text() + "\n\n" + added)
    # WHEN the contracts are checked THEN the acyclic_siblings contract breaks, naming the package and the import
    result = _lint_imports(copy)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "No import cycle between the modules and subpackages of one package BROKEN" in result.stdout
    assert all(part in result.stdout for part in cycle), result.stdout[-3000:]
