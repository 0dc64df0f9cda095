"""The memory planner: GiB per GPU of an FSDP2 training run, from the settings alone (no torch).

What training/ does, and what each part of the estimate counts (P parameters, S = the shard group: every GPU of
every node (W) under sharding fsdp, the GPUs of one node under hsdp; T = microBatch x seqLen tokens per GPU, L layers,
d hidden, kv key/value width, I MLP width, V vocabulary):

- parameters   4P/S       fp32 master weights, sharded over the S GPUs of the shard group (FSDP2 fully_shard).
- gradients    4P/S       fp32 sharded gradients. They are freed before each forward (zero_grad(set_to_none=True)),
                          so the *allocated* peak rarely holds them, but the caching allocator keeps their blocks
                          *reserved*: the 2026-12-01 calibration measured reserved = allocated + about this much.
               + 4P       with sharding fsdp and gradAccumulation > 1: the unsharded fp32 gradients FSDP2 accumulates
                          between optimizer steps (set_requires_gradient_sync(False)); not with
                          gradSyncEveryMicroBatch (reduce-scatter every micro-batch, NVLink traffic instead). hsdp keeps reducing within the
                          node at every micro-batch and accumulates sharded gradients only.
               + c 4P/S   with gradAccumulation > 1 on more than one GPU: c = ACCUMULATION_GRADIENT_COPIES (fsdp 2,
                          hsdp 3) sharded copies held across micro-batches, fitted to 2 x H200 reserved memory.
               2P instead on one GPU with gradAccumulation 2: training.one_rank keeps the first micro-batch's bf16
                          gradients until the second's arrive (the fp32 sums are made during the last backward, as
                          the activations are freed), measured 2P = 2.79 GiB less allocated than FSDP2's fp32
                          accumulator on one H100 (Llama 3.2 1B dims, 2026-12-08).
- optimizer    8P/S       AdamW exp_avg and exp_avg_sq, fp32, sharded.
- gathered     2*P_root + 2*B_layer + 2*6*P_layer (B_layer = 2*P_layer bytes; with fp8, 1 byte for each weight
                          of a converted linear, core.fp8.fp8_linears)
                          bf16 all-gathered copies: the root (embeddings = tied output projection, final norm) stays
                          gathered from forward to backward; one layer computes while the next is prefetched; in
                          backward two layers' unsharded gradients (bf16 + the fp32 copy reduce-scattered) are in
                          flight. With one rank in the shard group, 2*P + 2*6*P_layer: the whole model is held
                          gathered for the step (training.parallelize: ParallelPlan.hold_gathered).
- activations  T * (L * a + 10d) bytes, a = 22d + 4kv + 8I: per token and layer two RMSNorms (fp32 input, bf16
                          normalized and scaled output: 8d each), attention with SDPA (q, k, v, output and o_proj
                          input: 6d + 4kv; no seq x seq scores), SwiGLU MLP (gate, SiLU, up, product: 8I); 10d for
                          the final norm and the hidden states the loss reads.
               (a per family: ModelPreset.activation_bytes_per_token_layer, its norms, q/k norms and head widths.)
               with full activation checkpointing: T * (L * 2d + 10d) + max(0, T a - C): each layer keeps only
                          its bf16 input, and one layer is recomputed at a time in backward; that layer's T a bytes
                          never meet the loss's logits (C, below: freed once the hidden states have their gradient,
                          before the first layer's backward), so only what it needs beyond them counts.
               with selective (per-op) checkpointing: T * (L * s + 10d) + max(0, T a - C), s = 2d + 2 (saved
                          linears' outputs) + 2 q: each layer keeps its input, the outputs of every other matrix
                          product (torchtitan's op policy, ModelPreset.selective_linears) and the attention output;
                          compiled, less the output no backward reads (down_proj's, in pre-norm families).
               with compile: a x COMPILED_ACTIVATIONS (0.68, calibrated against reserved memory on H200).
- logits       unchunked: 12 V T bytes, the backward of the fp32 cross-entropy (saved log-softmax, its gradient
                          and the logits' gradient, 4 bytes each).
               chunked (lossChunkSize = c): 8 V min(c, T) for one chunk (fp32 logits, bf16 copies; compiled,
                          COMPILED_LOSS_BYTES_PER_LOGIT = 5.4 for each token beyond 1024, measured) plus 6 V d
                          (the fp32 accumulator of the projection's gradient and one bf16 chunk product) plus 2 d T
                          (the stored gradient of the hidden states). C: the unchunked 12 V T, or the one chunk's.
- overhead     1.5 GiB outside PyTorch's allocator (CUDA context and NCCL buffers) + 5% of the rest (FRAGMENTATION;
               with gradAccumulation > 1 on one GPU 1% (ONE_RANK_FRAGMENTATION): training.one_rank's gradients stay
               on the compute stream; with FSDP2's own post-backward there, 0.9 x 4P/S instead:
               ACCUMULATING_RESERVED_GRADIENTS): the caching allocator's reserved peak over its allocated one
               (rounding, fragmentation, blocks cached per stream), as measured.

The constants are calibrated against what runs out: *reserved* memory plus what lies outside the allocator
(bench/calibrate.py and bench/sharding_proof.py on H200, expandable segments on; docs/BENCHMARKS.md).

bf16 everywhere except where noted: the GPU path gathers parameters in bf16 (MixedPrecisionPolicy). With precision
fp8 the layers' linear weights are gathered in fp8 (1 byte) and the activations are FP8_ACTIVATIONS of bf16's. The
local CPU run keeps fp32 and has no GPU to plan for. This module is a leaf: which strategy runs, and the refusal of a
plan that cannot fit, are core.strategy's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ray_efa.core import catalog, fp8
from ray_efa.core.models import ModelPreset
from ray_efa.core.settings import Settings, SettingsError, TrainingSettings

__all__ = [
    "MemoryEstimate",
    "estimate",
    "estimate_for",
    "OVERHEAD_FIXED_GIB",
    "FRAGMENTATION",
    "COMPILED_ACTIVATIONS",
    "ACCUMULATION_GRADIENT_COPIES",
    "FP8_ACTIVATIONS",
    "SUGGESTED_LOSS_CHUNK",
    "ACCUMULATING_RESERVED_GRADIENTS",
    "ONE_RANK_FRAGMENTATION",
    "COMPILED_LOSS_BYTES_PER_LOGIT",
    "grad_sync_every_micro_batch",
]

_GIB = 2**30
OVERHEAD_FIXED_GIB = 1.5
"""Outside PyTorch's allocator, per GPU: 1.30 GiB measured at world size 1 (CUDA context, cuBLAS, NCCL; one H200)
+ 0.2 GiB for larger communicators' buffers (NCCL_BUFFSIZE, 4 MiB per channel and peer)."""
FRAGMENTATION = 0.05
"""Headroom over the parts without accumulation: measured peak reserved memory was at most 0.986 of them (one H200,
expandable segments, bench/calibrate.py)."""
ACCUMULATING_RESERVED_GRADIENTS = 0.9
"""With gradAccumulation > 1 on one GPU under FSDP2's own post-backward (one_rank_gradients=False: every run recorded
before 2026-12-08, and a torch release training.one_rank is not proven on; training.one_rank's path is
ONE_RANK_FRAGMENTATION's; on more GPUs, ACCUMULATION_GRADIENT_COPIES, fitted to 2 x H200 reserved memory,
covers it), what the caching allocator reserves beyond the allocated peak, in fp32 gradient bytes per GPU (4P/S):
planned as 0.9 of them, and no share of the parts (FRAGMENTATION). Every one-GPU run with accumulation reserved 5.8
to 6.8 GiB over its allocated peak, whatever that peak was: 57.4, 43.1 and 44.3 GiB allocated for Llama 3.2 1B dims
(4P = 5.58 GiB), 53.1 and 61.9 for Qwen2.5-1.5B (5.75) on one H100 (2026-12-07, bench/results/
2026-12-07-h100x1-*-side-by-side.jsonl), and 29 to 72 GiB in the older Qwen runs on H100 and H200 (2026-12-01 to
12-06). A constant of about the gradients' size, not a share: the likely cause, not traced, is that FSDP2 writes the
reduced gradients on its own stream, and the caching allocator's pools are per stream, so those blocks cannot reuse
the activations' cached ones. 0.9 is fitted on the five 2026-12-07 runs (docs/plan-evidence.md, "The memory plan
against the measured reserved peak"): each planned 0.7 to 4.5% over what it reserved; the older runs of the path
before the gathered model was held (+2.36 GiB added to what they reserved), -0.1 to +4.3%. Both models are 1.5B, so
a gap fixed in GiB and one that grows with the model cannot be told apart here; the gradients' size is the cause
named. It replaces a share of 0.16 (issue 48), then 0.09, of the parts: a share over-planned the large bf16 runs and
under-planned the small checkpointed ones, whose gap is as large."""
ONE_RANK_FRAGMENTATION = 0.01
"""With gradAccumulation > 1 on one GPU under training.one_rank (the train function's path there, on the torch releases
it is proven on), what the caching allocator reserves beyond the allocated peak, as a share of the parts: its gradients
never leave the compute stream, and the 5.8-6.8 GiB gap of FSDP2's own post-backward (ACCUMULATING_RESERVED_GRADIENTS,
whose cause was named there as blocks cached for FSDP2's reduce-scatter stream) is gone: 54.63 GiB allocated, 54.98
reserved (0.64%) in every run of the Llama 3.2 1B dims job at fp8 16 x 2048 x 2 on one H100, against 57.42 and 63.28
with FSDP2's (bench/step_profile.py variants, bench/results/2026-12-08-h100x1-one-rank-variants.jsonl; `ray-efa train`
reported 54.6 / 55.0 in all four side-by-side runs). One shape measured: 1%, over what it showed."""
_LOSS_CHUNK_REFERENCE = 1024  # the chunk the calibrated constants were measured with
COMPILED_LOSS_BYTES_PER_LOGIT = 5.4
"""Bytes per logit of a compiled chunk beyond 1024 tokens (the calibrated 8 up to there, whose slack the measured
reserved memory of earlier runs needs): bf16 logits and their bf16 gradient, no fp32 copy. Measured on one H100, the default fp8 16 x 2048 job's peak allocated 72.09 GiB at lossChunkSize 1024 and 74.42 at
4096, 2.33 GiB for 3072 x 151,936 more logits = 5.35 bytes each (docs/BENCHMARKS.md, 2026-12-06)."""
SUGGESTED_LOSS_CHUNK = 1024
"""The loss chunk the planner suggests for an unchunked plan that does not fit (the settings' default)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryEstimate:
    """GiB per GPU of one training run, by part, and whether it fits the GPU of the settings' instance type."""

    parameters_gib: float
    gradients_gib: float
    optimizer_gib: float
    gathered_gib: float
    """All-gathered bf16 parameters and unsharded gradients of the layers in flight and the root."""
    activations_gib: float
    logits_gib: float
    overhead_gib: float
    total_gib: float
    capacity_gib: float
    """Device memory of one GPU of gpuInstanceType (core.catalog)."""
    gpu: str
    world_size: int

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.capacity_gib

    @property
    def headroom_gib(self) -> float:
        return self.capacity_gib - self.total_gib

    def breakdown(self) -> tuple[tuple[str, float], ...]:
        """(part, GiB) rows in a stable order, total last: what `ray-efa plan` prints."""
        return (
            ("parameters (fp32, sharded)", self.parameters_gib),
            ("gradients (fp32, sharded)", self.gradients_gib),
            ("optimizer (AdamW fp32, sharded)", self.optimizer_gib),
            ("gathered layers (bf16)", self.gathered_gib),
            ("activations", self.activations_gib),
            ("logits", self.logits_gib),
            ("overhead", self.overhead_gib),
            ("total", self.total_gib),
        )


