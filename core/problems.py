"""What is wrong with the settings: one Problem each, all of them in one SettingsError.

A module of its own, below core.settings, so that the modules the settings' checks call (core.model_source) can
report in these terms without importing the settings. Plain Python: no pydantic here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Problem", "SettingsError"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the settings."""

    key: str
    value: Any
    message: str

    def __str__(self) -> str:
        if self.value is None:  # the setting is unset: "got None" would name nothing the user wrote
            return f"{self.key}: {self.message}"
        return f"{self.key}: {self.message}, got {self.value!r}"


class SettingsError(ValueError):
    """Every problem found in the settings, raised before anything is synthesized or written."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("invalid settings:\n" + "\n".join(f"  - {p}" for p in problems))

    def __reduce__(self) -> tuple[type[SettingsError], tuple[list[Problem]]]:
        # rebuilt from its problems, not its message: a worker's refusal reaches the driver whole (through Ray)
        return (type(self), (self.problems,))
