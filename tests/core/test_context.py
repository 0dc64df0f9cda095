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


def test_precedence_and_sources(project, tmp_path_factory):
    # GIVEN cdk.json, cdk.context.json, a named layer and -c all setting values (and no ~/.cdk.json)
    home = tmp_path_factory.mktemp("home")
    resolved = resolve_settings(
        {"steps": "12"}, root=project, home=home, extra_layers=[("--local preset", {"model": "tiny", "steps": 5})]
    )
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


def test_cdk_json_wins_over_the_lookup_cache(project, tmp_path_factory):
    # GIVEN gpuNodeCount 3 in cdk.json and 7 in cdk.context.json (the CDK CLI's precedence: cdk.json first)
    (project / "cdk.context.json").write_text(json.dumps({"gpuNodeCount": 7}))
    resolved = resolve_settings({}, root=project, home=tmp_path_factory.mktemp("home"))
    # THEN ray-efa shows what `cdk deploy` gets
    assert (resolved.settings.nodes.gpu_node_count, resolved.sources["gpuNodeCount"]) == (3, "cdk.json")


def test_the_app_directory_is_the_working_directorys_not_the_install_folders(project, tmp_path_factory, monkeypatch):
    # GIVEN the working directory inside an app whose cdk.json asks for 3 nodes
    monkeypatch.chdir(project)
    resolved = resolve_settings({}, home=tmp_path_factory.mktemp("home"))
    # THEN that app's cdk.json is read
    assert resolved.app_dir == project and resolved.settings.nodes.gpu_node_count == 3
    # AND outside any app only the defaults (and ~/.cdk.json) apply
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    monkeypatch.chdir(elsewhere)
    outside = resolve_settings({}, home=tmp_path_factory.mktemp("home"))
    assert outside.app_dir is None and outside.settings.nodes.gpu_node_count == 2


def test_a_broken_context_file_is_a_settings_error_naming_it(project, tmp_path_factory):
    (project / "cdk.context.json").write_text("{")
    with pytest.raises(SettingsError, match="cdk.context.json: is not valid JSON"):
        resolve_settings({}, root=project, home=tmp_path_factory.mktemp("home"))
