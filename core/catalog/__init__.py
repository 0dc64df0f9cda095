"""Facts about EC2 instance types, and the small pure functions that derive everything else from them.

Every number the stack, the manifests and the training job need about hardware comes from this table:
launch-template interfaces, GPUs per node, pod resources, EFA resources, FI_EFA_USE_DEVICE_RDMA, cost per hour,
the all-reduce bandwidth floor and the peak FLOP/s used for MFU. Nothing here imports aws_cdk, cdk8s or torch,
because the training job imports it inside the container.

Sources: AWS "Specifications for Amazon EC2 accelerated computing instances" (docs.aws.amazon.com/ec2/latest/
instancetypes/ac.html: memory, vCPUs, GPUs and their memory, network bandwidth, EFA support, network cards), the EFA
user guide (GPUDirect RDMA: "Supported instance types", RDMA read/write), NVIDIA data sheets (dense bf16 tensor
throughput; dense fp8: 242.5 L4, 733 L40S, 1,979 H100/H200, 4,500 B200, none on A10G and A100), the AWS on-demand
price list for Linux in us-east-2 (recorded 2026-10/11; us-east-1 and us-east-2 list the same prices for these types;
prices change, treat them as estimates). Where describe-instance-types disagrees, it wins: fix the record
(core/catalog/families.py; docs/development.md, "Adding a GPU type").

Which types: every EFA-capable x86_64 NVIDIA GPU type of that page whose GPU trains in bf16 and that the EKS AL2023
NVIDIA AMI runs (AL2023_X86_64_NVIDIA), with the facts above recorded. Not built in, and why: g4dn (T4: no bf16
tensor cores), p6e-gb200/gb300 (Grace arm64 UltraServer nodes: a different AMI and image architecture), and types
whose bf16 peak or price this catalog has not recorded (g7, g7e, gr6, p6-b300; p6-b300's first network card carries
no EFA). Describe any of them yourself, with the same checks as a built-in row: the `extraGpuInstanceTypes` setting,
or `describe_gpu_instance` / `add_gpu_instance` in Python.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict, TypeVar

from ray_efa.core import node_pods
from ray_efa.core.catalog import network
from ray_efa.core.catalog.families import FAMILIES

# The types, the family records and the rows derived from them live in their own modules (core.catalog.types,
# core.catalog.families, core.catalog.rows); this one derives from them and re-exports every name, so callers import from
# core.catalog alone.
from ray_efa.core.catalog.rows import (
    BUILT_IN_GPU_INSTANCES,
    CAPACITY_BLOCK_INSTANCES,
    CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW,
    EFA_DEVICE_PLUGIN_ALLOWLISTS,
    EFA_DRA_DRIVER_ALLOWLISTS,
    EFA_ONLY_FAMILIES,
    EKS_CONTROL_PLANE_USD_PER_HOUR,
    GPU_INSTANCES,
    GPU_LINKS,
    GPUS,
    NAT_GATEWAY_USD_PER_HOUR,
    RECORDED_LINKS,
    SYSTEM_INSTANCES,
    gpu_for_device_name,
)
from ray_efa.core.catalog.types import (
    CHART_GPU_ALLOWLISTS,
    DEFAULT_GPU_LINK,
    EFA_DRA_CHART,
    EFA_PLUGIN_CHART,
    CatalogError,
    Gpu,
    GpuFamily,
    GpuInstanceType,
    GpuLink,
    InstanceSize,
    InstanceType,
    build_gpu_row,
    gpu_link,
)

__all__ = [
    "CatalogError",
    "Gpu",
    "GpuLink",
    "GPU_LINKS",
    "DEFAULT_GPU_LINK",
    "gpu_link",
    "InstanceType",
    "GpuInstanceType",
    "GpuFamily",
    "InstanceSize",
    "FAMILIES",
    "GPUS",
    "GPU_INSTANCES",
    "BUILT_IN_GPU_INSTANCES",
    "SYSTEM_INSTANCES",
    "EFA_DEVICE_PLUGIN_ALLOWLISTS",
    "EFA_DRA_DRIVER_ALLOWLISTS",
    "EFA_PLUGIN_CHART",
    "EFA_DRA_CHART",
    "CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW",
    "CHART_GPU_ALLOWLISTS",
    "EKS_CONTROL_PLANE_USD_PER_HOUR",
    "NAT_GATEWAY_USD_PER_HOUR",
    "gpu_instance",
    "describe_gpu_instance",
    "add_gpu_instance",
    "usable_gpu_instance",
    "DESCRIPTION_KEYS",
    "description_of",
    "system_instance",
    "gpu_for_device_name",
    "efa_network_interfaces",
    "EFA_ONLY_FAMILIES",
    "CAPACITY_BLOCK_INSTANCES",
    "WorkerPodResources",
    "worker_pod_resources",
    "head_pod_resources",
    "system_node_room",
    "SYSTEM_NODE_NEIGHBOURS",
    "node_allocatable",
    "gpu_node_room",
    "worker_fit_problem",
    "head_fit_problem",
    "use_device_rdma",
    "allreduce_floor_gbps",
    "HealthyBusbw",
    "healthy_efa_busbw",
    "EFA_LINE_SHARE",
    "HOST_STAGED_EFA_GB_S",
    "FLOOR_MARGIN",
    "efa_plugin_supports",
    "efa_plugin_problem",
]


_Row = TypeVar("_Row", bound=InstanceType)


def _lookup(table: dict[str, _Row], name: str, what: str) -> _Row:
    try:
        return table[name]
    except KeyError:
        raise CatalogError(f"unknown {what} instance type {name!r}; known: {', '.join(sorted(table))}") from None


def gpu_instance(name: str) -> GpuInstanceType:
    """The catalog row of an EFA-capable GPU instance type; raises CatalogError for anything else."""
    if name in SYSTEM_INSTANCES:
        raise CatalogError(f"{name} has no GPU; choose one of: {', '.join(sorted(_efa_gpu_names()))}")
    row = _lookup(GPU_INSTANCES, name, "GPU")
    if not row.efa_capable:
        raise CatalogError(
            f"{name} has {row.gpus} x {row.gpu.name} but no EFA support; choose one of: {', '.join(sorted(_efa_gpu_names()))}"
        )
    return row


def system_instance(name: str) -> InstanceType:
    """The catalog row of a general-purpose instance type for the system node group."""
    return _lookup(SYSTEM_INSTANCES, name, "system")


def _efa_gpu_names() -> list[str]:
    return [n for n, row in GPU_INSTANCES.items() if row.efa_capable]


class NetworkInterface(TypedDict):
    """One launch-template network interface, keyed as CloudFormation's NetworkInterfaces entries."""

    NetworkCardIndex: int
    DeviceIndex: int
    InterfaceType: str


