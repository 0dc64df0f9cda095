"""`ops.verify`: a real kubernetes client against recorded API objects served on localhost (tests/ops/kube_server.py).

The recording (fixtures/verify/healthy.json) is a healthy 2 x g6.12xlarge deployment: one system node and two GPU
nodes, the kube-system DaemonSets (including the NVIDIA chart's MPS control daemon, desired 0 by design), the KubeRay
operator, and the training RayJob with the RayCluster it created. Each variant changes one thing, as a broken cluster
would, and must fail with the right check named and nothing else failing.
"""

from __future__ import annotations

import json
import socket

import pytest
import urllib3
from kubernetes import client

from ray_efa.core.settings import Settings
from ray_efa.ops.verify import Expectations, verify_cluster, verify_until
from tests.ops.cli_helpers import run_cli
from tests.ops.kube_server import FakeKubeApi, load_recording

NODES = "/api/v1/nodes"
DAEMONSETS = "/apis/apps/v1/namespaces/kube-system/daemonsets"
DEPLOYMENTS = "/apis/apps/v1/namespaces/kuberay-system/deployments"
RAYCLUSTERS = "/apis/ray.io/v1/namespaces/ray/rayclusters"
RAYJOBS = "/apis/ray.io/v1/namespaces/ray/rayjobs"

EXPECTED = Expectations.from_settings(Settings())  # 2 x g6.12xlarge: 4 GPUs and 1 EFA interface per node
ALL_CHECKS = ["gpu-nodes", "gpu-allocatable", "efa-allocatable", "nvidia-device-plugin", "aws-efa-k8s-device-plugin",
              "kuberay-operator", "raycluster", "ray-init-containers", "ray-token-auth", "network-policy-enforcement", "network-policy"]


def item(recording: dict, collection: str, name: str) -> dict:
    return next(i for i in recording[collection]["items"] if i["metadata"]["name"] == name)


def gpu_nodes(recording: dict) -> list[dict]:
    return [n for n in recording[NODES]["items"] if n["metadata"]["labels"].get("role") == "gpu-worker"]


def verify(recording: dict, expected: Expectations = EXPECTED):
    with FakeKubeApi(recording) as api:
        return verify_cluster(client.ApiClient(client.Configuration(host=api.url)), expected)


def test_healthy_recording_passes_every_check():
    # GIVEN the healthy recording WHEN verified
    report = verify(load_recording())
    # THEN every check ran and passed
    assert [c.id for c in report.checks] == ALL_CHECKS
    assert report.ok, report.as_dict()


def test_a_desired_0_daemon_set_of_another_release_is_not_mistaken_for_the_plugin():
    # GIVEN the NVIDIA chart's MPS control daemon, desired 0 by design, sits next to the plugin with the same labels
    recording = load_recording()
    assert item(recording, DAEMONSETS, "nvidia-device-plugin-mps-control-daemon")["status"]["desiredNumberScheduled"] == 0
    # WHEN verified THEN the plugin check reads the plugin's own DaemonSet (named after the release) and passes
    check = next(c for c in verify(recording).checks if c.id == "nvidia-device-plugin")
    assert check.ok and check.detail == "2 of 2 pods ready"


@pytest.mark.parametrize("release", ["nvidia-device-plugin", "aws-efa-k8s-device-plugin"])
def test_daemon_set_with_desired_0_fails_as_the_silent_failure(release):
    # GIVEN the plugin's DaemonSet exists but selects no node (ready == desired == 0, "healthy" to kubectl)
    recording = load_recording()
    status = item(recording, DAEMONSETS, release)["status"]
    status.update(currentNumberScheduled=0, desiredNumberScheduled=0, numberReady=0, numberAvailable=0, updatedNumberScheduled=0)
    # WHEN verified
    report = verify(recording)
    # THEN exactly that check fails, and it says why this is not fine
    assert [c.id for c in report.failed] == [release]
    assert "desired 0" in report.failed[0].detail and "silent failure" in report.failed[0].detail


