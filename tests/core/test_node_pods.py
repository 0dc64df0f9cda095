"""The pods beside the Ray pods (core.node_pods) and the fits derived from them (core.catalog): a head that cannot fit
its system node, or a worker its GPU node, is refused before anything is synthesized."""

from __future__ import annotations

import re

import pytest

from ray_efa.core import addons, catalog, node_pods
from ray_efa.core.problems import SettingsError
from ray_efa.core.settings import Settings
from tests.shared_reference import chart_values


def _requests(pods: tuple[node_pods.NodePod, ...]) -> dict[str, tuple[int, int]]:
    return {pod.name: (pod.cpu_m, pod.memory_mib) for pod in pods}


def test_every_node_runs_the_vpc_cni_with_both_of_its_containers_kube_proxy_and_the_pod_identity_agent():
    system = _requests(node_pods.node_daemonsets("system"))
    assert system == {"aws-node": (50, 0), "kube-proxy": (100, 0), "eks-pod-identity-agent": (0, 0)}
    aws_node = next(pod for pod in node_pods.node_daemonsets("system") if pod.name == "aws-node")
    assert [(c.name, c.cpu_m) for c in aws_node.containers] == [("aws-node", 25), ("aws-eks-nodeagent", 25)]
    assert all(pod.kind == "DaemonSet" and pod.source for pod in node_pods.node_daemonsets("gpu"))


def test_gpu_nodes_add_the_device_plugins_or_the_dra_drivers_never_both():
    plugins = _requests(node_pods.node_daemonsets("gpu"))
    dra = _requests(node_pods.node_daemonsets("gpu", device_allocation="dra"))
    assert {addons.NVIDIA_DEVICE_PLUGIN.release, addons.EFA_DEVICE_PLUGIN.release} <= set(plugins)
    assert addons.EFA_DRA_DRIVER.release in dra and not {
        addons.NVIDIA_DEVICE_PLUGIN.release,
        addons.EFA_DEVICE_PLUGIN.release,
    } & set(dra)
    assert plugins["aws-efa-k8s-device-plugin"] == (10, 20) and dra["aws-dranet"] == (100, 50)
    # the system nodes run neither: the plugins and drivers select the GPU nodes
    assert not set(_requests(node_pods.node_daemonsets("system"))) & (set(plugins) | set(dra)) - {
        "aws-node",
        "kube-proxy",
        "eks-pod-identity-agent",
    }


def test_the_system_node_also_holds_coredns_twice_the_operator_and_the_submitter():
    pods = _requests(node_pods.system_node_pods())
    assert pods["coredns"] == (200, 140) and pods["kuberay-operator"] == (100, 512)
    assert pods["ray-job-submitter"] == (500, 1024)
    assert node_pods.pod_requests(node_pods.system_node_pods()) == (950, 1676)
    assert catalog.SYSTEM_NODE_NEIGHBOURS and sum(v[0] for v in catalog.SYSTEM_NODE_NEIGHBOURS.values()) == 950


def test_the_submitters_requests_are_the_pods():
    from ray_efa.k8s import cluster_spec  # noqa: PLC0415 - k8s builds on core, not the other way

    assert (cluster_spec._SUBMITTER_CPU, cluster_spec._SUBMITTER_MEMORY) == ("500m", "1Gi")


def test_the_chart_requests_are_the_pinned_charts_values():
    efa = chart_values("aws-efa-k8s-device-plugin-v0.5.30")
    assert efa["resources"]["requests"] == {"cpu": "10m", "memory": "20Mi"}
    nvidia = chart_values("nvidia-device-plugin-0.20.0")
    assert nvidia["resources"] == {}
    for version in ("1.4.0", "1.7.0"):
        operator = chart_values(f"kuberay-operator-{version}")
        # limits only: Kubernetes defaults the requests to them
        assert operator["resources"] == {"limits": {"cpu": "100m", "memory": "512Mi"}}, version


def test_m7i_large_is_refused_for_the_head_naming_the_setting_the_room_and_what_fits():
    # 2 vCPU: 1930m allocatable (kube-reserved 70m), less 950m beside the head = 980m < the head's 1000m
    assert catalog.node_allocatable(catalog.system_instance("m7i.large"))[0] == 1930
    assert catalog.system_node_room(catalog.system_instance("m7i.large")) == (980, 4541)
    with pytest.raises(SettingsError) as error:
        Settings.from_context({"systemInstanceType": "m7i.large"})
    text = str(error.value)
    assert re.search(
        r"systemInstanceType: is too small for the Ray head: m7i\.large .* leaves 980m CPU .* less than "
        r"the head's 1000m CPU and 2048 MiB.*\(m7i\.xlarge, m7i\.2xlarge",
        text,
    ), text
    assert text.endswith("got 'm7i.large'")
    # every other offered type fits
    for name in set(catalog.SYSTEM_INSTANCES) - {"m7i.large"}:
        assert catalog.head_fit_problem(catalog.system_instance(name)) is None, name
        Settings.from_context({"systemInstanceType": name})


def test_every_built_in_gpu_row_fits_its_worker_beside_either_set_of_daemonsets():
    for name, row in catalog.GPU_INSTANCES.items():
        for allocation in ("device-plugin", "dra"):
            assert catalog.worker_fit_problem(row, allocation) is None, (name, allocation)
            pod = catalog.worker_pod_resources(row)
            room_cpu, room_mib = catalog.gpu_node_room(row, allocation)
            assert pod.cpu * 1000 <= room_cpu and pod.memory_gib * 1024 <= room_mib


def test_a_described_gpu_type_without_room_for_its_worker_beside_the_daemonsets_is_refused():
    description = dict(catalog.description_of(catalog.gpu_instance("g6e.8xlarge")), name="x9.8xlarge")
    assert catalog.worker_fit_problem(catalog.describe_gpu_instance(description)) is None
    # 32 vCPU and 100 GiB: the worker keeps 92 GiB (8 GiB reserve), but the kernel's 5%, kube-reserved for 250 pods,
    # the eviction threshold and the EFA plugin's 20Mi leave 94155 MiB < 94208
    with pytest.raises(
        catalog.CatalogError,
        match=r"vcpus 32 and memoryGib 100 leave no room for the worker pod: the "
        r"Ray worker asks 29 CPU and 92 GiB, but a x9.8xlarge node leaves "
        r"\d+m CPU and 94155 MiB",
    ):
        catalog.describe_gpu_instance({**description, "memoryGib": 100})
