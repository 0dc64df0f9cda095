"""The catalog's types (core.catalog): a GPU model, the GPUs' link inside a node, an instance type and a GPU instance
type, the EFA chart allowlists recorded beyond the rows, and the one constructor every GPU row goes through.

core.catalog_rows holds the built-in rows made of these; core.catalog the lookups and derivations, and re-exports
both. Nothing here imports aws_cdk, cdk8s or torch (the training job imports it inside the container).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "CatalogError",
    "Gpu",
    "GpuLink",
    "DEFAULT_GPU_LINK",
    "gpu_link",
    "InstanceType",
    "GpuInstanceType",
    "GPUS",
    "EFA_PLUGIN_CHART",
    "EFA_DRA_CHART",
    "CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW",
    "gpu_for_device_name",
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
"""A described link of a recorded link's bandwidth is that link (its name says its kind to core.gpu_constants)."""
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
