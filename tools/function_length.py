"""No function of the package longer than LIMIT lines (`make lint` runs it; tests/test_function_length.py too).

    python tools/function_length.py            every offender in PACKAGE_FOLDERS, with its length; exit 1 if any
    python tools/function_length.py FOLDER...  those folders (or files) instead

A function's length is counted from its `def` line to the last line of its body (found by ast; decorators excluded,
its docstring and comments included): what a reader has to hold at once. A line that continues an open bracket (a
call's arguments, a literal's items, a parenthesized expression) belongs to the line that opened it and does not count
again, so the number is the same however the formatter (`ruff format`) lays out one statement. A long function is
split by responsibility (a construct's constructor into a list of steps, a command into a parse step and an act step),
not cut to the number.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_FOLDERS = ("core", "infra", "k8s", "training", "ops", "cli")
"""The folders the limit covers (the package's code; ray_efa/ holds only its __init__)."""
LIMIT = 80
"""The most lines a function may have."""


@dataclass(frozen=True)
class LongFunction:
    path: str
    line: int
    name: str  # qualified within its module: Class.method, outer.inner
    length: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.name}: {self.length} lines (limit {LIMIT})"


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function of `tree` (methods and nested functions too), with its qualified name."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{node.name}", node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def _continuation_lines(source: str) -> set[int]:
    """The line numbers that start inside an open bracket: a statement's second and later lines, as laid out."""
    depth, last_row, continued = 0, 0, set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        last = token.end[0]
        if depth:  # every line this token starts or reaches, past the previous token's, begins inside the bracket
            continued.update(range(last_row + 1, last + 1))
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
        last_row = max(last_row, last)
    return continued


def function_lengths(source: str) -> Iterator[tuple[str, int, int]]:
    """(qualified name, def line, length in lines) of every function in `source`, bracket continuations not counted."""
    continued = _continuation_lines(source)
    for name, node in _functions(ast.parse(source)):
        end = node.end_lineno if node.end_lineno is not None else node.lineno
        yield name, node.lineno, sum(1 for line in range(node.lineno, end + 1) if line not in continued)


def long_functions(paths: Iterable[Path], *, root: Path = ROOT, limit: int = LIMIT) -> list[LongFunction]:
    """The functions over `limit` lines in the .py files of `paths` (folders are searched), longest first."""
    files = sorted({f for p in paths for f in ([p] if p.is_file() else p.rglob("*.py"))})
    found = [
        LongFunction(str(f.relative_to(root)) if f.is_relative_to(root) else str(f), line, name, length)
        for f in files
        for name, line, length in function_lengths(f.read_text(encoding="utf-8"))
        if length > limit
    ]
    return sorted(found, key=lambda f: (-f.length, f.path, f.line))


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or [ROOT / folder for folder in PACKAGE_FOLDERS]
    offenders = long_functions(paths)
    for offender in offenders:
        print(offender)
    if offenders:
        print(
            f"{len(offenders)} function(s) over {LIMIT} lines: split each by responsibility "
            "(tools/function_length.py says how it counts)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
