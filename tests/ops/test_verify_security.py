"""`ops.verify`'s security checks: Ray token auth on the live Ray cluster, network-policy enforcement by the VPC CNI,
and the Ray object's NetworkPolicy. A real kubernetes client reads the recorded API objects (tests/ops/kube_server.py).

The recording's security parts have the shapes the components write: the RayCluster's spec.authOptions and the head
pod's RAY_AUTH_MODE / RAY_AUTH_TOKEN env as KubeRay v1.7.0 sets them (common/pod.go SetContainerTokenAuthEnvVars),
the aws-node DaemonSet's aws-eks-nodeagent container with the args the vpc-cni add-on gives it when
enableNetworkPolicy is on, and the NetworkPolicy this project's manifests create.
"""

from __future__ import annotations

import copy

from ray_efa.core.settings import Settings
from ray_efa.ops.verify import Expectations
from tests.ops.kube_server import load_recording
from tests.ops.test_verify import DAEMONSETS, RAYCLUSTERS, item, verify

PODS = "/api/v1/namespaces/ray/pods"
POLICIES = "/apis/networking.k8s.io/v1/namespaces/ray/networkpolicies"
SECURITY_CHECKS = ["ray-token-auth", "network-policy-enforcement", "network-policy"]


def _check(report, check_id: str):
    return next(c for c in report.checks if c.id == check_id)


def _node_agent(recording: dict) -> dict:
    containers = item(recording, DAEMONSETS, "aws-node")["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "aws-eks-nodeagent")


def test_healthy_recording_has_token_auth_and_enforced_policies():
    report = verify(load_recording())
    for check_id in SECURITY_CHECKS:
        assert _check(report, check_id).ok, _check(report, check_id)
    assert "head pod train-efa-x7k2p-head-m2x9d has RAY_AUTH_MODE=token" in _check(report, "ray-token-auth").detail
    assert _check(report, "network-policy").name == "NetworkPolicy ray/train-efa-ray-ingress"


def test_policy_agent_without_enforcement_fails_naming_the_addon_setting():
    # GIVEN the VPC CNI as EKS installs it by default: the agent runs with enforcement off
    recording = load_recording()
    args = _node_agent(recording)["args"]
    args[args.index("--enable-network-policy=true")] = "--enable-network-policy=false"
    # WHEN verified THEN only the enforcement check fails, and says what to set
    report = verify(recording)
    assert [c.id for c in report.failed] == ["network-policy-enforcement"]
    assert "enableNetworkPolicy" in report.failed[0].detail and "--enable-network-policy=false" in report.failed[0].detail


def test_vpc_cni_without_the_policy_agent_fails():
    recording = load_recording()
    spec = item(recording, DAEMONSETS, "aws-node")["spec"]["template"]["spec"]
    spec["containers"] = [c for c in spec["containers"] if c["name"] == "aws-node"]
    report = verify(recording)
    assert [c.id for c in report.failed] == ["network-policy-enforcement"]
    assert "no such container" in report.failed[0].detail


def test_missing_network_policy_fails():
    recording = load_recording()
    recording[POLICIES]["items"] = []
    report = verify(recording)
    assert [c.id for c in report.failed] == ["network-policy"]
    assert "any pod in the cluster can reach the Ray pods" in report.failed[0].detail


def test_auth_options_pruned_by_an_old_crd_fail_the_token_check():
    # GIVEN a RayCluster whose authOptions the API server pruned (an operator with a CRD older than KubeRay 1.5.1)
    recording = load_recording()
    del item(recording, RAYCLUSTERS, "train-efa-x7k2p")["spec"]["authOptions"]
    report = verify(recording)
    assert [c.id for c in report.failed] == ["ray-token-auth"]
    assert "authOptions.mode unset, expected token" in report.failed[0].detail


def test_head_pod_without_the_injected_token_fails():
    recording = load_recording()
    head = recording[PODS]["items"][0]
    head["spec"]["containers"][0]["env"] = [e for e in head["spec"]["containers"][0]["env"]
                                            if not e["name"].startswith("RAY_AUTH")]
    report = verify(recording)
    assert [c.id for c in report.failed] == ["ray-token-auth"]
    assert "runs without RAY_AUTH_MODE=token" in report.failed[0].detail


def test_the_head_pod_is_found_by_its_cluster_not_by_name():
    # GIVEN another Ray cluster's head pod in the namespace, without a token
    recording = load_recording()
    stranger = copy.deepcopy(recording[PODS]["items"][0])
    stranger["metadata"].update(name="other-head-abcde", labels={**stranger["metadata"]["labels"], "ray.io/cluster": "other"})
    stranger["spec"]["containers"][0]["env"] = []
    recording[PODS]["items"].insert(0, stranger)
    # THEN the check reads the head of the live cluster and passes
    assert _check(verify(recording), "ray-token-auth").ok


def test_kuberay_1_4_plans_no_token_and_the_check_says_so():
    # GIVEN settings pinning KubeRay 1.4.0 and a cluster deployed from them (no authOptions, no token env)
    recording = load_recording()
    del item(recording, RAYCLUSTERS, "train-efa-x7k2p")["spec"]["authOptions"]
    report = verify(recording, Expectations.from_settings(Settings().replace(kuberayVersion="1.4.0")))
    # THEN nothing fails, and the report says token auth is off and why
    assert report.ok, report.as_dict()
    detail = _check(report, "ray-token-auth").detail
    assert detail.startswith("off, as planned: kuberayVersion 1.4.0 has no authOptions")


def test_the_standing_rayclusters_policy_is_checked_when_it_runs():
    # GIVEN the long-lived RayCluster ray-efa is what runs (no RayJob cluster)
    recording = load_recording()
    cluster = item(recording, RAYCLUSTERS, "train-efa-x7k2p")
    cluster["metadata"].update(name="ray-efa", labels={}, ownerReferences=[])
    recording[PODS]["items"][0]["metadata"]["labels"]["ray.io/cluster"] = "ray-efa"
    # WHEN only the job's policy exists THEN the check names the RayCluster's policy as missing
    report = verify(recording)
    assert [c.id for c in report.failed] == ["network-policy"]
    assert report.failed[0].name == "NetworkPolicy ray/ray-efa-ray-ingress"
    # AND with it, everything passes
    policy = copy.deepcopy(recording[POLICIES]["items"][0])
    policy["metadata"]["name"] = "ray-efa-ray-ingress"
    recording[POLICIES]["items"].append(policy)
    assert verify(recording).ok