def test_daemon_set_with_pods_not_ready_fails():
    recording = load_recording()
    item(recording, DAEMONSETS, "aws-efa-k8s-device-plugin")["status"]["numberReady"] = 1
    report = verify(recording)
    assert [c.id for c in report.failed] == ["aws-efa-k8s-device-plugin"]
    assert report.failed[0].detail.startswith("1 of 2 pods ready")


def test_missing_daemon_set_fails_naming_the_helm_release():
    recording = load_recording()
    recording[DAEMONSETS]["items"] = [i for i in recording[DAEMONSETS]["items"] if i["metadata"]["name"] != "nvidia-device-plugin"]
    report = verify(recording)
    assert [c.id for c in report.failed] == ["nvidia-device-plugin"]
    assert "Helm release nvidia-device-plugin" in report.failed[0].detail


def test_node_without_efa_allocatable_fails_the_efa_check():
    # GIVEN one GPU node never got vpc.amazonaws.com/efa (the EFA plugin did not run there)
    recording = load_recording()
    node = gpu_nodes(recording)[1]
    del node["status"]["allocatable"]["vpc.amazonaws.com/efa"]
    # WHEN verified THEN the EFA check fails and names that node
    report = verify(recording)
    assert [c.id for c in report.failed] == ["efa-allocatable"]
    assert f"{node['metadata']['name']}: missing" in report.failed[0].detail


def test_node_with_fewer_gpus_than_the_catalog_fails_the_gpu_check():
    recording = load_recording()
    gpu_nodes(recording)[0]["status"]["allocatable"]["nvidia.com/gpu"] = "3"
    report = verify(recording)
    assert [c.id for c in report.failed] == ["gpu-allocatable"]
    assert "expected 4 per node" in report.failed[0].detail


def test_not_ready_gpu_node_fails_the_node_check():
    recording = load_recording()
    node = gpu_nodes(recording)[0]
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    ready.update(status="False", reason="KubeletNotReady", message="container runtime network not ready")
    report = verify(recording)
    assert [c.id for c in report.failed] == ["gpu-nodes"]
    assert f"not Ready: {node['metadata']['name']}" in report.failed[0].detail


def test_fewer_gpu_nodes_than_the_settings_fails_the_node_check():
    # GIVEN settings that ask for 3 GPU nodes, and a cluster with 2
    expected = Expectations.from_settings(Settings.from_context({"gpuNodeCount": 3}))
    report = verify(load_recording(), expected)
    assert [c.id for c in report.failed] == ["gpu-nodes"]
    assert "2 Ready of 2 nodes labelled role=gpu-worker, expected 3" in report.failed[0].detail


def test_unavailable_operator_fails_the_operator_check():
    recording = load_recording()
    deployment = item(recording, DEPLOYMENTS, "kuberay-operator")
    deployment["status"].update(availableReplicas=0, readyReplicas=0, unavailableReplicas=1)
    deployment["status"]["conditions"][0].update(status="False", reason="MinimumReplicasUnavailable",
                                                 message="Deployment does not have minimum availability.")
    report = verify(recording)
    assert [c.id for c in report.failed] == ["kuberay-operator"]
    assert "MinimumReplicasUnavailable" in report.failed[0].detail


def test_ray_cluster_not_ready_fails_the_raycluster_check():
    # GIVEN the RayJob's cluster with its head not ready yet
    recording = load_recording()
    cluster = recording[RAYCLUSTERS]["items"][0]
    cluster["status"].update(state="", readyWorkerReplicas=0)
    cluster["status"]["conditions"][0].update(status="False", reason="ContainersNotReady")
    cluster["status"]["conditions"][1].update(status="False", reason="RayClusterPodsProvisioning")
    report = verify(recording)
    assert [c.id for c in report.failed] == ["raycluster"]
    assert "HeadPodReady=False" in report.failed[0].detail and "0 of 2 workers ready" in report.failed[0].detail


def test_the_long_lived_ray_cluster_is_checked_when_applied():
    # GIVEN the long-lived RayCluster (k8s.names.RAY_CLUSTER_NAME) exists and is not ready, while the job's one is
    recording = load_recording()
    long_lived = json.loads(json.dumps(recording[RAYCLUSTERS]["items"][0]))
    long_lived["metadata"].update(name="ray-efa", labels={}, ownerReferences=[])
    long_lived["status"]["state"] = "suspended"
    long_lived["status"]["conditions"] = []
    recording[RAYCLUSTERS]["items"].append(long_lived)
    # THEN it is the one verified
    check = next(c for c in verify(recording).checks if c.id == "raycluster")
    assert (check.ok, check.name) == (False, "RayCluster ray/ray-efa")