COMPILED_ACTIVATIONS = 0.68
"""Share of eager activation bytes compiled layers keep: fitted to reserved peaks of six shapes on one H200 (0.63 fits
allocated peaks)."""

FP8_ACTIVATIONS = 0.75
"""Share of the bf16 activation bytes kept with precision fp8 and compile on and no activation checkpointing (torchao
float8 saves the linears' inputs in fp8 only under torch.compile; in eager mode float8_linear.py saves the bf16 input,
and eager fp8 peaked at 71.1 GiB reserved like bf16 at 4 x 4096 on one H200). From first principles the 1-byte
inputs of the linears (d + q + d + I bytes a token and layer of Llama's) would keep 0.81 of the compiled bf16 bytes;
the compiled fp8 layer keeps less (what else its fused casts drop is not counted here), so the share is measured on one H100 (2026-12-07,
bench/results/2026-12-07-h100x1-*-side-by-side.jsonl): Llama 3.2 1B dims fp8 at 16 and 8 x 2048 allocated 14.3 GiB
apart, 0.752 of the bf16 bytes planned for those 16,384 tokens; Qwen2.5-1.5B 8 x 2048 x 4 allocated 8.8 GiB less in
fp8 than in bf16, of which 0.49 is the fp8 gathered weights (docs/BENCHMARKS.md, 2026-12-06), 0.73 to 0.74 of the
bf16 activations planned. 0.75 covers both. It was 0.66 (H200, bench/speed.py at 8 x 4096 against 62 GiB of
compiled activations planned there), whose shortfall a share of 0.16 over the parts had covered (and over-planned bf16 by 8%).
Published fp8 runs save next to nothing: torchtitan's Llama 3.1 8B 77.0 vs 76.8 GiB on
8 H100s and 62.0 vs 61.8 on 128 (benchmarks/llama3_h100_202412_torchtitan.md), all with selective or full activation
checkpointing, where a layer keeps only what checkpointing keeps (its bf16 input, or the matrix products' outputs)
and fp8 has no linear input to shrink. So the saving applies without checkpointing only; with it, fp8 plans the
bf16 activations (core/data/published_runs.csv keeps those runs)."""


