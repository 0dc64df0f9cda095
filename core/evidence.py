"""Published training throughput, as data, and the step model (core.perf) held to it.

core/data/published_runs.csv holds measured and published runs, one a row, each with its source, GPU, model, nodes,
GPUs per node, sequence, micro batch, accumulation, precision, compile, activation checkpointing, stack and reported
tokens/s per GPU. Rows are split in two: `fit` (the per-family constants of core.catalog.gpu_constants were fitted to them) and
`heldout` (never fitted: tests/core/test_evidence.py holds the model to them). A row's role says how it is judged:
- comparable: an FSDP stack (FSDP1 or FSDP2, eager or compiled); the plan's prediction for the same configuration
  should land within TOLERANCE of it.
- ceiling: a faster stack (Megatron-LM with Transformer Engine); the plan must never exceed it by more than
  CEILING_MARGIN.
- context: kept for a term other than a family's constant (the scale term), not comparable (the note says why).

How a published configuration is planned: its own architecture (the model_type column: MODELS holds Llama's as
Llama, from the models' config.json; MPT, no family of the train function, as the Llama-shaped layer of the same
weights, its 4d GELU MLP as the SwiGLU width 8d/3), FSDP over nodes x GPUs of its
catalog instance (the network the plan would use there), chunked loss (ours), and checkpointing as run: none, selective
(torchtitan's per-op policy, recomputing every other matrix product: core.perf.recompute_factor) or full.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal, cast

from ray_efa.core import catalog, perf
from ray_efa.core.catalog import gpu_constants
from ray_efa.core.models import ModelPreset
from ray_efa.core.settings import TrainingSettings

__all__ = [
    "DATA",
    "MODELS",
    "PLANNED_AS",
    "TOLERANCE",
    "CEILING_MARGIN",
    "PublishedRun",
    "runs",
    "predict",
    "Verdict",
    "judge",
    "LEVERS",
    "pairs",
    "ratio",
    "source_of",
    "fit_family",
    "SourceCheck",
    "leave_one_source_out",
]

DATA = Path(__file__).parent / "data" / "published_runs.csv"
TOLERANCE = 0.15
"""A comparable held-out run is matched when the prediction is within +-15% of it."""
CEILING_MARGIN = 0.05
"""The plan may exceed a faster stack's published figure by at most 5%."""


def _llama(name: str, d: int, layers: int, heads: int, kv: int, inter: int, vocab: int) -> ModelPreset:
    return ModelPreset(
        name=name,
        model_type="llama",
        hidden_size=d,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        intermediate_size=inter,
        vocab_size=vocab,
        max_position_embeddings=131_072,
        tie_word_embeddings=False,
    )


def _mpt(name: str, d: int, layers: int, heads: int) -> ModelPreset:
    # MPT is no family transformers builds with this project's train function: planned as the Llama-shaped layer of
    # the same weights (its 4d GELU MLP as a gated one of 8d/3), tied embeddings, no biases, as MPT has none
    return ModelPreset(
        name=name,
        model_type="llama",
        hidden_size=d,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        intermediate_size=round(8 * d / 3),
        vocab_size=50_368,
        max_position_embeddings=131_072,
        tie_word_embeddings=True,
    )


PLANNED_AS = {"mpt": "llama"}
"""A published run's model_type the plan has no family for, and the family whose shapes stand in for it."""