def efa_network_interfaces(instance: InstanceType) -> list[NetworkInterface]:
    """Launch-template network interfaces: one EFA interface per network card.

    Card 0 carries the primary interface (DeviceIndex 0, type `efa`: EFA with ENA, the node's IP); every other card i
    gets DeviceIndex 1 and NetworkCardIndex i, which is how EC2 numbers secondary cards (eksctl and terraform-aws-eks
    do the same), with type `efa-only` where the row says so (efa_only_secondary). Security groups are attached by
    the caller: they are CloudFormation values, not facts.
    """
    if not instance.efa_capable:
        raise CatalogError(f"{instance.name} has no EFA interfaces")
    secondary = "efa-only" if instance.efa_only_secondary else "efa"
    return [
        {
            "NetworkCardIndex": card,
            "DeviceIndex": 0 if card == 0 else 1,
            "InterfaceType": "efa" if card == 0 else secondary,
        }
        for card in range(instance.efa_interfaces)
    ]


def use_device_rdma(instance: InstanceType) -> bool:
    """FI_EFA_USE_DEVICE_RDMA=1 only where GPUDirect RDMA exists: on g5/g6/g6e it aborts the ranks."""
    return instance.gpudirect_rdma


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerPodResources:
    """What one Ray worker pod (one per GPU node) asks for. Requests equal limits (Guaranteed QoS)."""

    cpu: int
    memory_gib: int
    gpus: int
    efa: int
    shm_gib: int
    """Size of the memory-backed /dev/shm emptyDir; it counts against memory_gib."""