ACCUMULATION_GRADIENT_COPIES = {"fsdp": 2, "hsdp": 3}
"""Sharded fp32 gradient copies held across micro-batches on several GPUs (FSDP2 keeps reduce outputs in flight while
a slow link lags): fitted to reserved memory of the 2 x H200 cells (shard groups of 1 and 2)."""


def _activation_bytes_per_token(p: ModelPreset, mode: str, compiled: bool = False) -> tuple[float, float]:
    """(kept, recomputed): bytes of activations per token of a micro-batch the layers keep from forward to backward
    under checkpointing `mode` (none, selective, full), and those of the one layer recomputed at a time in backward
    (none without checkpointing)."""
    d, layers = p.hidden_size, p.num_hidden_layers
    per_layer: float = p.activation_bytes_per_token_layer()
    if compiled:
        per_layer *= COMPILED_ACTIVATIONS
    if mode == "none":
        return layers * per_layer + 10 * d, 0.0
    kept = 2 * d if mode == "full" else p.selective_bytes_per_token_layer(compiled=compiled)
    return layers * kept + 10 * d, per_layer


def _loss_chunk_bytes(p: ModelPreset, tokens: int, chunk: int, *, compiled: bool = False) -> float:
    """Bytes of the loss's logits and their gradients, freed once the loss has given the hidden states their
    gradient (before the first layer's backward): all of the unchunked loss's, one chunk's of the chunked one."""
    v = p.vocab_size
    if chunk <= 0:
        return 12 * v * tokens
    held = min(chunk, tokens)
    if compiled:  # the calibrated 8 bytes up to the reference chunk, the measured marginal bytes beyond it
        return 8 * v * min(held, _LOSS_CHUNK_REFERENCE) + COMPILED_LOSS_BYTES_PER_LOGIT * v * max(
            0, held - _LOSS_CHUNK_REFERENCE
        )
    return 8 * v * held


