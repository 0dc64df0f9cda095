"""The package's folders: one idea each (docs/development.md, "Layout"). In core/ and training/, a family of modules
that share a prefix (settings_checks.py, settings_rules.py, ...) is a subpackage with a public face instead
(core/settings/: its __init__ exports what the family did), and no module name repeats inside one subpackage tree, so
a name says which module it is.

Read from the folders, nothing imported.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("core", "training")
"""The subpackages held to the rule (k8s/'s code_* and ray_* modules are not yet)."""
FAMILY = 3
"""This many modules of one folder with one prefix (`prefix_*.py`) are a family that wants a folder of its own."""


def _modules(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.py") if p.name != "__init__.py" and not p.name.startswith("_"))


def flat_families(folder: Path) -> dict[str, list[str]]:
    """Prefix -> the module names that share it, for each prefix shared by FAMILY or more modules of `folder`."""
    by_prefix: dict[str, list[str]] = {}
    for module in _modules(folder):
        if "_" in module.stem:
            by_prefix.setdefault(module.stem.split("_")[0], []).append(module.name)
    return {prefix: names for prefix, names in by_prefix.items() if len(names) >= FAMILY}


def repeated_names(package: Path) -> list[str]:
    """The module file names that occur more than once in `package` and its subpackages."""
    counts = Counter(p.name for p in package.rglob("*.py") if p.name != "__init__.py" and "__pycache__" not in p.parts)
    return sorted(name for name, count in counts.items() if count > 1)


@pytest.mark.parametrize("package", CHECKED)
def test_no_flat_family_of_prefixed_modules(package):
    folders = [ROOT / package, *(p.parent for p in (ROOT / package).rglob("*/__init__.py"))]
    found = {str(folder.relative_to(ROOT)): families for folder in folders if (families := flat_families(folder))}
    assert not found, f"make each family a subpackage with a public face (core/settings/ is one): {found}"


@pytest.mark.parametrize("package", CHECKED)
def test_no_module_name_repeats_inside_a_subpackage(package):
    assert not repeated_names(ROOT / package)


def test_the_subpackages_are_there_and_the_checks_can_fail(tmp_path):
    # the families moved into folders with a public face...
    for folder in ("core/settings", "core/catalog", "training/transport", "training/efa_counters"):
        assert (ROOT / folder / "__init__.py").is_file(), folder
    # ...and a flat family or a repeated name, planted, is found
    for name in ("gate_lines.py", "gate_parse.py", "gate_verdict.py", "models.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "models.py").write_text("")
    assert flat_families(tmp_path) == {"gate": ["gate_lines.py", "gate_parse.py", "gate_verdict.py"]}
    assert repeated_names(tmp_path) == ["models.py"]
