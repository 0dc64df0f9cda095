"""Writing settings into cdk.context.json, the file `cdk deploy` reads after cdk.json (see core.context)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from ray_efa.core.context import PROJECT_ROOT

__all__ = ["ContextFileError", "context_file", "write_context"]


class ContextFileError(RuntimeError):
    """cdk.context.json cannot be read or written; nothing was changed."""


def context_file() -> Path:
    """The project's cdk.context.json (a function, so that tests can point it elsewhere)."""
    return PROJECT_ROOT / "cdk.context.json"


def write_context(updates: Mapping[str, Any], path: Path | None = None) -> Path:
    """Merge `updates` into cdk.context.json, keeping every other key (the CDK caches its lookups there).

    The new content goes to a temporary file in the same directory, then replaces the old one with os.replace, so
    a crash or Ctrl-C leaves either the old file or the new one, never half of one.
    """
    path = path or context_file()
    current: dict[str, Any] = {}
    if path.exists():
        try:
            current = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ContextFileError(f"{path} is not valid JSON ({error}); fix or remove it, nothing was written") from None
        if not isinstance(current, dict):
            raise ContextFileError(f"{path} must hold a JSON object, found {type(current).__name__}; nothing was written")
    merged = {**current, **updates}
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as stream:
            json.dump(merged, stream, indent=2)
            stream.write("\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