def _logits_bytes(p: ModelPreset, tokens: int, chunk: int, *, compiled: bool = False) -> float:
    v, d = p.vocab_size, p.hidden_size
    held = _loss_chunk_bytes(p, tokens, chunk, compiled=compiled)
    return held if chunk <= 0 else held + 6 * v * d + 2 * d * tokens


def _gathered_layer_bytes(p: ModelPreset, fp8_all_gather: bool) -> int:
    """Bytes of one all-gathered decoder layer: bf16, or with the fp8 all-gather the converted linears' weights in 1
    byte each (core.fp8.fp8_linears: the k and v projections of a grouped-query model often stay bf16) and the rest
    (small linears, biases, norms) in bf16."""
    converted = fp8.fp8_parameters(p) // p.num_hidden_layers if fp8_all_gather else 0
    return 2 * p.layer_parameters - converted


def grad_sync_every_micro_batch(
    t: TrainingSettings, *, strategy: str, nodes: int, gpus_per_node: int, nvlink: bool
) -> bool:
    """Whether gradients are reduce-scattered after every micro-batch (gradSyncEveryMicroBatch; auto: under fsdp with
    accumulation on one node of several NVLink-connected GPUs, where the k reduce-scatters stay on NVLink and the
    unsharded fp32 gradients, 4 bytes a parameter, are never held). hsdp reduces inside the node every micro-batch
    anyway; training.train and core.perf read the same answer."""
    if t.grad_sync_every_micro_batch != "auto":
        return bool(t.grad_sync_every_micro_batch)
    return strategy == "fsdp" and t.accumulation_steps > 1 and nodes == 1 and gpus_per_node > 1 and nvlink


