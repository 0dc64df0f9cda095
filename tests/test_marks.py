"""The check behind `make test-fast`: a test that starts Ray, calls into jsii or starts a process of its own without
the mark for it fails, naming the mark (tests/conftest.py); with the mark it runs."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from tests.conftest import UnmarkedCost, _marked_for_what_it_runs


@dataclass
class _Item:
    """What the check reads of a pytest item: its node id and its marks."""

    marks: list[str] = field(default_factory=list)
    nodeid: str = "tests/test_x.py::test_x"

    def iter_markers(self, name: str | None = None):
        # a generator, as pytest's Node.iter_markers returns: never falsy, even with no such mark
        return (getattr(pytest.mark, mark).mark for mark in self.marks if name in (None, mark))


@pytest.mark.spawn
def test_a_python_process_needs_the_spawn_mark():
    # GIVEN an unmarked test WHEN it starts a Python process THEN it fails naming the mark, and nothing started
    with pytest.raises(UnmarkedCost, match=r"tests/test_x.py::test_x starts a process .*not marked spawn"):
        with _marked_for_what_it_runs(_Item()):  # type: ignore[arg-type]
            subprocess.run([sys.executable, "-c", "pass"], check=True)
    # AND marked spawn (or any mark that make test-fast leaves out) it runs; a quick tool such as git needs no mark
    for mark in ("spawn", "ray"):
        with _marked_for_what_it_runs(_Item([mark])):  # type: ignore[arg-type]
            subprocess.run([sys.executable, "-c", "pass"], check=True)
    with _marked_for_what_it_runs(_Item()):  # type: ignore[arg-type]
        subprocess.run(["git", "--version"], check=True, capture_output=True)


def test_ray_init_needs_the_ray_mark():
    import ray

    with pytest.raises(UnmarkedCost, match="starts Ray .*not marked ray"):
        with _marked_for_what_it_runs(_Item()):  # type: ignore[arg-type]
            ray.init(num_cpus=1)
    assert not ray.is_initialized()


@pytest.mark.synth
def test_a_cdk_object_needs_the_synth_mark():
    import aws_cdk as cdk

    with pytest.raises(UnmarkedCost, match=r"calls into jsii .*not marked synth"):
        with _marked_for_what_it_runs(_Item()):  # type: ignore[arg-type]
            cdk.Duration.minutes(5).to_seconds()
    with _marked_for_what_it_runs(_Item(["synth"])):  # type: ignore[arg-type]
        assert cdk.Duration.minutes(5).to_seconds() == 300


@pytest.mark.spawn
def test_make_test_fast_leaves_out_what_the_conftest_marks():
    # GIVEN a module marked ray through MARKS, and a test marked spawn through a fixture of FIXTURE_MARKS
    # WHEN make test-fast's selection collects them
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not (ray or synth or spawn or wheel or cluster)",
            "tests/cli/test_demo.py",
            "tests/test_docs_site.py",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    # THEN neither is left, the marks were there before `-m` deselected, and the unmarked tests beside them are
    collected = [line.split("::")[-1] for line in run.stdout.splitlines() if "::" in line]
    assert "test_the_readme_links_every_page" in collected, run.stdout[-2000:]
    for marked in (
        "test_demo_runs_every_step_and_writes_stack_and_manifests",
        "test_the_site_builds_strictly_with_every_page",
    ):
        assert marked not in collected, run.stdout[-2000:]
