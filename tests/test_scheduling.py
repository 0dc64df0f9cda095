"""tests/scheduling.py: the longest-first order of the work units `make test` hands to its xdist workers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace

from tests import scheduling


@dataclass
class FakeItem:
    """The two things the order reads of a pytest.Item: its node id and its marks."""

    nodeid: str
    marks: dict[str, tuple] = field(default_factory=dict)

    def iter_markers(self, name):
        return [SimpleNamespace(args=self.marks[name], kwargs={})] if name in self.marks else []


def _ids(items):
    return [item.nodeid for item in items]


def test_recorded_seconds_put_the_longest_unit_first_and_keep_each_module_whole():
    # GIVEN two modules, the second one's tests recorded as longer in total, and a group across both
    items = [
        FakeItem("a.py::t1"),
        FakeItem("a.py::t2"),
        FakeItem("b.py::t1"),
        FakeItem("b.py::t2"),
        FakeItem("a.py::g", {"xdist_group": ("g",)}),
        FakeItem("b.py::g@g", {"xdist_group": ("g",)}),
    ]
    durations = {"a.py::t1": 5.0, "b.py::t1": 4.0, "b.py::t2": 4.0, "a.py::g": 1.0, "b.py::g": 1.0}
    # WHEN they are ordered THEN b's 8 s, then a's 5 s, then the group's 2 s; each unit's tests in collection order
    assert _ids(scheduling.longest_first(items, durations)) == [
        "b.py::t1",
        "b.py::t2",
        "a.py::t1",
        "a.py::t2",
        "a.py::g",
        "b.py::g@g",
    ]


def test_a_test_the_file_does_not_list_is_quick_in_a_recorded_module_else_counts_by_its_slowest_mark():
    durations = scheduling.Durations({"c.py::recorded": 1.0}, ["c.py", "e.py"])
    assert scheduling.estimate(FakeItem("c.py::recorded@g", {"ray": ()}), durations) == 1.0  # the record wins
    # a Ray test of a recorded module that the file leaves out took less than MIN_RECORDED_S
    assert scheduling.estimate(FakeItem("e.py::quick", {"ray": ()}), durations) == scheduling.UNMARKED_ESTIMATE_S
    # one of a module the recorded run did not hold is new: its slowest mark says
    new = FakeItem("d.py::new", {"ray": (), "synth": ()})
    assert scheduling.estimate(new, durations) == scheduling.ESTIMATE_BY_MARK["ray"]
    assert scheduling.estimate(FakeItem("d.py::plain"), durations) == scheduling.UNMARKED_ESTIMATE_S
    # so a new module of Ray tests goes before a module of quick recorded tests
    items = [FakeItem("c.py::recorded"), new]
    assert _ids(scheduling.longest_first(items, durations)) == ["d.py::new", "c.py::recorded"]


def test_the_durations_file_round_trips_without_the_quick_tests(tmp_path):
    path = tmp_path / "durations.json"
    kept = scheduling.write_durations(path, {"x.py::b": 2.04, "x.py::a": 0.6, "x.py::quick": 0.1}, command="test")
    assert kept == 2
    durations = scheduling.read_durations(path)
    assert durations == {"x.py::a": 0.6, "x.py::b": 2.0} and durations.recorded_modules == {"x.py"}
    assert list(json.loads(path.read_text())["seconds"]) == ["x.py::a", "x.py::b"]  # sorted: reruns diff by change
    # and a missing or broken file leaves every test to its marks
    assert scheduling.read_durations(tmp_path / "missing.json") == {}
    (tmp_path / "broken.json").write_text("{")
    assert scheduling.read_durations(tmp_path / "broken.json") == {}


def test_the_recorded_file_is_one_the_recorder_wrote():
    data = json.loads(scheduling.DURATIONS_FILE.read_text())
    assert data["written_by"] == "make test-durations" and data["min_seconds"] == scheduling.MIN_RECORDED_S
    assert {key.split("::")[0] for key in data["seconds"]} <= set(data["modules"])
    assert all("@" not in key and value >= scheduling.MIN_RECORDED_S for key, value in data["seconds"].items())
