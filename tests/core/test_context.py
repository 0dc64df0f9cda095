"""Settings resolved from the project's context files and `-c`, with each value's source."""

from __future__ import annotations

import json

import pytest

from ray_efa.core.context import parse_overrides, resolve_settings
from ray_efa.core.settings import SettingsError


@pytest.fixture
def project(tmp_path):
    (tmp_path / "cdk.json").write_text(json.dumps({"app": "x", "context": {"gpuNodeCount": 3, "steps": 10}}))
    (tmp_path / "cdk.context.json").write_text(json.dumps({"gpuAvailabilityZone": "us-east-2b", "steps": 11}))
    return tmp_path


def test_precedence_and_sources(project):
    # GIVEN cdk.json, cdk.context.json, a named layer and -c all setting values
    resolved = resolve_settings({"steps": "12"}, root=project, extra_layers=[("--local preset", {"model": "tiny", "steps": 5})])
    s, sources = resolved.settings, resolved.sources
    # THEN -c wins over the layers below it, and each value says where it came from
    assert s.training.steps == 12 and sources["steps"] == "-c"
    assert s.nodes.gpu_node_count == 3 and sources["gpuNodeCount"] == "cdk.json"
    assert s.gpu_availability_zone == "us-east-2b" and sources["gpuAvailabilityZone"] == "cdk.context.json"
    assert s.training.model == "tiny" and sources["model"] == "--local preset"
    assert sources["region"] == "default"


def test_malformed_override_is_an_error():
    with pytest.raises(SettingsError, match="-c: must be key=value, got 'gpuNodeCount'"):
        parse_overrides(["gpuNodeCount"])
    assert parse_overrides(["a=b=c"]) == {"a": "b=c"}


def test_project_cdk_json_is_valid_settings():
    # The committed cdk.json context must itself be valid settings (a typo there would break every synth).
    resolved = resolve_settings({})
    assert resolved.settings.nodes.gpu_instance_type == "g6.12xlarge"
