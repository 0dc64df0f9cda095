"""Your own training code: where codeDir is, whether trainFunction exists in it, and which files ship to the pods.

Checked without importing your code (its imports may be heavy, or absent on this machine): the module's source is
found in codeDir (or, for a module outside it, where Python would import it from) and parsed with `ast`, and the
function must be defined (or imported, or assigned) at its top level. Every problem is a SettingsError naming
trainFunction or codeDir, raised before Ray starts or anything is synthesized. Nothing under codeDir is written.

    code = check_user_code(settings)          # UserCode(code_dir, module, function), or SettingsError
    files = code_files(code.code_dir)         # what ships: every file but caches and hidden ones, sorted
"""

from __future__ import annotations

import ast
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from ray_efa.core.context import find_app_dir
from ray_efa.core.settings import Problem, Settings, SettingsError

__all__ = [
    "UserCode",
    "code_dir_path",
    "check_user_code",
    "missing_imports",
    "code_files",
    "split_function",
    "PROJECT_PACKAGE",
]

PROJECT_PACKAGE = "ray_efa"
"""The project's own package: codeDir may not hold one of that name (it would shadow the driver's)."""

_SKIPPED_DIRS = {"__pycache__", "node_modules", "cdk.out"}
_SKIPPED_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True, kw_only=True, slots=True)
class UserCode:
    """The resolved trainFunction and codeDir."""

    code_dir: Path | None
    """codeDir as an absolute path; None when unset."""
    module: str
    function: str
    source: Path | None
    """The file that defines the module (None for a module without a source file)."""


def split_function(spec: str) -> tuple[str, str]:
    """ "pkg.mod:fn" -> ("pkg.mod", "fn")."""
    module, _, function = spec.partition(":")
    return module, function


def code_dir_path(settings: Settings, *, app_dir: Path | None = None) -> Path | None:
    """codeDir as an absolute path: as given when absolute, else relative to `app_dir` (default: the app directory,
    the nearest folder at or above the working directory holding cdk.json, else the working directory)."""
    given = settings.workload.code_dir
    if given is None:
        return None
    path = Path(os.path.expanduser(given))
    return (path if path.is_absolute() else (app_dir or find_app_dir() or Path.cwd()) / path).resolve()


def _code_dir_problem(code_dir: Path, given: str) -> Problem | None:
    if not code_dir.is_dir():
        what = "is not a folder" if code_dir.exists() else "does not exist"
        return Problem("codeDir", given, f"must be a folder of your training code; {code_dir} {what}")
    if code_dir in (Path(os.path.expanduser("~")).resolve(), Path(code_dir.anchor)):
        return Problem(
            "codeDir",
            given,
            f"must be the folder of your training code, not {code_dir} (a home or "
            "filesystem root: everything in it would ship to the pods)",
        )
    if (code_dir / "cdk.json").is_file():
        return Problem(
            "codeDir",
            given,
            f"must be the folder of your training code, not the app directory {code_dir} "
            "(it holds cdk.json: cdk.out/, tests and the app itself would ship); point it "
            "at the folder that holds your package",
        )
    if (code_dir / PROJECT_PACKAGE).exists():
        # The repository root of this project (or site-packages) holds ray_efa/: refused here too.
        return Problem(
            "codeDir",
            given,
            f"must not hold a {PROJECT_PACKAGE}/ ({code_dir / PROJECT_PACKAGE}): that is "
            "this project's package (is codeDir the repository root?), and a copy would "
            "shadow the driver on the pods",
        )
    return None


def _module_source(module: str, code_dir: Path) -> Path | None:
    """The file of `module` under code_dir: a/b.py, a/b/__init__.py, or a namespace folder a/b/ (returned as is)."""
    base = code_dir.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return base if base.is_dir() else None


