"""What differs between CI's run and a local one: CI (CI=true) has everything the suite needs (../shared beside the
clone, user namespaces, the tools), so there a missing prerequisite fails the test; a local run skips it, saying what
is missing, or uses a source of its own (tests/shared_reference.py)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """Whether this is CI's run (CI=true)."""
    return os.environ.get("CI", "").lower() in ("true", "1")


def unavailable(reason: str) -> NoReturn:
    """The test cannot run here for `reason`: a failure in CI, which must have it; locally a skip that says why."""
    if in_ci():
        pytest.fail(f"{reason} (CI must have it: a missing prerequisite is a failure there)")
    pytest.skip(reason)
