"""The training code and settings shipped to the Ray pods at synth time, as ConfigMap data (no image build, no registry).

Every .py file of the shipped packages (ray_efa.core, ray_efa.training) becomes one ConfigMap key; ConfigMap keys cannot contain
'/', so each key is the path with '/' replaced by '.', and the volume's `items` map it back to its path. The resolved
settings ride along as settings.json. Size limits are checked here, at synth time, so that an oversized bundle fails
with a clear message instead of a rejected `kubectl apply` half-way through a deployment.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ray_efa.core.settings import Settings
from ray_efa.core.user_code import code_files
from ray_efa.k8s.names import SETTINGS_FILE, SHIPPED_PACKAGES, settings_config_map_name

__all__ = [
    "ManifestError",
    "ShippedFile",
    "CodeBundle",
    "collect_code",
    "collect_user_code",
    "config_map_problem",
    "CONFIG_MAP_MAX_BYTES",
    "CHUNK_BYTES",
    "LAST_APPLIED_MAX_BYTES",
]

CONFIG_MAP_MAX_BYTES = 1024 * 1024
"""The API server rejects a ConfigMap whose keys and values together exceed 1 MiB."""

LAST_APPLIED_MAX_BYTES = 256 * 1024
"""Annotations of one object are capped at 256 KiB. Client-side `kubectl apply` and `kubectl create --save-config`
(what the CDK's KubernetesManifest runs) copy the whole object into the last-applied-configuration annotation, so
they fail well below the 1 MiB ConfigMap limit."""

CHUNK_BYTES = 160 * 1024
"""Where a package's ConfigMap ends and its next one begins (the last-applied size, as check_fits counts it): well
under LAST_APPLIED_MAX_BYTES, so that a module can grow without a chunk reaching the limit."""

_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_ANNOTATION_OVERHEAD_BYTES = 4 * 1024
"""Room for metadata, labels and the annotation's own key in the last-applied copy."""


class ManifestError(ValueError):
    """The manifests cannot be synthesized as asked; the message names what and why."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ShippedFile:
    """One file of the bundle."""

    path: str
    """Path below the mount point, '/'-separated (ray_efa/core/settings/__init__.py)."""
    text: str

    @property
    def key(self) -> str:
        """The ConfigMap key: the path with '/' replaced by '.' (ray_efa.core.settings.__init__.py)."""
        return self.path.replace("/", ".")


@dataclass(frozen=True, kw_only=True, slots=True)
class CodeBundle:
    """The shipped packages plus settings.json, ready to become ConfigMap data and volume items."""

    files: tuple[ShippedFile, ...]
    """Every file, settings.json included, sorted by path."""

    def __post_init__(self) -> None:
        keys = [f.key for f in self.files]
        bad = [k for k in keys if not _KEY.match(k)]
        if bad:
            raise ManifestError(
                f"shipped file names must give ConfigMap keys of letters, digits, '-', '_' or '.', got {bad}"
            )
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise ManifestError(f"shipped files map to the same ConfigMap keys {duplicates}; rename one of each pair")

    @property
    def data(self) -> dict[str, str]:
        """ConfigMap data: key -> file text."""
        return {f.key: f.text for f in self.files}

    @property
    def items(self) -> list[tuple[str, str]]:
        """(key, path) pairs for the ConfigMap volume's items, which restore the directory tree."""
        return [(f.key, f.path) for f in self.files]

    def config_maps(self, name: str) -> list[tuple[str, CodeBundle]]:
        """The ConfigMaps this bundle ships in, as (ConfigMap name, its files), in mount order.

        One per shipped package (ray_efa/__init__.py rides with the first, named `name`; the others `name-<package>`),
        then settings.json alone (k8s.names.settings_config_map_name). A package larger than CHUNK_BYTES continues in
        `<its name>-2`, `-3`, ... (files in path order, each whole), so no one object approaches kubectl's annotation
        limit as the code grows. Each is checked against the limits on its own; and a change of one training setting
        changes the small settings ConfigMap only: a readable `cdk diff`.
        """
        groups: dict[str, list[ShippedFile]] = {}
        for f in self.files:
            if f.path == SETTINGS_FILE:
                continue
            parts = f.path.split("/")
            groups.setdefault(parts[1] if len(parts) > 2 else "", []).append(f)
        packages = sorted(group for group in groups if group)
        if "" in groups:  # top-level files (ray_efa/__init__.py) ship with the first package
            first = packages[0] if packages else ""
            groups[first] = groups.pop("") + groups.get(first, [])
            packages = packages or [""]
        out: list[tuple[str, CodeBundle]] = []
        for i, package in enumerate(packages):
            base = name if i == 0 else f"{name}-{package}"
            for j, chunk in enumerate(_chunks(sorted(groups[package], key=lambda f: f.path), CHUNK_BYTES)):
                out.append((base if j == 0 else f"{base}-{j + 1}", CodeBundle(files=tuple(chunk))))
        settings = tuple(f for f in self.files if f.path == SETTINGS_FILE)
        if settings:
            out.append((settings_config_map_name(name), CodeBundle(files=settings)))
        return out

    def settings_only(self) -> CodeBundle:
        """settings.json alone: what the ConfigMaps hold when the code itself ships as a zip (k8s.names.APP_CODE_PATH)."""
        return CodeBundle(files=tuple(f for f in self.files if f.path == SETTINGS_FILE))

    def write_tree(self, folder: Path) -> Path:
        """Write every file but settings.json under `folder` (which must be empty or new), the paths as in the bundle:
        the folder a zip of the code is made of. settings.json stays out, so that a training setting changes the small
        settings ConfigMap alone, never the zip. Returns `folder`."""
        folder.mkdir(parents=True, exist_ok=True)
        if any(folder.iterdir()):
            raise ManifestError(f"{folder} must be empty to hold the shipped code")
        for f in self.files:
            if f.path == SETTINGS_FILE:
                continue
            target = folder / f.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(f.text, encoding="utf-8")
        return folder

    @property
    def size_bytes(self) -> int:
        """Size as the API server counts it for the 1 MiB limit: UTF-8 bytes of every key and value."""
        return sum(len(f.key.encode()) + len(f.text.encode()) for f in self.files)

    def paths(self) -> list[str]:
        return [f.path for f in self.files]

    def check_fits(self, config_map: str) -> None:
        """Raise ManifestError unless a ConfigMap with this data can be created and applied with kubectl."""
        largest = ", ".join(
            f"{f.path} ({len(f.text.encode()):,} B)" for f in sorted(self.files, key=lambda f: -len(f.text))[:3]
        )
        if self.size_bytes > CONFIG_MAP_MAX_BYTES:
            raise ManifestError(
                f"ConfigMap {config_map} would hold {self.size_bytes:,} bytes of code, over the Kubernetes limit of "
                f"{CONFIG_MAP_MAX_BYTES:,} bytes (1 MiB); largest files: {largest}. Ship less code or build an image."
            )
        applied = len(json.dumps({"data": self.data})) + _ANNOTATION_OVERHEAD_BYTES
        if applied > LAST_APPLIED_MAX_BYTES:
            raise ManifestError(
                f"ConfigMap {config_map} would need a last-applied-configuration annotation of about {applied:,} bytes, "
                f"over the {LAST_APPLIED_MAX_BYTES:,}-byte annotation limit that client-side `kubectl apply` and the CDK's "
                f"KubernetesManifest hit; largest files: {largest}. Ship less code, or apply with `kubectl apply --server-side`."
            )

    def require_module(self, module: str) -> None:
        """Raise ManifestError unless `module` (dotted) is a module of the bundle."""
        path = module.replace(".", "/")
        if f"{path}.py" not in self.paths() and f"{path}/__main__.py" not in self.paths():
            raise ManifestError(
                f"module {module} is not in the shipped code (no {path}.py under {', '.join(SHIPPED_PACKAGES)})"
            )


def _applied_bytes(f: ShippedFile) -> int:
    """What one file adds to a ConfigMap's last-applied annotation (its key and text as JSON)."""
    return len(json.dumps(f.key)) + len(json.dumps(f.text)) + 2


def _chunks(files: list[ShippedFile], budget: int) -> list[list[ShippedFile]]:
    """`files` in order, cut into runs of at most `budget` applied bytes (a file larger than that alone in its run)."""
    chunks: list[list[ShippedFile]] = [[]]
    size = 0
    for f in files:
        cost = _applied_bytes(f)
        if chunks[-1] and size + cost > budget:
            chunks.append([])
            size = 0
        chunks[-1].append(f)
        size += cost
    return chunks


DATA_FILES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ray_efa/core/prices.py": ("ray_efa.core", ("data/on_demand_prices.csv",)),
}
"""Shipped module -> (its package, the data files it reads there with importlib.resources), shipped with it: the settings' offering rule
(core.prices.offering_problem) runs wherever settings are read, the pods included."""


