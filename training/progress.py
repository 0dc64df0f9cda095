"""A line per report of a train function of your own: what it passes to `ray.train.report`, printed as it arrives.

The built-in train function prints its own progress lines (training.reporting); a function of your own shows nothing
between the preflight and "finished" unless it prints. Ray Train calls a UserCallback's `after_report` on its
controller once every worker has reported (ray.train.v2.api.callback.UserCallback, Ray 2.58), whose output Ray sends
to the driver's: `ReportLines` prints rank 0's metrics there, one line a report.
"""

from __future__ import annotations

import math
from typing import Any

from ray.train import UserCallback

__all__ = ["ReportLines", "report_line"]

_MAX_KEYS = 8


def _value(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)[:40]
    if isinstance(value, float) and math.isfinite(value) and value != int(value):
        return f"{value:.4g}"
    return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:g}"


def report_line(number: int, metrics: dict[str, Any]) -> str:
    """ "report 3: step 30 | loss 1.234 | ...": rank 0's metrics of report `number`, numbers short, at most
    _MAX_KEYS of them (step and epoch first)."""
    keys = [k for k in ("step", "epoch") if k in metrics] + sorted(k for k in metrics if k not in ("step", "epoch"))
    parts = [f"{k} {_value(metrics[k])}" for k in keys[:_MAX_KEYS]]
    more = len(keys) - _MAX_KEYS
    return f"report {number}: " + " | ".join(parts) + (f" | (+{more} more)" if more > 0 else "")


class ReportLines(UserCallback):
    """Prints report_line of each report (rank 0's metrics) on Ray Train's controller, which Ray shows in the
    driver's output."""

    def __init__(self) -> None:
        self.reports: int = 0

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
        self.reports += 1
        print(
            report_line(self.reports, metrics[0] if metrics else {})
            + (" | checkpoint" if checkpoint is not None else ""),
            flush=True,
        )