def test_finished_job_without_a_cluster_fails_saying_so():
    recording = load_recording()
    recording[RAYCLUSTERS]["items"] = []
    recording[RAYJOBS]["items"][0]["status"].update(jobDeploymentStatus="Complete", jobStatus="SUCCEEDED")
    report = verify(recording)
    # THEN the cluster check says why, and token auth cannot be confirmed without a cluster
    assert [c.id for c in report.failed] == ["raycluster", "ray-token-auth"]
    assert "jobDeploymentStatus Complete" in report.failed[0].detail
    assert "no live RayCluster" in report.failed[1].detail


def test_an_unreachable_api_raises_on_the_first_read():
    # GIVEN a port nothing listens on
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    configuration = client.Configuration(host=f"http://127.0.0.1:{port}")
    configuration.retries = 0
    # THEN the connection's error is raised (the CLI makes it one line), not a report of every check failing for it
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        verify_cluster(client.ApiClient(configuration), EXPECTED)


def test_verify_until_polls_until_the_cluster_is_healthy():
    # GIVEN a cluster whose EFA plugin becomes ready only after the first poll
    recording = load_recording()
    status = item(recording, DAEMONSETS, "aws-efa-k8s-device-plugin")["status"]
    status["numberReady"] = 0
    polls = []

    def sleep(_seconds):
        polls.append(_seconds)
        status["numberReady"] = 2

    with FakeKubeApi(recording) as api:
        report = verify_until(client.ApiClient(client.Configuration(host=api.url)), EXPECTED, timeout_s=60,
                              interval_s=10, sleep=sleep)
    # THEN it waited once and then passed
    assert polls == [10] and report.ok


# -- the command ----------------------------------------------------------------------------------------------------


def kubeconfig(tmp_path, url: str):
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({  # JSON is YAML
        "apiVersion": "v1", "kind": "Config", "current-context": "recorded",
        "clusters": [{"name": "recorded", "cluster": {"server": url}}],
        "users": [{"name": "reader", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "recorded", "context": {"cluster": "recorded", "user": "reader"}}],
    }))
    return path


SETTINGS = ("-c", "gpuInstanceType=g6.12xlarge", "-c", "gpuNodeCount=2", "-c", "namespace=ray", "-c", "network=efa")


def test_command_passes_on_the_healthy_recording_with_a_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps to the terminal width
    with FakeKubeApi(load_recording()) as api:
        code = run_cli("verify", "--kubeconfig", str(kubeconfig(tmp_path, api.url)), "--kube-context", "recorded", *SETTINGS)
    out = capsys.readouterr().out
    assert code == 0
    assert "DaemonSet kube-system/aws-efa-k8s-device-plugin" in out and "All checks passed." in out


def test_command_exits_1_naming_the_failing_check(tmp_path, capsys):
    recording = load_recording()
    item(recording, DAEMONSETS, "aws-efa-k8s-device-plugin")["status"]["desiredNumberScheduled"] = 0
    with FakeKubeApi(recording) as api:
        code = run_cli("verify", "--kubeconfig", str(kubeconfig(tmp_path, api.url)), "--json", *SETTINGS)
    captured = capsys.readouterr()
    assert code == 1
    assert json.loads(captured.out)["failed"] == ["aws-efa-k8s-device-plugin"]
    assert "failed: aws-efa-k8s-device-plugin" in captured.err


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


