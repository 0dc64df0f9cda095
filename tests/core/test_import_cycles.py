"""core/ imports in one direction: no module of it imports, directly or through others, one that imports it back.

Every import counts that runs: at module level, inside a function (it runs on the first call, and the cycle is only
hidden, not gone) and in the `else:` of `if TYPE_CHECKING:`; the body of `if TYPE_CHECKING:` does not (the type
checker alone reads it). The modules are parsed with `ast`, never imported, so the test names every cycle at once.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import ray_efa.core

PACKAGE = "ray_efa.core"
CORE = Path(ray_efa.core.__file__).parent  # ray_efa/core -> core/


@dataclass(frozen=True)
class Edge:
    """`source` imports `target` at `line` (in `function`, or at module level)."""

    source: str
    target: str
    line: int
    function: str | None

    def __str__(self) -> str:
        where = f" (in {self.function})" if self.function else ""
        return f"{self.source}:{self.line}{where} imports {self.target}"


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module under `root` by its dotted name (a package's __init__.py by the package's name)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join((package, *parts))] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement loads: for `from a import b`, a.b where that is a module, else a."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's own package, one level up per extra dot
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def imports_of(module: str, source: str, is_package: bool = False) -> list[tuple[str, int, str | None]]:
    """(imported name, line, enclosing function) of every import in `source` that runs, TYPE_CHECKING blocks left out."""
    found: list[tuple[str, int, str | None]] = []

    def visit(node: ast.AST, scope: str, in_function: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:  # `else:` runs; the body is for the type checker only
                visit(child, scope, in_function)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            function = scope if in_function else None
            found.extend((name, node.lineno, function) for name in _imported(node, module, is_package))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = f"{scope}.{node.name}" if scope else node.name
            in_function = in_function or not isinstance(node, ast.ClassDef)
        for child in ast.iter_child_nodes(node):
            visit(child, scope, in_function)

    visit(ast.parse(source), "", False)
    return found


def import_graph(modules: dict[str, str], packages: frozenset[str] = frozenset()) -> list[Edge]:
    """The imports between the given modules (name -> source), each edge once, at its first line."""
    edges: dict[tuple[str, str], Edge] = {}
    for module, source in modules.items():
        for name, line, function in imports_of(module, source, module in packages):
            # `from pkg import mod` lists both pkg and pkg.mod: the module itself is the edge where it exists
            if name in modules and name != module and (module, name) not in edges:
                edges[(module, name)] = Edge(module, name, line, function)
    return sorted(edges.values(), key=lambda e: (e.source, e.line))


def cycles(edges: list[Edge]) -> list[list[Edge]]:
    """One cycle through each group of modules that import each other (each strongly connected component), as edges."""
    graph: dict[str, list[Edge]] = {}
    for edge in edges:
        graph.setdefault(edge.source, []).append(edge)
    # Tarjan's strongly connected components
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for edge in graph.get(node, ()):
            if edge.target not in index:
                connect(edge.target)
                low[node] = min(low[node], low[edge.target])
            elif edge.target in stack:
                low[node] = min(low[node], index[edge.target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [_cycle_in(component, graph) for component in components]


def _cycle_in(component: set[str], graph: dict[str, list[Edge]]) -> list[Edge]:
    """The shortest cycle through the component's first module (breadth first, inside the component)."""
    start = min(component)
    paths: dict[str, list[Edge]] = {start: []}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for edge in graph.get(node, ()):
            if edge.target == start:
                return [*paths[node], edge]
            if edge.target in component and edge.target not in paths:
                paths[edge.target] = [*paths[node], edge]
                queue.append(edge.target)
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")  # cannot happen for a component


def core_graph() -> list[Edge]:
    names = module_names(CORE, PACKAGE)
    packages = frozenset(name for name, path in names.items() if path.name == "__init__.py")
    return import_graph({name: path.read_text(encoding="utf-8") for name, path in names.items()}, packages)


def test_core_has_no_import_cycle():
    # GIVEN every import of every core/ module that runs (module level, in functions; not TYPE_CHECKING)
    found = cycles(core_graph())
    # THEN none leads back to the module it started from
    assert not found, "import cycles in core/:\n" + "\n".join(
        "  " + " -> ".join(edge.source for edge in cycle) + f" -> {cycle[0].source}\n"
        + "".join(f"      {edge}\n" for edge in cycle) for cycle in found)


def test_the_scan_reads_core_imports_of_every_form():
    # GIVEN the graph of core/ as it is: it must see what it claims to, or an empty graph would pass the test above
    edges = {(e.source, e.target) for e in core_graph()}
    assert ("ray_efa.core.settings_checks", "ray_efa.core.catalog") in edges  # from ray_efa.core import catalog
    assert ("ray_efa.core.strategy", "ray_efa.core.memory") in edges  # from ray_efa.core.memory import ...
    assert ("ray_efa.core.calibrate", "ray_efa.core.strategy") in edges  # inside a function


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
