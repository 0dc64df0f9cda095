"""The construct props' defaults, bounds and choices, read from the settings fields (not part of the public API).

core.settings declares each value once, on its field (`setting(default, key, doc, ge=..., le=...)`, a Literal for a
closed set); the constructs' keyword defaults and checks read them here, so that a construct used without a
Settings object and the project's own app agree. tests/infra/test_props.py fails if a prop drifts from its setting.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ray_efa.core.settings import Settings, setting_choices, setting_keys


@cache
def _field(key: str) -> FieldInfo:
    section, info = setting_keys()[key]
    section_cls = Settings.model_fields[section].annotation
    assert isinstance(section_cls, type) and issubclass(section_cls, BaseModel), section
    return section_cls.model_fields[info.name]


def default(key: str) -> Any:
    """The default of the setting `key` (its context key: "clusterName")."""
    return _field(key).default


def bounds(key: str) -> tuple[int, int]:
    """The inclusive (ge, le) bounds of the numeric setting `key`."""
    low = [m.ge for m in _field(key).metadata if isinstance(m, annotated_types.Ge)]
    high = [m.le for m in _field(key).metadata if isinstance(m, annotated_types.Le)]
    if not (low and high):
        raise ValueError(f"setting {key} has no ge/le bounds")
    return int(low[0]), int(high[0])  # type: ignore[arg-type]


def check_bounds(prop: str, value: int, key: str, what: str = "") -> None:
    """Raise ValueError naming `prop` when `value` is outside the bounds of the setting `key`."""
    low, high = bounds(key)
    if not low <= value <= high:
        raise ValueError(f"{prop} must be between {low}{what} and {high}, got {value!r}")


def choices(key: str) -> tuple[str, ...]:
    """The values the closed setting `key` allows, in declaration order."""
    return setting_choices(key)


def check_type(prop: str, value: Any, kind: type | tuple[type, ...], what: str) -> None:
    """TypeError naming `prop` when `value` is not a `kind` (`what` says it in words); a bool is no int here."""
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, (int, float))):
        raise TypeError(f"{prop} must be {what}, got {value!r} ({type(value).__name__})")


def check_strings(prop: str, values: Any, problem: Callable[[str], str | None] | None = None) -> tuple[str, ...]:
    """A list-of-strings prop as a tuple: TypeError naming `prop` for a lone string (which Python would take as its
    characters) or anything but strings; ValueError for the first item `problem` (the setting's own check) refuses."""
    if (
        isinstance(values, (str, bytes))
        or not isinstance(values, (list, tuple))
        or not all(isinstance(v, str) for v in values)
    ):
        raise TypeError(f"{prop} must be a list of strings, got {values!r} ({type(values).__name__})")
    for value in values:
        if problem is not None and (why := problem(value)) is not None:
            raise ValueError(f"{prop} {why}, got {value!r}")
    return tuple(values)