MODELS: dict[str, ModelPreset] = {
    m.name: m
    for m in (
        # Llama: the models' config.json (Meta); MPT: llm-foundry's scripts/train/yamls/pretrain/mpt-*.yaml
        _llama("llama3.1-8b", 4096, 32, 32, 8, 14_336, 128_256),
        _llama("llama3-8b", 4096, 32, 32, 8, 14_336, 128_256),
        _llama("llama3-70b", 8192, 80, 64, 8, 28_672, 128_256),
        _llama("llama2-13b", 5120, 40, 40, 40, 13_824, 32_000),
        _llama("llama2-70b", 8192, 80, 64, 8, 28_672, 32_000),
        _mpt("mpt-760m", 1536, 24, 12),
        _mpt("mpt-1b", 2048, 24, 16),
        _mpt("mpt-3b", 2560, 32, 20),
        _mpt("mpt-7b", 4096, 32, 32),
        _mpt("mpt-13b", 5120, 40, 40),
        _mpt("mpt-30b", 7168, 48, 56),
        _mpt("mpt-70b", 8192, 80, 64),
    )
}


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishedRun:
    """One row of core/data/published_runs.csv."""

    split: str
    """fit, heldout or context (neither)."""
    role: str
    """comparable, ceiling or context."""
    gpu: str
    instance_type: str
    """The catalog row whose GPU and network the plan uses for it."""
    nodes: int
    gpus_per_node: int
    model: str
    model_type: str
    """The run's own architecture (config.json's model_type): qwen2, llama, or mpt (PLANNED_AS)."""
    seq: int
    micro_batch: int
    grad_accumulation: int
    precision: str
    compile: bool
    checkpointing: str
    """none, selective or full."""
    stack: str
    tokens_per_s_per_gpu: float
    date: str
    source: str
    note: str

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@cache
def runs() -> tuple[PublishedRun, ...]:
    """Every row of the data file."""
    with DATA.open(newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        if (
            r["precision"] not in ("bf16", "fp8")
            or r["split"] not in ("fit", "heldout", "context")
            or r["role"] not in ("comparable", "ceiling", "context")
        ):
            raise ValueError(
                f"{DATA}: a row with precision {r['precision']!r}, split {r['split']!r}, role "
                f"{r['role']!r}: precision bf16 or fp8, split fit, heldout or context, role comparable, ceiling "
                "or context"
            )  # context rows are neither fitted nor judged
        out.append(
            PublishedRun(
                split=r["split"],
                role=r["role"],
                gpu=r["gpu"],
                instance_type=r["instance_type"],
                nodes=int(r["nodes"]),
                gpus_per_node=int(r["gpus_per_node"]),
                model=r["model"],
                model_type=r["model_type"],
                seq=int(r["seq"]),
                micro_batch=int(r["micro_batch"]),
                grad_accumulation=int(r["grad_accumulation"]),
                precision=r["precision"],
                compile=r["compile"] == "true",
                checkpointing=r["checkpointing"],
                stack=r["stack"],
                tokens_per_s_per_gpu=float(r["tokens_per_s_per_gpu"]),
                date=r["date"],
                source=r["source"],
                note=r["note"],
            )
        )
    return tuple(out)


_CHECKPOINTING: dict[str, Literal["selective"] | bool] = {"none": False, "selective": "selective", "full": True}
"""The CSV's checkpointing column as activationCheckpointing."""


def _preset(run: PublishedRun) -> ModelPreset:
    """The run's architecture, of its own family (or PLANNED_AS's stand-in); ValueError if the CSV's model_type is not
    the one planned."""
    if run.model in MODELS:
        arch = MODELS[run.model]
    else:
        from ray_efa.core.models import model_preset

        arch = model_preset(run.model)
    if PLANNED_AS.get(run.model_type, run.model_type) != arch.model_type:
        raise ValueError(f"{DATA}: {run.model} is a {run.model_type} run, planned as {arch.model_type}")
    return arch


def predict(run: PublishedRun) -> float:
    """The plan's tokens/s per GPU for the run's configuration (see the module docstring)."""
    instance = catalog.GPU_INSTANCES[run.instance_type]
    t = TrainingSettings(
        micro_batch=run.micro_batch,
        seq_len=min(run.seq, 32_768),
        grad_accumulation=run.grad_accumulation,
        precision=cast(Literal["bf16", "fp8"], run.precision),
        compile=run.compile,
        activation_checkpointing=_CHECKPOINTING[run.checkpointing],
        sharding="fsdp",
        grad_reduce_dtype="fp32",
    )
    if run.seq != t.seq_len:
        raise ValueError(f"{run.model}: seq {run.seq} beyond what the settings take")
    prediction = perf.predict(
        t,
        instance=instance,
        nodes=run.nodes,
        gpus_per_node=run.gpus_per_node,
        network="efa",
        strategy="fsdp",
        model=_preset(run),
    )
    return prediction.tokens_per_s_per_gpu


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """How the model does on a set of published runs."""

    within: int
    """Comparable runs predicted within TOLERANCE."""
    comparable: int
    medians: dict[str, float]
    """Per GPU family, the median of predicted / published - 1 over its comparable runs."""
    ceilings_exceeded: tuple[tuple[PublishedRun, float], ...]
    """Ceiling runs the prediction exceeds by more than CEILING_MARGIN, with predicted / published."""
    errors: tuple[tuple[PublishedRun, float], ...]
    """Every comparable run with predicted / published - 1."""

    @property
    def share_within(self) -> float:
        return self.within / self.comparable if self.comparable else 0.0


def judge(split: str = "heldout") -> Verdict:
    """The model against the runs of `split` (fit or heldout)."""
    errors: list[tuple[PublishedRun, float]] = []
    exceeded: list[tuple[PublishedRun, float]] = []
    for run in runs():
        if run.split != split or run.role == "context":
            continue
        ratio = predict(run) / run.tokens_per_s_per_gpu
        if run.role == "ceiling":
            if ratio > 1 + CEILING_MARGIN:
                exceeded.append((run, ratio))
        else:
            errors.append((run, ratio - 1))
    by_gpu: dict[str, list[float]] = {}
    for run, error in errors:
        by_gpu.setdefault(run.gpu, []).append(error)
    return Verdict(
        within=sum(abs(e) <= TOLERANCE for _, e in errors),
        comparable=len(errors),
        medians={gpu: statistics.median(values) for gpu, values in by_gpu.items()},
        ceilings_exceeded=tuple(exceeded),
        errors=tuple(errors),
    )


def fit_scale(gpu: str) -> float:
    """The factor that, times a family's compute efficiency, makes the geometric mean of its fit runs' predicted /
    published 1 (what tools use to refit core.catalog.gpu_constants; not used at run time)."""
    ratios = [
        predict(r) / r.tokens_per_s_per_gpu
        for r in runs()
        if r.split == "fit" and r.role == "comparable" and r.gpu == gpu
    ]
    return math.exp(-statistics.fmean(math.log(x) for x in ratios)) if ratios else 1.0


# -- same-machine ratios and validation by source ------------------------------------------------------------------

LEVERS = ("compile", "fp8")
"""The levers whose gain is fitted from same-machine pairs: compile (eager vs compiled bf16) and fp8 (compiled bf16
vs compiled fp8)."""


def _pair_key(run: PublishedRun) -> tuple[object, ...]:
    return (
        run.source,
        run.gpu,
        run.model,
        run.nodes,
        run.gpus_per_node,
        run.seq,
        run.micro_batch,
        run.grad_accumulation,
        run.checkpointing,
    )


def pairs(lever: str, gpu: str | None = None) -> tuple[tuple[PublishedRun, PublishedRun], ...]:
    """Same-machine pairs of `lever` (LEVERS): two rows of one source, GPU, model, nodes, GPUs per node, sequence,
    micro batch, accumulation and checkpointing that differ only in the lever, as (without, with). Any split: a
    pair's ratio holds where its absolute numbers do not (torchtitan's 500 W H100s: the power cancels)."""

    def wanted(a: PublishedRun, b: PublishedRun) -> bool:
        if lever == "compile":
            return a.precision == b.precision == "bf16" and not a.compile and b.compile
        return a.compile and b.compile and a.precision == "bf16" and b.precision == "fp8"

    rows = [
        r for r in runs() if (gpu is None or r.gpu == gpu) and r.role != "ceiling" and source_of(r) not in _LEFT_OUT
    ]
    return tuple((a, b) for a in rows for b in rows if _pair_key(a) == _pair_key(b) and wanted(a, b))


def ratio(lever: str, gpu: str, *, predicted: bool) -> float | None:
    """The geometric mean gain of `lever` over the family's pairs, predicted or published; None without a pair."""
    found = pairs(lever, gpu)
    if not found:
        return None
    if predicted:
        logs = [math.log(predict(b) / predict(a)) for a, b in found]
    else:
        logs = [math.log(b.tokens_per_s_per_gpu / a.tokens_per_s_per_gpu) for a, b in found]
    return math.exp(statistics.fmean(logs))


def source_of(run: PublishedRun) -> str:
    """The source a run is validated by: its repository or site (llm-foundry's tables, torchtitan's, AWS's sample,
    Trainy's, NeMo's, this project's docs/BENCHMARKS.md), so that no held-out row shares its source with a fitted one."""
    text = run.source
    if text.startswith("https://github.com/"):
        return "/".join(text.split("/")[3:5])
    if text.startswith("https://"):
        return text.split("/")[2]
    return text.split(" ")[0]


@contextmanager
def _constants(gpu: str, **values: float) -> Iterator[None]:
    """core.catalog.gpu_constants' row of `gpu` with `values` while inside (what a fit tries); the row as it was after."""
    before = gpu_constants.GPU_CONSTANTS[gpu]
    gpu_constants.GPU_CONSTANTS[gpu] = dataclasses.replace(before, **values)
    try:
        yield
    finally:
        gpu_constants.GPU_CONSTANTS[gpu] = before


def _bisect(error: Callable[[float], float], low: float, high: float) -> float:
    """The x in [low, high] where a rising error(x) crosses zero."""
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if error(mid) < 0 else (low, mid)
    return (low + high) / 2


def _log_error(rows: list[PublishedRun]) -> float:
    return statistics.fmean(math.log(predict(r) / r.tokens_per_s_per_gpu) for r in rows)


def fit_family(gpu: str, rows: list[PublishedRun]) -> dict[str, float]:
    """The family's constants fitted to `rows` (comparable runs) and its same-machine pairs: the eager share from
    compile pairs, the compute efficiency from the bf16 rows, the fp8 efficiency from fp8 pairs (else fp8 rows).
    Only what has evidence is fitted; the rest stays as core.catalog.gpu_constants has it."""
    fitted: dict[str, float] = {}
    family = gpu_constants.GPU_CONSTANTS[gpu]
    bf16 = [r for r in rows if r.gpu == gpu and r.precision == "bf16"]
    fp8_rows = [r for r in rows if r.gpu == gpu and r.precision == "fp8"]
    with _constants(gpu):
        for _ in range(3):  # the eager share and the compute efficiency move each other a little: alternate
            published = ratio("compile", gpu, predicted=False)
            if published is not None:

                def compile_error(x: float, published: float = published) -> float:
                    with _constants(gpu, eager_speed=x):
                        return -math.log(ratio("compile", gpu, predicted=True) or 1.0) + math.log(published)

                fitted["eager_speed"] = _bisect(compile_error, 0.3, 1.0)
                gpu_constants.GPU_CONSTANTS[gpu] = dataclasses.replace(
                    gpu_constants.GPU_CONSTANTS[gpu], eager_speed=fitted["eager_speed"]
                )
            if bf16:

                def compute_error(x: float) -> float:
                    with _constants(gpu, compute_efficiency=x):
                        return _log_error(bf16)

                fitted["compute_efficiency"] = _bisect(compute_error, 0.05, 1.0)
                gpu_constants.GPU_CONSTANTS[gpu] = dataclasses.replace(
                    gpu_constants.GPU_CONSTANTS[gpu], compute_efficiency=fitted["compute_efficiency"]
                )
        published_fp8 = ratio("fp8", gpu, predicted=False) if family.fp8_compute_efficiency else None
        if published_fp8 is not None:

            def fp8_error(x: float) -> float:
                with _constants(gpu, fp8_compute_efficiency=x):
                    return math.log(ratio("fp8", gpu, predicted=True) or 1.0) - math.log(published_fp8)

            fitted["fp8_compute_efficiency"] = _bisect(fp8_error, 0.05, 1.0)
        elif fp8_rows and family.fp8_compute_efficiency:

            def fp8_rows_error(x: float) -> float:
                with _constants(gpu, fp8_compute_efficiency=x):
                    return _log_error(fp8_rows)

            fitted["fp8_compute_efficiency"] = _bisect(fp8_rows_error, 0.05, 1.0)
    return fitted


@dataclass(frozen=True, kw_only=True, slots=True)
class SourceCheck:
    """Validation by source: each source's comparable runs predicted with constants fitted without that source."""

    errors: tuple[tuple[PublishedRun, float], ...]
    """Every held-out comparable run (its source left out of the fit) with predicted / published - 1."""
    uncovered: tuple[PublishedRun, ...]
    """Runs of a family no other source has: nothing to fit them from once their source is left out."""
    ceilings_exceeded: tuple[tuple[PublishedRun, float], ...]

    @property
    def within(self) -> int:
        return sum(abs(e) <= TOLERANCE for _, e in self.errors)

    def band(self, gpu: str, share: float = 0.9) -> float | None:
        """The error that `share` of the family's held-out runs stay within (the observed spread), or None."""
        values = sorted(abs(e) for r, e in self.errors if r.gpu == gpu)
        if not values:
            return None
        return values[min(len(values) - 1, math.ceil(share * len(values)) - 1)]


def leave_one_source_out() -> SourceCheck:
    """Each source's comparable runs, predicted with every family's constants refitted (fit_family) on the other
    sources' comparable runs and pairs only: what the plan would say of a source it has never seen."""
    comparable = [r for r in runs() if r.role == "comparable"]
    errors: list[tuple[PublishedRun, float]] = []
    uncovered: list[PublishedRun] = []
    exceeded: list[tuple[PublishedRun, float]] = []
    for source in sorted({source_of(r) for r in runs() if r.role != "context"}):
        others = [r for r in comparable if source_of(r) != source]
        mine = [r for r in runs() if source_of(r) == source and r.role in ("comparable", "ceiling")]
        for gpu in sorted({r.gpu for r in mine}):
            if gpu not in gpu_constants.GPU_CONSTANTS:
                continue
            family_rows = [r for r in others if r.gpu == gpu]
            if not family_rows and mine[0].role != "ceiling":
                uncovered.extend(r for r in mine if r.gpu == gpu)
                continue
            with _constants(gpu):
                with _without_pairs_of(source):
                    fitted = fit_family(gpu, family_rows) if family_rows else {}
                with _constants(gpu, **fitted):
                    for r in (r for r in mine if r.gpu == gpu):
                        ratio_ = predict(r) / r.tokens_per_s_per_gpu
                        if r.role == "ceiling":
                            if ratio_ > 1 + CEILING_MARGIN:
                                exceeded.append((r, ratio_))
                        else:
                            errors.append((r, ratio_ - 1))
    return SourceCheck(errors=tuple(errors), uncovered=tuple(uncovered), ceilings_exceeded=tuple(exceeded))


_LEFT_OUT: list[str] = []


@contextmanager
def _without_pairs_of(source: str) -> Iterator[None]:
    """pairs() leaves out `source`'s rows while inside (a held-out source lends no ratio either)."""
    _LEFT_OUT.append(source)
    try:
        yield
    finally:
        _LEFT_OUT.pop()
