"""`functools.cache` for test helpers that take a Settings: one synth per process for equal settings."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar, cast

from ray_efa.core.settings import Settings

T = TypeVar("T")


def per_settings(build: Callable[[Settings], T]) -> Callable[[Settings], T]:
    """`build`, run once per distinct Settings value.

    Settings hash by value at run time (core.settings.framework.Model.__hash__), but pyright takes every pydantic model
    for unhashable (it does not read `model_config`'s frozen=True, so it gives each model class `__hash__ = None`),
    and so refuses a Settings for the cache's Hashable arguments: the cast states the run-time type.
    """
    return cast("Callable[[Settings], T]", functools.cache(build))
