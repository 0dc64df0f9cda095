"""The order `make test` hands work to its two xdist workers: the longest first, from measured durations.

`make test` runs `pytest -n 2 --dist loadgroup`. xdist hands out work units (an `xdist_group`, or a single test) in
the order of the collection, one to whichever worker runs low. Its own reordering (by number of tests a unit holds)
put a group of 51 Ray tests (15 minutes) after groups of hundreds of quick synth checks, and the suite ended with
one worker running Ray alone while the other idled. Longest-first instead (the classic LPT rule): units whose tests
took longest in the last recorded run go first, so the short ones fill in at the end and both workers finish close
together.

The durations live in tests/durations.json: seconds per test (setup, call and teardown), the tests of at least
MIN_RECORDED_S. `make test-durations` writes it anew from a full run. A test it does not list (new, or quick) counts
by its marks (ESTIMATE_BY_MARK), so a new Ray test still goes early before the file is rewritten.

The order moves whole units and whole modules, never a module's tests apart from each other: a module-scoped
fixture would otherwise be set up again each time its module came back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

DURATIONS_FILE = Path(__file__).with_name("durations.json")
MIN_RECORDED_S = 0.5
"""Quicker tests are left out of the file: they count by their marks, and the file stays small."""

ESTIMATE_BY_MARK = {"ray": 20.0, "wheel": 5.0, "spawn": 3.0, "synth": 0.3}
"""Seconds a test not in the file is taken to cost, by its slowest mark (a Ray run is 15-60 s on 2 cores)."""
UNMARKED_ESTIMATE_S = 0.02


class Item(Protocol):
    """What the order reads of a pytest.Item."""

    nodeid: str

    def iter_markers(self, name: str) -> Iterable: ...


def group_of(item: Item) -> str | None:
    """The item's xdist_group name, as `--dist loadgroup` reads it (the first positional argument or name=)."""
    for mark in item.iter_markers("xdist_group"):
        return mark.args[0] if mark.args else mark.kwargs.get("name", "default")
    return None


def duration_key(nodeid: str) -> str:
    """A test's key in the durations file: its node id without the `@group` that loadgroup appends."""
    return nodeid.split("@", 1)[0]


def estimate(item: Item, durations: Mapping[str, float]) -> float:
    """Seconds the test took in the recorded run, else the estimate of its slowest mark."""
    recorded = durations.get(duration_key(item.nodeid))
    if recorded is not None:
        return recorded
    marked = [seconds for mark, seconds in ESTIMATE_BY_MARK.items() if any(item.iter_markers(mark))]
    return max(marked, default=UNMARKED_ESTIMATE_S)


def longest_first(items: Sequence[Item], durations: Mapping[str, float]) -> list[Item]:
    """`items` with their units, longest first: a unit is an xdist_group, or a module's tests that are in none.

    A stable sort: units of equal cost, and the tests within a unit, keep the collection's order."""
    units: dict[str, list[Item]] = {}
    for item in items:
        group = group_of(item)
        units.setdefault(f"group {group}" if group else f"module {item.nodeid.split('::', 1)[0]}", []).append(item)
    cost = {name: sum(estimate(item, durations) for item in members) for name, members in units.items()}
    return [item for name in sorted(units, key=lambda name: -cost[name]) for item in units[name]]


def read_durations(path: Path = DURATIONS_FILE) -> dict[str, float]:
    """The recorded durations; empty when the file is missing or unreadable (every test then counts by its marks)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.get("seconds", {}).items()} if isinstance(data, dict) else {}


def write_durations(path: Path, seconds: Mapping[str, float], *, command: str) -> int:
    """Write the tests of at least MIN_RECORDED_S to `path` (sorted, so that a rerun diffs by what changed); return
    how many."""
    kept = {key: round(value, 1) for key, value in sorted(seconds.items()) if value >= MIN_RECORDED_S}
    path.write_text(json.dumps({"written_by": command, "min_seconds": MIN_RECORDED_S, "seconds": kept}, indent=1)
                    + "\n")
    return len(kept)
