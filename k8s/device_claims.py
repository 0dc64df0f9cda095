"""The GPU worker's devices as a DRA ResourceClaimTemplate (deviceAllocation dra), GPUs paired with their EFA cards.

With Dynamic Resource Allocation the worker pod asks for devices by DeviceClass instead of extended resources: the NVIDIA
DRA driver's `gpu.nvidia.com` and the EFA DRA driver's (DRANET) `efa.networking.k8s.aws` (core.addons). Where the EFA
interfaces divide evenly among the GPUs (p4d/p4de: none do; p5/p5e: 4 per GPU; p5en: 2; p6-b200: 1), each GPU is its
own request with the EFA interfaces of its own request, tied by a `matchAttribute: resource.kubernetes.io/pcieRoot`
constraint: every GPU gets the EFA interfaces on its PCIe root, which is the topology-aware pairing of the EKS User
Guide ("Topology-aware EFA and GPU/Neuron device allocation", device-management-efa). Elsewhere (fewer EFA interfaces
than GPUs: g5, g6, g6e, p4d) two plain requests take all GPUs and all EFA interfaces of the node.

resource.k8s.io/v1 objects, checked against the Kubernetes 1.36 schemas; the pod template's `resourceClaims` and the
container's `resources.claims` are in both KubeRay CRDs (1.4.0 and 1.7.0) and are checked there.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import (
    CoreV1ResourceClaim,
    V1DeviceClaim,
    V1DeviceConstraint,
    V1DeviceRequest,
    V1ExactDeviceRequest,
    V1ObjectMeta,
    V1PodResourceClaim,
    V1ResourceClaimSpec,
    V1ResourceClaimTemplateSpec,
)

from ray_efa.core import catalog
from ray_efa.core.addons import EFA_DEVICE_CLASS, GPU_DEVICE_CLASS
from ray_efa.k8s._private import api_object, labels
from ray_efa.k8s.ray_types import to_json

__all__ = [
    "CLAIM_NAME",
    "MAX_DEVICES_PER_CLAIM",
    "PCIE_ROOT",
    "RESOURCE_API_VERSION",
    "claim_names",
    "claim_template_name",
    "worker_device_claims",
    "worker_claim_templates",
    "claim_device_count",
    "pod_resource_claims",
    "container_claims",
]

RESOURCE_API_VERSION = "resource.k8s.io/v1"
CLAIM_NAME = "gpus-efa"
"""The claim's name inside the pod (container resources.claims and pod resourceClaims)."""
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
"""The standard device attribute both DRA drivers publish: devices with the same value share a PCIe root."""


MAX_DEVICES_PER_CLAIM = 32
"""The most devices one ResourceClaim's allocation may hold: AllocationResultsMaxSize = 32 in k8s.io/api resource/v1
(types.go, DeviceAllocationResult.Results, Kubernetes 1.34-1.36); the scheduler refuses a larger claim ("number of
requested devices N exceeds the claim limit of 32") and the pod stays Pending. A pod's devices are split into claims
of at most this many, each GPU with its EFA interfaces inside one claim (their pcieRoot constraint is per claim)."""


def claim_names(instance: catalog.InstanceType) -> list[str]:
    """The worker pod's claim names: CLAIM_NAME where one claim holds the node's devices, else CLAIM_NAME-<i>."""
    count = len(_gpu_groups(instance))
    return [CLAIM_NAME] if count == 1 else [f"{CLAIM_NAME}-{index}" for index in range(count)]


def claim_template_name(owner: str, claim: str = CLAIM_NAME) -> str:
    """The ResourceClaimTemplate of the workers of `owner` (the RayJob or RayCluster) for pod claim `claim`."""
    return f"{owner}-{claim}"


def _exact(name: str, device_class: str, count: int) -> V1DeviceRequest:
    return V1DeviceRequest(
        name=name,
        exactly=V1ExactDeviceRequest(device_class_name=device_class, allocation_mode="ExactCount", count=count),
    )


def _efa_per_gpu(instance: catalog.InstanceType) -> int | None:
    gpus, efa = instance.gpus, instance.efa_interfaces
    return efa // gpus if efa >= gpus and efa % gpus == 0 else None


