"""Shared test setup. Area fixtures live in tests/<area>/conftest.py, mirroring the source layout."""

import contextlib
import multiprocessing.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from tests import scheduling
from tests.cdk_cli import cdk_cli  # noqa: F401 (the fixture behind tests.cdk_cli.needs_cdk_cli, for every test folder)

# jsii prints an end-of-life banner for Node 20 on every process start; it is noise in test output.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

SLOW_MARKS = ("ray", "synth", "spawn", "wheel", "cluster")
"""The marks `make test-fast` leaves out (pyproject's [tool.pytest.ini_options] markers say what each means)."""


MARKS: dict[str, tuple[str, ...]] = {
    # whole modules: every test synthesizes (or reads a synth of its own) or runs the CLI in a process
    "tests/cli/test_demo.py": ("ray",),  # the demo's process trains on a local Ray cluster
    "tests/cli/test_output_dir.py": ("synth",),
    "tests/cli/test_unreachable.py": ("spawn",),
    "tests/examples/test_embedding.py": ("synth",),
    "tests/examples/test_own_training.py": ("spawn",),
    "tests/examples/test_platform.py": ("synth",),
    "tests/k8s/test_manifests_cli.py": ("synth",),
    "tests/test_xdist_groups.py": ("spawn",),
    "tests/training/test_accumulation.py": ("spawn",),  # gloo ranks
    "tests/training/test_hold_gathered.py": ("spawn",),  # gloo ranks
    "tests/training/test_fp8.py": ("spawn",),
    "tests/training/test_sharding.py": ("spawn",),
    # single tests
    "tests/cli/test_vocabulary.py::test_check_transport_at_80_columns_stacks_each_process": ("spawn",),
    "tests/cli/test_vocabulary.py::test_plan_at_80_columns_cuts_nothing": ("spawn",),
    "tests/core/test_context_cdk_cli.py::test_context_resolution_matches_the_real_cdk_cli": ("synth",),
    "tests/core/test_context_cdk_cli.py::test_resolved_settings_and_sources_are_what_cdk_deploy_gets": ("synth",),
    "tests/core/test_settings_alone.py::test_core_settings_imports_with_pydantic_alone": ("spawn",),
    "tests/k8s/test_code_archive.py::test_the_zip_holds_what_ships_and_the_pods_unpack_the_same_tree": ("spawn",),
    "tests/k8s/test_code_archive.py::test_the_init_container_refuses_an_archive_that_is_not_what_its_name_says": (
        "spawn",
    ),
    "tests/k8s/test_code_bundle.py::test_shipped_code_imports_and_its_settings_round_trip": ("spawn",),
    "tests/k8s/test_packages.py::test_a_package_installed_from_a_local_wheel_file_is_pinned_too": ("spawn",),
    "tests/k8s/test_packages.py::test_a_package_that_shadows_the_standard_library_is_refused": ("spawn",),
    "tests/k8s/test_packages.py::test_a_package_that_would_replace_an_image_package_fails_naming_the_setting": (
        "spawn",
    ),
    "tests/k8s/test_packages.py::test_a_stray_test_suite_is_left_out_and_the_package_installed": ("spawn",),
    "tests/k8s/test_packages.py::test_the_install_script_adds_only_what_the_image_lacks": ("spawn",),
    "tests/k8s/test_rayjob.py::test_a_failing_driver_fails_the_entrypoint_as_the_head_runs_it": ("spawn",),
    # `ray-efa manifests` in-process: write_manifests synthesizes the charts (k8s.dist)
    "tests/k8s/test_user_code.py::test_manifests_cli_names_the_follow_line_for_the_jobs_namespace": ("synth",),
    "tests/k8s/test_user_code.py::test_manifests_cli_ships_binary_code_as_a_zip_under_s3_storage_with_its_upload_line": (
        "synth",
    ),
    "tests/k8s/test_user_code.py::test_manifests_cli_ships_the_code_and_names_the_job": ("synth",),
    "tests/k8s/test_user_code.py::test_the_fetch_script_unpacks_a_zip_through_pyarrows_s3_filesystem": ("spawn",),
    "tests/k8s/test_package.py::test_names_import_without_cdk8s": ("spawn",),
    "tests/k8s/test_package.py::test_the_object_builders_import_without_cdk8s": ("spawn",),
    "tests/examples/test_one_truth.py::test_the_smallest_embedding_type_checks_in_strict_mode": ("spawn",),  # pyright
    "tests/test_docs_site.py::test_the_strict_build_fails_on_what_would_break_a_reader": ("spawn",),  # mkdocs
    # lint-imports in a Python process of its own
    "tests/test_layers.py::test_the_code_keeps_its_layer_contracts": ("spawn",),
    "tests/test_layers.py::test_an_import_against_the_layers_breaks_the_check": ("spawn",),
    "tests/test_layers.py::test_an_import_cycle_between_siblings_breaks_the_check": ("spawn",),
    "tests/training/test_families.py::test_two_gloo_ranks_train_each_family_and_resume_bit_identically": ("spawn",),
    "tests/training/test_loss.py::test_compiled_chunk_softmax_equals_the_eager_one": ("spawn",),  # inductor's workers
    "tests/training/test_parallelize.py::test_levers_train_to_the_plain_losses_and_keep_checkpoint_keys"
    "[compile+checkpointing+chunked]": ("spawn",),
    "tests/training/test_replica_all_reduce_hook.py::"
    "test_hsdp_falls_back_to_the_native_fp32_all_reduce_where_the_hook_is_not_proven": ("spawn",),  # gloo ranks
    "tests/training/test_reporting.py::test_two_gloo_ranks_agree_on_the_report_steps_through_one_all_reduce": (
        "spawn",
    ),
    "tests/training/test_transport_cli.py::test_a_subprocess_reads_stdin_and_returns_the_exit_code": ("spawn",),
    "tests/cli/test_kube_token.py::test_an_exec_plugins_token_is_sent_and_sent_anew_after_it_expires": ("spawn",),
    "tests/test_checkout_imports.py::test_a_checkout_imports_the_six_packages_and_nothing_else_of_the_repository": (
        "spawn",
    ),
    # `ray-efa plan --json` in a process of its own for each project run's memory
    "tests/training/test_titan_side_by_side.py::"
    "test_the_rounds_report_reads_the_run_again_after_an_out_of_memory_and_the_llama_flops": ("spawn",),
}
"""Marks given here rather than in the test files, by module path or node id (without [...]: every case)."""

