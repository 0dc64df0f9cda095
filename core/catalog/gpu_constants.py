"""Step-model constants per GPU model (catalog.Gpu.name), each with its source and whether measured or assumed.

core.perf's compute efficiency (the share of the data-sheet bf16 peak that the compiled decoder layers reach) and
its fp8 efficiency were fitted on one H200 (bench/calibrate.py, docs/BENCHMARKS.md). Applied unlabeled to every GPU
they predicted 53% MFU for a 72 W L4, and lent NVLink's achieved share to PCIe. Here each family has its own, and
`ray-efa plan` says which are measured here, which are fitted to published runs (core/data/published_runs.csv,
core.evidence) and which are assumed. Each GPU's constants are part of its family's record (core.catalog.families,
core.catalog.types.GpuConstants): GPU_CONSTANTS is derived from them. `ray-efa calibrate` on a finished run replaces the
compute efficiency with the run's own (core.calibrate), which is how an assumed constant becomes a measured one.
"""

from __future__ import annotations

from ray_efa.core.catalog.families import FAMILIES
from ray_efa.core.catalog.types import STATUSES, GpuConstants

__all__ = ["STATUSES", "GpuConstants", "GPU_CONSTANTS", "LINK_SHARES", "constants_for", "link_share", "describe"]

GPU_CONSTANTS: dict[str, GpuConstants] = {family.gpu.name: family.constants for family in FAMILIES}
"""The step-model constants of each built-in GPU model (catalog.Gpu.name), from its families' records (two families
of one GPU agree on them: core.catalog.rows checks it). A dict that core.evidence's fits replace entries of while
they try values."""

_DEFAULT = GpuConstants(
    compute_efficiency=0.40,
    compute_status="assumed",
    compute_source="a prior for a GPU the model has no constants for (a described type): below the H200's measured "
    "0.666, as every other family's",
    fp8_compute_efficiency=0.25,
    fp8_status="assumed",
    fp8_source="a prior for a GPU the model has no constants for",
)

LINK_SHARES: dict[str, tuple[float, bool, str]] = {
    "NVLink": (0.72, True, "all-reduce bus bandwidth 325 GB/s over NVLink 4 (450 per direction), 2 x H200"),
    "PCIe": (
        0.65,
        False,
        "a prior: NCCL over {link} without NVLink (through the host bridge) reaches less of its "
        "{gb_s:g} GB/s than NVSwitch does of NVLink; no PCIe node measured here",
    ),
}
"""(share of the data-sheet GPU link bandwidth NCCL reaches, measured, source) by link kind (its name's first word);
a source's {link} and {gb_s} are the link's own name and bandwidth."""


def constants_for(gpu_name: str) -> GpuConstants:
    """The step-model constants of a GPU model (catalog.Gpu.name); a prior for one without its own."""
    return GPU_CONSTANTS.get(gpu_name, _DEFAULT)


def link_share(link_name: str, gb_s: float | None = None) -> tuple[float, bool, str]:
    """(share, measured, source) of an intra-node link (catalog.GpuLink.name, e.g. "PCIe Gen5 x16"), its source
    naming that link (not another generation's): NVLink's measured share for NVLink, the PCIe prior otherwise."""
    kind = "NVLink" if link_name.startswith("NVLink") else "PCIe"
    share, measured, source = LINK_SHARES[kind]
    return share, measured, source.format(link=link_name or "PCIe", gb_s=gb_s or 0)


def describe(gpu_name: str, link_name: str, link_gb_s: float | None = None) -> dict[str, dict[str, object]]:
    """`plan --json`'s "constants": each step-model constant of this GPU and link, its value, its status
    (measured, published or assumed) and its source."""
    family = constants_for(gpu_name)
    share, link_measured, link_source = link_share(link_name, link_gb_s)
    return {
        "compute_efficiency": {
            "value": family.compute_efficiency,
            "status": family.compute_status,
            "source": family.compute_source,
        },
        "fp8_compute_efficiency": {
            "value": family.fp8_compute_efficiency,
            "status": family.fp8_status,
            "source": family.fp8_source,
        },
        "intra_node_link_share": {
            "value": share,
            "status": "measured" if link_measured else "assumed",
            "source": link_source,
        },
    }