# Room left on a GPU node for the kubelet, the OS and the DaemonSets (aws-node, kube-proxy, both device plugins,
# CloudWatch agents a platform may add). EKS's own kube-reserved for a 48-vCPU node is about 0.2 vCPU and 3.5 GiB;
# we leave more so that a worker pod with requests == limits always fits on allocatable.
_RESERVED_CPU_FRACTION, _RESERVED_CPU_MIN = 0.08, 2
_RESERVED_MEMORY_FRACTION, _RESERVED_MEMORY_MIN_GIB = 0.08, 8
# NCCL's SHM transport and torch DataLoader workers live in /dev/shm; a quarter of the pod is plenty and bounded.
_SHM_FRACTION, _SHM_MAX_GIB = 0.25, 128


def worker_pod_resources(instance: InstanceType) -> WorkerPodResources:
    """Resources of the Ray worker pod that fills one GPU node: all GPUs and EFA interfaces, most CPU and memory."""
    cpu = instance.vcpus - max(_RESERVED_CPU_MIN, math.ceil(instance.vcpus * _RESERVED_CPU_FRACTION))
    memory = instance.memory_gib - max(
        _RESERVED_MEMORY_MIN_GIB, math.ceil(instance.memory_gib * _RESERVED_MEMORY_FRACTION)
    )
    return WorkerPodResources(
        cpu=cpu,
        memory_gib=memory,
        gpus=instance.gpus,
        efa=instance.efa_interfaces,
        shm_gib=min(_SHM_MAX_GIB, int(memory * _SHM_FRACTION)),
    )


# What a node has room for. The kubelet's reservations on an EKS AL2023 node (nodeadm, the formula of the EKS
# AMI's bootstrap): kube-reserved CPU is 6% of the first core, 1% of the second, 0.5% of the third and fourth and
# 0.25% of every other; kube-reserved memory is 255 MiB + 11 MiB per pod the node may run (maxPods, at most 110 on a
# node of fewer than 30 vCPUs, 250 on larger ones: taken at that cap, the most it can be); the hard eviction threshold
# is 100 MiB. The pods beside the Ray pods (DaemonSets, and on a system node CoreDNS, the operator, the submitter)
# are core.node_pods'.
# The kernel reports less memory than EC2's figure (firmware and kernel reservations): we count 5% less.
_KUBE_RESERVED_CPU_SHARES = (60, 10, 5, 5)
_KUBE_RESERVED_CPU_REST = 2.5  # millicores per vCPU beyond the fourth
_KUBE_RESERVED_MEMORY_BASE_MIB = 255
_EVICTION_MEMORY_MIB = 100
_KERNEL_MEMORY_SHARE = 0.95
SYSTEM_NODE_NEIGHBOURS: dict[str, tuple[int, int]] = {
    f"{pod.name} ({pod.source})": (pod.cpu_m, pod.memory_mib) for pod in node_pods.system_node_pods()
}
"""The other pods a system node runs beside the Ray head, with their requests (millicores, MiB): core.node_pods's
DaemonSets of a system node, CoreDNS, the KubeRay operator and the RayJob's submitter, each with its source."""
_HEAD_MIN_CPU, _HEAD_MIN_MEMORY_GIB = 1, 2


