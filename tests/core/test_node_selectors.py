"""Node selectors of the system side and the GPU side: settings systemNodeSelector and gpuNodeSelector, and where they go
(the pods' nodeSelector, the Helm values, the node groups' labels, `ray-efa verify`'s GPU node query)."""

from __future__ import annotations

from typing import Any

import pytest

from ray_efa.core.scheduling import (
    DEFAULT_GPU_NODE_SELECTOR,
    DEFAULT_SYSTEM_NODE_SELECTOR,
    gpu_node_labels,
    label_selector,
    node_selector_problem,
    parse_node_selector,
)
from ray_efa.core.settings import Settings, SettingsError
from ray_efa.infra.device_plugins import device_plugin_values
from ray_efa.infra.kuberay import kuberay_values
from ray_efa.ops.verify import Expectations

PLATFORM_SYSTEM = {"platform.example.com/pool": "system"}
PLATFORM_GPU = {"platform.example.com/pool": "gpu", "team": "ml"}


def test_defaults_are_todays_role_labels():
    nodes = Settings().nodes
    assert nodes.system_node_selector == DEFAULT_SYSTEM_NODE_SELECTOR == {"role": "system"}
    assert nodes.gpu_node_selector == DEFAULT_GPU_NODE_SELECTOR == {"role": "gpu-worker"}


@pytest.mark.parametrize(
    "text, selector",
    [
        ("role=gpu", {"role": "gpu"}),
        ("platform.example.com/pool=gpu, team=ml", PLATFORM_GPU),
        ('{"platform.example.com/pool": "gpu", "team": "ml"}', PLATFORM_GPU),
        ("dedicated=", {"dedicated": ""}),  # an empty value is a valid label value
    ],
)
def test_minus_c_takes_key_value_pairs_or_a_json_object(text, selector):
    assert parse_node_selector(text) == selector
    assert Settings.from_context({"gpuNodeSelector": text}).nodes.gpu_node_selector == selector


@pytest.mark.parametrize(
    "text, message",
    [
        ("role", r"'role' has no '='"),
        ('{"role": 1}', "JSON object of string labels"),
        ('{"role": ', "must be a JSON object"),
    ],
)
def test_unparsable_selectors_are_refused_by_name(text, message):
    with pytest.raises(SettingsError, match=rf"gpuNodeSelector: .*{message}"):
        Settings.from_context({"gpuNodeSelector": text})


@pytest.mark.parametrize(
    "selector, message",
    [
        ({}, "at least one node label"),
        ({"bad key": "x"}, "label key 'bad key' must be"),
        ({"Example.com/pool": "x"}, "label key 'Example.com/pool' has a bad prefix"),
        ({"pool": "-gpu"}, "label value '-gpu' of pool must be empty or"),
        ({"pool": "x" * 64}, "label value 'x{64}' of pool"),
    ],
)
def test_label_keys_and_values_follow_kubernetes_syntax(selector, message):
    assert node_selector_problem(selector) is not None
    with pytest.raises(SettingsError, match=rf"systemNodeSelector: .*{message}"):
        Settings.from_context({"systemNodeSelector": selector})


def test_python_api_takes_a_mapping_strictly():
    with pytest.raises(SettingsError, match="gpuNodeSelector"):
        nodes: Any = {"gpu_node_selector": "role=gpu"}  # a mapping for a section, refused at run time: what is tested
        Settings(nodes=nodes)  # a string is for -c; the typed API takes a dict


def test_a_gpu_selector_that_also_picks_the_system_nodes_is_refused():
    # GIVEN system nodes labelled pool=shared,kind=system and GPU workers selecting pool=shared alone
    with pytest.raises(
        SettingsError, match=r"gpuNodeSelector: must not also select the system nodes \(pool=shared,kind=system\)"
    ):
        Settings.from_context({"systemNodeSelector": "pool=shared,kind=system", "gpuNodeSelector": "pool=shared"})


@pytest.mark.parametrize(
    "selector, labels",
    [
        ({"role": "gpu-worker"}, {"role": "gpu-worker", "nvidia.com/gpu.present": "true"}),
        (PLATFORM_GPU, {**PLATFORM_GPU, "nvidia.com/gpu.present": "true"}),
    ],
)
def test_gpu_node_groups_also_carry_what_the_nvidia_plugin_affinity_needs(selector, labels):
    assert gpu_node_labels(selector) == labels


def test_selectors_flow_into_helm_values_and_verify():
    # GIVEN a platform's own labels
    settings = Settings.from_context({"systemNodeSelector": PLATFORM_SYSTEM, "gpuNodeSelector": PLATFORM_GPU})
    # THEN the operator, both device plugins and verify's GPU node query use them
    assert kuberay_values(settings.nodes.system_node_selector)["nodeSelector"] == PLATFORM_SYSTEM
    assert device_plugin_values(settings.nodes.gpu_node_selector)["nodeSelector"] == PLATFORM_GPU
    assert Expectations.from_settings(settings).gpu_node_selector == "platform.example.com/pool=gpu,team=ml"
    assert label_selector(PLATFORM_GPU) == "platform.example.com/pool=gpu,team=ml"


def test_selectors_survive_the_settings_json_the_job_ships():
    settings = Settings.from_context({"gpuNodeSelector": PLATFORM_GPU})
    assert Settings.from_json(settings.to_json()) == settings
