"""The catalog's types (core.catalog): a GPU model and its step-model constants, the GPUs' link inside a node, an
instance type and a GPU instance type, a GPU instance family (the one record a GPU type is added by: core.catalog.families),
the GPU types each recorded EFA chart version lists, and the one constructor every GPU row goes through.

core.catalog.families holds the built-in families made of these; core.catalog.rows the rows and views derived from them;
core.catalog the lookups and derivations, and re-exports all three. Nothing here imports aws_cdk, cdk8s or torch (the
training job imports it inside the container).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = [
    "CatalogError",
    "Gpu",
    "GpuConstants",
    "STATUSES",
    "H200_EAGER_SPEED",
    "GpuLink",
    "PCIE4",
    "NVLINK3",
    "NVLINK4",
    "NVLINK5",
    "DEFAULT_GPU_LINK",
    "gpu_link",
    "InstanceType",
    "GpuInstanceType",
    "EfaShare",
    "InstanceSize",
    "GpuFamily",
    "EFA_PLUGIN_CHART",
    "EFA_DRA_CHART",
    "CHART_GPU_ALLOWLISTS",
    "build_gpu_row",
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


STATUSES = ("measured", "published", "assumed")
"""How a constant is known: measured here (or by `ray-efa calibrate`), fitted to published runs (core/data/
published_runs.csv, core.evidence), or assumed (a prior; decisions that depend on it stay on the safe side)."""

H200_EAGER_SPEED = 0.946
"""Eager vs compiled layers on the H200: 35,434 vs 37,465 tokens/s/GPU, 2 x H200, 4x4096, unchunked
(the maintainers' reference notes, outside the repository): the share of a compiled step's compute rate an eager
step reaches (the H200's record states it measured; a family without a same-machine pair of its own is lent it)."""
_LENT_EAGER = (
    "the H200's measured eager/compiled share (0.946), lent: no same-machine compile pair recorded for this "
    "family (eager rows fit its compute efficiency; a compiled prediction leans on this ratio)"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuConstants:
    """The step model's constants of one GPU model (core.perf), each with its status and source (core.catalog.gpu_constants
    reads them from the families' records)."""

    compute_efficiency: float
    """Share of the bf16 peak in fwd+bwd of compiled layers."""
    compute_status: str
    """measured, published or assumed (STATUSES)."""
    compute_source: str
    fp8_compute_efficiency: float
    """Share of the fp8 peak the converted fp8 linears reach (0 where the GPU has no fp8)."""
    fp8_status: str
    fp8_source: str
    eager_speed: float = H200_EAGER_SPEED
    """Share of the compiled compute rate an eager step reaches: fitted per family to same-machine pairs (eager and
    compiled, all else equal) in core/data/published_runs.csv, so power and clock differences cancel."""
    eager_status: str = "assumed"
    eager_source: str = _LENT_EAGER
    band: float | None = None
    """+- share that 90% of the family's runs stayed within when their source was left out of the fit
    (core.evidence.leave_one_source_out, tools/fit_constants.py): the observed spread; None where no other source has
    the family (plan --recommend then uses its status's range)."""

    @property
    def measured(self) -> bool:
        """The compute efficiency was measured on this GPU (not published elsewhere, not assumed)."""
        return self.compute_status == "measured"

    @property
    def fp8_evidenced(self) -> bool:
        """The fp8 efficiency rests on a measurement or a published run: what precision auto needs to pick fp8."""
        return self.fp8_status in ("measured", "published")

    @property
    def source(self) -> str:
        return self.compute_source


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuLink:
    """How the GPUs inside one node talk to each other."""

    name: str
    gb_s: float
    """Data-sheet bandwidth per GPU per direction, GB/s."""


PCIE4 = GpuLink(name="PCIe Gen4 x16", gb_s=32.0)  # A10G, L4 and L40S data sheets: "PCIe Gen4 x16: 64 GB/s" both ways
NVLINK3 = GpuLink(name="NVLink 3 (NVSwitch)", gb_s=300.0)  # A100 SXM4 data sheet: 600 GB/s both ways
NVLINK4 = GpuLink(name="NVLink 4 (NVSwitch)", gb_s=450.0)  # H100/H200 SXM data sheets: 900 GB/s both ways
NVLINK5 = GpuLink(name="NVLink 5 (NVSwitch)", gb_s=900.0)  # HGX B200 data sheet: 1.8 TB/s per GPU both ways
DEFAULT_GPU_LINK: GpuLink = PCIE4
"""The link of a GPU row that states none (a described type without gpuLinkGbS): PCIe, the slowest recorded."""


def gpu_link(instance: InstanceType) -> GpuLink:
    """The intra-node GPU link of a GPU instance type (its row's)."""
    if instance.gpu_link is None:
        raise CatalogError(f"no intra-node GPU link recorded for {instance.name}")
    return instance.gpu_link


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
    type, as "chart version" (e.g. "aws-efa-k8s-device-plugin v0.5.30"; derived from CHART_GPU_ALLOWLISTS)."""
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


class EfaShare(NamedTuple):
    """What NCCL's all-reduce reaches over EFA between GPUDirect RDMA nodes of a family (core.catalog.network)."""

    share: float
    """Share of the aggregate EFA line rate at >= 1 GiB per collective."""
    status: str
    """measured, published or assumed (STATUSES)."""
    source: str


@dataclass(frozen=True, kw_only=True, slots=True)
class InstanceSize:
    """One size of a GPU instance family: the facts that differ between its sizes."""

    name: str
    """The EC2 instance type, the family's name before the dot (p5.48xlarge)."""
    gpus: int
    vcpus: int
    memory_gib: int
    efa_interfaces: int
    """One per network card with EFA; 0: no EFA (the type is known so that choosing it fails with a helpful message)."""
    network_gbps: int
    usd_per_hour: float
    """On-Demand Linux in us-east-2 (core.prices: other regions are core/data/on_demand_prices.csv's rows)."""
    capacity_blocks: bool = False
    """Whether Capacity Blocks for ML offer this size (EC2 User Guide, supported instance types)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuFamily:
    """One GPU instance family, the one record of its types (core.catalog.families): its GPU model and that GPU's
    step-model constants, the GPUs' link inside a node, the EFA facts every size shares, NCCL's share of the EFA
    line, and its sizes. Every row, view and table keyed by instance type, family or GPU name derives from these
    (core.catalog.rows, core.catalog.gpu_constants, core.catalog.network); prices stay data (core/data/on_demand_prices.csv)."""

    name: str
    """The family as EC2 names it: the instance type's part before the dot (p5, p6-b200)."""
    gpu: Gpu
    constants: GpuConstants
    """The step model's constants of this family's GPU (the same for every family of that GPU)."""
    gpu_link: GpuLink
    gpudirect_rdma: bool
    """Whether EFA can read and write GPU memory directly (FI_EFA_USE_DEVICE_RDMA=1)."""
    efa_only_secondary: bool = False
    """Whether network cards after the first get `efa-only` interfaces (InstanceType.efa_only_secondary)."""
    efa_share: EfaShare | None = None
    """NCCL's share of the EFA line with GPUDirect RDMA; None: core.catalog.network's default (p5's published share), or no
    GPUDirect RDMA (host-staged: core.catalog.network.HOST_STAGED_GB_S)."""
    sizes: tuple[InstanceSize, ...]

    def __post_init__(self) -> None:
        wrong = [size.name for size in self.sizes if size.name.split(".")[0] != self.name]
        if wrong or not self.sizes:
            raise CatalogError(
                f"family {self.name}: every size is named {self.name}.<size>, and there is one at least "
                f"(got {', '.join(wrong) or 'none'})"
            )
        if self.efa_share is not None and not self.gpudirect_rdma:
            raise CatalogError(
                f"family {self.name}: an EFA share is NCCL's with GPUDirect RDMA; without it every "
                "family is host-staged (core.catalog.network.HOST_STAGED_GB_S)"
            )

    def rows(self) -> tuple[GpuInstanceType, ...]:
        """The catalog row of each size, built as every GPU row is (build_gpu_row)."""
        return tuple(
            build_gpu_row(
                name=size.name,
                gpu=self.gpu,
                gpus=size.gpus,
                vcpus=size.vcpus,
                memory_gib=size.memory_gib,
                efa_interfaces=size.efa_interfaces,
                gpudirect_rdma=self.gpudirect_rdma,
                network_gbps=size.network_gbps,
                usd_per_hour=size.usd_per_hour,
                gpu_link=self.gpu_link,
                efa_only_secondary=self.efa_only_secondary,
                capacity_blocks=size.capacity_blocks,
            )
            for size in self.sizes
        )


# The chart allowlists this project has read (values key supportedInstanceLabels.values): each chart schedules its
# DaemonSet only on listed types and fails silently (DESIRED 0) on others. Source: ../shared/helm-values/PROVENANCE.md
# (aws/eks-charts stable/aws-efa-k8s-device-plugin; stable/aws-dranet 1.0.0 values.yaml).
EFA_PLUGIN_CHART: str = "aws-efa-k8s-device-plugin"
EFA_DRA_CHART: str = "aws-dranet"

_LISTED_SINCE_V0_5_28 = frozenset(
    {
        "g5.12xlarge",
        "g5.48xlarge",
        "g6.12xlarge",
        "g6.48xlarge",
        "g6e.24xlarge",
        "g6e.48xlarge",
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
    }
)
_LISTED_SINCE_V0_5_30 = _LISTED_SINCE_V0_5_28 | frozenset(
    {
        "g4dn.8xlarge",
        "g4dn.12xlarge",
        "g4dn.16xlarge",
        "g4dn.metal",
        "g5.8xlarge",
        "g5.16xlarge",
        "g5.24xlarge",
        "g6.8xlarge",
        "g6.16xlarge",
        "g6.24xlarge",
        "g6e.8xlarge",
        "g6e.12xlarge",
        "g6e.16xlarge",
        "g7.8xlarge",
        "g7.12xlarge",
        "g7.24xlarge",
        "g7.48xlarge",
        "g7e.8xlarge",
        "g7e.12xlarge",
        "g7e.24xlarge",
        "g7e.48xlarge",
        "gr6.8xlarge",
        "p3dn.24xlarge",
        "p5.4xlarge",
        "p6-b200.48xlarge",
        "p6-b300.48xlarge",
        "p6e-gb200.36xlarge",
        "p6e-gb300.36xlarge",
    }
)
CHART_GPU_ALLOWLISTS: dict[str, frozenset[str]] = {
    # v0.5.30's allowlist has 303 entries (PROVENANCE.md lists them all); these are its GPU types, built in or not,
    # so that a row or a described type is checked against what the chart really lists.
    f"{EFA_PLUGIN_CHART} v0.5.30": _LISTED_SINCE_V0_5_30,
    f"{EFA_PLUGIN_CHART} v0.5.29": _LISTED_SINCE_V0_5_28,
    f"{EFA_PLUGIN_CHART} v0.5.28": _LISTED_SINCE_V0_5_28,
    f"{EFA_DRA_CHART} 1.0.0": _LISTED_SINCE_V0_5_30 - {"g7.8xlarge", "g7.12xlarge", "g7.24xlarge", "g7.48xlarge"},
}
"""The GPU types each recorded chart version lists ("chart version": names), facts of the chart: a row is listed by
the versions whose list holds its name (InstanceType.allowlisted_by), so a new row needs no edit here. Its keys are
every chart version recorded."""


def build_gpu_row(**facts: Any) -> GpuInstanceType:
    """Every GPU row, built in or described, is made here, so a fact a row does not state gets the same default:
    the dataclass's (DEFAULT_GPU_LINK, no efa-only, no Capacity Blocks), and the chart versions whose recorded
    allowlist names it."""
    given = {key: value for key, value in facts.items() if value is not None}
    if not given.get("allowlisted_by"):
        given["allowlisted_by"] = frozenset(
            chart for chart, names in CHART_GPU_ALLOWLISTS.items() if given["name"] in names
        )
    return GpuInstanceType(**given)