def estimate_for(
    t: TrainingSettings,
    *,
    world_size: int,
    gpu: catalog.Gpu,
    shard_size: int | None = None,
    strategy: str = "fsdp",
    sync_every_micro_batch: bool = False,
    one_rank_gradients: bool = True,
) -> MemoryEstimate:
    """GiB per GPU of training `t` on `world_size` GPUs of model `gpu` (any world size, e.g. a measured one).

    shard_size: GPUs each parameter is sharded over (default: all of them, plain FSDP; hsdp: the GPUs of one node).
    strategy: "fsdp" or "hsdp", which decides where gradients accumulate when gradAccumulation > 1.
    sync_every_micro_batch: fsdp reduce-scatters every micro-batch (grad_sync_every_micro_batch): no unsharded fp32
    gradients are held between micro-batches.
    one_rank_gradients: on one GPU, training.one_rank's post-backward (the train function's, ParallelPlan's default);
    False: FSDP2's own (the path of the runs recorded before 2026-12-08, and of a torch release it is not proven on).
    """
    if t.undecided:
        raise ValueError(f"{', '.join(t.undecided)} must be decided first (core.strategy.resolve), not auto")
    p = t.preset
    fp8 = t.precision == "fp8"
    params = p.num_parameters
    layer = p.layer_parameters
    root = params - p.num_hidden_layers * layer
    tokens = t.micro_batch_size * t.seq_len
    kept, recomputed = _activation_bytes_per_token(p, t.checkpointing_mode, t.compile)
    shard = shard_size or world_size
    one_rank = one_rank_gradients and world_size == 1 and t.accumulation_steps > 1
    accumulated = 0.0
    if t.accumulation_steps > 1 and world_size > 1:
        copies = ACCUMULATION_GRADIENT_COPIES[strategy]
        unsharded = strategy == "fsdp" and not sync_every_micro_batch
        accumulated = (4 * params if unsharded else 0) + copies * 4 * params / shard
    parts = {
        "parameters": 4 * params / shard,
        # one_rank with 2 micro-batches: the first's bf16 gradients are what is held at the peak (2P, not 4P)
        "gradients": (2 * params if one_rank and t.accumulation_steps == 2 else 4 * params / shard) + accumulated,
        "optimizer": 8 * params / shard,
        # one rank in the shard group: training.parallelize holds the whole gathered model for the step: measured +2.36
        # GiB allocated on one H100 with it in bf16 (docs/BENCHMARKS.md, 2026-12-06). With fp8 the held linears are
        # gathered in fp8 now, measured 0.49 GiB less (not the 1.2 GiB of 1 byte a converted weight); planned at the
        # bf16 figure, 0.5 GiB over.
        # Otherwise the root and two layers; with the fp8 all-gather the layers hold 1-byte linear weights.
        "gathered": (2 * params if shard == 1 else 2 * root + 2 * _gathered_layer_bytes(p, fp8)) + 2 * 6 * layer,
        # torchao saves the linears' fp8 inputs only when compiled (eager float8_linear.py saves the bf16 input) and
        # only where the layer keeps them: with checkpointing it keeps its bf16 input (FP8_ACTIVATIONS). The layer
        # recomputed in backward never meets the loss's logits, freed before it: only what it needs beyond them counts
        "activations": tokens * kept * (FP8_ACTIVATIONS if fp8 and t.compile and not t.checkpointing else 1.0)
        + max(0.0, tokens * recomputed - _loss_chunk_bytes(p, tokens, t.loss_chunk, compiled=t.compile)),
        "logits": _logits_bytes(p, tokens, t.loss_chunk, compiled=t.compile),
    }
    gib = {k: v / _GIB for k, v in parts.items()}
    allocated = sum(gib.values())
    # on one GPU the accumulation copies term (fitted on two) adds nothing; what accumulation costs there is reserved
    if one_rank:
        overhead = OVERHEAD_FIXED_GIB + ONE_RANK_FRAGMENTATION * allocated
    elif t.accumulation_steps > 1 and world_size == 1:
        overhead = OVERHEAD_FIXED_GIB + ACCUMULATING_RESERVED_GRADIENTS * 4 * params / shard / _GIB
    else:
        overhead = OVERHEAD_FIXED_GIB + FRAGMENTATION * allocated
    return MemoryEstimate(
        parameters_gib=gib["parameters"],
        gradients_gib=gib["gradients"],
        optimizer_gib=gib["optimizer"],
        gathered_gib=gib["gathered"],
        activations_gib=gib["activations"],
        logits_gib=gib["logits"],
        overhead_gib=overhead,
        total_gib=allocated + overhead,
        capacity_gib=gpu.memory_gib,
        gpu=gpu.name,
        world_size=world_size,
    )


