"""`ops.verify` without a cluster: the checks that are pure functions of API objects, and the command's handling of
an unreachable API server and of its flags. Verifying a cluster, each check failing as a broken cluster makes it fail,
runs against the real control plane: tests/cluster/test_verify.py."""

from __future__ import annotations

import json
import socket

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration

from ray_efa.core.settings import Settings
from ray_efa.ops.verify import Expectations, check_gpu_nodes, check_resource_slices, ray_cluster_ready, verify_cluster
from tests.ops.cli_helpers import run_cli

EXPECTED = Expectations.from_settings(Settings())  # 2 x g6.12xlarge: 4 GPUs and 1 EFA interface per node


def _node(name: str, ready: str = "True", **condition) -> client.V1Node:
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name),
        status=client.V1NodeStatus(conditions=[client.V1NodeCondition(type="Ready", status=ready, **condition)]),
    )


def test_not_ready_gpu_node_fails_the_node_check():
    # (a kubelet that stops reporting: on the control plane KWOK keeps every node Ready, so this one is pure)
    nodes = [
        _node("gpu-a"),
        _node("gpu-b", "False", reason="KubeletNotReady", message="container runtime network not ready"),
    ]
    check = check_gpu_nodes(nodes, EXPECTED)
    assert not check.ok and check.id == "gpu-nodes"
    assert "1 Ready of 2 nodes labelled role=gpu-worker, expected 2; not Ready: gpu-b" in check.detail


def test_a_ray_cluster_whose_operator_omits_a_zero_ready_count_is_not_ready():
    # KubeRay's status fields are omitempty: 0 ready workers is no readyWorkerReplicas at all, beside state "ready"
    ready, description = ray_cluster_ready({"status": {"state": "ready", "desiredWorkerReplicas": 2}})
    assert not ready and "0 of 2 workers ready" in description
    assert ray_cluster_ready({"status": {"state": "ready"}})[0]  # an operator that reports no counts at all


def _slice(node: str, driver: str, count: int) -> dict:
    return {"spec": {"driver": driver, "nodeName": node, "devices": [{"name": f"dev-{i}"} for i in range(count)]}}


def test_dra_devices_are_counted_per_node_from_the_resource_slices_of_each_driver():
    nodes = [_node("gpu-a"), _node("gpu-b")]
    slices = [_slice(n, "gpu.nvidia.com", 4) for n in ("gpu-a", "gpu-b")] + [_slice("gpu-a", "dra.net", 1)]
    gpus = check_resource_slices(nodes, slices, kind="gpu", want=4, check_id="gpu-allocatable", provider="nvidia")
    assert gpus.ok and gpus.detail == "4 on each of 2 GPU nodes"
    efa = check_resource_slices(nodes, slices, kind="efa", want=1, check_id="efa-allocatable", provider="aws-dranet")
    assert not efa.ok and "ResourceSlices of driver dra.net; gpu-b: 0" in efa.detail


def test_an_unreachable_api_raises_on_the_first_read():
    # GIVEN a port nothing listens on
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    configuration = Configuration(host=f"http://127.0.0.1:{port}")
    # kubernetes' Configuration declares retries only as `self.retries = None`, so pyright takes the documented int
    # (urllib3's retry count) for a type error
    configuration.retries = 0  # pyright: ignore[reportAttributeAccessIssue]
    # THEN the connection's error is raised (the CLI makes it one line), not a report of every check failing for it
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        verify_cluster(ApiClient(configuration), EXPECTED)


def kubeconfig(tmp_path, url: str):
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {  # JSON is YAML
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "recorded",
                "clusters": [{"name": "recorded", "cluster": {"server": url}}],
                "users": [{"name": "reader", "user": {"token": "not-a-real-token"}}],
                "contexts": [{"name": "recorded", "context": {"cluster": "recorded", "user": "reader"}}],
            }
        )
    )
    return path


def test_command_with_an_unknown_kubeconfig_context_exits_2(tmp_path, capsys):
    code = run_cli("verify", "--kubeconfig", str(kubeconfig(tmp_path, "http://127.0.0.1:9")), "--kube-context", "nope")
    assert code == 2
    assert "context nope" in capsys.readouterr().err


def test_context_is_for_settings_and_the_old_kubeconfig_use_is_named(tmp_path, capsys):
    # GIVEN the spelling of earlier versions, `--context NAME` for the kubeconfig context
    code = run_cli("verify", "--kubeconfig", str(kubeconfig(tmp_path, "http://127.0.0.1:9")), "--context", "recorded")
    # THEN exit 2 with the new flag named, rather than a settings error about 'recorded'
    assert code == 2
    assert "use --kube-context recorded" in capsys.readouterr().err
    # and -c/--context KEY=VALUE is a setting, as in every other subcommand
    code = run_cli("verify", "--kubeconfig", str(tmp_path / "missing"), "--context", "gpuNodeCount=65", "--json")
    assert code == 2
    error = json.loads(capsys.readouterr().out)
    assert [p["key"] for p in error["problems"]] == ["gpuNodeCount"]


def _agent_node(name: str, **faults: str) -> client.V1Node:
    """A GPU node as the EKS node monitoring agent reports it: its five conditions True but `faults` (type -> the
    agent's reason), which are False. (The agent cannot run here: KWOK's nodes have no GPUs, kernels or interfaces.)"""
    from ray_efa.core.addons import NODE_HEALTH_CONDITIONS

    conditions = [client.V1NodeCondition(type="Ready", status="True")]
    for kind in NODE_HEALTH_CONDITIONS:
        reason = faults.get(kind)
        conditions.append(
            client.V1NodeCondition(
                type=kind,
                status="False" if reason else "True",
                reason=reason,
                message="XID 79: GPU has fallen off the bus" if reason else None,
            )
        )
    return client.V1Node(metadata=client.V1ObjectMeta(name=name), status=client.V1NodeStatus(conditions=conditions))


def test_node_health_names_each_node_and_fault_the_monitoring_agent_reports():
    from ray_efa.ops.verify import check_node_health

    # GIVEN two GPU nodes, one whose GPU fell off the bus
    check = check_node_health([_agent_node("gpu-a"), _agent_node("gpu-b", AcceleratedHardwareReady="NvidiaXID79")])
    # THEN the check fails naming the node, the condition, the agent's reason and message, and what EKS does
    assert not check.ok and check.id == "node-health"
    assert "gpu-b AcceleratedHardwareReady=False (NvidiaXID79 XID 79: GPU has fallen off the bus)" in check.detail
    assert "gpu-a" not in check.detail and "replaces the node" in check.detail
    # AND healthy nodes pass; nodes the agent never reported on pass, saying the agent is missing
    assert check_node_health([_agent_node("gpu-a")]).ok
    missing = check_node_health([_node("gpu-a")])
    assert missing.ok and "eks-node-monitoring-agent" in missing.detail
