"""`ray-efa verify` against the real control plane: a deployed 2 x g6.12xlarge cluster (tests/cluster/deployment.py)
whose DaemonSets and Deployment the real controllers count, whose training RayJob the real KubeRay operator reconciles
into a RayCluster and pods. Each test breaks one thing as a broken cluster would (a plugin that selects no node, a pod
not ready, a node without EFA, the operator unavailable, ...) and puts it back; each must fail with the right check
named and nothing else failing. The tests that leave the cluster changed for good come last."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from ray_efa.core.settings import Settings
from ray_efa.ops.verify import Expectations, verify_cluster, verify_until
from tests.cluster.conftest import DEPLOYED_KUBERAY, served_kuberay, wait_for
from tests.cluster.controlplane import ControlPlane
from tests.cluster.deployment import (
    Deployment,
    cluster_addons,
    daemon_set,
    daemon_set_settled,
    set_auth_options,
    set_pod_ready,
    training_job,
)
from tests.cluster.objects import name_of, namespace_of, status_of
from tests.ops.cli_helpers import run_cli

NAMESPACE = "ops-verify"
CONTEXT = {
    "gpuInstanceType": "g6.12xlarge",
    "gpuNodeCount": 2,
    "namespace": NAMESPACE,
    "network": "efa",
    "kuberayVersion": served_kuberay(),
}  # the KubeRay version whose CRDs the API server serves
SETTINGS = Settings.from_context(CONTEXT)
EXPECTED = Expectations.from_settings(SETTINGS)  # 2 x g6.12xlarge: 4 GPUs and 1 EFA interface per node
CLI_SETTINGS = tuple(a for k, v in CONTEXT.items() for a in ("-c", f"{k}={v}"))
ALL_CHECKS = [
    "gpu-nodes",
    "node-health",
    "gpu-allocatable",
    "efa-allocatable",
    "nvidia-device-plugin",
    "aws-efa-k8s-device-plugin",
    "kuberay-operator",
    "raycluster",
    "ray-init-containers",
    "ray-token-auth",
    "network-policy-enforcement",
    "network-policy",
]


@pytest.fixture(scope="module")
def deployed(control_plane: ControlPlane, api: ApiClient) -> Iterator[Deployment]:
    made = Deployment.up(control_plane, api, SETTINGS)
    yield made
    made.remove()


def verify(api: ApiClient, expected: Expectations = EXPECTED):
    return verify_cluster(api, expected)


def check(report, check_id: str):
    return next(c for c in report.checks if c.id == check_id)


def apply_addon(plane: ControlPlane, name: str, *, node_selector: dict[str, str] | None = None) -> None:
    """One add-on of cluster_addons re-applied as installed, or with its pods' nodeSelector replaced."""
    (obj,) = [o for o in cluster_addons(SETTINGS) if o["metadata"]["name"] == name]
    if node_selector is not None:
        obj["spec"]["template"]["spec"]["nodeSelector"] = node_selector
    plane.apply([obj])


def patch_node(api: ApiClient, name: str, status: dict) -> None:
    client.CoreV1Api(api).patch_node_status(name, {"status": status})


# -- a healthy cluster --------------------------------------------------------------------------------------------------


def test_a_healthy_deployment_passes_every_check(deployed: Deployment, api: ApiClient):
    report = verify(api)
    assert [c.id for c in report.checks] == ALL_CHECKS
    assert report.ok, report.as_dict()
    details = {c.id: c.detail for c in report.checks}
    assert details["gpu-allocatable"] == "4 on each of 2 GPU nodes"
    assert details["efa-allocatable"] == "1 on each of 2 GPU nodes"
    assert check(report, "raycluster").name == f"RayCluster {NAMESPACE}/{deployed.ray_cluster} (of RayJob train-efa)"
    # the head pod the operator made, found by its cluster's labels
    (head,) = deployed.pods(f"ray.io/cluster={deployed.ray_cluster},ray.io/node-type=head")
    if EXPECTED.token_auth:
        assert f"head pod {name_of(head)} has RAY_AUTH_MODE=token" in details["ray-token-auth"]
    else:  # a clone alone: the served CRDs (KubeRay 1.5.0's) have no authOptions, so the deployment plans no token
        assert details["ray-token-auth"].startswith(f"off, as planned: kuberayVersion {served_kuberay()} has no ")
    assert check(report, "network-policy").name == f"NetworkPolicy {NAMESPACE}/train-efa-ray-ingress"


