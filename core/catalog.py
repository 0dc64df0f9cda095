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
prices change, treat them as estimates). Where describe-instance-types disagrees, it wins: fix the row here.

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
from typing import Any, TypedDict, TypeVar

from ray_efa.core import network

__all__ = [
    "CatalogError",
    "Gpu",
    "GpuLink",
    "GPU_LINKS",
    "DEFAULT_GPU_LINK",
    "gpu_link",
    "InstanceType",
    "GpuInstanceType",
    "GPUS",
    "GPU_INSTANCES",
    "SYSTEM_INSTANCES",
    "EFA_DEVICE_PLUGIN_ALLOWLISTS",
    "EFA_DRA_DRIVER_ALLOWLISTS",
    "EFA_PLUGIN_CHART",
    "EFA_DRA_CHART",
    "CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW",
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


class CatalogError(ValueError):
    """An instance type or chart version the catalog does not know or cannot use."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Gpu:
    """One GPU model."""

    name: str
    """Short model name, as AWS writes it (L4, A100, H100...)."""
    memory_gib: float
    """Device memory the driver reports, in GiB (less than the marketing GB)."""
    peak_bf16_tflops: float
    """Dense bf16 tensor-core throughput, TFLOP/s, from the data sheet (no sparsity). Used for MFU."""
    device_names: tuple[str, ...]
    """Substrings of torch.cuda.get_device_name() that identify this GPU."""
    memory_bandwidth_gb_s: float = 0.0
    """Device-memory bandwidth, GB/s, from the data sheet. The step-time model (core.perf) times the optimizer by it."""
    peak_fp8_tflops: float = 0.0
    """Dense fp8 tensor-core throughput, TFLOP/s, from the data sheet (no sparsity); 0: no fp8 tensor cores (Ampere
    and older), so the `precision` setting cannot be fp8."""

    @property
    def has_fp8(self) -> bool:
        return self.peak_fp8_tflops > 0


GPUS: dict[str, Gpu] = {
    g.name: g
    for g in (
        Gpu(name="A10G", memory_gib=22.49, peak_bf16_tflops=70.0, device_names=("A10G",), memory_bandwidth_gb_s=600.0),
        Gpu(name="L4", memory_gib=22.49, peak_bf16_tflops=121.0, device_names=("L4",), memory_bandwidth_gb_s=300.0, peak_fp8_tflops=242.5),
        Gpu(name="L40S", memory_gib=44.99, peak_bf16_tflops=362.0, device_names=("L40S",), memory_bandwidth_gb_s=864.0, peak_fp8_tflops=733.0),
        Gpu(name="A100-40GB", memory_gib=39.39, peak_bf16_tflops=312.0, device_names=("A100-SXM4-40GB", "A100-PCIE-40GB"), memory_bandwidth_gb_s=1555.0),
        Gpu(name="A100-80GB", memory_gib=79.15, peak_bf16_tflops=312.0, device_names=("A100-SXM4-80GB", "A100 80GB"), memory_bandwidth_gb_s=2039.0),
        Gpu(name="H100", memory_gib=79.65, peak_bf16_tflops=989.0, device_names=("H100",), memory_bandwidth_gb_s=3350.0, peak_fp8_tflops=1979.0),
        Gpu(name="H200", memory_gib=139.8, peak_bf16_tflops=989.0, device_names=("H200",), memory_bandwidth_gb_s=4800.0, peak_fp8_tflops=1979.0),
        # NVIDIA HGX B200 data sheet: BF16 tensor 36 PFLOPS with sparsity for 8 GPUs = 2.25 PFLOPS dense each. Memory
        # and bandwidth as CUDA reports them on p6-b200 (178.35 GiB; 7,680-bit bus at 3,996 MHz: 7.67 TB/s,
        # pytorch/ao#4002); AWS lists 179 GiB per GPU. FP8 tensor: 72 PFLOPS with sparsity for 8 = 4.5 dense each.
        Gpu(name="B200", memory_gib=178.35, peak_bf16_tflops=2250.0, device_names=("B200",), memory_bandwidth_gb_s=7672.0, peak_fp8_tflops=4500.0),
    )
}


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuLink:
    """How the GPUs inside one node talk to each other."""

    name: str
    gb_s: float
    """Data-sheet bandwidth per GPU per direction, GB/s."""


_PCIE4 = GpuLink(name="PCIe Gen4 x16", gb_s=32.0)  # A10G, L4 and L40S data sheets: "PCIe Gen4 x16: 64 GB/s" both ways
_NVLINK3 = GpuLink(name="NVLink 3 (NVSwitch)", gb_s=300.0)  # A100 SXM4 data sheet: 600 GB/s both ways
_NVLINK4 = GpuLink(name="NVLink 4 (NVSwitch)", gb_s=450.0)  # H100/H200 SXM data sheets: 900 GB/s both ways
_NVLINK5 = GpuLink(name="NVLink 5 (NVSwitch)", gb_s=900.0)  # HGX B200 data sheet: 1.8 TB/s per GPU both ways
_RECORDED_LINKS = {link.gb_s: link for link in (_PCIE4, _NVLINK3, _NVLINK4, _NVLINK5)}
"""A described link of a recorded link's bandwidth is that link (its name says its kind to core.families)."""
DEFAULT_GPU_LINK: GpuLink = _PCIE4
"""The link of a GPU row that states none (a described type without gpuLinkGbS): PCIe, the slowest recorded."""


def gpu_link(instance: InstanceType) -> GpuLink:
    """The intra-node GPU link of a GPU instance type (its row's)."""
    if instance.gpu_link is None:
        raise CatalogError(f"no intra-node GPU link recorded for {instance.name}")
    return instance.gpu_link


def gpu_for_device_name(device_name: str) -> Gpu | None:
    """The catalog GPU whose name appears in a torch device name (e.g. "NVIDIA H200"), or None."""
    # Longest match first so "A100-SXM4-80GB" never resolves to a shorter, wrong pattern.
    candidates = [(len(pattern), gpu) for gpu in GPUS.values() for pattern in gpu.device_names if pattern in device_name]
    return max(candidates, key=lambda c: c[0])[1] if candidates else None


@dataclass(frozen=True, kw_only=True, slots=True)
class InstanceType:
    """One EC2 instance type and the facts this project derives from."""

    name: str
    vcpus: int
    memory_gib: int
    usd_per_hour: float
    """On-demand Linux price in us-east-2, USD per hour (an estimate; prices change)."""
    gpu: Gpu | None = None
    gpus: int = 0
    efa_interfaces: int = 0
    """EFA interfaces the node gets: one per network card (0 = no EFA support)."""
    gpudirect_rdma: bool = False
    """Whether EFA can read and write GPU memory directly (FI_EFA_USE_DEVICE_RDMA=1)."""
    network_gbps: int = 0
    """Aggregate network bandwidth in Gbit/s."""
    gpu_link: GpuLink | None = None
    """How its GPUs talk inside the node (None: no GPUs; a GPU row gets DEFAULT_GPU_LINK when it states none)."""
    efa_only_secondary: bool = False
    """Whether network cards after the first get `efa-only` interfaces (EFA without an ENA, so without a private IP:
    31 or 15 saved per node on p5); needs the Amazon VPC CNI v1.18.4 or later (terraform-aws-eks, which does this by
    default, documents it). Off unless the row says so: `efa` on every card works with any VPC CNI."""
    capacity_blocks: bool = False
    """Whether Capacity Blocks for ML offer this type (EC2 User Guide, supported instance types)."""
    allowlisted_by: frozenset[str] = frozenset()
    """The recorded chart versions whose instance allowlist (values key supportedInstanceLabels.values) holds this
    type, as "chart version" (e.g. "aws-efa-k8s-device-plugin v0.5.30"; see CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW)."""
    described: bool = False
    """True for a type a user described (extraGpuInstanceTypes or add_gpu_instance), not a built-in row."""

    @property
    def family(self) -> str:
        return self.name.split(".")[0]

    @property
    def efa_capable(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def primary_card_gbps(self) -> float:
        """Gbit/s of network card 0, which carries the node's IP and so every TCP flow (NCCL's sockets included):
        the aggregate split evenly over the cards (p5.48xlarge: 32 x 100, p5en: 16 x 200, p4d and g6e.48xlarge:
        4 x 100; single-card types: all of it). EFA uses every card; TCP only this one."""
        return self.network_gbps / max(1, self.efa_interfaces)


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuInstanceType(InstanceType):
    """An instance type with GPUs: the same facts, with `gpu` always set (so callers need no None check)."""

    # A kw_only dataclass may put a required field after defaulted ones; pyright's override check ignores kw_only.
    gpu: Gpu  # pyright: ignore[reportGeneralTypeIssues]
    gpu_link: GpuLink = DEFAULT_GPU_LINK  # pyright: ignore[reportIncompatibleVariableOverride]


# The chart allowlists this project has read (values key supportedInstanceLabels.values): each chart schedules its
# DaemonSet only on listed types and fails silently (DESIRED 0) on others. Source: ../shared/helm-values/PROVENANCE.md
# (aws/eks-charts stable/aws-efa-k8s-device-plugin; stable/aws-dranet 1.0.0 values.yaml).
EFA_PLUGIN_CHART: str = "aws-efa-k8s-device-plugin"
EFA_DRA_CHART: str = "aws-dranet"

CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW: dict[str, frozenset[str]] = {
    # Every GPU type of v0.5.30's allowlist (PROVENANCE.md lists all 303 entries) that has no row here, so that a
    # described type is checked against what the chart really lists. v0.5.28 and v0.5.29 list only rows' types.
    f"{EFA_PLUGIN_CHART} v0.5.30": frozenset({
        "g4dn.8xlarge", "g4dn.12xlarge", "g4dn.16xlarge", "g4dn.metal", "g7.8xlarge", "g7.12xlarge", "g7.24xlarge",
        "g7.48xlarge", "g7e.8xlarge", "g7e.12xlarge", "g7e.24xlarge", "g7e.48xlarge", "gr6.8xlarge", "p3dn.24xlarge",
        "p6-b300.48xlarge", "p6e-gb200.36xlarge", "p6e-gb300.36xlarge",
    }),
    f"{EFA_PLUGIN_CHART} v0.5.29": frozenset(),
    f"{EFA_PLUGIN_CHART} v0.5.28": frozenset(),
    f"{EFA_DRA_CHART} 1.0.0": frozenset({
        "g4dn.8xlarge", "g4dn.12xlarge", "g4dn.16xlarge", "g4dn.metal", "g7e.8xlarge", "g7e.12xlarge", "g7e.24xlarge",
        "g7e.48xlarge", "gr6.8xlarge", "p3dn.24xlarge", "p6-b300.48xlarge", "p6e-gb200.36xlarge", "p6e-gb300.36xlarge",
    }),
}
"""The GPU types each recorded chart version lists beyond the rows below ("chart version": names); its keys are every
chart version recorded. A row says itself which of them list it (InstanceType.allowlisted_by)."""

_EVERY = frozenset(CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW)
_SINCE_V0_5_30 = frozenset({f"{EFA_PLUGIN_CHART} v0.5.30", f"{EFA_DRA_CHART} 1.0.0"})
_NONE: frozenset[str] = frozenset()


def _gpu_type(**facts: Any) -> GpuInstanceType:
    """Every GPU row, built in or described, is made here, so a fact a row does not state gets the same default:
    the dataclass's (DEFAULT_GPU_LINK, no efa-only, no Capacity Blocks), and the chart versions whose recorded
    allowlist names it."""
    given = {key: value for key, value in facts.items() if value is not None}
    if not given.get("allowlisted_by"):
        given["allowlisted_by"] = frozenset(
            chart for chart, names in CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW.items() if given["name"] in names)
    return GpuInstanceType(**given)


def _gpu_row(name: str, gpu: str, *, gpus: int, vcpus: int, memory_gib: int, efa: int, rdma: bool, gbps: int,
             usd: float, link: GpuLink, efa_only: bool, blocks: bool, charts: frozenset[str]) -> GpuInstanceType:
    """One built-in row: the name and GPU model by position, every fact by keyword (three booleans must not be
    told apart by their place)."""
    return _gpu_type(
        name=name, gpu=GPUS[gpu], gpus=gpus, vcpus=vcpus, memory_gib=memory_gib, efa_interfaces=efa, gpudirect_rdma=rdma,
        network_gbps=gbps, usd_per_hour=usd, gpu_link=link, efa_only_secondary=efa_only, capacity_blocks=blocks,
        allowlisted_by=charts,
    )


# fmt: off
GPU_INSTANCES: dict[str, GpuInstanceType] = {row.name: row for row in (
    # name, GPU, GPUs, vCPUs, memory GiB, EFA interfaces (one per network card; 0: no EFA), GPUDirect RDMA, Gbit/s,
    # USD/h; the GPUs' link inside the node (AWS instance pages: g5, g6 and g6e have no NVLink); `efa-only` secondary
    # cards (p5 family, p6-b200: 31, 15 or 7 private IPs saved per node); Capacity Blocks for ML offer it; the chart
    # allowlists that hold it (_EVERY: every recorded version; _SINCE_V0_5_30: aws-efa-k8s-device-plugin v0.5.30 and
    # aws-dranet 1.0.0).
    _gpu_row("g5.12xlarge",     "A10G",      gpus=4, vcpus= 48, memory_gib= 192, efa= 1, rdma=False, gbps=  40, usd=   5.672, link=_PCIE4  , efa_only=False, blocks=False, charts=_EVERY),
    _gpu_row("g5.48xlarge",     "A10G",      gpus=8, vcpus=192, memory_gib= 768, efa= 1, rdma=False, gbps= 100, usd=  16.288, link=_PCIE4  , efa_only=False, blocks=False, charts=_EVERY),
    _gpu_row("g6.12xlarge",     "L4",        gpus=4, vcpus= 48, memory_gib= 192, efa= 1, rdma=False, gbps=  40, usd=  4.6016, link=_PCIE4  , efa_only=False, blocks=False, charts=_EVERY),
    _gpu_row("g6.48xlarge",     "L4",        gpus=8, vcpus=192, memory_gib= 768, efa= 1, rdma=False, gbps= 100, usd= 13.3504, link=_PCIE4  , efa_only=False, blocks=False, charts=_EVERY),
    _gpu_row("g6e.24xlarge",    "L40S",      gpus=4, vcpus= 96, memory_gib= 768, efa= 2, rdma=False, gbps= 200, usd= 15.0656, link=_PCIE4  , efa_only=False, blocks=False, charts=_EVERY),
    _gpu_row("g6e.48xlarge",    "L40S",      gpus=8, vcpus=192, memory_gib=1536, efa= 4, rdma=False, gbps= 400, usd= 30.1312, link=_PCIE4  , efa_only=False, blocks=False, charts=_EVERY),
    _gpu_row("p4d.24xlarge",    "A100-40GB", gpus=8, vcpus= 96, memory_gib=1152, efa= 4, rdma=True , gbps= 400, usd= 21.9576, link=_NVLINK3, efa_only=False, blocks=True , charts=_EVERY),
    _gpu_row("p4de.24xlarge",   "A100-80GB", gpus=8, vcpus= 96, memory_gib=1152, efa= 4, rdma=True , gbps= 400, usd= 27.4470, link=_NVLINK3, efa_only=False, blocks=False, charts=_EVERY),
    _gpu_row("p5.48xlarge",     "H100",      gpus=8, vcpus=192, memory_gib=2048, efa=32, rdma=True , gbps=3200, usd= 55.0400, link=_NVLINK4, efa_only=True , blocks=True , charts=_EVERY),
    _gpu_row("p5e.48xlarge",    "H200",      gpus=8, vcpus=192, memory_gib=2048, efa=32, rdma=True , gbps=3200, usd= 63.2960, link=_NVLINK4, efa_only=True , blocks=True , charts=_EVERY),
    _gpu_row("p5en.48xlarge",   "H200",      gpus=8, vcpus=192, memory_gib=2048, efa=16, rdma=True , gbps=3200, usd= 63.2960, link=_NVLINK4, efa_only=True , blocks=True , charts=_EVERY),
    # One network card each; the single-GPU sizes are EFA nodes of one GPU (ac.html, network specifications). Prices:
    # the 8x/16x sizes as read from the AWS Price List API for us-east-2 (2026-10); g5.24xlarge, g6.24xlarge and
    # g6e.12xlarge are the list prices as recorded here without that re-read, p5.4xlarge and p6-b200 as a public
    # snapshot of the us-east-1 list quotes them: check them with `aws pricing get-products` before relying on them.
    _gpu_row("g5.8xlarge",      "A10G",      gpus=1, vcpus= 32, memory_gib= 128, efa= 1, rdma=False, gbps=  25, usd=   2.448, link=_PCIE4  , efa_only=False, blocks=False, charts=_SINCE_V0_5_30),
    _gpu_row("g5.16xlarge",     "A10G",      gpus=1, vcpus= 64, memory_gib= 256, efa= 1, rdma=False, gbps=  25, usd=   4.096, link=_PCIE4  , efa_only=False, blocks=False, charts=_SINCE_V0_5_30),
    _gpu_row("g5.24xlarge",     "A10G",      gpus=4, vcpus= 96, memory_gib= 384, efa= 1, rdma=False, gbps=  50, usd=   8.144, link=_PCIE4  , efa_only=False, blocks=False, charts=_SINCE_V0_5_30),
    _gpu_row("g6.8xlarge",      "L4",        gpus=1, vcpus= 32, memory_gib= 128, efa= 1, rdma=False, gbps=  25, usd=  2.0144, link=_PCIE4  , efa_only=False, blocks=False, charts=_SINCE_V0_5_30),
    _gpu_row("g6.16xlarge",     "L4",        gpus=1, vcpus= 64, memory_gib= 256, efa= 1, rdma=False, gbps=  25, usd=  3.3968, link=_PCIE4  , efa_only=False, blocks=False, charts=_SINCE_V0_5_30),
    _gpu_row("g6.24xlarge",     "L4",        gpus=4, vcpus= 96, memory_gib= 384, efa= 1, rdma=False, gbps=  50, usd=  6.6752, link=_PCIE4  , efa_only=False, blocks=False, charts=_SINCE_V0_5_30),
    _gpu_row("g6e.8xlarge",     "L40S",      gpus=1, vcpus= 32, memory_gib= 256, efa= 1, rdma=False, gbps=  25, usd= 4.52856, link=_PCIE4  , efa_only=False, blocks=False, charts=_SINCE_V0_5_30),
    _gpu_row("g6e.12xlarge",    "L40S",      gpus=4, vcpus= 48, memory_gib= 384, efa= 1, rdma=False, gbps= 100, usd=10.49264, link=_PCIE4  , efa_only=False, blocks=False, charts=_SINCE_V0_5_30),
    _gpu_row("g6e.16xlarge",    "L40S",      gpus=1, vcpus= 64, memory_gib= 512, efa= 1, rdma=False, gbps=  35, usd= 7.57719, link=_PCIE4  , efa_only=False, blocks=False, charts=_SINCE_V0_5_30),
    _gpu_row("p5.4xlarge",      "H100",      gpus=1, vcpus= 16, memory_gib= 256, efa= 1, rdma=True , gbps= 100, usd=    6.88, link=_NVLINK4, efa_only=True , blocks=False, charts=_SINCE_V0_5_30),
    # 8 network cards, 3,200 Gbit/s; GPUDirect RDMA read and write (EFA user guide); 1432 GiB of GPU memory.
    _gpu_row("p6-b200.48xlarge","B200",      gpus=8, vcpus=192, memory_gib=2048, efa= 8, rdma=True , gbps=3200, usd=113.9328, link=_NVLINK5, efa_only=True , blocks=False, charts=_SINCE_V0_5_30),
    # GPU types without EFA: known, so that choosing one fails with a helpful message, not "unknown".
    _gpu_row("g5.xlarge",       "A10G",      gpus=1, vcpus=  4, memory_gib=  16, efa= 0, rdma=False, gbps=  10, usd=   1.006, link=_PCIE4  , efa_only=False, blocks=False, charts=_NONE),
    _gpu_row("g6.xlarge",       "L4",        gpus=1, vcpus=  4, memory_gib=  16, efa= 0, rdma=False, gbps=  10, usd=  0.8048, link=_PCIE4  , efa_only=False, blocks=False, charts=_NONE),
    _gpu_row("g6.4xlarge",      "L4",        gpus=1, vcpus= 16, memory_gib=  64, efa= 0, rdma=False, gbps=  25, usd=  1.3232, link=_PCIE4  , efa_only=False, blocks=False, charts=_NONE),
    _gpu_row("g6e.xlarge",      "L40S",      gpus=1, vcpus=  4, memory_gib=  32, efa= 0, rdma=False, gbps=  20, usd=   1.861, link=_PCIE4  , efa_only=False, blocks=False, charts=_NONE),
)}

_BUILT_IN: dict[str, GpuInstanceType] = dict(GPU_INSTANCES)
"""The rows above, before any add_gpu_instance."""

SYSTEM_INSTANCES: dict[str, InstanceType] = {row.name: row for row in (
    InstanceType(name="m7i.large",   vcpus=2,  memory_gib=8,  usd_per_hour=0.1008),
    InstanceType(name="m7i.xlarge",  vcpus=4,  memory_gib=16, usd_per_hour=0.2016),
    InstanceType(name="m7i.2xlarge", vcpus=8,  memory_gib=32, usd_per_hour=0.4032),
    InstanceType(name="m7i.4xlarge", vcpus=16, memory_gib=64, usd_per_hour=0.8064),
    InstanceType(name="m6i.xlarge",  vcpus=4,  memory_gib=16, usd_per_hour=0.192),
    InstanceType(name="m6i.2xlarge", vcpus=8,  memory_gib=32, usd_per_hour=0.384),
    InstanceType(name="m5.xlarge",   vcpus=4,  memory_gib=16, usd_per_hour=0.192),
    InstanceType(name="m5.2xlarge",  vcpus=8,  memory_gib=32, usd_per_hour=0.384),
)}
# fmt: on

EKS_CONTROL_PLANE_USD_PER_HOUR = 0.10
NAT_GATEWAY_USD_PER_HOUR = 0.045
"""Per NAT gateway, before data processing charges."""


def _allowlists(chart: str) -> dict[str, frozenset[str]]:
    """Each recorded version of `chart` -> the instance types its allowlist holds: the rows that say so, and the
    types without a row."""
    return {
        key.split(" ", 1)[1]: beyond | {row.name for row in _BUILT_IN.values() if key in row.allowlisted_by}
        for key, beyond in CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW.items() if key.split(" ", 1)[0] == chart
    }


EFA_DEVICE_PLUGIN_ALLOWLISTS: dict[str, frozenset[str]] = _allowlists(EFA_PLUGIN_CHART)
"""aws-efa-k8s-device-plugin chart version -> the GPU types its allowlist holds (from the rows)."""
EFA_DRA_DRIVER_ALLOWLISTS: dict[str, frozenset[str]] = _allowlists(EFA_DRA_CHART)
"""aws-dranet chart version -> the GPU types its allowlist holds (from the rows)."""

# Views of the rows by one fact, for callers that ask by family or name.
GPU_LINKS: dict[str, GpuLink] = {row.family: row.gpu_link for row in _BUILT_IN.values()}
"""Intra-node GPU link by built-in family (each row carries its own: InstanceType.gpu_link)."""
EFA_ONLY_FAMILIES: frozenset[str] = frozenset(row.family for row in _BUILT_IN.values() if row.efa_only_secondary)
"""Built-in families whose secondary network cards get `efa-only` interfaces (InstanceType.efa_only_secondary)."""
CAPACITY_BLOCK_INSTANCES: frozenset[str] = frozenset(row.name for row in _BUILT_IN.values() if row.capacity_blocks)
"""Built-in GPU types that Capacity Blocks for ML offer (InstanceType.capacity_blocks)."""


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
        {"NetworkCardIndex": card, "DeviceIndex": 0 if card == 0 else 1, "InterfaceType": "efa" if card == 0 else secondary}
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
    memory = instance.memory_gib - max(_RESERVED_MEMORY_MIN_GIB, math.ceil(instance.memory_gib * _RESERVED_MEMORY_FRACTION))
    return WorkerPodResources(
        cpu=cpu,
        memory_gib=memory,
        gpus=instance.gpus,
        efa=instance.efa_interfaces,
        shm_gib=min(_SHM_MAX_GIB, int(memory * _SHM_FRACTION)),
    )


# What a system node has room for. The kubelet's reservations on an EKS AL2023 node (nodeadm, the formula of the EKS
# AMI's bootstrap): kube-reserved CPU is 6% of the first core, 1% of the second, 0.5% of the third and fourth and
# 0.25% of every other; kube-reserved memory is 255 MiB + 11 MiB per pod the node may run (maxPods, at most 110 on a
# node of fewer than 30 vCPUs: taken at 110 here, the most it can be); the hard eviction threshold is 100 MiB.
# The kernel reports less memory than EC2's figure (firmware and kernel reservations): we count 5% less.
_KUBE_RESERVED_CPU_SHARES = (60, 10, 5, 5)
_KUBE_RESERVED_CPU_REST = 2.5  # millicores per vCPU beyond the fourth
_KUBE_RESERVED_MEMORY_MIB = 255 + 11 * 110
_EVICTION_MEMORY_MIB = 100
_KERNEL_MEMORY_SHARE = 0.95
SYSTEM_NODE_NEIGHBOURS: dict[str, tuple[int, int]] = {
    "aws-node (VPC CNI)": (25, 0),
    "kube-proxy": (100, 0),
    "coredns (2 replicas: the only nodes without the GPU taint)": (200, 140),
    "kuberay-operator (its chart's requests)": (100, 512),
    "ray-job-submitter (k8s.cluster_spec)": (500, 1024),
}
"""The other pods a system node runs beside the Ray head, with their requests (millicores, MiB): EKS's add-ons'
DaemonSets and Deployments as EKS installs them, the KubeRay chart's values.yaml and the RayJob's submitter pod."""
_HEAD_MIN_CPU, _HEAD_MIN_MEMORY_GIB = 1, 2


def system_node_room(instance: InstanceType) -> tuple[int, int]:
    """(millicores, MiB) that a system node of `instance` has left for the Ray head: the kubelet's allocatable
    (capacity less kube-reserved and the eviction threshold) less the requests of SYSTEM_NODE_NEIGHBOURS."""
    shares = [*_KUBE_RESERVED_CPU_SHARES[:instance.vcpus]]
    reserved_cpu = sum(shares) + _KUBE_RESERVED_CPU_REST * max(0, instance.vcpus - len(_KUBE_RESERVED_CPU_SHARES))
    capacity_mib = instance.memory_gib * 1024 * _KERNEL_MEMORY_SHARE
    allocatable_cpu = instance.vcpus * 1000 - math.ceil(reserved_cpu)
    allocatable_mib = math.floor(capacity_mib) - _KUBE_RESERVED_MEMORY_MIB - _EVICTION_MEMORY_MIB
    cpu, memory = (sum(pod[i] for pod in SYSTEM_NODE_NEIGHBOURS.values()) for i in (0, 1))
    return allocatable_cpu - cpu, allocatable_mib - memory


def head_pod_resources(instance: InstanceType) -> tuple[int, int]:
    """(cpu, memory GiB) of the GPU-less Ray head on a system node: all but 2 vCPU and 6 GiB of the node (at least 1
    and 2), within the room the node has beside the other pods it runs (system_node_room). CatalogError when not even
    1 vCPU and 2 GiB fit: the head would never schedule."""
    room_cpu, room_mib = system_node_room(instance)
    cpu = min(max(_HEAD_MIN_CPU, instance.vcpus - 2), room_cpu // 1000)
    memory = min(max(_HEAD_MIN_MEMORY_GIB, instance.memory_gib - 6), room_mib // 1024)
    if cpu < _HEAD_MIN_CPU or memory < _HEAD_MIN_MEMORY_GIB:
        raise CatalogError(
            f"{instance.name} ({instance.vcpus} vCPU, {instance.memory_gib} GiB) leaves {room_cpu}m CPU and {room_mib} "
            f"MiB beside the system pods, less than the Ray head's {_HEAD_MIN_CPU} CPU and {_HEAD_MIN_MEMORY_GIB} GiB: "
            f"choose a larger system instance type")
    return cpu, memory


# -- the preflight's all-reduce floor over EFA ------------------------------------------------------------------------
# The floor is a share (FLOOR_MARGIN) of what a healthy pair of nodes reaches: all-reduce bus bandwidth at 1 GiB, as
# nccl-tests reports it and training.preflight measures it. What a healthy node reaches is core.network's figure for
# its family at 1 GiB, the same the step model (core.perf) uses: with GPUDirect RDMA the family's published share of
# the aggregate EFA line rate; without it (g5, g6, g6e) at most the host-staged 3 GB/s (aws/aws-ofi-nccl#547); never
# above the intra-node link (the row's gpu_link, data sheet), which the ring also crosses.
# Measure your own nodes (`ray-efa calibrate` on a finished run suggests the floor) and set preflightMinBusbwGbps.
EFA_LINE_SHARE = network.EFA_SHARE["p4d"][0]
"""Share of the aggregate EFA line rate NCCL's all-reduce reaches at 1 GiB on p4d (NVIDIA/nccl#527); each family's own
is core.network.EFA_SHARE."""
HOST_STAGED_EFA_GB_S = network.HOST_STAGED_GB_S
"""All-reduce bus bandwidth a healthy EFA pair reaches without GPUDirect RDMA, GB/s (core.network)."""
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
    """The all-reduce bus bandwidth (GB/s, at 1 GiB) a healthy pair of `instance` nodes reaches over EFA: core.network's
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
    "memoryBandwidthGbS": ((int, float), False, "device-memory bandwidth per GPU, GB/s, for the step model's optimizer "
                                                "time (a catalog GPU's otherwise)"),
    "vcpus": (int, True, "vCPUs per node"),
    "memoryGib": (int, True, "host memory per node, GiB"),
    "efaInterfaces": (int, True, "EFA interfaces per node: one per network card with EFA (>= 1)"),
    "networkGbps": (int, True, "aggregate network bandwidth per node, Gbit/s"),
    "usdPerHour": ((int, float), True, "on-demand price per node, USD per hour"),
    "gpudirectRdma": (bool, False, "EFA reads and writes GPU memory directly (FI_EFA_USE_DEVICE_RDMA=1); default false"),
    "gpuLinkGbS": ((int, float), False, "GPU-to-GPU bandwidth inside the node per direction, GB/s; default PCIe Gen4 32"),
    "efaOnlySecondary": (bool, False, "`efa-only` interfaces on the cards after the first (no IP each; VPC CNI v1.18.4 "
                                      "or later); default false, as for every row"),
    "capacityBlocks": (bool, False, "Capacity Blocks for ML offer the type (capacityReservationType capacity-block); "
                                    "default false"),
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
            problems.append(f"{key} must be {'a number' if isinstance(kind, tuple) else kind.__name__}: {meaning}, "
                            f"got {value!r}")
    if problems:
        raise CatalogError("; ".join(problems))
    name = str(description["name"])
    known_gpu = GPUS.get(str(description["gpuName"]))
    for key in ("gpuMemoryGib", "peakBf16Tflops", "memoryBandwidthGbS"):
        if known_gpu is None and description.get(key) is None:
            problems.append(f"{key} is required for a GPU the catalog does not know ({description['gpuName']}; known: "
                            f"{', '.join(GPUS)}): {DESCRIPTION_KEYS[key][2]}")
    checks = [
        (_INSTANCE_NAME.match(name) is not None, f"name must be an EC2 instance type like p6-b300.48xlarge, got {name!r}"),
        (not new_name or (name not in _BUILT_IN and name not in SYSTEM_INSTANCES),
         f"name {name} is in the catalog already: choose it by gpuInstanceType alone"),
        (int(description["efaInterfaces"]) >= 1,  # type: ignore[call-overload]
         f"efaInterfaces must be >= 1: {name} needs EFA for the GPU nodes' all-reduce (a GPU type without EFA is "
         f"refused like g6.xlarge), got {description['efaInterfaces']}"),
        (int(description["gpus"]) >= 1, f"gpus must be >= 1, got {description['gpus']}"),  # type: ignore[call-overload]
    ]
    for key in ("vcpus", "memoryGib", "networkGbps", "usdPerHour", "gpuMemoryGib", "peakBf16Tflops",
                "memoryBandwidthGbS", "gpuLinkGbS"):
        value = description.get(key)
        checks.append((value is None or float(value) > 0, f"{key} must be > 0, got {value}"))  # type: ignore[arg-type]
    problems += [message for ok, message in checks if not ok]
    if problems:
        raise CatalogError("; ".join(problems))
    gpu = known_gpu or Gpu(
        name=str(description["gpuName"]), memory_gib=float(description["gpuMemoryGib"]),  # type: ignore[arg-type]
        peak_bf16_tflops=float(description["peakBf16Tflops"]), device_names=(str(description["gpuName"]),),  # type: ignore[arg-type]
        memory_bandwidth_gb_s=float(description["memoryBandwidthGbS"]),  # type: ignore[arg-type]
    )
    link = description.get("gpuLinkGbS")
    gpu_link = None if link is None else _RECORDED_LINKS.get(
        float(link), GpuLink(name=f"described ({link} GB/s)", gb_s=float(link)))  # type: ignore[arg-type]
    # Only what the description states; _gpu_type gives the rest the defaults every row gets.
    row = _gpu_type(
        name=name, vcpus=int(description["vcpus"]), memory_gib=int(description["memoryGib"]),  # type: ignore[call-overload]
        usd_per_hour=float(description["usdPerHour"]), gpu=gpu, gpus=int(description["gpus"]),  # type: ignore[arg-type, call-overload]
        efa_interfaces=int(description["efaInterfaces"]),  # type: ignore[call-overload]
        gpudirect_rdma=description.get("gpudirectRdma"), network_gbps=int(description["networkGbps"]),  # type: ignore[call-overload]
        gpu_link=gpu_link,
        efa_only_secondary=description.get("efaOnlySecondary"), capacity_blocks=description.get("capacityBlocks"),
        described=True,
    )
    pod = worker_pod_resources(row)
    if pod.cpu < 1 or pod.memory_gib < 1:
        raise CatalogError(f"vcpus and memoryGib leave no room for a worker pod next to the node's reserve "
                           f"(vcpus {row.vcpus}, memoryGib {row.memory_gib})")
    return row


def usable_gpu_instance(instance: InstanceType) -> GpuInstanceType:
    """`instance` when the job can use it: a built-in EFA row, or a row of your own passing describe_gpu_instance's
    checks (EFA, GPUs, room for the worker pod). Raises CatalogError otherwise."""
    if _BUILT_IN.get(instance.name) == instance:
        return gpu_instance(instance.name)
    if instance.gpu is None:
        raise CatalogError(f"{instance.name} has no GPU")
    if instance.name in _BUILT_IN:
        raise CatalogError(f"{instance.name} is in the catalog with other facts: pass its name, or a type of your own")
    _describe_row(instance)
    if isinstance(instance, GpuInstanceType):
        return instance
    # An InstanceType with a GPU: the same facts as a GpuInstanceType, with the defaults of any row (its link).
    return _gpu_type(**{field.name: getattr(instance, field.name) for field in dataclasses.fields(instance)})


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
        "name": instance.name, "gpus": instance.gpus, "gpuName": instance.gpu.name,
        "gpuMemoryGib": instance.gpu.memory_gib, "peakBf16Tflops": instance.gpu.peak_bf16_tflops,
        "memoryBandwidthGbS": instance.gpu.memory_bandwidth_gb_s or None, "vcpus": instance.vcpus,
        "memoryGib": instance.memory_gib, "efaInterfaces": instance.efa_interfaces,
        "networkGbps": instance.network_gbps, "usdPerHour": instance.usd_per_hour,
        "gpudirectRdma": instance.gpudirect_rdma, "gpuLinkGbS": instance.gpu_link.gb_s if instance.gpu_link else None,
        "efaOnlySecondary": instance.efa_only_secondary, "capacityBlocks": instance.capacity_blocks,
    }
    return {key: value for key, value in description.items() if value is not None}


def _describe_row(instance: InstanceType) -> GpuInstanceType:
    """describe_gpu_instance's checks on a row built in Python."""
    return describe_gpu_instance(description_of(instance), new_name=False)
