"""The catalog's rows and views (core.catalog), derived from the family records (core.catalog.families): the GPU rows,
the GPU models, the links, the chart allowlists' rows, efa-only families and Capacity Blocks, for callers that ask by
family or name; and the system node types with the fixed costs beside them. Sources and the choice of types:
core.catalog's docstring.
"""

from __future__ import annotations

from ray_efa.core.catalog.families import FAMILIES
from ray_efa.core.catalog.types import (
    CHART_GPU_ALLOWLISTS,
    EFA_DRA_CHART,
    EFA_PLUGIN_CHART,
    CatalogError,
    Gpu,
    GpuInstanceType,
    GpuLink,
    InstanceType,
)

__all__ = [
    "GPUS",
    "gpu_for_device_name",
    "RECORDED_LINKS",
    "GPU_LINKS",
    "GPU_INSTANCES",
    "BUILT_IN_GPU_INSTANCES",
    "SYSTEM_INSTANCES",
    "CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW",
    "EFA_DEVICE_PLUGIN_ALLOWLISTS",
    "EFA_DRA_DRIVER_ALLOWLISTS",
    "EKS_CONTROL_PLANE_USD_PER_HOUR",
    "NAT_GATEWAY_USD_PER_HOUR",
    "EFA_ONLY_FAMILIES",
    "CAPACITY_BLOCK_INSTANCES",
]


def _gpus() -> dict[str, Gpu]:
    """Each GPU model of the families, once: two families of one GPU must agree on it and on its constants."""
    gpus: dict[str, Gpu] = {}
    for family in FAMILIES:
        first = next((other for other in FAMILIES if other.gpu.name == family.gpu.name), family)
        if (first.gpu, first.constants) != (family.gpu, family.constants):
            raise CatalogError(
                f"families {first.name} and {family.name} describe the GPU {family.gpu.name} differently"
            )
        gpus.setdefault(family.gpu.name, family.gpu)
    return gpus


GPUS: dict[str, Gpu] = _gpus()
"""Every GPU model of the built-in families, by name."""


def gpu_for_device_name(device_name: str) -> Gpu | None:
    """The catalog GPU whose name appears in a torch device name (e.g. "NVIDIA H200"), or None."""
    # Longest match first so "A100-SXM4-80GB" never resolves to a shorter, wrong pattern.
    candidates = [
        (len(pattern), gpu) for gpu in GPUS.values() for pattern in gpu.device_names if pattern in device_name
    ]
    return max(candidates, key=lambda c: c[0])[1] if candidates else None


RECORDED_LINKS: dict[float, GpuLink] = {family.gpu_link.gb_s: family.gpu_link for family in FAMILIES}
"""A described link of a recorded link's bandwidth is that link (its name says its kind to core.catalog.gpu_constants)."""


def _plugin_listed_since(row: GpuInstanceType) -> int:
    """How late the EFA device plugin's chart came to list `row`: the index of the oldest recorded version that lists
    it (oldest first), or the number of versions for a type none lists (one without EFA)."""
    versions = sorted(
        (key for key in CHART_GPU_ALLOWLISTS if key.startswith(f"{EFA_PLUGIN_CHART} ")),
        key=lambda key: tuple(int(part) for part in key.rsplit(" v", 1)[1].split(".")),
    )
    return next((i for i, key in enumerate(versions) if key in row.allowlisted_by), len(versions))


# fmt: off
BUILT_IN_GPU_INSTANCES: dict[str, GpuInstanceType] = {row.name: row for row in sorted(
    (row for family in FAMILIES for row in family.rows()), key=_plugin_listed_since)}
"""Every size of every built-in family, before any add_gpu_instance: the types the EFA device plugin has listed
longest first, then those it came to list later, then those without EFA; within each, the families' order and each
family's sizes in its record's order (the order of every listing: the docs' instance table, `plan --recommend`)."""
GPU_INSTANCES: dict[str, GpuInstanceType] = dict(BUILT_IN_GPU_INSTANCES)
"""The GPU rows this process knows: the built-in ones, and those add_gpu_instance added."""

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

CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW: dict[str, frozenset[str]] = {
    chart: names - set(BUILT_IN_GPU_INSTANCES) for chart, names in CHART_GPU_ALLOWLISTS.items()
}
"""The GPU types each recorded chart version lists that have no built-in row (a described type may be one)."""


def _allowlists(chart: str) -> dict[str, frozenset[str]]:
    """Each recorded version of `chart` -> the instance types its allowlist holds: the rows that say so, and the
    types without a row."""
    return {
        key.split(" ", 1)[1]: beyond
        | {row.name for row in BUILT_IN_GPU_INSTANCES.values() if key in row.allowlisted_by}
        for key, beyond in CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW.items()
        if key.split(" ", 1)[0] == chart
    }


EFA_DEVICE_PLUGIN_ALLOWLISTS: dict[str, frozenset[str]] = _allowlists(EFA_PLUGIN_CHART)
"""aws-efa-k8s-device-plugin chart version -> the GPU types its allowlist holds (from the rows)."""
EFA_DRA_DRIVER_ALLOWLISTS: dict[str, frozenset[str]] = _allowlists(EFA_DRA_CHART)
"""aws-dranet chart version -> the GPU types its allowlist holds (from the rows)."""

# Views of the rows by one fact, for callers that ask by family or name.
GPU_LINKS: dict[str, GpuLink] = {family.name: family.gpu_link for family in FAMILIES}
"""Intra-node GPU link by built-in family (each row carries its own: InstanceType.gpu_link)."""
EFA_ONLY_FAMILIES: frozenset[str] = frozenset(family.name for family in FAMILIES if family.efa_only_secondary)
"""Built-in families whose secondary network cards get `efa-only` interfaces (InstanceType.efa_only_secondary)."""
CAPACITY_BLOCK_INSTANCES: frozenset[str] = frozenset(
    row.name for row in BUILT_IN_GPU_INSTANCES.values() if row.capacity_blocks
)
"""Built-in GPU types that Capacity Blocks for ML offer (InstanceType.capacity_blocks)."""