def test_a_desired_0_daemon_set_of_another_release_is_not_mistaken_for_the_plugin(deployed, api):
    # GIVEN the NVIDIA chart's MPS control daemon, desired 0 by design, beside the plugin with the same labels
    assert status_of(daemon_set_settled(api, "nvidia-device-plugin-mps-control-daemon")).desired_number_scheduled == 0
    # THEN the plugin check reads the plugin's own DaemonSet (named after the release) and passes
    assert check(verify(api), "nvidia-device-plugin").detail == "2 of 2 pods ready"


@pytest.mark.parametrize("release", ["nvidia-device-plugin", "aws-efa-k8s-device-plugin"])
def test_daemon_set_with_desired_0_fails_as_the_silent_failure(deployed, api, control_plane, release):
    # GIVEN the plugin's DaemonSet selects no node (its chart's selection matches none): ready == desired == 0
    apply_addon(control_plane, release, node_selector={"node.kubernetes.io/instance-type": "no-such-type"})
    try:
        daemon_set_settled(api, release, desired=0)
        report = verify(api)
        # THEN exactly that check fails, and it says why this is not fine
        assert [c.id for c in report.failed] == [release]
        assert "desired 0" in report.failed[0].detail and "silent failure" in report.failed[0].detail
    finally:
        apply_addon(control_plane, release)
        daemon_set_settled(api, release, desired=2)


def test_daemon_set_with_pods_not_ready_fails(deployed, api):
    # GIVEN one of the EFA plugin's pods fails its readiness (the kubelet reports it not Ready)
    pod = deployed.pods("app.kubernetes.io/name=aws-efa-k8s-device-plugin", "kube-system")[0]
    set_pod_ready(api, pod, False)
    try:
        wait_for(
            lambda: (
                status_of(
                    client.AppsV1Api(api).read_namespaced_daemon_set("aws-efa-k8s-device-plugin", "kube-system")
                ).number_ready
                == 1
            ),
            "the DaemonSet controller's count",
        )
        report = verify(api)
        assert [c.id for c in report.failed] == ["aws-efa-k8s-device-plugin"]
        assert report.failed[0].detail.startswith("1 of 2 pods ready")
    finally:
        set_pod_ready(api, client.CoreV1Api(api).read_namespaced_pod(pod.metadata.name, "kube-system"), True)
        daemon_set_settled(api, "aws-efa-k8s-device-plugin", desired=2)


def test_missing_daemon_set_fails_naming_the_helm_release(deployed, api, control_plane):
    client.AppsV1Api(api).delete_namespaced_daemon_set("nvidia-device-plugin", "kube-system")
    try:
        report = verify(api)
        assert [c.id for c in report.failed] == ["nvidia-device-plugin"]
        assert "Helm release nvidia-device-plugin" in report.failed[0].detail
    finally:
        apply_addon(control_plane, "nvidia-device-plugin")
        daemon_set_settled(api, "nvidia-device-plugin", desired=2)


def test_node_without_efa_allocatable_fails_the_efa_check(deployed, api):
    # GIVEN one GPU node never got vpc.amazonaws.com/efa (the EFA plugin did not run there)
    node = deployed.gpu_nodes[1]
    patch_node(api, node, {"allocatable": {"vpc.amazonaws.com/efa": None}})
    try:
        report = verify(api)
        assert [c.id for c in report.failed] == ["efa-allocatable"]
        assert f"{node}: missing" in report.failed[0].detail
    finally:
        patch_node(api, node, {"allocatable": {"vpc.amazonaws.com/efa": "1"}})


def test_node_with_fewer_gpus_than_the_catalog_fails_the_gpu_check(deployed, api):
    node = deployed.gpu_nodes[0]
    patch_node(api, node, {"allocatable": {"nvidia.com/gpu": "3"}})
    try:
        report = verify(api)
        assert [c.id for c in report.failed] == ["gpu-allocatable"]
        assert "expected 4 per node" in report.failed[0].detail and f"{node}: 3" in report.failed[0].detail
    finally:
        patch_node(api, node, {"allocatable": {"nvidia.com/gpu": "4"}})