FIXTURE_MARKS: dict[str, tuple[str, ...]] = {
    "synthesized": ("synth",),  # the infra session synths (tests/infra marks all its tests synth anyway)
    "gloo_results": ("spawn",),  # tests/training/test_preflight.py's two gloo ranks
    "site": ("spawn",),  # tests/test_docs_site.py's mkdocs build
}
"""Marks of every test that uses a fixture: the fixture's cost is the test's (its first user pays it)."""


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    # A wrapper: the marks go on before every other implementation, `-m`'s deselection among them (a trylast hook
    # added them after it, and make test-fast ran every test they leave out); the order is set after all of them,
    # the area conftests' marks and groups included (tests/infra/conftest.py adds groups).
    for item in items:
        # by path and name, not nodeid: --dist loadgroup appends "@<group>" to the nodeid of a grouped test
        module = item.path.relative_to(item.config.rootpath).as_posix()
        function = getattr(item, "originalname", item.name)
        marks = MARKS.get(module, ()) + MARKS.get(f"{module}::{function}", ()) + MARKS.get(f"{module}::{item.name}", ())
        for fixture in getattr(item, "fixturenames", ()):
            marks += FIXTURE_MARKS.get(fixture, ())
        for mark in dict.fromkeys(marks):
            item.add_marker(getattr(pytest.mark, mark))
    yield
    if config.getoption("dist", "no") != "no" or hasattr(config, "workerinput"):  # the order xdist hands out
        items[:] = scheduling.longest_first(items, scheduling.read_durations())


def pytest_addoption(parser):
    parser.addoption(
        "--record-durations",
        metavar="PATH",
        default=None,
        help="write each test's seconds (setup + call + teardown) to PATH for the longest-first order "
        "(tests/scheduling.py; `make test-durations` writes tests/durations.json)",
    )