def test_a_deployment_scaled_to_zero_passes_with_no_gpu_node_plugin_pod_or_ray_cluster():
    # GIVEN gpuNodeCount 0: the GPU node group has no node, so the plugins' DaemonSets want no pod, and no job runs
    recording = load_recording()
    recording[NODES]["items"] = [n for n in recording[NODES]["items"] if n not in gpu_nodes(recording)]
    for name in ("nvidia-device-plugin", "aws-efa-k8s-device-plugin"):
        item(recording, DAEMONSETS, name)["status"].update(desiredNumberScheduled=0, numberReady=0,
                                                           currentNumberScheduled=0, numberAvailable=0)
    for collection in (RAYCLUSTERS, RAYJOBS, "/apis/networking.k8s.io/v1/namespaces/ray/networkpolicies"):
        recording[collection]["items"] = []
    expected = Expectations.from_settings(Settings.from_context({"gpuNodeCount": 0}))
    # WHEN verified THEN every check passes, saying why nothing GPU-side is there
    report = verify(recording, expected)
    assert report.ok, report.as_dict()
    details = {c.id: c.detail for c in report.checks}
    assert "0 Ready of 0 nodes" in details["gpu-nodes"] and "scaled to zero" in details["aws-efa-k8s-device-plugin"]
    assert "scaled to zero" in details["raycluster"]
    # ...while the same cluster with the GPU nodes expected fails exactly there
    failed = {c.id for c in verify(recording).failed}
    assert {"gpu-nodes", "nvidia-device-plugin", "aws-efa-k8s-device-plugin", "raycluster"} <= failed


def dra_recording(efa_per_node: int = 1) -> dict:
    """The healthy cluster with the DRA drivers instead of the device plugins: their node DaemonSets, ResourceSlices
    that publish each GPU node's 4 GPUs and its EFA interfaces, and no extended resources on the nodes."""
    recording = load_recording()
    plugins = recording[DAEMONSETS]["items"]
    nvidia = json.loads(json.dumps(item(recording, DAEMONSETS, "nvidia-device-plugin")))
    nvidia["metadata"].update(name="dra-driver-nvidia-gpu-kubelet-plugin", namespace="nvidia")
    efa = json.loads(json.dumps(item(recording, DAEMONSETS, "aws-efa-k8s-device-plugin")))
    efa["metadata"]["name"] = "aws-dranet"
    recording[DAEMONSETS]["items"] = [d for d in plugins if "device-plugin" not in d["metadata"]["name"]] + [efa]
    recording["/apis/apps/v1/namespaces/nvidia/daemonsets"] = {"kind": "DaemonSetList", "apiVersion": "apps/v1",
                                                              "metadata": {}, "items": [nvidia]}
    slices = []
    for node in gpu_nodes(recording):
        for resource in ("nvidia.com/gpu", "vpc.amazonaws.com/efa"):
            node["status"]["allocatable"].pop(resource, None)
        name = node["metadata"]["name"]
        for driver, count in (("gpu.nvidia.com", 4), ("dra.net", efa_per_node)):
            slices.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                           "metadata": {"name": f"{name}-{driver}"},
                           "spec": {"driver": driver, "nodeName": name, "pool": {"name": name, "generation": 1,
                                                                               "resourceSliceCount": 1},
                                    "devices": [{"name": f"dev-{i}"} for i in range(count)]}})
    recording["/apis/resource.k8s.io/v1/resourceslices"] = {"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1",
                                                           "metadata": {}, "items": slices}
    return recording


DRA = Expectations.from_settings(Settings.from_context({"deviceAllocation": "dra"}))


def test_a_dra_cluster_is_verified_by_its_resource_slices_and_its_drivers_daemon_sets():
    report = verify(dra_recording(), DRA)
    assert report.ok, report.as_dict()
    details = {c.id: c.detail for c in report.checks}
    assert details["gpu-allocatable"] == "4 on each of 2 GPU nodes"
    assert {"dra-driver-nvidia-gpu", "aws-dranet"} <= set(details)
    # ...and the device-plugin checks of the same cluster fail: nothing advertises extended resources there
    assert {"gpu-allocatable", "nvidia-device-plugin"} <= {c.id for c in verify(dra_recording()).failed}


def test_a_dra_node_that_publishes_too_few_efa_devices_fails_naming_the_driver():
    report = verify(dra_recording(efa_per_node=0), DRA)
    assert [c.id for c in report.failed] == ["efa-allocatable"]
    assert "ResourceSlices of driver dra.net" in report.failed[0].detail