def node_allocatable(instance: InstanceType) -> tuple[int, int]:
    """(millicores, MiB) the kubelet of an EKS AL2023 node of `instance` offers pods: capacity less kube-reserved and
    the eviction threshold (maxPods taken at 110 below 30 vCPUs, 250 from there: nodeadm's caps, the most it can be)."""
    shares = [*_KUBE_RESERVED_CPU_SHARES[: instance.vcpus]]
    reserved_cpu = sum(shares) + _KUBE_RESERVED_CPU_REST * max(0, instance.vcpus - len(_KUBE_RESERVED_CPU_SHARES))
    max_pods = 110 if instance.vcpus < 30 else 250
    capacity_mib = instance.memory_gib * 1024 * _KERNEL_MEMORY_SHARE
    allocatable_cpu = instance.vcpus * 1000 - math.ceil(reserved_cpu)
    allocatable_mib = math.floor(capacity_mib) - (_KUBE_RESERVED_MEMORY_BASE_MIB + 11 * max_pods) - _EVICTION_MEMORY_MIB
    return allocatable_cpu, allocatable_mib


def system_node_room(instance: InstanceType) -> tuple[int, int]:
    """(millicores, MiB) that a system node of `instance` has left for the Ray head: the kubelet's allocatable
    (node_allocatable) less the requests of the pods beside it (SYSTEM_NODE_NEIGHBOURS, core.node_pods)."""
    allocatable_cpu, allocatable_mib = node_allocatable(instance)
    cpu, memory = node_pods.pod_requests(node_pods.system_node_pods())
    return allocatable_cpu - cpu, allocatable_mib - memory


def gpu_node_room(
    instance: InstanceType, device_allocation: node_pods.DeviceAllocation = "device-plugin"
) -> tuple[int, int]:
    """(millicores, MiB) that a GPU node of `instance` has left for its Ray worker: node_allocatable less the requests
    of the node's DaemonSets (core.node_pods.node_daemonsets("gpu"): the device plugins or the DRA drivers)."""
    allocatable_cpu, allocatable_mib = node_allocatable(instance)
    cpu, memory = node_pods.pod_requests(node_pods.node_daemonsets("gpu", device_allocation=device_allocation))
    return allocatable_cpu - cpu, allocatable_mib - memory


def worker_fit_problem(
    instance: InstanceType, device_allocation: node_pods.DeviceAllocation = "device-plugin"
) -> str | None:
    """Why the Ray worker pod (worker_pod_resources) would not fit a GPU node of `instance` beside its DaemonSets, or
    None."""
    pod = worker_pod_resources(instance)
    room_cpu, room_mib = gpu_node_room(instance, device_allocation)
    if pod.cpu * 1000 <= room_cpu and pod.memory_gib * 1024 <= room_mib:
        return None
    return (
        f"the Ray worker asks {pod.cpu} CPU and {pod.memory_gib} GiB, but a {instance.name} node leaves "
        f"{room_cpu}m CPU and {room_mib} MiB beside the kubelet's reserve and its DaemonSets"
    )


