"""The order `make test` hands work to its two xdist workers: the longest first, from measured durations.

`make test` runs `pytest -n 2 --dist loadgroup`. xdist hands out work units (an `xdist_group`, or a single test) in
the order of the collection, one to whichever worker runs low. Its own reordering (by number of tests a unit holds)
put a group of 51 Ray tests (15 minutes) after groups of hundreds of quick synth checks, and the suite ended with
one worker running Ray alone while the other idled. Longest-first instead (the classic LPT rule): units whose tests
took longest in the last recorded run go first, so the short ones fill in at the end and both workers finish close
together.

The durations live in tests/durations.json: seconds per test (setup, call and teardown) of the tests that took at
least MIN_RECORDED_S, and the modules the recorded run held. `make test-durations` writes it anew from a full run. A
test it does not list counts as quick when its module was recorded (it took less), else by its marks
(ESTIMATE_BY_MARK): a new module of Ray tests still goes early before the file is rewritten.

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

ESTIMATE_BY_MARK = {"ray": 20.0, "cluster": 15.0, "wheel": 5.0, "spawn": 3.0, "synth": 0.3}
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


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class Durations(dict[str, float]):
    """Seconds per test key, with the modules the recorded run held (`recorded_modules`)."""

    def __init__(self, seconds: Mapping[str, float] | None = None, modules: Iterable[str] = ()) -> None:
        super().__init__(seconds or {})
        self.recorded_modules = frozenset(modules) | {module_of(key) for key in self}


def estimate(item: Item, durations: Mapping[str, float]) -> float:
    """Seconds the test took in the recorded run; quick when its module was recorded without it; else the estimate
    of its slowest mark."""
    recorded = durations.get(duration_key(item.nodeid))
    if recorded is not None:
        return recorded
    if module_of(item.nodeid) in getattr(durations, "recorded_modules", ()):
        return UNMARKED_ESTIMATE_S
    marked = [seconds for mark, seconds in ESTIMATE_BY_MARK.items() if any(item.iter_markers(mark))]
    return max(marked, default=UNMARKED_ESTIMATE_S)


def longest_first(items: Sequence[Item], durations: Mapping[str, float]) -> list[Item]:
    """`items` with their units, longest first: a unit is an xdist_group, or a module's tests that are in none.

    A stable sort: units of equal cost, and the tests within a unit, keep the collection's order."""
    units: dict[str, list[Item]] = {}
    for item in items:
        group = group_of(item)
        units.setdefault(f"group {group}" if group else f"module {module_of(item.nodeid)}", []).append(item)
    cost = {name: sum(estimate(item, durations) for item in members) for name, members in units.items()}
    return [item for name in sorted(units, key=lambda name: -cost[name]) for item in units[name]]


def read_durations(path: Path = DURATIONS_FILE) -> Durations:
    """The recorded durations; empty when the file is missing or unreadable (every test then counts by its marks)."""
    try:
        data = json.loads(path.read_text())
        return Durations({str(k): float(v) for k, v in data["seconds"].items()}, map(str, data.get("modules", ())))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return Durations()


def write_durations(path: Path, seconds: Mapping[str, float], *, command: str) -> int:
    """Write the tests of at least MIN_RECORDED_S to `path`, and every module of the run (sorted, so that a rerun
    diffs by what changed); return how many tests."""
    kept = {key: round(value, 1) for key, value in sorted(seconds.items()) if value >= MIN_RECORDED_S}
    modules = sorted({module_of(key) for key in seconds})
    path.write_text(
        json.dumps(
            {"written_by": command, "min_seconds": MIN_RECORDED_S, "modules": modules, "seconds": kept}, indent=1
        )
        + "\n"
    )
    return len(kept)
