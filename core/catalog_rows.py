"""The built-in rows of the catalog (core.catalog): the GPU instance types with their facts and sources, the system
node types, the fixed costs beside them, and the views of the rows that callers ask by family or name (the chart
allowlists, the links, efa-only families, Capacity Blocks). Sources and the choice of types: core.catalog's docstring.
"""

from __future__ import annotations

from ray_efa.core.catalog_types import (
    _EVERY,
    _NONE,
    _NVLINK3,
    _NVLINK4,
    _NVLINK5,
    _PCIE4,
    _SINCE_V0_5_30,
    CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW,
    EFA_DRA_CHART,
    EFA_PLUGIN_CHART,
    GPUS,
    GpuInstanceType,
    GpuLink,
    InstanceType,
    _gpu_type,
)

__all__ = [
    "GPU_LINKS",
    "GPU_INSTANCES",
    "SYSTEM_INSTANCES",
    "EFA_DEVICE_PLUGIN_ALLOWLISTS",
    "EFA_DRA_DRIVER_ALLOWLISTS",
    "EKS_CONTROL_PLANE_USD_PER_HOUR",
    "NAT_GATEWAY_USD_PER_HOUR",
    "EFA_ONLY_FAMILIES",
    "CAPACITY_BLOCK_INSTANCES",
]


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
    # p5e: no On-Demand price in any region (core/data/on_demand_prices.csv: no-price or not-offered); its figure is the
    # us-east-2 Capacity Block rate core.prices records, never shown as an On-Demand price (it was p5en's, copied).
    _gpu_row("p5e.48xlarge",    "H200",      gpus=8, vcpus=192, memory_gib=2048, efa=32, rdma=True , gbps=3200, usd= 43.2600, link=_NVLINK4, efa_only=True , blocks=True , charts=_EVERY),
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