def head_pod_resources(instance: InstanceType) -> tuple[int, int]:
    """(cpu, memory GiB) of the GPU-less Ray head on a system node: all but 2 vCPU and 6 GiB of the node (at least 1
    and 2), within the room the node has beside the other pods it runs (system_node_room). CatalogError when not even
    1 vCPU and 2 GiB fit: the head would never schedule."""
    problem = head_fit_problem(instance)
    if problem is not None:
        raise CatalogError(problem)
    room_cpu, room_mib = system_node_room(instance)
    cpu = min(max(_HEAD_MIN_CPU, instance.vcpus - 2), room_cpu // 1000)
    memory = min(max(_HEAD_MIN_MEMORY_GIB, instance.memory_gib - 6), room_mib // 1024)
    return cpu, memory


def head_fit_problem(instance: InstanceType) -> str | None:
    """Why the Ray head (at least 1 CPU and 2 GiB, requests == limits) would not fit a system node of `instance` beside
    the pods it shares the node with (SYSTEM_NODE_NEIGHBOURS), naming the room, the head's ask and the system types
    where it fits; None when it fits."""

    def fits(row: InstanceType) -> bool:
        room_cpu, room_mib = system_node_room(row)
        return room_cpu >= _HEAD_MIN_CPU * 1000 and room_mib >= _HEAD_MIN_MEMORY_GIB * 1024

    if fits(instance):
        return None
    room_cpu, room_mib = system_node_room(instance)
    others = ", ".join(f"{pod.name} {pod.cpu_m}m/{pod.memory_mib}Mi" for pod in node_pods.system_node_pods())
    fitting = [name for name, row in SYSTEM_INSTANCES.items() if fits(row)]
    return (
        f"{instance.name} ({instance.vcpus} vCPU, {instance.memory_gib} GiB) leaves {room_cpu}m CPU and {room_mib} "
        f"MiB for the Ray head once the kubelet's reserve and the pods beside it ({others}) are placed, less than "
        f"the head's {_HEAD_MIN_CPU * 1000}m CPU and {_HEAD_MIN_MEMORY_GIB * 1024} MiB: its pod would stay "
        f"Pending; choose a larger system instance type ({', '.join(fitting)})"
    )


# -- the preflight's all-reduce floor over EFA ------------------------------------------------------------------------
# The floor is a share (FLOOR_MARGIN) of what a healthy pair of nodes reaches: all-reduce bus bandwidth at 1 GiB, as
# nccl-tests reports it and training.preflight measures it. What a healthy node reaches is core.catalog.network's figure for
# its family at 1 GiB, the same the step model (core.perf) uses: with GPUDirect RDMA the family's published share of
# the aggregate EFA line rate; without it (g5, g6, g6e) at most the host-staged 3 GB/s (aws/aws-ofi-nccl#547); never
# above the intra-node link (the row's gpu_link, data sheet), which the ring also crosses.
# Measure your own nodes (`ray-efa calibrate` on a finished run suggests the floor) and set preflightMinBusbwGbps.
EFA_LINE_SHARE = network.EFA_SHARE["p4d"][0]
"""Share of the aggregate EFA line rate NCCL's all-reduce reaches at 1 GiB on p4d (NVIDIA/nccl#527); each family's own
is core.catalog.network.EFA_SHARE."""
HOST_STAGED_EFA_GB_S = network.HOST_STAGED_GB_S
"""All-reduce bus bandwidth a healthy EFA pair reaches without GPUDirect RDMA, GB/s (core.catalog.network)."""
FLOOR_MARGIN = 0.5
"""The floor is this share of a healthy node's bus bandwidth: it catches a broken or fallen-back path, not a slow
day (the probe's 5 timed all-reduces at 1 GiB vary by far less than half)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HealthyBusbw:
    """What a healthy pair of nodes of one type reaches: all-reduce bus bandwidth at 1 GiB, and why that number."""

    gb_s: float
    source: str
    """Where the number comes from: the facts it derives from and the measurement it rests on."""


def healthy_efa_busbw(instance: InstanceType) -> HealthyBusbw:
    """The all-reduce bus bandwidth (GB/s, at 1 GiB) a healthy pair of `instance` nodes reaches over EFA: core.catalog.network's
    link of its family (GPUDirect RDMA, EFA cards, line rate, intra-node link)."""
    figure = network.efa_link(instance, network.GiB)
    return HealthyBusbw(gb_s=figure.gb_s, source=figure.source)


def allreduce_floor_gbps(instance: InstanceType) -> float:
    """Lowest inter-node all-reduce bus bandwidth (GB/s) at 1 GiB we accept over EFA before calling the path slow:
    FLOOR_MARGIN of what a healthy pair of nodes reaches (healthy_efa_busbw)."""
    return round(healthy_efa_busbw(instance).gb_s * FLOOR_MARGIN, 2)


def efa_plugin_supports(instance_name: str, chart_version: str) -> bool:
    """Whether the EFA device plugin chart at this version schedules on this instance type; raises for unknown versions."""
    try:
        return instance_name in EFA_DEVICE_PLUGIN_ALLOWLISTS[chart_version]
    except KeyError:
        raise CatalogError(
            f"no allowlist recorded for aws-efa-k8s-device-plugin chart {chart_version!r}; "
            f"known versions: {', '.join(sorted(EFA_DEVICE_PLUGIN_ALLOWLISTS))}"
        ) from None


def efa_plugin_problem(
    instance_name: str, chart_version: str, allowlists: dict[str, frozenset[str]] = EFA_DEVICE_PLUGIN_ALLOWLISTS
) -> str | None:
    """Why the EFA device plugin at this chart version would not run on this type (and which version would), or None."""
    if instance_name in allowlists.get(chart_version, frozenset()):
        return None
    if chart_version not in allowlists:
        return f"no allowlist recorded for this chart version; known versions: {', '.join(sorted(allowlists))}"
    fixed = sorted((v for v, types in allowlists.items() if instance_name in types), key=_version_key)
    hint = f"use efaDevicePluginVersion {fixed[-1]}" if fixed else "no recorded chart version lists it"
    return f"its allowlist does not hold {instance_name}, so the plugin would schedule on no node; {hint}"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.lstrip("v").split("."))


# -- types a user describes ------------------------------------------------------------------------------------------

_INSTANCE_NAME = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")

DESCRIPTION_KEYS: dict[str, tuple[type | tuple[type, ...], bool, str]] = {
    "name": (str, True, "the EC2 instance type, e.g. p6-b300.48xlarge"),
    "gpus": (int, True, "GPUs per node (>= 1)"),
    "gpuName": (str, True, "the GPU's short name; a catalog GPU (B200, H200, ...) brings its own facts"),
    "gpuMemoryGib": ((int, float), False, "device memory per GPU as CUDA reports it, GiB (a catalog GPU's otherwise)"),
    "peakBf16Tflops": ((int, float), False, "dense bf16 tensor TFLOP/s per GPU, for MFU and the step model"),
    "memoryBandwidthGbS": (
        (int, float),
        False,
        "device-memory bandwidth per GPU, GB/s, for the step model's optimizer time (a catalog GPU's otherwise)",
    ),
    "vcpus": (int, True, "vCPUs per node"),
    "memoryGib": (int, True, "host memory per node, GiB"),
    "efaInterfaces": (int, True, "EFA interfaces per node: one per network card with EFA (>= 1)"),
    "networkGbps": (int, True, "aggregate network bandwidth per node, Gbit/s"),
    "usdPerHour": ((int, float), True, "on-demand price per node, USD per hour"),
    "gpudirectRdma": (
        bool,
        False,
        "EFA reads and writes GPU memory directly (FI_EFA_USE_DEVICE_RDMA=1); default false",
    ),
    "gpuLinkGbS": (
        (int, float),
        False,
        "GPU-to-GPU bandwidth inside the node per direction, GB/s; default PCIe Gen4 32",
    ),
    "efaOnlySecondary": (
        bool,
        False,
        "`efa-only` interfaces on the cards after the first (no IP each; VPC CNI v1.18.4 "
        "or later); default false, as for every row",
    ),
    "capacityBlocks": (
        bool,
        False,
        "Capacity Blocks for ML offer the type (capacityReservationType capacity-block); default false",
    ),
}
"""The keys of a described GPU instance type: (type, required, meaning)."""


def describe_gpu_instance(description: Mapping[str, object], *, new_name: bool = True) -> GpuInstanceType:
    """An InstanceType from a user's description (DESCRIPTION_KEYS), checked as a built-in row would be: a GPU type
    with EFA that the job can use. Raises CatalogError listing every problem, each naming its key.

    new_name: refuse a name the catalog builds in (choose that one by name instead)."""
    problems: list[str] = []
    unknown = sorted(set(description) - set(DESCRIPTION_KEYS))
    if unknown:
        problems.append(f"unknown keys {', '.join(unknown)} (known: {', '.join(DESCRIPTION_KEYS)})")
    for key, (kind, required, meaning) in DESCRIPTION_KEYS.items():
        value = description.get(key)
        if value is None:
            if required:
                problems.append(f"{key} is required: {meaning}")
            continue
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            problems.append(
                f"{key} must be {'a number' if isinstance(kind, tuple) else kind.__name__}: {meaning}, got {value!r}"
            )
    if problems:
        raise CatalogError("; ".join(problems))
    name = str(description["name"])
    known_gpu = GPUS.get(str(description["gpuName"]))
    for key in ("gpuMemoryGib", "peakBf16Tflops", "memoryBandwidthGbS"):
        if known_gpu is None and description.get(key) is None:
            problems.append(
                f"{key} is required for a GPU the catalog does not know ({description['gpuName']}; known: "
                f"{', '.join(GPUS)}): {DESCRIPTION_KEYS[key][2]}"
            )
    checks = [
        (
            _INSTANCE_NAME.match(name) is not None,
            f"name must be an EC2 instance type like p6-b300.48xlarge, got {name!r}",
        ),
        (
            not new_name or (name not in BUILT_IN_GPU_INSTANCES and name not in SYSTEM_INSTANCES),
            f"name {name} is in the catalog already: choose it by gpuInstanceType alone",
        ),
        (
            int(description["efaInterfaces"]) >= 1,  # type: ignore[call-overload]
            f"efaInterfaces must be >= 1: {name} needs EFA for the GPU nodes' all-reduce (a GPU type without EFA is "
            f"refused like g6.xlarge), got {description['efaInterfaces']}",
        ),
        (int(description["gpus"]) >= 1, f"gpus must be >= 1, got {description['gpus']}"),  # type: ignore[call-overload]
    ]
    for key in (
        "vcpus",
        "memoryGib",
        "networkGbps",
        "usdPerHour",
        "gpuMemoryGib",
        "peakBf16Tflops",
        "memoryBandwidthGbS",
        "gpuLinkGbS",
    ):
        value = description.get(key)
        checks.append((value is None or float(value) > 0, f"{key} must be > 0, got {value}"))  # type: ignore[arg-type]
    problems += [message for ok, message in checks if not ok]
    if problems:
        raise CatalogError("; ".join(problems))
    gpu = known_gpu or Gpu(
        name=str(description["gpuName"]),
        memory_gib=float(description["gpuMemoryGib"]),  # type: ignore[arg-type]
        peak_bf16_tflops=float(description["peakBf16Tflops"]),  # pyright: ignore[reportArgumentType]
        device_names=(str(description["gpuName"]),),
        memory_bandwidth_gb_s=float(description["memoryBandwidthGbS"]),  # type: ignore[arg-type]
    )
    link = description.get("gpuLinkGbS")
    gpu_link = (
        None
        if link is None
        else RECORDED_LINKS.get(float(link), GpuLink(name=f"described ({link} GB/s)", gb_s=float(link)))  # pyright: ignore[reportArgumentType]
    )
    # Only what the description states; build_gpu_row gives the rest the defaults every row gets.
    row = build_gpu_row(
        name=name,
        vcpus=int(description["vcpus"]),  # pyright: ignore[reportArgumentType]
        memory_gib=int(description["memoryGib"]),  # type: ignore[call-overload]
        usd_per_hour=float(description["usdPerHour"]),  # pyright: ignore[reportArgumentType]
        gpu=gpu,
        gpus=int(description["gpus"]),  # type: ignore[arg-type, call-overload]
        efa_interfaces=int(description["efaInterfaces"]),  # type: ignore[call-overload]
        gpudirect_rdma=description.get("gpudirectRdma"),
        network_gbps=int(description["networkGbps"]),  # type: ignore[call-overload]
        gpu_link=gpu_link,
        efa_only_secondary=description.get("efaOnlySecondary"),
        capacity_blocks=description.get("capacityBlocks"),
        described=True,
    )
    pod = worker_pod_resources(row)
    if pod.cpu < 1 or pod.memory_gib < 1:
        raise CatalogError(
            f"vcpus and memoryGib leave no room for a worker pod next to the node's reserve "
            f"(vcpus {row.vcpus}, memoryGib {row.memory_gib})"
        )
    if (problem := worker_fit_problem(row)) is not None:
        raise CatalogError(
            f"vcpus {row.vcpus} and memoryGib {row.memory_gib} leave no room for the worker pod: {problem}"
        )
    return row


def usable_gpu_instance(instance: InstanceType) -> GpuInstanceType:
    """`instance` when the job can use it: a built-in EFA row, or a row of your own passing describe_gpu_instance's
    checks (EFA, GPUs, room for the worker pod). Raises CatalogError otherwise."""
    if BUILT_IN_GPU_INSTANCES.get(instance.name) == instance:
        return gpu_instance(instance.name)
    if instance.gpu is None:
        raise CatalogError(f"{instance.name} has no GPU")
    if instance.name in BUILT_IN_GPU_INSTANCES:
        raise CatalogError(f"{instance.name} is in the catalog with other facts: pass its name, or a type of your own")
    _describe_row(instance)
    if isinstance(instance, GpuInstanceType):
        return instance
    # An InstanceType with a GPU: the same facts as a GpuInstanceType, with the defaults of any row (its link).
    return build_gpu_row(**{field.name: getattr(instance, field.name) for field in dataclasses.fields(instance)})


def add_gpu_instance(instance: InstanceType | Mapping[str, object]) -> GpuInstanceType:
    """Add a described type to this process's catalog (GPU_INSTANCES), after the checks of describe_gpu_instance:
    the Python way to choose it by name in constructs and settings (gpuInstanceType). Adding the same row twice is
    fine; another row under a built-in name is refused. Returns the row."""
    row = usable_gpu_instance(instance) if isinstance(instance, InstanceType) else describe_gpu_instance(instance)
    GPU_INSTANCES[row.name] = row
    return row


def description_of(instance: InstanceType) -> dict[str, object]:
    """The description (DESCRIPTION_KEYS) of a GPU row: describe_gpu_instance of it, under another name, builds the
    same row."""
    if instance.gpu is None:
        raise CatalogError(f"{instance.name} has no GPU")
    description: dict[str, object] = {
        "name": instance.name,
        "gpus": instance.gpus,
        "gpuName": instance.gpu.name,
        "gpuMemoryGib": instance.gpu.memory_gib,
        "peakBf16Tflops": instance.gpu.peak_bf16_tflops,
        "memoryBandwidthGbS": instance.gpu.memory_bandwidth_gb_s or None,
        "vcpus": instance.vcpus,
        "memoryGib": instance.memory_gib,
        "efaInterfaces": instance.efa_interfaces,
        "networkGbps": instance.network_gbps,
        "usdPerHour": instance.usd_per_hour,
        "gpudirectRdma": instance.gpudirect_rdma,
        "gpuLinkGbS": instance.gpu_link.gb_s if instance.gpu_link else None,
        "efaOnlySecondary": instance.efa_only_secondary,
        "capacityBlocks": instance.capacity_blocks,
    }
    return {key: value for key, value in description.items() if value is not None}


def _describe_row(instance: InstanceType) -> GpuInstanceType:
    """describe_gpu_instance's checks on a row built in Python."""
    return describe_gpu_instance(description_of(instance), new_name=False)