def _gpu_groups(instance: catalog.InstanceType) -> list[list[int]]:
    """The GPU indices of each claim: as few claims as fit MAX_DEVICES_PER_CLAIM, GPUs spread evenly among them."""
    per_gpu = _efa_per_gpu(instance)
    gpus = list(range(instance.gpus))
    if per_gpu is None:
        devices = instance.gpus + instance.efa_interfaces
        if devices > MAX_DEVICES_PER_CLAIM:
            raise ValueError(
                f"{instance.name}: {devices} devices (all GPUs and EFA interfaces, unpaired) exceed the "
                f"{MAX_DEVICES_PER_CLAIM} of one ResourceClaim (resource/v1 AllocationResultsMaxSize)"
            )
        return [gpus]
    per_claim = MAX_DEVICES_PER_CLAIM // (1 + per_gpu)
    if per_claim == 0:
        raise ValueError(
            f"{instance.name}: one GPU with its {per_gpu} EFA interfaces exceeds the "
            f"{MAX_DEVICES_PER_CLAIM} devices of one ResourceClaim (resource/v1 AllocationResultsMaxSize)"
        )
    claims = -(-len(gpus) // per_claim)
    size = -(-len(gpus) // claims)
    return [gpus[start : start + size] for start in range(0, len(gpus), size)]


def worker_device_claims(instance: catalog.InstanceType) -> list[V1DeviceClaim]:
    """All GPUs and EFA interfaces of one node in claims of at most MAX_DEVICES_PER_CLAIM devices, each GPU with the
    EFA interfaces on its PCIe root where they divide."""
    per_gpu = _efa_per_gpu(instance)
    if per_gpu is None:
        _gpu_groups(instance)  # checks the size
        return [
            V1DeviceClaim(
                requests=[
                    _exact("gpus", GPU_DEVICE_CLASS, instance.gpus),
                    _exact("efa", EFA_DEVICE_CLASS, instance.efa_interfaces),
                ]
            )
        ]
    claims = []
    for group in _gpu_groups(instance):
        requests, constraints = [], []
        for index in group:
            requests += [_exact(f"gpu-{index}", GPU_DEVICE_CLASS, 1), _exact(f"efa-{index}", EFA_DEVICE_CLASS, per_gpu)]
            constraints.append(V1DeviceConstraint(requests=[f"gpu-{index}", f"efa-{index}"], match_attribute=PCIE_ROOT))
        claims.append(V1DeviceClaim(requests=requests, constraints=constraints))
    return claims


def claim_device_count(claim: V1DeviceClaim) -> int:
    """How many devices `claim` allocates (the sum of its exact counts); ValueError for a request whose count is not
    fixed (a firstAvailable list, allocationMode All)."""
    return sum(_exact_count(request) for request in claim.requests or [])


def _exact_count(request: V1DeviceRequest) -> int:
    exactly = request.exactly
    if exactly is None or exactly.allocation_mode == "All":
        raise ValueError(f"device request {request.name!r} has no fixed count (only an ExactCount request has one)")
    return 1 if exactly.count is None else exactly.count  # the API's default count is 1


def pod_resource_claims(owner: str, instance: catalog.InstanceType) -> list[V1PodResourceClaim]:
    """The worker pod's resourceClaims: one per claim of the node's devices, each made from the owner's template."""
    return [
        V1PodResourceClaim(name=name, resource_claim_template_name=claim_template_name(owner, name))
        for name in claim_names(instance)
    ]


def container_claims(instance: catalog.InstanceType) -> list[CoreV1ResourceClaim]:
    """The worker container's resources.claims: all of the pod's claims."""
    return [CoreV1ResourceClaim(name=name) for name in claim_names(instance)]


def worker_claim_templates(owner: str, namespace: str, instance: catalog.InstanceType) -> list[dict[str, Any]]:
    """The ResourceClaimTemplates the GPU workers of `owner` claim their devices from, one per name of claim_names
    (apply them before the workers)."""
    objects = []
    for claim, devices in zip(claim_names(instance), worker_device_claims(instance), strict=True):
        spec = V1ResourceClaimTemplateSpec(
            metadata=V1ObjectMeta(labels=labels(owner, "gpu-worker-devices")),
            spec=V1ResourceClaimSpec(devices=devices),
        )
        objects.append(
            api_object(
                api_version=RESOURCE_API_VERSION,
                kind="ResourceClaimTemplate",
                name=claim_template_name(owner, claim),
                namespace=namespace,
                object_labels=labels(owner, "gpu-worker-devices"),
                body={"spec": to_json(spec)},
            )
        )
    return objects
