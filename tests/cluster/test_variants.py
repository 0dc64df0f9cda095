"""The variants the project produces beside the default job, on the real control plane: DRA claims allocated by the
real scheduler from the devices the drivers publish, an own train function, a GPU stack without its job, and the
held-out platform app's job on the platform's own labelled nodes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.api_client import ApiClient

from ray_efa.core import addons, catalog
from tests.cluster.conftest import DEPLOYED_KUBERAY, Nodes, served_kuberay, wait_for
from tests.cluster.controlplane import ControlPlane
from tests.cluster.deployment import ray_job_cluster
from tests.cluster.objects import name_of, node_of, requests_of, spec_of, status_of
from tests.cluster.test_crd_versions import NEWER_THAN_THE_OPERATOR
from tests.cluster.test_workload import Stack, deploy, ray_pods
from tests.cluster.test_workload import stack as stack  # noqa: F401 (the module fixture, shared)
from tests.cluster.workload import NodeGroup, add_node_group, apply_in_order, stack_manifests, wait_for_node_pods

pytestmark = pytest.mark.synth

# The DRA drivers' DeviceClasses as their charts install them: each selects its driver's devices by CEL. The NVIDIA
# driver publishes GPUs as driver gpu.nvidia.com with attribute type=gpu; DRANET (aws-dranet) its EFA interfaces as
# driver dra.net (core/addons.py). Both publish the standard resource.kubernetes.io/pcieRoot attribute.
GPU_DRIVER, EFA_DRIVER = "gpu.nvidia.com", "dra.net"
DEVICE_CLASSES = [
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": addons.GPU_DEVICE_CLASS},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f"device.driver == '{GPU_DRIVER}' && device.attributes['{GPU_DRIVER}'].type == 'gpu'"
                    }
                }
            ]
        },
    },
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": addons.EFA_DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{EFA_DRIVER}'"}}]},
    },
]


def resource_slices(node: str, instance: catalog.GpuInstanceType) -> list[dict[str, Any]]:
    """What the two DRA drivers publish for one node: a GPU a PCIe root, the EFA interfaces spread evenly over the
    roots (p5: 4 a GPU), as on the hardware."""
    per_root = max(1, instance.efa_interfaces // instance.gpus)

    def root(index: int) -> dict[str, str]:
        return {"string": f"pci0000:{index:02x}"}

    gpus = [
        {"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "resource.kubernetes.io/pcieRoot": root(i)}}
        for i in range(instance.gpus)
    ]
    efas = [
        {
            "name": f"efa-{j}",
            "attributes": {"resource.kubernetes.io/pcieRoot": root(min(j // per_root, instance.gpus - 1))},
        }
        for j in range(instance.efa_interfaces)
    ]
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{kind}"},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }
        for kind, driver, devices in (("gpu", GPU_DRIVER, gpus), ("efa", EFA_DRIVER, efas))
    ]


def _claim_name(status: client.V1PodResourceClaimStatus) -> str:
    """The ResourceClaim made for the pod's claim (the pods asked for have theirs)."""
    assert status.resource_claim_name is not None, f"no ResourceClaim made for the pod's claim {status.name}"
    return status.resource_claim_name


def _allocated(claim: client.ResourceV1ResourceClaim) -> list[client.V1DeviceRequestAllocationResult]:
    """The devices the scheduler allocated to `claim` (an allocated one)."""
    allocation = status_of(claim).allocation
    assert allocation is not None and allocation.devices is not None, f"ResourceClaim {name_of(claim)} is not allocated"
    return allocation.devices.results or []


@pytest.mark.parametrize("row", ["p5.48xlarge", "p5en.48xlarge", "g6.12xlarge"])
def test_dra_claims_are_allocated_by_the_scheduler_from_the_devices_the_drivers_publish(
    row: str, control_plane: ControlPlane, api: ApiClient, nodes: Nodes, stack: Stack, namespace: str, tmp_path: Path
):
    # GIVEN GPU nodes that advertise no extended resources, only the DRA drivers' ResourceSlices
    instance = catalog.GPU_INSTANCES[row]
    system = add_node_group(nodes, stack.system)
    gpu = add_node_group(nodes, stack.gpu, instance=row, device_plugins=False)
    control_plane.apply([*DEVICE_CLASSES, *(s for node in gpu for s in resource_slices(node, instance))])
    # WHEN the deviceAllocation=dra job is deployed
    deploy(
        control_plane, stack, namespace, tmp_path, f"gpuInstanceType={row}", "deviceAllocation=dra", on=(system, gpu)
    )
    cluster = ray_job_cluster(api, namespace, "train-efa")
    workers = ray_pods(api, namespace, cluster, "worker", len(gpu))
    # THEN each worker is on its own node, with every GPU and EFA device of that node allocated to its claims
    assert sorted(node_of(w) for w in workers) == sorted(gpu)
    resources = client.ResourceV1Api(api)
    for worker in workers:
        claims = [
            resources.read_namespaced_resource_claim(_claim_name(status), namespace)
            for status in status_of(worker).resource_claim_statuses or []
        ]
        assert claims, f"{name_of(worker)} has no allocated claims"
        results = [r for claim in claims for r in _allocated(claim)]
        assert all(r.pool == node_of(worker) for r in results)
        assert sorted(r.device for r in results if r.driver == GPU_DRIVER) == sorted(
            f"gpu-{i}" for i in range(instance.gpus)
        )
        assert len([r for r in results if r.driver == EFA_DRIVER]) == instance.efa_interfaces
    # and the ResourceClaims leave the extended resources alone (nothing asks for nvidia.com/gpu)
    assert all("nvidia.com/gpu" not in requests_of(spec_of(w).containers[0]) for w in workers)
    client.CoreV1Api(api).delete_collection_namespaced_pod(namespace)
    for node in gpu:
        for kind in ("gpu", "efa"):
            resources.delete_resource_slice(f"{node}-{kind}")