def pytest_configure(config):
    # Our order, not xdist's: loadgroup would otherwise sort the work units by how many tests they hold
    # (tests/scheduling.py says why that left one worker idle).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if config.getoption("--record-durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_DurationRecorder(Path(config.getoption("--record-durations"))), "durations")


class _DurationRecorder:
    """Sums each test's phases as the reports arrive (from the workers, under xdist) and writes them at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = {}
        self.failed = False

    def pytest_runtest_logreport(self, report):
        key = scheduling.duration_key(report.nodeid)
        self.seconds[key] = self.seconds.get(key, 0.0) + report.duration
        self.failed |= report.failed

    def pytest_sessionfinish(self, session):
        if self.failed or session.shouldfail or not self.seconds:
            print(f"\nnot writing {self.path}: record durations from a full run that passes", file=sys.stderr)
            return
        kept = scheduling.write_durations(self.path, self.seconds, command="make test-durations")
        print(f"\nwrote {self.path}: {kept} tests of at least {scheduling.MIN_RECORDED_S} s", file=sys.stderr)


class UnmarkedCost(Exception):
    """A test did something slow in this process without the mark that `make test-fast` leaves it out by."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with _marked_for_what_it_runs(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with _marked_for_what_it_runs(item):
        return (yield)


@contextlib.contextmanager
def _marked_for_what_it_runs(item: pytest.Item) -> Iterator[None]:
    """A test without any of SLOW_MARKS, which `make test-fast` runs, fails when it (its fixtures' setup included)
    starts Ray (mark it `ray`), calls into jsii's node process, which every CDK and cdk8s object is (`synth`), or
    starts a Python, node, CDK CLI, pyright or checkov process (`spawn`), naming the mark. A marked test is not
    checked: the marks are there to leave tests out of `make test-fast`, and it is left out. What a started process
    does inside is not seen: a CLI process that synthesizes is `spawn` all the same."""
    if any(True for name in SLOW_MARKS for _ in item.iter_markers(name)):  # iter_markers: a generator, never falsy
        yield
        return

    def refuse(mark: str, what: str) -> NoReturn:
        raise UnmarkedCost(
            f"{item.nodeid} {what} but is not marked {mark}: add @pytest.mark.{mark} (or a pytestmark, "
            "or an entry in tests/conftest.py's MARKS), so that `make test-fast` leaves it out"
        )

    ray = sys.modules.get("ray")
    ray_was_up = ray is not None and ray.is_initialized()
    with pytest.MonkeyPatch.context() as patch:
        if ray is not None:
            patch.setattr(ray, "init", lambda *a, **k: refuse("ray", "starts Ray (ray.init)"))
        jsii_process = sys.modules.get("jsii._kernel.providers.process")
        if jsii_process is not None:
            patch.setattr(
                jsii_process._NodeProcess,
                "send",
                lambda *a, **k: refuse("synth", "calls into jsii (a CDK or cdk8s object)"),
            )
        execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

        def popen(self, args, *rest, **kwargs):
            if "jsii-runtime" in _command(args):
                refuse("synth", "starts jsii's node process (imports the CDK or cdk8s)")
            if _starts_slowly(args):
                refuse("spawn", f"starts a process ({_command(args)[:160]})")
            return execute_child(self, args, *rest, **kwargs)

        def multiprocessing_spawn(path, args, passfds):
            refuse("spawn", f"starts a multiprocessing process ({_command(args)[:160]})")

        patch.setattr(subprocess.Popen, "_execute_child", popen)
        patch.setattr(multiprocessing.util, "spawnv_passfds", multiprocessing_spawn)
        yield
    ray = sys.modules.get("ray")
    if not ray_was_up and ray is not None and ray.is_initialized():
        refuse("ray", "left Ray initialized")


def _command(args) -> str:
    return args if isinstance(args, str) else " ".join(str(arg) for arg in args)


def _starts_slowly(args) -> bool:
    """A process that takes seconds to start: Python (torch, Ray or the CDK come with it), node, npx, the CDK CLI, pyright,
    checkov (a shell line is judged by its first word)."""
    words = (args if isinstance(args, str) else _command(args)).split()
    if not words:
        return False
    program = os.path.basename(words[0])
    return words[0] == sys.executable or program.startswith(
        ("python", "node", "npx", "cdk", "pyright", "ray", "checkov")
    )