def test_fewer_gpu_nodes_than_the_settings_fails_the_node_check(deployed, api):
    expected = Expectations.from_settings(Settings.from_context({**CONTEXT, "gpuNodeCount": 3}))
    report = verify(api, expected)
    assert "gpu-nodes" in [c.id for c in report.failed]
    assert "2 Ready of 2 nodes labelled role=gpu-worker, expected 3" in check(report, "gpu-nodes").detail


def test_unavailable_operator_fails_the_operator_check(deployed, api):
    # GIVEN the operator's pod not ready: the Deployment controller makes the Deployment not Available
    (pod,) = deployed.pods("app.kubernetes.io/name=kuberay-operator", "kuberay-system")
    set_pod_ready(api, pod, False)
    apps = client.AppsV1Api(api)

    def available() -> str:
        conditions = status_of(apps.read_namespaced_deployment("kuberay-operator", "kuberay-system")).conditions or []
        return next((c.status for c in conditions if c.type == "Available"), "")

    try:
        wait_for(lambda: available() == "False", "the Deployment controller's Available=False")
        report = verify(api)
        assert [c.id for c in report.failed] == ["kuberay-operator"]
        assert "MinimumReplicasUnavailable" in report.failed[0].detail
    finally:
        set_pod_ready(api, client.CoreV1Api(api).read_namespaced_pod(pod.metadata.name, "kuberay-system"), True)
        wait_for(lambda: available() == "True", "the operator's Deployment Available again")


def test_ray_cluster_not_ready_fails_the_raycluster_check(deployed, api):
    # GIVEN the RayJob's workers fail their readiness: the operator counts them out of the RayCluster's status
    objects = client.CustomObjectsApi(api)
    workers = deployed.pods(f"ray.io/cluster={deployed.ray_cluster},ray.io/node-type=worker")
    for pod in workers:
        set_pod_ready(api, pod, False)

    def ready_workers() -> int:
        return (
            objects.get_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayclusters", deployed.ray_cluster).get(
                "status"
            )
            or {}
        ).get("readyWorkerReplicas", 0)

    try:
        wait_for(lambda: ready_workers() == 0, "the operator's readyWorkerReplicas 0")
        report = verify(api)
        assert [c.id for c in report.failed] == ["raycluster"]
        assert "0 of 2 workers ready" in report.failed[0].detail
    finally:
        for pod in workers:
            set_pod_ready(api, client.CoreV1Api(api).read_namespaced_pod(pod.metadata.name, NAMESPACE), True)
        wait_for(lambda: ready_workers() == 2, "the operator's readyWorkerReplicas 2")


def test_verify_until_polls_until_the_cluster_is_healthy(deployed, api):
    # GIVEN a cluster whose EFA plugin pods become ready only after the first poll
    plugin = deployed.pods("app.kubernetes.io/name=aws-efa-k8s-device-plugin", "kube-system")
    for pod in plugin:
        set_pod_ready(api, pod, False)
    wait_for(
        lambda: (
            status_of(
                client.AppsV1Api(api).read_namespaced_daemon_set("aws-efa-k8s-device-plugin", "kube-system")
            ).number_ready
            == 0
        ),
        "the DaemonSet controller's count",
    )
    polls = []

    def sleep(seconds):
        polls.append(seconds)
        for pod in plugin:
            set_pod_ready(api, client.CoreV1Api(api).read_namespaced_pod(pod.metadata.name, "kube-system"), True)
        daemon_set_settled(api, "aws-efa-k8s-device-plugin", desired=2)

    report = verify_until(api, EXPECTED, timeout_s=60, interval_s=10, sleep=sleep)
    # THEN it waited once and then passed
    assert polls == [10] and report.ok, report.as_dict()


# -- the security checks ------------------------------------------------------------------------------------------------


def test_policy_agent_without_enforcement_fails_naming_the_addon_setting(deployed, api, control_plane):
    # GIVEN the VPC CNI as EKS installs it by default: the agent runs with enforcement off
    args = ["--enable-network-policy=false"]
    control_plane.apply(
        [
            daemon_set(
                "aws-node",
                "kube-system",
                containers=[
                    {"name": "aws-node", "image": "registry.k8s.io/pause:3.10"},
                    {"name": "aws-eks-nodeagent", "image": "registry.k8s.io/pause:3.10", "args": args},
                ],
            )
        ]
    )
    try:
        report = verify(api)
        assert [c.id for c in report.failed] == ["network-policy-enforcement"]
        assert (
            "enableNetworkPolicy" in report.failed[0].detail
            and "--enable-network-policy=false" in report.failed[0].detail
        )
        # and without the agent container at all
        control_plane.apply([daemon_set("aws-node", "kube-system")])
        report = verify(api)
        assert [c.id for c in report.failed] == ["network-policy-enforcement"]
        assert "no such container" in report.failed[0].detail
    finally:
        apply_addon(control_plane, "aws-node")


