"""One machine-readable line per finished run, so that two runs' logs can be compared (EFA versus TCP).

The driver prints `RAY_EFA_RUN_SUMMARY {json}` after its table. The line survives whatever carries the driver's
output (`kubectl logs` of the RayJob's submitter, `ray job logs`, a file): `find_summaries` finds it behind any prefix.
"""

from __future__ import annotations

import json
from typing import Iterable

__all__ = ["MARKER", "summary_line", "find_summaries"]

MARKER = "RAY_EFA_RUN_SUMMARY"


def summary_line(*, name: str, network: str, instance_type: str, nodes: int, summary: dict) -> str:
    """The line for one run: its name, transport, hardware and steady-state figures (training.metrics summary)."""
    record = {"name": name, "network": network, "instance_type": instance_type, "nodes": nodes, **summary}
    return f"{MARKER} {json.dumps(record, sort_keys=True)}"


def find_summaries(lines: Iterable[str]) -> list[dict]:
    """Every run summary in `lines`, in order (prefixes such as Ray's or a timestamp are ignored)."""
    found = []
    for line in lines:
        at = line.find(MARKER + " {")
        if at >= 0:
            try:
                found.append(json.loads(line[at + len(MARKER) + 1:].strip()))
            except json.JSONDecodeError:
                continue  # a line cut by a log shipper: not a summary we can trust
    return found