def test_an_own_train_function_ships_and_is_placed(
    control_plane: ControlPlane, api: ApiClient, nodes: Nodes, stack: Stack, namespace: str, tmp_path: Path
):
    system = add_node_group(nodes, stack.system)
    gpu = add_node_group(nodes, stack.gpu)
    stored = deploy(
        control_plane,
        stack,
        namespace,
        tmp_path,
        "trainFunction=own_training.train:train_func",
        "codeDir=examples/own-training/src",
        on=(system, gpu),
    )
    # the user's code ships beside the job, in objects the server took
    assert any(o["kind"] == "ConfigMap" and "own_training" in json.dumps(o.get("data", {})) for o in stored)
    cluster = ray_job_cluster(api, namespace, "train-efa")
    ray_pods(api, namespace, cluster, "head", 1)
    ray_pods(api, namespace, cluster, "worker", len(gpu))


def test_a_gpu_stack_without_its_job_applies_no_rayjob_and_the_rest_is_accepted(control_plane: ControlPlane):
    from tests.infra.conftest import synthesize

    synth = synthesize(trainingJob=False)
    objects = stack_manifests(synth.gpu.to_json())
    assert not [o for o in objects if o["kind"] in ("RayJob", "RayCluster")]
    everything = [*stack_manifests(synth.cluster.to_json()), *objects]
    namespaces = [o for o in everything if o["kind"] == "Namespace"]
    control_plane.apply(namespaces)  # a dry run creates nothing, and the rest lives in the namespace
    try:
        control_plane.apply([o for o in everything if o["kind"] != "Namespace"], dry_run=True)
    finally:
        for namespace in namespaces:
            client.CoreV1Api(control_plane.api_client()).delete_namespace(namespace["metadata"]["name"])


@pytest.fixture(scope="module")
def platform() -> dict[str, dict]:
    """`npx cdk synth` of examples/platform (the held-out platform app), offline, as its own tests run it."""
    from tests.examples.test_platform import EXAMPLE
    from tests.infra.test_app import offline_env

    out = Path(__file__).parent / ".platform-cdk-out"
    result = subprocess.run(
        ["npx", "cdk", "synth", "--quiet", "--output", str(out)],
        cwd=EXAMPLE,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    try:
        return json.loads((out / "PlatformWithRay.template.json").read_text())
    finally:
        subprocess.run(["rm", "-rf", str(out)], check=False)


def _as_served(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects as the served CRDs take them. The platform app pins its settings in code (no -c context), so it
    cannot be synthesized for kuberayVersion 1.4.0 as the other tests here are: in a clone alone (the operator's own
    v1.5.0 CRDs) its RayJob loses the fields that schema lacks, which test_crd_versions names and proves are all."""
    if served_kuberay() == DEPLOYED_KUBERAY:
        return objects
    for job in (o for o in objects if o["kind"] == "RayJob"):
        for field in NEWER_THAN_THE_OPERATOR:
            *path, last = field.split(".")
            node = job
            for key in path:
                node = node.get(key, {})
            node.pop(last, None)
    return objects


def test_the_platform_apps_job_runs_on_the_platforms_own_labelled_nodes(
    control_plane: ControlPlane, api: ApiClient, nodes: Nodes, platform: dict[str, Any]
):
    groups = NodeGroup.from_template(platform)
    system_group = next(g for g in groups if "nvidia.com/gpu.present" not in g.labels)
    gpu_group = next(g for g in groups if "nvidia.com/gpu.present" in g.labels)
    system = add_node_group(nodes, system_group)
    gpu = add_node_group(nodes, gpu_group)
    wait_for_node_pods(api, system, gpu)
    objects = _as_served(stack_manifests(platform))
    (job,) = [o for o in objects if o["kind"] == "RayJob"]
    namespace = job["metadata"]["namespace"]
    apply_in_order(control_plane, objects)
    try:
        cluster = ray_job_cluster(api, namespace, job["metadata"]["name"])
        (head,) = ray_pods(api, namespace, cluster, "head", 1)
        workers = ray_pods(api, namespace, cluster, "worker", len(gpu))
        assert node_of(head) in system
        assert sorted(node_of(w) for w in workers) == sorted(gpu)
    finally:
        client.CoreV1Api(api).delete_namespace(namespace)
        wait_for(
            lambda: namespace not in {name_of(n) for n in client.CoreV1Api(api).list_namespace().items},
            f"namespace {namespace} gone",
            timeout_s=60,
        )
