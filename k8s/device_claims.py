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

from constructs import Construct
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
    "CLAIM_NAME", "PCIE_ROOT", "RESOURCE_API_VERSION", "WorkerDeviceClaims", "claim_template_name", "worker_device_claim",
    "pod_resource_claims", "container_claims",
]

RESOURCE_API_VERSION = "resource.k8s.io/v1"
CLAIM_NAME = "gpus-efa"
"""The claim's name inside the pod (container resources.claims and pod resourceClaims)."""
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
"""The standard device attribute both DRA drivers publish: devices with the same value share a PCIe root."""


def claim_template_name(owner: str) -> str:
    """The ResourceClaimTemplate of the workers of `owner` (the RayJob or RayCluster)."""
    return f"{owner}-{CLAIM_NAME}"


def _exact(name: str, device_class: str, count: int) -> V1DeviceRequest:
    return V1DeviceRequest(name=name, exactly=V1ExactDeviceRequest(
        device_class_name=device_class, allocation_mode="ExactCount", count=count))


def worker_device_claim(instance: catalog.InstanceType) -> V1DeviceClaim:
    """All GPUs and EFA interfaces of one node, each GPU with the EFA interfaces on its PCIe root where they divide."""
    gpus, efa = instance.gpus, instance.efa_interfaces
    if efa >= gpus and efa % gpus == 0:
        per_gpu = efa // gpus
        requests, constraints = [], []
        for index in range(gpus):
            requests += [_exact(f"gpu-{index}", GPU_DEVICE_CLASS, 1), _exact(f"efa-{index}", EFA_DEVICE_CLASS, per_gpu)]
            constraints.append(V1DeviceConstraint(requests=[f"gpu-{index}", f"efa-{index}"], match_attribute=PCIE_ROOT))
        return V1DeviceClaim(requests=requests, constraints=constraints)
    return V1DeviceClaim(requests=[_exact("gpus", GPU_DEVICE_CLASS, gpus), _exact("efa", EFA_DEVICE_CLASS, efa)])


def pod_resource_claims(owner: str) -> list[V1PodResourceClaim]:
    """The worker pod's resourceClaims: one claim per pod, made from the owner's template."""
    return [V1PodResourceClaim(name=CLAIM_NAME, resource_claim_template_name=claim_template_name(owner))]


def container_claims() -> list[CoreV1ResourceClaim]:
    """The worker container's resources.claims: all of the pod's claim."""
    return [CoreV1ResourceClaim(name=CLAIM_NAME)]


class WorkerDeviceClaims(Construct):
    """The ResourceClaimTemplate the GPU workers of `owner` claim their devices from (apply it before them)."""

    def __init__(self, scope: Construct, id: str, *, owner: str, namespace: str, instance: catalog.InstanceType):
        super().__init__(scope, id)
        self.name: str = claim_template_name(owner)
        spec = V1ResourceClaimTemplateSpec(
            metadata=V1ObjectMeta(labels=labels(owner, "gpu-worker-devices")),
            spec=V1ResourceClaimSpec(devices=worker_device_claim(instance)),
        )
        api_object(self, "Resource", api_version=RESOURCE_API_VERSION, kind="ResourceClaimTemplate", name=self.name,
                   namespace=namespace, object_labels=labels(owner, "gpu-worker-devices"),
                   body={"spec": to_json(spec)})
