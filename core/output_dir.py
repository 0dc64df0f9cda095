"""Safe output folders: a command writes only its own files, and replaces only files it wrote before.

Every `ray-efa` command that writes a folder (`manifests --out`, `demo --dist` and `--cdk-out`, `train --logs-dir`)
goes through `publish`:

- The folder keeps a record, `.ray-efa-output.json`, of the entries ray-efa wrote there. A later run replaces those
  entries and removes the ones it no longer writes; it refuses a folder that holds anything else (a user's
  `kustomization.yaml`, notes, code), naming what it found, and changes nothing.
- It never writes into the working directory itself, a folder above it, the repository (app) root or a folder above
  it, or a source folder of the project (core/, infra/, k8s/, training/, ops/, cli/, tests/, ray_efa/, ...).
- All or nothing: the new content is built in a staging folder inside the output folder; a failure while building
  leaves the folder as it was (and removes the folders this call created). Folders are created 0755, files 0644 (0755 if executable).

`check_output_dir` runs the same checks without writing, so a command can refuse before any slow work.

A single output file (`plan --plot FILE`, `compare --plot FILE`) goes through `publish_file`: it is new, or a file
that the caller recognizes as one ray-efa wrote (a chart whose PNG text says so); never inside the project's source
folders or the installed package; written to a temporary file beside it and moved into place, so that a failure
leaves no half-written file. `check_output_file` runs the same checks without writing.
The module is pure standard library, so that training (in the container) and the CLI share it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = [
    "RECORD_NAME",
    "SOURCE_FOLDERS",
    "OutputDirError",
    "check_output_dir",
    "publish",
    "recorded_entries",
    "check_output_file",
    "publish_file",
]

RECORD_NAME = ".ray-efa-output.json"
"""The record of what ray-efa wrote into a folder (one per output folder)."""

_STAGING_PREFIX = ".ray-efa-staging-"

PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The repository root in a checkout (the folder above core/); the installed package folder in a wheel install."""

SOURCE_FOLDERS = (
    "core",
    "infra",
    "k8s",
    "training",
    "ops",
    "cli",
    "tests",
    "ray_efa",
    "bench",
    "tools",
    "docs",
    ".git",
    ".venv",
    "node_modules",
)
"""Folders of the repository root that no command may write into (nor into any folder below them)."""


def _umask() -> int:
    """The process's umask (os.umask can only be read by setting it: set back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _dir_mode() -> int:
    """What mkdir would give under the caller's umask (0755 under 022, 0700 under 077): the temporary folders and
    files this module renames into place are made 0700/0600 by tempfile, whatever the umask."""
    return 0o777 & ~_umask()


def _file_mode(executable: bool = False) -> int:
    return (0o777 if executable else 0o666) & ~_umask()


class OutputDirError(ValueError):
    """The output folder cannot be used; nothing was written. The message names the folder and what to do."""


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _protected(out: Path, cwd: Path) -> str | None:
    """Why `out` (resolved) may never be written, or None."""
    import ray_efa

    package = Path(ray_efa.__file__).resolve().parent
    if _within(cwd, out):
        return "it is the working directory" if out == cwd else "it holds the working directory"
    if _within(PROJECT_ROOT, out):
        return "it is the repository root" if out == PROJECT_ROOT else "it holds the repository"
    for name in SOURCE_FOLDERS:
        if _within(out, PROJECT_ROOT / name):
            return f"it is inside the project's source folder {name}/"
    if _within(out, package):
        return "it is inside the installed ray_efa package"
    for marker in ("cdk.json", "pyproject.toml", ".git"):
        if (out / marker).exists():
            return f"it holds {marker}: it is a project's root"
    return None


def _read_record(out: Path) -> set[str]:
    record = out / RECORD_NAME
    if not record.exists():
        return set()
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
        names = data["entries"]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise TypeError("entries must be a list of names")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise OutputDirError(
            f"{out}: its record {RECORD_NAME} is unreadable ({error}); nothing was written. Remove the folder's "
            "ray-efa files by hand, or give another folder"
        ) from None
    # A record can only name plain entries of this folder: never a path that leads elsewhere.
    return {n for n in names if n and "/" not in n and "\\" not in n and n not in (".", "..", RECORD_NAME)}


def recorded_entries(out: Path) -> set[str]:
    """The names the folder's record lists (empty when there is no record)."""
    return _read_record(Path(out))


def check_output_dir(out: Path | str, *, accept: Callable[[Path], bool] | None = None) -> Path:
    """The resolved folder when a command may write it; raises OutputDirError (writing nothing) when not.

    `accept(entry)` lets a caller take over entries it recognizes as its own kind of output though unrecorded (the
    CDK's cloud assembly files in a cdk.out that `cdk synth` wrote).
    """
    given = Path(out)
    resolved = given.expanduser().resolve()
    why = _protected(resolved, Path.cwd().resolve())
    if why:
        raise OutputDirError(f"refusing to write into {given}: {why}. Give a folder of its own, e.g. dist/")
    if resolved.exists() and not resolved.is_dir():
        raise OutputDirError(f"refusing to write into {given}: it is a file, not a folder")
    if not resolved.exists():
        return resolved
    recorded = _read_record(resolved)
    foreign = sorted(
        e.name
        for e in resolved.iterdir()
        if e.name != RECORD_NAME
        and e.name not in recorded
        and not e.name.startswith(_STAGING_PREFIX)
        and not (accept and accept(e))
    )
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise OutputDirError(
            f"refusing to write into {given}: it holds files ray-efa did not write ({shown}). Give an empty or new "
            f"folder, or one that ray-efa wrote before (it keeps a record in {RECORD_NAME})"
        )
    return resolved


