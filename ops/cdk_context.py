"""Writing settings a user chose into cdk.json's "context", where the CDK keeps an app's own context.

Never into cdk.context.json: the CDK CLI treats that file as its cache of lookups (`cdk context --clear` empties it,
and cdk.json's context wins over it anyway; see core.context). cdk.json is the user's file, so a write keeps every
other key, the key order and the file's indentation, and replaces the file atomically.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray_efa.core.context import PROJECT_CONFIG, find_app_dir

__all__ = ["ContextFileError", "app_config_file", "write_context", "context_flags"]


class ContextFileError(RuntimeError):
    """cdk.json cannot be read or written; nothing was changed."""


def app_config_file() -> Path | None:
    """The cdk.json of the app directory (core.context.find_app_dir), or None outside any app (a function, so that
    tests can point it elsewhere)."""
    app_dir = find_app_dir()
    return app_dir / PROJECT_CONFIG if app_dir else None


def context_flags(updates: Mapping[str, Any]) -> str:
    """The same values as `-c key=value` flags, for a user who keeps them out of cdk.json."""

    def text(value: Any) -> str:
        return (
            json.dumps(value)
            if isinstance(value, (list, dict))
            else str(value).lower()
            if isinstance(value, bool)
            else str(value)
        )

    return " ".join(f"-c {key}={text(value)}" for key, value in updates.items())


def _indent_of(text: str) -> int | str:
    """The indentation the file uses (spaces or a tab), so a write keeps the user's formatting; 2 for a new file."""
    match = re.search(r"^\{\s*\n([ \t]+)\"", text)
    if not match:
        return 2
    unit = match.group(1)
    return "\t" if unit.startswith("\t") else len(unit)


def write_context(updates: Mapping[str, Any], path: Path | None = None) -> Path:
    """Merge `updates` into the "context" object of cdk.json (`path`, default: the app directory's), keeping every
    other key; return the file written.

    Refuses (ContextFileError, nothing written) a missing app, a file that is not a JSON object, or a "context" that
    is not one. The new content goes to a temporary file in the same directory, then replaces the old one with
    os.replace, so a crash or Ctrl-C leaves either the old file or the new one, never half of one.
    """
    path = path or app_config_file()
    if path is None:
        raise ContextFileError(
            f"no {PROJECT_CONFIG} in {Path.cwd()} or above: run this in the app directory, or pass the values to cdk as "
            f"{context_flags(updates)}; nothing was written"
        )
    if not path.exists():
        raise ContextFileError(
            f"{path} does not exist: it is the app's cdk.json, made by the project; nothing was written"
        )
    text = path.read_text()
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ContextFileError(f"{path} is not valid JSON ({error}); fix it, nothing was written") from None
    if not isinstance(config, dict):
        raise ContextFileError(f"{path} must hold a JSON object, found {type(config).__name__}; nothing was written")
    context = config.setdefault("context", {})
    if not isinstance(context, dict):
        raise ContextFileError(
            f'{path}: "context" must be a JSON object, found {type(context).__name__}; nothing was written'
        )
    context.update(updates)
    mode = path.stat().st_mode & 0o777
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as stream:
            json.dump(config, stream, indent=_indent_of(text), ensure_ascii=False)
            stream.write("\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
