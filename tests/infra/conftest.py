"""Synthesized stacks, once per session and per settings variant (a synth costs seconds)."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from dataclasses import dataclass

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from ray_efa.core.settings import Settings
from ray_efa.infra.app import RayEfaStacks, build_stacks, feature_flags

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


@functools.cache
def synthesize(**context) -> Synthesized:
    """Synthesize both stacks (cdk-nag included: synth raises on any unacknowledged finding)."""
    settings = Settings.from_context(context)
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


def pytest_collection_modifyitems(items):
    # Every infra test shares the session's synths: keep them on one xdist worker.
    for item in items:
        if "tests/infra/" in str(item.fspath):
            item.add_marker(pytest.mark.xdist_group("infra"))
