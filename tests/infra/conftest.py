"""Synthesized stacks, once per test process and per settings (a synth of both stacks costs seconds)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import dataclass

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from ray_efa.core.settings import Settings
from ray_efa.infra.app import RayEfaStacks, build_stacks, feature_flags
from tests.settings_cache import per_settings

_SYNTH_ROOT = tempfile.mkdtemp(prefix="ray-efa-synth-")
# One folder per test process for every cloud assembly (each is ~60 MB with the kubectl layer), removed at exit.
atexit.register(shutil.rmtree, _SYNTH_ROOT, True)

INSTANCE_TYPES = ("g6.12xlarge", "g6e.48xlarge", "p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge")


@dataclass(frozen=True)
class Synthesized:
    settings: Settings
    stacks: RayEfaStacks
    cluster: Template
    gpu: Template
    assembly: cdk.cx_api.CloudAssembly


def synthesize(**context) -> Synthesized:
    """Synthesize both stacks (cdk-nag included: synth raises on any unacknowledged finding), once per process for
    equal settings: build_stacks reads only the settings' values, so `gpuNodeCount=4` and `gpuNodeCount="4"`, or a
    default given explicitly and left out, share one synth."""
    return _synthesize(Settings.from_context(context))


@per_settings
def _synthesize(settings: Settings) -> Synthesized:
    # cdk.json's feature flags, as `cdk synth` applies them
    app = cdk.App(outdir=tempfile.mkdtemp(dir=_SYNTH_ROOT), context=feature_flags())
    stacks = build_stacks(app, settings)
    assembly = app.synth()
    return Synthesized(settings, stacks, Template.from_stack(stacks.cluster), Template.from_stack(stacks.gpu), assembly)


@pytest.fixture(scope="session", params=INSTANCE_TYPES)
def synthesized(request) -> Synthesized:
    return synthesize(gpuInstanceType=request.param)


@pytest.fixture(scope="session")
def default_synth() -> Synthesized:
    return synthesize()


XDIST_GROUPS: dict[str, str | None] = {
    "test_day2.py": "infra-changes",
    "test_deploy_ready.py": "infra-changes",
    "test_checkov.py": "infra-changes",
    "test_app.py": None,
    "test_props.py": None,
    "test_training_job.py": None,
}
"""The xdist group of each module (`make test`: pytest -n 2 --dist loadgroup) that is not in "infra". A group runs on
one worker, whose process shares the synths of its modules (synthesize() caches per process): two groups of about
equal time so that both workers synthesize, each holding the modules that share the most settings. A module that
builds only its own apps (no synthesize(), no synth fixture) is in none: its tests spread over both workers."""


def pytest_collection_modifyitems(items):
    for item in items:
        path = item.path
        if path.parent.name == "infra" and path.parent.parent.name == "tests":
            item.add_marker(pytest.mark.synth)
            group = XDIST_GROUPS.get(path.name, "infra")
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))