def test_missing_network_policy_fails(deployed, api, control_plane):
    client.NetworkingV1Api(api).delete_namespaced_network_policy("train-efa-ray-ingress", NAMESPACE)
    try:
        report = verify(api)
        assert [c.id for c in report.failed] == ["network-policy"]
        assert "any pod in the cluster can reach the Ray pods" in report.failed[0].detail
    finally:
        control_plane.apply([o for o in training_job(SETTINGS) if o["kind"] == "NetworkPolicy"])


def test_auth_options_pruned_fail_the_token_check_and_kuberay_1_4_plans_none(deployed, api):
    # GIVEN a RayCluster without authOptions, as an operator whose types lack it makes it (this one, v1.5.0, does; in a
    # clone alone the served 1.5.0 schema has no authOptions, so the RayCluster has none already)
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        "ray.io", "v1", NAMESPACE, "rayclusters", deployed.ray_cluster, {"spec": {"authOptions": None}}
    )
    try:
        # THEN settings of the deployed KubeRay, which plan a token, fail the token check
        report = verify(api, Expectations.from_settings(SETTINGS.replace(kuberayVersion=DEPLOYED_KUBERAY)))
        assert [c.id for c in report.failed] == ["ray-token-auth"]
        assert "authOptions.mode unset, expected token" in report.failed[0].detail
        # while settings pinning KubeRay 1.4.0 plan no token, and the report says so
        report = verify(api, Expectations.from_settings(SETTINGS.replace(kuberayVersion="1.4.0")))
        assert report.ok, report.as_dict()
        assert check(report, "ray-token-auth").detail.startswith(
            "off, as planned: kuberayVersion 1.4.0 has no authOptions"
        )
    finally:
        if EXPECTED.token_auth:
            set_auth_options(api, NAMESPACE, deployed.ray_cluster)


def test_the_head_pod_is_found_by_its_cluster_not_by_name(deployed, api):
    # GIVEN another Ray cluster's head pod in the namespace, without a token
    core = client.CoreV1Api(api)
    # a manifest dict as the body: the client takes one (the kubernetes stubs name only the model)
    core.create_namespaced_pod(
        NAMESPACE,
        {  # pyright: ignore[reportArgumentType]
            "metadata": {"name": "other-head-abcde", "labels": {"ray.io/cluster": "other", "ray.io/node-type": "head"}},
            "spec": {
                "containers": [{"name": "ray-head", "image": "registry.k8s.io/pause:3.10"}],
                "nodeSelector": {"role": "system"},
            },
        },
    )
    try:
        # THEN the check reads the head of the live cluster and passes
        assert check(verify(api), "ray-token-auth").ok
    finally:
        core.delete_namespaced_pod("other-head-abcde", NAMESPACE, grace_period_seconds=0)


# -- the command --------------------------------------------------------------------------------------------------------


