"""Test-only fault injection for train_func: a worker that raises, a worker whose process is lost, a job stopped
between checkpoints.

The driver never sets it. Tests pass `test_config={"_faults": {...}}` to training.driver.fit (trainConfig may not use
it: the settings refuse keys that start with '_'); train_func reads it once, before its loop, and only then gives the Reporter an
after-step hook (`FaultInjection.hook`) or stops the loop early (`FaultInjection.last_step`). A run without the key
runs no fault code at all.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["FAULTS_KEY", "FaultInjection", "InjectedFault"]

FAULTS_KEY = "_faults"
"""The train_loop_config key tests set (a dict of FaultInjection's fields)."""


class InjectedFault(RuntimeError):
    """The failure FaultInjection raises (tests only)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FaultInjection:
    """What to break, and where."""

    raise_at_step: int | None = None
    """Rank `raise_on_rank` raises right after optimizer step k, before that step's report or checkpoint. It fires
    once: only in an attempt that started from step 0, so the restarted attempt (resumed from a checkpoint before k,
    which the test must provide) runs through."""
    raise_on_rank: int = 1
    """The rank that raises, or exits."""
    exit_at_step: int | None = None
    """Rank `raise_on_rank` ends its process (os._exit) right after optimizer step k, as a worker whose node is lost:
    the failure a run retries (training.failure_policy; an exception of the code is not retried). Once, as above."""
    stop_after_step: int | None = None
    """Every rank leaves the loop after this step (and its report, if due), keeping the full run's LR schedule: a job
    stopped between checkpoints, for resume tests."""

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> FaultInjection | None:
        """The faults a test asked for; None (nothing to inject) in every real run."""
        faults = config.get(FAULTS_KEY)
        return None if faults is None else cls(**faults)

    def last_step(self, steps: int) -> int:
        """The last step the loop runs: stop_after_step, or the run's own."""
        return min(steps, self.stop_after_step) if self.stop_after_step is not None else steps

    def hook(self, *, rank: int, start_step: int) -> Callable[[int], None] | None:
        """This rank's after-step hook (the Reporter calls it after recording each step), or None when nothing fires
        here: another rank, or an attempt resumed from a checkpoint."""
        if rank != self.raise_on_rank or start_step != 0:
            return None
        if self.raise_at_step is None and self.exit_at_step is None:
            return None
        return self.after_step

    def after_step(self, step: int) -> None:
        if self.raise_at_step == step:
            raise InjectedFault(f"injected fault at step {step} on rank {self.raise_on_rank}")
        if self.exit_at_step == step:
            # The controller takes reports (and their checkpoints) by polling: wait past a few polls, so the step
            # k-1 checkpoint is registered before the process goes, as it would be on a node lost later.
            time.sleep(3)
            sys.stdout.flush()
            os._exit(1)  # no exception, no cleanup: the worker process is gone