def estimate(settings: Settings, strategy: str, *, one_rank_gradients: bool = True) -> MemoryEstimate:
    """GiB per GPU of the run the settings describe with `strategy` ("fsdp" or "hsdp", resolved: core.strategy
    resolves auto, and its `estimate` takes the settings alone); one_rank_gradients as estimate_for takes it."""
    if strategy not in ("fsdp", "hsdp"):
        raise ValueError(f"strategy must be fsdp or hsdp (core.strategy resolves auto), got {strategy!r}")
    if settings.nodes.scaled_to_zero:
        raise SettingsError([settings.scaled_to_zero_problem()])
    gpus_per_node = settings.nodes.gpu_instance.gpus
    shard = gpus_per_node if strategy == "hsdp" and settings.nodes.gpu_node_count > 1 else settings.world_size
    instance = settings.nodes.gpu_instance
    sync = grad_sync_every_micro_batch(
        settings.training,
        strategy=strategy,
        nodes=settings.nodes.gpu_node_count,
        gpus_per_node=instance.gpus,
        nvlink=instance.gpu_link is not None and instance.gpu_link.name.startswith("NVLink"),
    )
    return estimate_for(
        settings.training,
        world_size=settings.world_size,
        gpu=instance.gpu,
        shard_size=shard,
        strategy=strategy,
        sync_every_micro_batch=sync,
        one_rank_gradients=one_rank_gradients,
    )