def test_command_passes_with_a_table(deployed, control_plane, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps to the terminal width
    code = run_cli("verify", "--kubeconfig", str(control_plane.kubeconfig), "--kube-context", "test", *CLI_SETTINGS)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "DaemonSet kube-system/aws-efa-k8s-device-plugin" in out and "All checks passed." in out


def test_command_exits_1_naming_the_failing_check(deployed, api, control_plane, capsys):
    apply_addon(
        control_plane, "aws-efa-k8s-device-plugin", node_selector={"node.kubernetes.io/instance-type": "no-such-type"}
    )
    try:
        daemon_set_settled(api, "aws-efa-k8s-device-plugin", desired=0)
        code = run_cli("verify", "--kubeconfig", str(control_plane.kubeconfig), "--json", *CLI_SETTINGS)
        captured = capsys.readouterr()
        assert code == 1
        assert json.loads(captured.out)["failed"] == ["aws-efa-k8s-device-plugin"]
        assert "failed: aws-efa-k8s-device-plugin" in captured.err
    finally:
        apply_addon(control_plane, "aws-efa-k8s-device-plugin")
        daemon_set_settled(api, "aws-efa-k8s-device-plugin", desired=2)


# -- changes for good (the last tests of the module) --------------------------------------------------------------------


def test_the_long_lived_ray_cluster_is_checked_when_applied_with_its_own_policy(deployed, api, control_plane):
    # GIVEN the long-lived RayCluster (k8s.names.RAY_CLUSTER_NAME) applied beside the job's, its workers with no room
    job = next(o for o in training_job(SETTINGS) if o["kind"] == "RayJob")
    control_plane.apply(
        [
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "metadata": {"name": "ray-efa", "namespace": NAMESPACE},
                "spec": job["spec"]["rayClusterSpec"],
            }
        ]
    )
    # THEN it is the one verified: not ready, and the NetworkPolicy named after it is missing
    report = verify(api)
    assert (check(report, "raycluster").ok, check(report, "raycluster").name) == (
        False,
        f"RayCluster {NAMESPACE}/ray-efa",
    )
    policy = check(report, "network-policy")
    assert (policy.ok, policy.name) == (False, f"NetworkPolicy {NAMESPACE}/ray-efa-ray-ingress")
    client.CustomObjectsApi(api).delete_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayclusters", "ray-efa")


def test_finished_job_without_a_cluster_fails_saying_so(deployed, api):
    # GIVEN the RayJob finished (its status as the operator writes it once Ray's job succeeded) and its cluster gone
    objects = client.CustomObjectsApi(api)
    objects.patch_namespaced_custom_object_status(
        "ray.io",
        "v1",
        NAMESPACE,
        "rayjobs",
        "train-efa",
        {"status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}},
    )
    objects.delete_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayclusters", deployed.ray_cluster)
    wait_for(
        lambda: not objects.list_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayclusters")["items"],
        "the RayCluster gone",
    )
    report = verify(api)
    # THEN the cluster check says why, and token auth (where planned) cannot be confirmed without a cluster
    assert [c.id for c in report.failed] == ["raycluster", "ray-token-auth"][: 1 + EXPECTED.token_auth]
    assert "jobDeploymentStatus Complete" in report.failed[0].detail
    if EXPECTED.token_auth:
        assert "no live RayCluster" in report.failed[1].detail


def test_a_deployment_scaled_to_zero_passes_with_no_gpu_node_plugin_pod_or_ray_cluster(deployed, api):
    # GIVEN gpuNodeCount 0: the GPU nodes gone (the plugins' DaemonSets then want no pod) and no job
    core = client.CoreV1Api(api)
    core.delete_namespace(NAMESPACE)
    for node in deployed.gpu_nodes:
        core.delete_node(node)
        # what the kubelet of a terminated instance no longer reports: its pods, deleted at once rather than by the
        # pod garbage collector's quarantine
        for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items:
            try:
                core.delete_namespaced_pod(name_of(pod), namespace_of(pod), grace_period_seconds=0)
            except ApiException as error:  # already deleted with its namespace (the namespace controller is quicker)
                if error.status != 404:
                    raise
    for name in ("nvidia-device-plugin", "aws-efa-k8s-device-plugin"):
        daemon_set_settled(api, name, desired=0)
    wait_for(lambda: _namespace_gone(api), f"namespace {NAMESPACE} gone", timeout_s=90)
    expected = Expectations.from_settings(Settings.from_context({**CONTEXT, "gpuNodeCount": 0}))
    # WHEN verified THEN every check passes, saying why nothing GPU-side is there
    report = verify(api, expected)
    assert report.ok, report.as_dict()
    details = {c.id: c.detail for c in report.checks}
    assert "0 Ready of 0 nodes" in details["gpu-nodes"] and "scaled to zero" in details["aws-efa-k8s-device-plugin"]
    assert "scaled to zero" in details["raycluster"]
    # ...while the same cluster with the GPU nodes expected fails exactly there
    failed = {c.id for c in verify(api).failed}
    assert {"gpu-nodes", "nvidia-device-plugin", "aws-efa-k8s-device-plugin", "raycluster"} <= failed


def _namespace_gone(api: ApiClient) -> bool:
    try:
        client.CoreV1Api(api).read_namespace(NAMESPACE)
        return False
    except ApiException as error:
        return error.status == 404
