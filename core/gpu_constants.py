"""Step-model constants per GPU model (catalog.Gpu.name: "H200", "L4"...) and per intra-node link kind, each with its
source and whether it was measured or is assumed.

core.perf's compute efficiency (the share of the data-sheet bf16 peak that the compiled decoder layers reach) and
its fp8 efficiency were fitted on one H200 (bench/calibrate.py, docs/BENCHMARKS.md). Applied unlabeled to every GPU
they predicted 53% MFU for a 72 W L4, and lent NVLink's achieved share to PCIe. Here each GPU model has its own, and
`ray-efa plan` says which are measured and which assumed. `ray-efa calibrate` on a finished run replaces the compute
efficiency with the run's own (core.calibrate), which is how an assumed constant becomes a measured one.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GpuConstants", "GPU_CONSTANTS", "LINK_SHARES", "constants_for", "link_share", "describe"]

_H200_COMPUTE = 0.666
"""The H200 fit: 658 TFLOP/s of 989 over four shapes (bench/calibrate.py on one H200)."""
_H200_FP8 = 0.426
"""The H200 fp8 fit: 1.16x bf16's tokens/s at 8 x 4096 under torchao float8 (bench/speed.py)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuConstants:
    compute_efficiency: float
    """Share of the bf16 peak in fwd+bwd of compiled layers."""
    fp8_compute_efficiency: float
    """Share of the fp8 peak the fp8 linears reach (0 where the GPU has no fp8)."""
    measured: bool
    """True: fitted to runs of this GPU; False: a prior, to be replaced by `ray-efa calibrate`."""
    source: str


GPU_CONSTANTS: dict[str, GpuConstants] = {
    "H200": GpuConstants(compute_efficiency=_H200_COMPUTE, fp8_compute_efficiency=_H200_FP8, measured=True,
                            source="bench/calibrate.py and bench/speed.py on one H200 (docs/BENCHMARKS.md)"),
    "H100": GpuConstants(compute_efficiency=_H200_COMPUTE, fp8_compute_efficiency=_H200_FP8, measured=False,
                            source="the H200's: the same GH100 die, SM count and clocks (989 TFLOP/s bf16 dense); "
                                   "only memory size and bandwidth differ, and the optimizer is timed by bandwidth"),
    "B200": GpuConstants(compute_efficiency=_H200_COMPUTE, fp8_compute_efficiency=_H200_FP8, measured=False,
                            source="the H200's, a prior: no B200 run measured here"),
    "A100-40GB": GpuConstants(compute_efficiency=0.52, fp8_compute_efficiency=0.0, measured=False,
                                 source="published: Megatron-LM reached 163 TFLOP/s per A100, 52% of 312 (Narayanan "
                                        "et al., SC'21)"),
    "A100-80GB": GpuConstants(compute_efficiency=0.52, fp8_compute_efficiency=0.0, measured=False,
                                 source="published: Megatron-LM reached 163 TFLOP/s per A100, 52% of 312 (Narayanan "
                                        "et al., SC'21)"),
    "L40S": GpuConstants(compute_efficiency=0.45, fp8_compute_efficiency=0.30, measured=False,
                            source="a prior: a 350 W Ada part sustains well under its boost-clock peak under dense "
                                   "tensor load; about two thirds of the H200's share"),
    "L4": GpuConstants(compute_efficiency=0.45, fp8_compute_efficiency=0.29, measured=False,
                          source="a prior: a 72 W Ada part is power-capped under dense tensor load (its clock drops "
                                 "below the 2,040 MHz boost the 121 TFLOP/s peak assumes); two thirds of the H200's "
                                 "share, until `ray-efa calibrate` on an L4 run replaces it"),
    "A10G": GpuConstants(compute_efficiency=0.40, fp8_compute_efficiency=0.0, measured=False,
                            source="a prior: a 150 W Ampere part, power-capped like the L4 but less so"),
}

_DEFAULT = GpuConstants(compute_efficiency=0.40, fp8_compute_efficiency=0.25, measured=False,
                           source="a prior for a GPU the model has no constants for (a described type): below the "
                                  "H200's measured 0.666, as every other GPU's")

LINK_SHARES: dict[str, tuple[float, bool, str]] = {
    "NVLink": (0.72, True, "all-reduce bus bandwidth 325 GB/s over NVLink 4 (450 per direction), 2 x H200"),
    "PCIe": (0.65, False, "a prior: NCCL over PCIe Gen4 x16 without NVLink (through the host bridge) reaches less of "
                          "the 32 GB/s than NVSwitch does of NVLink; no PCIe node measured here"),
}
"""(share of the data-sheet GPU link bandwidth NCCL reaches, measured, source) by link kind (its name's first word)."""


def constants_for(gpu_name: str) -> GpuConstants:
    """The step-model constants of a GPU model (catalog.Gpu.name); a prior for one without its own."""
    return GPU_CONSTANTS.get(gpu_name, _DEFAULT)


def link_share(link_name: str) -> tuple[float, bool, str]:
    """(share, measured, source) of an intra-node link (catalog.GpuLink.name, e.g. "PCIe Gen4 x16")."""
    kind = link_name.split()[0] if link_name else ""
    return LINK_SHARES.get(kind, LINK_SHARES["PCIe"] if kind != "NVLink" else LINK_SHARES["NVLink"])


def describe(gpu_name: str, link_name: str) -> dict[str, dict[str, object]]:
    """`plan --json`'s "constants": each step-model constant of this GPU and link, its value, measured or
    assumed, and its source."""
    gpu = constants_for(gpu_name)
    share, link_measured, link_source = link_share(link_name)
    label = "measured" if gpu.measured else "assumed"
    return {
        "compute_efficiency": {"value": gpu.compute_efficiency, "status": label, "source": gpu.source},
        "fp8_compute_efficiency": {"value": gpu.fp8_compute_efficiency, "status": label, "source": gpu.source},
        "intra_node_link_share": {"value": share, "status": "measured" if link_measured else "assumed",
                                  "source": link_source},
    }
