"""Step-model constants per GPU model (catalog.Gpu.name), each with its source and whether measured or assumed.

core.perf's compute efficiency (the share of the data-sheet bf16 peak that the compiled decoder layers reach) and
its fp8 efficiency were fitted on one H200 (bench/calibrate.py, docs/BENCHMARKS.md). Applied unlabeled to every GPU
they predicted 53% MFU for a 72 W L4, and lent NVLink's achieved share to PCIe. Here each family has its own, and
`ray-efa plan` says which are measured here, which are fitted to published runs (core/data/published_runs.csv,
core.evidence) and which are assumed. `ray-efa calibrate` on a finished run replaces the compute
efficiency with the run's own (core.calibrate), which is how an assumed constant becomes a measured one.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["STATUSES", "GpuConstants", "GPU_CONSTANTS", "LINK_SHARES", "constants_for", "link_share", "describe"]

STATUSES = ("measured", "published", "assumed")
"""How a constant is known: measured here (or by `ray-efa calibrate`), fitted to published runs (core/data/
published_runs.csv, core.evidence), or assumed (a prior; decisions that depend on it stay on the safe side)."""

_H200_COMPUTE = 0.63
"""The H200 fit: bench/calibrate.py on one H200 gave 0.666 (658 TFLOP/s of 989 over four shapes), which predicted
the project's own measured steps up to 10% fast (docs/BENCHMARKS.md); refitted with tools/fit_constants.py to the measured and
published H200 rows of core/data/published_runs.csv (the project's bf16 runs on one H200, 48,930-51,828 tokens/s at 8 x 4096; Trainy's torchtitan on 8 x 8
H200)."""
_H200_FP8 = 0.419
"""The H200 fp8 fit: tools/fit_constants.py on the H200 fp8 rows of core/data/published_runs.csv (the project's 12 x 4096
fp8 run on one H200, 1.17x its bf16; Trainy's torchtitan float8 on 8 x 8 H200), with the casts timed at memory
bandwidth (core.fp8) and the k/v projections left in bf16."""
_PUBLISHED = "core/data/published_runs.csv"
_H200_EAGER = 0.946
"""Eager vs compiled layers on the H200: 35,434 vs 37,465 tokens/s/GPU, 2 x H200, 4x4096, unchunked
(the maintainers' reference notes, outside the repository): the share of a compiled step's compute rate an eager step reaches."""
_LENT_EAGER = ("the H200's measured eager/compiled share (0.946), lent: no same-machine compile pair recorded for this "
               "family (eager rows fit its compute efficiency; a compiled prediction leans on this ratio)")


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuConstants:
    compute_efficiency: float
    """Share of the bf16 peak in fwd+bwd of compiled layers."""
    compute_status: str
    """measured, published or assumed (STATUSES)."""
    compute_source: str
    fp8_compute_efficiency: float
    """Share of the fp8 peak the converted fp8 linears reach (0 where the GPU has no fp8)."""
    fp8_status: str
    fp8_source: str
    eager_speed: float = _H200_EAGER
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


_NO_FP8 = "no fp8 tensor cores (NVIDIA data sheet): precision fp8 is refused"

GPU_CONSTANTS: dict[str, GpuConstants] = {
    "H200": GpuConstants(
        compute_efficiency=_H200_COMPUTE, compute_status="measured",
        compute_source="bench/calibrate.py on one H200 (docs/BENCHMARKS.md); held against published torchtitan H200 "
                       f"runs ({_PUBLISHED})",
        fp8_compute_efficiency=_H200_FP8, fp8_status="measured",
        fp8_source="bench/speed.py on one H200: fp8 1.16x bf16 at 8 x 4096, 0.70x at 2 x 2048 (docs/BENCHMARKS.md)",
        eager_speed=_H200_EAGER, eager_status="measured",
        eager_source="eager vs compiled on 2 x H200, 4 x 4096, the same machine (the maintainers' reference notes)", band=0.17),
    "H100": GpuConstants(
        compute_efficiency=0.552, compute_status="published",
        compute_source="fitted to published FSDP runs on H100 SXM (AWS's torchtitan sample on 4 x p5.48xlarge, "
                       f"llm-foundry's H100 tables; {_PUBLISHED}) with the H100's own eager share: not the H200's, "
                       "the same GH100 die at 3.35 instead of 4.8 TB/s",
        fp8_compute_efficiency=0.460, fp8_status="published",
        fp8_source="fitted to the same-machine fp8/bf16 pairs of torchtitan's H100 tables (Llama 3.1 8B, 8 and 128 "
                   "GPUs, compiled: 1.28x and 1.29x; torchao's README: up to 1.25x at 8 GPUs / 8B), so power and "
                   f"clock cancel ({_PUBLISHED}; tools/fit_constants.py)",
        eager_speed=0.858, eager_status="published",
        eager_source="fitted to the same-machine eager/compiled pairs of torchtitan's H100 tables (Llama 3.1 8B, "
                     "5,762 vs 6,667 and 5,605 vs 6,514 tokens/s/GPU: compile 1.16x; "
                     "https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_h100_202412_torchtitan.md)",
        band=0.24),
    "B200": GpuConstants(
        compute_efficiency=0.30, compute_status="assumed",
        compute_source="a prior: no FSDP run on B200 recorded here with its configuration; issue 38's independent check "
                       "found published B200 FSDP runs 2.1-2.3x below what the H200's 0.666 predicted (about 0.30 "
                       "of the 2,250 TFLOP/s peak); held below NeMo's "
                       "Megatron-LM/Transformer Engine Llama3-8B on DGX-B200 (26,006 tokens/s/GPU in fp8, NeMo 25.02 "
                       "performance summary): a faster stack than FSDP2 with torchao",
        fp8_compute_efficiency=0.20, fp8_status="assumed",
        fp8_source="a prior (two thirds of the bf16 share, as on the H100 and H200), held below NeMo's Megatron-LM fp8 Llama3-8B on DGX-B200 (26,006 tokens/s/GPU); "
                   "torchao's MXFP8 on B200 was 1.22-1.28x bf16 at Llama3-70B scale (PyTorch blog, Crusoe B200)"),
    "A100-40GB": GpuConstants(
        compute_efficiency=0.692, compute_status="published",
        compute_source=f"fitted to llm-foundry's A100-40GB FSDP tables, 8-128 GPUs ({_PUBLISHED})",
        fp8_compute_efficiency=0.0, fp8_status="published", fp8_source=_NO_FP8),
    "A100-80GB": GpuConstants(
        compute_efficiency=0.70, compute_status="published",
        compute_source="fitted to llm-foundry's A100-80GB FSDP tables and torchtitan's 64 x A100 runs "
                       f"({_PUBLISHED})",
        fp8_compute_efficiency=0.0, fp8_status="published", fp8_source=_NO_FP8, band=0.14),
    "L40S": GpuConstants(
        compute_efficiency=0.45, compute_status="assumed",
        compute_source="a prior: a 350 W Ada part sustains well under its boost-clock peak under dense tensor load; "
                       "about two thirds of the H200's share, until `ray-efa calibrate` on an L40S run replaces it",
        fp8_compute_efficiency=0.30, fp8_status="assumed",
        fp8_source="a prior: no published fp8 training run on L40S; precision auto stays bf16 until `ray-efa "
                   "calibrate` on an fp8 run of this family measures it"),
    "L4": GpuConstants(
        compute_efficiency=0.45, compute_status="assumed",
        compute_source="a prior: a 72 W Ada part is power-capped under dense tensor load (its clock drops below the "
                       "2,040 MHz boost the 121 TFLOP/s peak assumes); two thirds of the H200's share, until `ray-efa "
                       "calibrate` on an L4 run replaces it",
        fp8_compute_efficiency=0.29, fp8_status="assumed",
        fp8_source="a prior: no published fp8 training run on L4, and what exists points the other way (fp8 0.70x "
                   "bf16 at 2 x 2048 on an H200; the L4 has 16x less memory bandwidth for 8x less compute); precision "
                   "auto stays bf16 until `ray-efa calibrate` on an fp8 run of this family measures it"),
    "A10G": GpuConstants(
        compute_efficiency=0.40, compute_status="assumed",
        compute_source="a prior: a 150 W Ampere part, power-capped like the L4 but less so",
        fp8_compute_efficiency=0.0, fp8_status="published", fp8_source=_NO_FP8),
}

_DEFAULT = GpuConstants(
    compute_efficiency=0.40, compute_status="assumed",
    compute_source="a prior for a GPU the model has no constants for (a described type): below the H200's measured "
                   "0.666, as every other family's",
    fp8_compute_efficiency=0.25, fp8_status="assumed", fp8_source="a prior for a GPU the model has no constants for")

LINK_SHARES: dict[str, tuple[float, bool, str]] = {
    "NVLink": (0.72, True, "all-reduce bus bandwidth 325 GB/s over NVLink 4 (450 per direction), 2 x H200"),
    "PCIe": (0.65, False, "a prior: NCCL over {link} without NVLink (through the host bridge) reaches less of its "
                          "{gb_s:g} GB/s than NVSwitch does of NVLink; no PCIe node measured here"),
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
        "compute_efficiency": {"value": family.compute_efficiency, "status": family.compute_status,
                               "source": family.compute_source},
        "fp8_compute_efficiency": {"value": family.fp8_compute_efficiency, "status": family.fp8_status,
                                   "source": family.fp8_source},
        "intra_node_link_share": {"value": share, "status": "measured" if link_measured else "assumed",
                                  "source": link_source},
    }