def collect_code(settings: Settings, *, packages: tuple[str, ...] = SHIPPED_PACKAGES) -> CodeBundle:
    """Read every .py file of `packages` (dotted names, found where Python imports them: the repository's folders in
    a checkout, site-packages in an install; sorted, no caches), each parent package's __init__.py, and settings.json;
    of the packages before the last, only the modules the last one imports (see _imported_from).

    Paths in the bundle follow the import names (ray_efa/core/settings/__init__.py), so the pods import the same modules.
    """
    files: dict[str, ShippedFile] = {}
    for package in packages:
        package_dir = _package_dir(package)
        base = package.replace(".", "/")
        parts = package.split(".")
        for depth in range(1, len(parts)):  # ray_efa/__init__.py for ray_efa.core
            parent = ".".join(parts[:depth])
            init = _package_dir(parent) / "__init__.py"
            path = f"{parent.replace('.', '/')}/__init__.py"
            files[path] = ShippedFile(path=path, text=init.read_text(encoding="utf-8"))
        for source in sorted(package_dir.rglob("*.py")):
            relative = source.relative_to(package_dir)
            if "__pycache__" in relative.parts or any(part.startswith(".") for part in relative.parts):
                continue
            path = f"{base}/{relative.as_posix()}"
            files[path] = ShippedFile(path=path, text=source.read_text(encoding="utf-8"))
    # The last package is the one the pods run (training); the ones before it ship as far as it imports them.
    files = _imported_from(files, roots=(packages[-1].replace(".", "/") + "/",))
    for module, (package, data) in DATA_FILES.items():  # the data a shipped module reads at import
        if module in files:
            for relative in data:
                path = f"{package.replace('.', '/')}/{relative}"
                text = (_package_dir(package) / relative).read_text(encoding="utf-8")
                files[path] = ShippedFile(path=path, text=text)
    files[SETTINGS_FILE] = ShippedFile(path=SETTINGS_FILE, text=settings.to_json() + "\n")
    return CodeBundle(files=tuple(sorted(files.values(), key=lambda f: f.path)))


