"""Progress reporting shared by the ops commands: a callback that takes one line of status."""

from __future__ import annotations

from collections.abc import Callable

Status = Callable[[str], None]
"""Called with what a long operation is doing now (the CLI shows it in a rich status spinner)."""


def quiet(_: str) -> None:
    """The default Status: report nothing (library use, tests)."""
