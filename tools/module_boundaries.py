"""Module boundaries inside the package: an underscore means "this module's own".

    python tools/module_boundaries.py [CHECKOUT]   # `make lint` runs it, tests/test_module_boundaries.py too;
                                                   # exit 0 the rule kept, 1 an offender (each one listed)

The rule, over the modules of ray_efa's subpackages (core/, infra/, k8s/, training/, ops/, cli/), each read with `ast`
and never imported, so every offender is named at once:

- **No private name crosses a module.** `from x import _y`, `import x as m; m._y` and `x._y` on an imported module are
  offenders wherever `_y` is a name defined in module `x` (dunders aside). A private *module* (infra/_private.py) is
  its package's own: the modules of that package may import it, any other module may not.

No import cycle between the modules of a package is import-linter's `acyclic_siblings` contract (pyproject
[tool.importlinter], `lint-imports` in `make lint`; tests/test_layers.py plants one).
"""

from __future__ import annotations

import ast
import functools
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = "ray_efa"
SUBPACKAGES = ("core", "infra", "k8s", "training", "ops", "cli")


@dataclass(frozen=True)
class PrivateUse:
    """`source` reaches the private `name` of `owner` at `line`."""

    source: str
    line: int
    owner: str
    name: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line} uses {self.owner}'s private {self.name}"


def package_folder(subpackage: str, root: Path = ROOT) -> Path:
    """The folder of ray_efa.<subpackage> in a checkout: the top-level folder (core/), or ray_efa/core/ where it is."""
    for folder in (root / subpackage, root / TOP / subpackage):
        if (folder / "__init__.py").is_file():
            return folder
    raise FileNotFoundError(f"no package folder for {TOP}.{subpackage} under {root}")


def module_names(folder: Path, package: str) -> dict[str, Path]:
    """Every module under `folder` by its dotted name (a package's __init__.py by the package's name)."""
    names = {}
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join((package, *parts))] = path
    return names


@functools.cache
def _parse(source: str) -> ast.Module:
    return ast.parse(source)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module a `from ... import` reads from, relative levels resolved against `module`."""
    base = node.module or ""
    if not node.level:
        return base
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{base}" if base else package


def _owner_of_private_module(module: str) -> tuple[str, str] | None:
    """(package, private module's name) for the first private part of a dotted module name, else None."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if _private(part):
            return ".".join(parts[:i]), part
    return None


def private_uses(modules: dict[str, str], packages: frozenset[str] = frozenset()) -> list[PrivateUse]:
    """Every reach into another module's private names, or into a private module from outside its package.

    `modules` is every module of the package (name -> source): an imported name is a module where one of that name
    exists, else a name defined in the module it is imported from."""
    found: list[PrivateUse] = []
    # the dotted names an import can reach in the package: its modules and every package above them (ray_efa)
    known = {".".join(name.split(".")[:i]) for name in modules for i in range(1, name.count(".") + 2)}
    roots = {name.split(".")[0] for name in modules}
    for module, source in modules.items():
        tree = _parse(source)

        def module_used(target: str, line: int, source_module: str = module) -> None:
            owner = _owner_of_private_module(target)
            if owner and source_module != owner[0] and not source_module.startswith(owner[0] + "."):
                found.append(PrivateUse(source_module, line, owner[0], f"module {owner[1]}"))

        bound: dict[str, str] = {}  # a local name -> the package module it is bound to (by any import in the file)
        attributes: list[ast.Attribute] = []
        for node in ast.walk(
            tree
        ):  # every import, TYPE_CHECKING ones too: a private name is private to the type checker
            if isinstance(node, ast.Attribute):
                attributes.append(node)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] not in roots:
                        continue
                    module_used(alias.name, node.lineno)
                    top = alias.name.split(".")[0]
                    bound[alias.asname or top] = alias.name if alias.asname else top
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, module, module in packages)
                if base.split(".")[0] not in roots:
                    continue
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in known:
                        module_used(full, node.lineno)
                        bound[alias.asname or alias.name] = full
                    else:
                        module_used(base, node.lineno)
                        if _private(alias.name) and base != module:
                            found.append(PrivateUse(module, node.lineno, base, alias.name))
        for node in attributes:
            chain = _dotted(node)
            if not chain or chain[0] not in bound:
                continue
            target = bound[chain[0]]
            for attr in chain[1:]:
                if f"{target}.{attr}" in known:
                    target = f"{target}.{attr}"
                    module_used(target, node.lineno)
                    continue
                if _private(attr) and target in modules and target != module:
                    found.append(PrivateUse(module, node.lineno, target, attr))
                break
    unique = {(use.source, use.line, use.owner, use.name): use for use in found}
    return sorted(unique.values(), key=lambda use: (use.source, use.line, use.name))


def _dotted(node: ast.Attribute) -> list[str] | None:
    """a.b.c as ["a", "b", "c"] for the outermost attribute of a plain name chain, else None (inner links skipped)."""
    parts: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    if not isinstance(current, ast.Name):
        return None
    return [current.id, *reversed(parts)]


def package_modules(root: Path = ROOT) -> tuple[dict[str, dict[str, str]], frozenset[str]]:
    """Each subpackage's modules (subpackage -> dotted name -> source), and which of the names are packages."""
    by_package: dict[str, dict[str, str]] = {}
    packages: set[str] = set()
    for subpackage in SUBPACKAGES:
        names = module_names(package_folder(subpackage, root), f"{TOP}.{subpackage}")
        by_package[subpackage] = {name: path.read_text(encoding="utf-8") for name, path in names.items()}
        packages |= {name for name, path in names.items() if path.name == "__init__.py"}
    return by_package, frozenset(packages)


def check(root: Path = ROOT) -> list[PrivateUse]:
    """The private names used across modules of the whole package."""
    by_package, packages = package_modules(root)
    everything = {name: source for modules in by_package.values() for name, source in modules.items()}
    return private_uses(everything, packages)


def report(uses: list[PrivateUse]) -> str:
    lines = [
        f"{len(uses)} private names used across modules (make the name public in its owner, with a "
        "docstring, or move the user next to it):"
    ]
    lines += [f"  {use}" for use in uses]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    uses = check(Path(argv[0]) if argv else ROOT)
    if uses:
        print(report(uses))
        return 1
    print("module boundaries kept: no private name crosses a module")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