def _create(folder: Path) -> list[Path]:
    """mkdir -p under the caller's umask; the folders created, outermost first."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()][::-1]
    for path in missing:
        path.mkdir(exist_ok=True)
        os.chmod(path, _dir_mode())
    return missing


def _set_modes(root: Path) -> None:
    os.chmod(root, _dir_mode())
    for base, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(base, name), _dir_mode())
        for name in files:  # executables (binaries of a CDK asset) stay executable
            path = os.path.join(base, name)
            executable = os.stat(path, follow_symlinks=False).st_mode & 0o100
            if not os.path.islink(path):
                os.chmod(path, _file_mode(bool(executable)))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _write_record(out: Path, names: Iterable[str], command: str) -> None:
    record = {
        "written_by": command,
        "entries": sorted(set(names)),
        "note": "ray-efa replaces only these entries of this folder and refuses the folder if it holds anything else",
    }
    fd, temporary = tempfile.mkstemp(prefix=f".{RECORD_NAME}.", dir=out)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            json.dump(record, stream, indent=2)
            stream.write("\n")
        os.chmod(temporary, _file_mode())
        os.replace(temporary, out / RECORD_NAME)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def publish(
    out: Path | str, build: Callable[[Path], object], *, command: str, accept: Callable[[Path], bool] | None = None
) -> list[Path]:
    """Let `build(staging)` write the new content, then put it in `out`; return the entries now in `out`, sorted.

    Checks `out` first (see check_output_dir; nothing is written on refusal). If `build` raises, `out` is left as
    it was and the exception propagates. Afterwards `out` holds exactly the entries `build` wrote, the record and
    nothing of an earlier run.
    """
    resolved = check_output_dir(out, accept=accept)
    previous = _read_record(resolved) if resolved.exists() else set()
    adopted = {e.name for e in resolved.iterdir() if accept and accept(e)} if resolved.exists() else set()
    created = _create(resolved)
    for leftover in resolved.glob(f"{_STAGING_PREFIX}*"):  # of a run that was killed: ours
        _remove(leftover)
    staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=resolved))
    try:
        build(staging)
        _set_modes(staging)
        names = sorted(e.name for e in staging.iterdir() if e.name != RECORD_NAME)
        # The record names every entry that may be ours before any is moved, so that an interruption leaves only
        # recorded entries behind and the next run can clean them up.
        _write_record(resolved, previous | adopted | set(names), command)
        for name in names:
            target = resolved / name
            if target.is_dir() and not target.is_symlink():
                target.rename(staging / f".old-{name}")  # removed with the staging folder
            elif (staging / name).is_dir() and (target.exists() or target.is_symlink()):
                target.unlink()  # a file of an earlier run where a folder goes now: os.replace cannot swap them
            os.replace(staging / name, target)
        for name in (previous | adopted) - set(names):
            _remove(resolved / name)
        _write_record(resolved, names, command)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if created and not any(e for e in resolved.iterdir() if e.name != RECORD_NAME):
            (resolved / RECORD_NAME).unlink(missing_ok=True)
            for folder in reversed(created):  # innermost first; only the empty folders this call made
                try:
                    folder.rmdir()
                except OSError:
                    break
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return [resolved / name for name in names]


def check_output_file(path: Path | str, *, is_ours: Callable[[Path], bool]) -> Path:
    """The resolved file path when a command may write it; raises OutputDirError (writing nothing) when not.

    Its folder may be missing (it is created), the working directory or the repository root (one new file puts
    nothing else at risk), but not a source folder of the project or the installed package. An existing file is
    replaced only when `is_ours(file)`.
    """
    import ray_efa

    given = Path(path)
    resolved = given.expanduser().resolve()
    if resolved.is_dir():
        raise OutputDirError(f"refusing to write {given}: it is a folder; give a file name, e.g. {given}/chart.png")
    package = Path(ray_efa.__file__).resolve().parent
    for name in SOURCE_FOLDERS:
        if _within(resolved.parent, PROJECT_ROOT / name):
            raise OutputDirError(f"refusing to write {given}: it is inside the project's source folder {name}/")
    if _within(resolved.parent, package):
        raise OutputDirError(f"refusing to write {given}: it is inside the installed ray_efa package")
    existing = next((p for p in (resolved.parent, *resolved.parent.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise OutputDirError(f"refusing to write {given}: {existing} is a file, not a folder")
    if resolved.exists() and not is_ours(resolved):
        raise OutputDirError(
            f"refusing to write {given}: the file exists and ray-efa did not write it. Give a new "
            "file name, or remove it yourself"
        )
    if existing is not None and not os.access(existing, os.W_OK):
        raise OutputDirError(f"cannot write {given}: {existing} is not writable")
    return resolved


def publish_file(path: Path | str, data: bytes, *, is_ours: Callable[[Path], bool]) -> Path:
    """Write `data` to `path` (see check_output_file; nothing is written on refusal); return the resolved path."""
    resolved = check_output_file(path, is_ours=is_ours)
    created = _create(resolved.parent)
    fd, temporary = tempfile.mkstemp(prefix=f".{resolved.name}.", dir=resolved.parent)
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, _file_mode())
        os.replace(temporary, resolved)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        for folder in reversed(created):
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    return resolved
