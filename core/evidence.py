"""Published training throughput, as data, and the step model (core.perf) held to it.

core/data/published_runs.csv holds measured and published runs, one a row, each with its source, GPU, model, nodes,
GPUs per node, sequence, micro batch, accumulation, precision, compile, activation checkpointing, stack and reported
tokens/s per GPU. Rows are split in two: `fit` (the per-family constants of core.gpu_constants were fitted to them) and
`heldout` (never fitted: tests/core/test_evidence.py holds the model to them). A row's role says how it is judged:
- comparable: an FSDP stack (FSDP1 or FSDP2, eager or compiled); the plan's prediction for the same configuration
  should land within TOLERANCE of it.
- ceiling: a faster stack (Megatron-LM with Transformer Engine); the plan must never exceed it by more than
  CEILING_MARGIN.
- context: kept for a term other than a family's constant (the scale term), not comparable (the note says why).

How a published configuration is planned: its architecture as a Qwen2-shaped preset (MODELS: Llama's and MPT's
dimensions; MPT's 4d GELU MLP as the SwiGLU width with the same weights, 8d/3), FSDP over nodes x GPUs of its
catalog instance (the network the plan would use there), chunked loss (ours), and checkpointing "selective" planned
as none (torchtitan's per-op selective checkpointing recomputes little).
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal, cast

from ray_efa.core import catalog, perf
from ray_efa.core.models import ModelPreset
from ray_efa.core.settings import TrainingSettings

__all__ = ["DATA", "MODELS", "TOLERANCE", "CEILING_MARGIN", "PublishedRun", "runs", "predict", "Verdict", "judge"]

DATA = Path(__file__).parent / "data" / "published_runs.csv"
TOLERANCE = 0.15
"""A comparable held-out run is matched when the prediction is within +-15% of it."""
CEILING_MARGIN = 0.05
"""The plan may exceed a faster stack's published figure by at most 5%."""


def _llama(name: str, d: int, layers: int, heads: int, kv: int, inter: int, vocab: int) -> ModelPreset:
    return ModelPreset(name=name, hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=kv, intermediate_size=inter, vocab_size=vocab,
                       max_position_embeddings=131_072, tie_word_embeddings=False)


def _mpt(name: str, d: int, layers: int, heads: int) -> ModelPreset:
    return ModelPreset(name=name, hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=heads, intermediate_size=round(8 * d / 3), vocab_size=50_368,
                       max_position_embeddings=131_072, tie_word_embeddings=True)


MODELS: dict[str, ModelPreset] = {m.name: m for m in (
    # Llama: the models' config.json (Meta); MPT: llm-foundry's scripts/train/yamls/pretrain/mpt-*.yaml
    _llama("llama3.1-8b", 4096, 32, 32, 8, 14_336, 128_256),
    _llama("llama3-8b", 4096, 32, 32, 8, 14_336, 128_256),
    _llama("llama3-70b", 8192, 80, 64, 8, 28_672, 128_256),
    _llama("llama2-13b", 5120, 40, 40, 40, 13_824, 32_000),
    _llama("llama2-70b", 8192, 80, 64, 8, 28_672, 32_000),
    _mpt("mpt-760m", 1536, 24, 12), _mpt("mpt-1b", 2048, 24, 16), _mpt("mpt-3b", 2560, 32, 20),
    _mpt("mpt-7b", 4096, 32, 32), _mpt("mpt-13b", 5120, 40, 40), _mpt("mpt-30b", 7168, 48, 56),
    _mpt("mpt-70b", 8192, 80, 64),
)}


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
        if r["precision"] not in ("bf16", "fp8") or r["split"] not in ("fit", "heldout", "context") or r["role"] not in (
                "comparable", "ceiling", "context"):
            raise ValueError(f"{DATA}: a row with precision {r['precision']!r}, split {r['split']!r}, role "
                             f"{r['role']!r}: precision bf16 or fp8, split fit, heldout or context, role comparable, ceiling "
                             "or context")  # context rows are neither fitted nor judged
        out.append(PublishedRun(
            split=r["split"], role=r["role"], gpu=r["gpu"], instance_type=r["instance_type"], nodes=int(r["nodes"]),
            gpus_per_node=int(r["gpus_per_node"]), model=r["model"], seq=int(r["seq"]),
            micro_batch=int(r["micro_batch"]), grad_accumulation=int(r["grad_accumulation"]),
            precision=r["precision"], compile=r["compile"] == "true", checkpointing=r["checkpointing"],
            stack=r["stack"], tokens_per_s_per_gpu=float(r["tokens_per_s_per_gpu"]), date=r["date"],
            source=r["source"], note=r["note"]))
    return tuple(out)


def _preset(run: PublishedRun) -> ModelPreset:
    if run.model in MODELS:
        return MODELS[run.model]
    from ray_efa.core.models import model_preset

    return model_preset(run.model)


def predict(run: PublishedRun) -> float:
    """The plan's tokens/s per GPU for the run's configuration (see the module docstring)."""
    instance = catalog.GPU_INSTANCES[run.instance_type]
    t = TrainingSettings(micro_batch=run.micro_batch, seq_len=min(run.seq, 32_768),
                         grad_accumulation=run.grad_accumulation,
                         precision=cast(Literal["bf16", "fp8"], run.precision), compile=run.compile,
                         activation_checkpointing=run.checkpointing == "full", sharding="fsdp",
                         grad_reduce_dtype="fp32")
    if run.seq != t.seq_len:
        raise ValueError(f"{run.model}: seq {run.seq} beyond what the settings take")
    prediction = perf.predict(t, instance=instance, nodes=run.nodes, gpus_per_node=run.gpus_per_node,
                              network="efa", strategy="fsdp", model=_preset(run))
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
    return Verdict(within=sum(abs(e) <= TOLERANCE for _, e in errors), comparable=len(errors),
                   medians={gpu: statistics.median(values) for gpu, values in by_gpu.items()},
                   ceilings_exceeded=tuple(exceeded), errors=tuple(errors))


def fit_scale(gpu: str) -> float:
    """The factor that, times a family's compute efficiency, makes the geometric mean of its fit runs' predicted /
    published 1 (what tools use to refit core.gpu_constants; not used at run time)."""
    ratios = [predict(r) / r.tokens_per_s_per_gpu for r in runs()
              if r.split == "fit" and r.role == "comparable" and r.gpu == gpu]
    return math.exp(-statistics.fmean(math.log(x) for x in ratios)) if ratios else 1.0