def _importable_source(module: str) -> tuple[bool, Path | None]:
    """(found, source file) of a module importable here, found without importing it (its parents' __init__ run)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a parent is missing, or not a package
        return False, None
    if spec is None:
        return False, None
    origin = spec.origin if spec.origin not in (None, "built-in", "frozen") else None
    return True, Path(origin) if origin else None


def _top_level_names(source: Path) -> set[str] | str:
    """Names bound at the top level of a Python file (def, class, import, assignment); if it does not parse, what is
    wrong and where ("line 3: '(' was never closed")."""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    except SyntaxError as error:  # IndentationError and TabError too
        return f"line {error.lineno}: {error.msg}" + (f" (column {error.offset})" if error.offset else "")
    except (UnicodeDecodeError, ValueError) as error:  # not UTF-8 text, or a null byte
        return f"not Python source text ({error})"
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.If, ast.Try)):  # `if TYPE_CHECKING:`/`try: import x` blocks: count what they bind
            for child in ast.walk(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(child.name)
                elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                    names.add(child.id)
                elif isinstance(child, ast.alias):
                    names.add((child.asname or child.name).split(".")[0])
    return names


def check_user_code(settings: Settings, *, app_dir: Path | None = None) -> UserCode:
    """The resolved trainFunction and codeDir, or SettingsError naming the setting, its value and what is allowed."""
    spec = settings.training.train_function
    module, function = split_function(spec)
    code_dir = code_dir_path(settings, app_dir=app_dir)
    if code_dir is not None and (problem := _code_dir_problem(code_dir, str(settings.workload.code_dir))):
        raise SettingsError([problem])
    source = _module_source(module, code_dir) if code_dir is not None else None
    where = f"codeDir {code_dir}" if code_dir is not None else "codeDir (unset)"
    if source is None:
        found, source = _importable_source(module)
        if not found:
            expected = module.replace(".", "/")
            raise SettingsError(
                [
                    Problem(
                        "trainFunction",
                        spec,
                        (
                            f"must name a module in {where} or one importable here: no {expected}.py or {expected}/__init__.py"
                            + ("" if code_dir is not None else "; set codeDir to the folder that holds it")
                        ),
                    )
                ]
            )
    if source is not None and source.is_file() and source.suffix == ".py":
        names = _top_level_names(source)
        if isinstance(names, str):
            raise SettingsError(
                [Problem("trainFunction", spec, f"must name a module that parses: syntax error in {source}, {names}")]
            )
        if function not in names:
            close = sorted(n for n in names if not n.startswith("_") and ("train" in n.lower() or "main" in n.lower()))
            hint = f" (it defines {', '.join(close)})" if close else ""
            raise SettingsError(
                [
                    Problem(
                        "trainFunction",
                        spec,
                        f"must name a function of {module}: {source} defines no {function} at its top level{hint}",
                    )
                ]
            )
    elif source is not None and source.is_dir():
        raise SettingsError(
            [
                Problem(
                    "trainFunction",
                    spec,
                    f"must name a module, not the folder {source} (a package without __init__.py defines no functions)",
                )
            ]
        )
    return UserCode(code_dir=code_dir, module=module, function=function, source=source)


def _top_level_imports(source: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import a module runs when it is imported: its top-level statements only (an
    import under `try:` may be optional, one under `if TYPE_CHECKING:` never runs, one in a function runs later)."""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    except (SyntaxError, UnicodeDecodeError, ValueError):  # check_user_code said so already
        return []
    found: list[tuple[int, str]] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def missing_imports(code: UserCode) -> list[Problem]:
    """A problem naming trainFunction for each top-level import of its module whose package is neither in codeDir nor
    installed here: what `train` would otherwise find only in the workers, after Ray started. Only the top-level
    package is looked up (importlib's finders; no package code runs), so nothing of your code is imported."""
    if code.source is None or not code.source.is_file() or code.source.suffix != ".py":
        return []
    missing: list[str] = []
    for line, module in _top_level_imports(code.source):
        package = module.split(".")[0]
        if code.code_dir is not None and _module_source(package, code.code_dir) is not None:
            continue
        if not _importable_source(package)[0]:
            missing.append(f"line {line}: import {module}")
    if not missing:
        return []
    where = f"codeDir {code.code_dir}" if code.code_dir is not None else "codeDir (unset)"
    return [
        Problem(
            "trainFunction",
            f"{code.module}:{code.function}",
            (
                f"must name a module whose imports are there: {code.source} ({'; '.join(missing)}) imports a package that is "
                f"neither in {where} nor installed on this machine; install it here (pip install; on the cluster, the setting "
                f"pipPackages installs it in the containers), or put it in codeDir"
            ),
        )
    ]


def code_files(code_dir: Path) -> list[tuple[str, Path]]:
    """(path relative to code_dir, '/'-separated; file) of every file that ships, sorted: all but hidden files and
    folders (.git, .venv), __pycache__, node_modules, cdk.out and compiled .pyc files. Symlinks are followed."""
    out: list[tuple[str, Path]] = []
    for directory, folders, files in os.walk(code_dir, followlinks=True):
        folders[:] = sorted(
            f for f in folders if not f.startswith(".") and f not in _SKIPPED_DIRS and not f.endswith(".egg-info")
        )
        for name in sorted(files):
            if name.startswith(".") or name.endswith(_SKIPPED_SUFFIXES):
                continue
            path = Path(directory) / name
            out.append((path.relative_to(code_dir).as_posix(), path))
    return sorted(out)