def _imported_from(files: dict[str, ShippedFile], *, roots: tuple[str, ...]) -> dict[str, ShippedFile]:
    """The files under `roots` (the training package) and the modules they import, directly or through each other.

    ray_efa.core is shipped for training's sake: what training never imports (the CDK
    app's context files, cost tables) stays out, so the ConfigMap stays under kubectl's annotation limit.
    """

    def module_path(module: str) -> str | None:
        base = module.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if candidate in files:
                return candidate
        return None

    keep: set[str] = set()
    todo = [path for path in files if path.startswith(roots) or path.endswith("__init__.py")]
    while todo:
        path = todo.pop()
        if path in keep:
            continue
        keep.add(path)
        todo.extend(found for name in _imported_names(files[path].text) if (found := module_path(name)) is not None)
    return {path: file for path, file in files.items() if path in keep}


@functools.lru_cache(maxsize=1024)
def _imported_names(source: str) -> tuple[str, ...]:
    """Every absolute module name `source` imports (`from a.b import c`: a.b and a.b.c), in order. Cached by the text,
    which is all it depends on: parsing the shipped modules was 90% of building a chart's objects, and every chart
    (the RayCluster and each job) ships the same files."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return tuple(names)


def _package_dir(package: str) -> Path:
    """The folder Python imports `package` from; ManifestError if it is not an importable package."""
    try:
        spec = importlib.util.find_spec(package)
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.submodule_search_locations or spec.origin is None:
        raise ManifestError(
            f"package {package} to ship is not importable here (no {package.replace('.', '/')}/__init__.py)"
        )
    # the folder of its __init__.py (in a checkout ray_efa/core, the link: paths below it are the import names)
    return Path(spec.origin).parent


def collect_user_code(code_dir: Path) -> CodeBundle:
    """Every file of code_dir that ships (core.user_code.code_files) as ConfigMap data, keys the paths with '/' as
    '.'; ManifestError for a file that is not UTF-8 text or whose name cannot be a ConfigMap key."""
    files = []
    for path, source in code_files(code_dir):
        try:
            text = source.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ManifestError(f"{source} is not UTF-8 text: a ConfigMap ships text files only") from None
        files.append(ShippedFile(path=path, text=text))
    if not files:
        raise ManifestError(f"codeDir {code_dir} holds no file to ship")
    return CodeBundle(files=tuple(files))


def config_map_problem(code_dir: Path, name: str) -> str | None:
    """Why code_dir cannot ship as the ConfigMap `name` (binary files, odd names, too large), or None if it can."""
    try:
        collect_user_code(code_dir).check_fits(name)
    except ManifestError as error:
        return str(error)
    return None
