"""Choosing how the job runs, from the step-time model (core.perf) and the memory plan (core.memory) together.

Both of those are leaves; everything that needs the two at once is here:
- `choose`: the sharding (auto: fsdp or hsdp) and the gradient reduction dtype (auto: bf16 only where it is predicted
  at least BF16_REDUCE_GAIN faster than fp32, i.e. where the wire binds) that give the fastest predicted step that
  fits memory; `resolve` writes its answer into the settings with the batch shape and precision, once, and the job
  runs that (training/ decides nothing again); `resolve_sharding` / `resolve_reduce_dtype` read it.
- `estimate` and `check_fits`: the memory plan of the settings as they will run, and the refusal (SettingsError
  naming the setting to change) of one that cannot fit.
- `performance`: `plan --json`'s "performance": every strategy's predicted step on EFA and TCP, the advice when a
  faster strategy is one change away, and whether more nodes are slower than fewer (by how much, and which single
  change would turn that around).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ray_efa.core import catalog, memory, perf, prices, provenance
from ray_efa.core.catalog import gpu_constants
from ray_efa.core.memory import MemoryEstimate
from ray_efa.core.model_source import model_problems
from ray_efa.core.provenance import fp8_evidence
from ray_efa.core.settings import Problem, Settings, SettingsError, TrainingSettings

__all__ = [
    "Option",
    "BF16_REDUCE_GAIN",
    "fp8_evidence",
    "AUTO_MEMORY_SHARE",
    "GlobalBatch",
    "global_batch",
    "resolve",
    "evaluate",
    "choose",
    "resolve_sharding",
    "resolve_reduce_dtype",
    "estimate",
    "check_fits",
    "performance",
]

BF16_REDUCE_GAIN = 0.05
"""gradReduceDtype auto takes bf16 only when it is predicted at least this much faster than fp32: half the bytes,
for some rounding in the sum, is worth it only where the wire binds."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Option:
    """One way to run the settings: its predicted step and its memory plan."""

    prediction: perf.StepPrediction
    memory: MemoryEstimate
    reduce_dtype: str
    """The gradReduceDtype it runs with (fp32 or bf16)."""
    training: TrainingSettings
    """The training section it runs, every auto decided (resolve): its micro batch, accumulation, precision."""

    @property
    def strategy(self) -> str:
        return self.prediction.strategy

    @property
    def fits(self) -> bool:
        return self.memory.fits

    @property
    def tokens_per_s(self) -> float:
        """The whole job's tokens/s."""
        return self.prediction.tokens_per_s_per_gpu * self.memory.world_size

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.prediction.as_dict(),
            "grad_reduce_dtype": self.reduce_dtype,
            "memory_gib": round(self.memory.total_gib, 2),
            "fits": self.fits,
        }


def _memory(settings: Settings, t: TrainingSettings, strategy: str) -> MemoryEstimate:
    """core.memory's estimate of `t` (the settings' training, or a candidate shape of it) on the settings' nodes."""
    n = settings.nodes
    shard = n.gpu_instance.gpus if strategy == "hsdp" and n.gpu_node_count > 1 else settings.world_size
    link = n.gpu_instance.gpu_link
    sync = memory.grad_sync_every_micro_batch(
        t,
        strategy=strategy,
        nodes=n.gpu_node_count,
        gpus_per_node=n.gpu_instance.gpus,
        nvlink=link is not None and link.name.startswith("NVLink"),
    )
    return memory.estimate_for(
        t,
        world_size=settings.world_size,
        gpu=n.gpu_instance.gpu,
        shard_size=shard,
        strategy=strategy,
        sync_every_micro_batch=sync,
    )


def evaluate(
    settings: Settings,
    *,
    strategy: str,
    reduce_dtype: str,
    network: str | None = None,
    calibration: perf.Calibration | None = None,
    training: TrainingSettings | None = None,
) -> Option:
    """The predicted step and memory plan of the settings run with `strategy` and `reduce_dtype` (and `training`
    in place of the settings' own, decided, training section: a candidate shape of core.strategy.resolve)."""
    n = settings.nodes
    t = training or resolve(settings, network, calibration).training
    prediction = perf.predict(
        t,
        instance=n.gpu_instance,
        nodes=n.gpu_node_count,
        network=network or settings.workload.network,
        strategy=strategy,
        reduce_dtype=reduce_dtype,
        placement_group=n.use_placement_group,
        calibration=calibration,
    )
    return Option(prediction=prediction, memory=_memory(settings, t, strategy), reduce_dtype=reduce_dtype, training=t)


def _options(
    settings: Settings,
    network: str | None,
    calibration: perf.Calibration | None,
    strategy: str | None = None,
    training: TrainingSettings | None = None,
) -> list[Option]:
    t = training or resolve(settings, network, calibration).training
    own = settings.training  # the candidates are what the settings leave open (resolved settings: the decided one)
    if strategy is not None:
        shardings: tuple[str, ...] = (strategy,)
    elif own.sharding != "auto":
        shardings = (own.sharding,)
    elif settings.nodes.gpu_node_count <= 1:
        shardings = ("fsdp",)  # one node has nothing to replicate across (0: scaled to zero, no job)
    else:
        shardings = perf.STRATEGIES
    reduces = ("fp32", "bf16") if own.grad_reduce_dtype == "auto" else (own.grad_reduce_dtype,)
    return [
        evaluate(settings, strategy=s, reduce_dtype=r, network=network, calibration=calibration, training=t)
        for s in shardings
        for r in reduces
    ]


def choose(
    settings: Settings,
    network: str | None = None,
    calibration: perf.Calibration | None = None,
    *,
    strategy: str | None = None,
    training: TrainingSettings | None = None,
) -> Option:
    """What the job runs: the fastest option that fits memory (bf16 reduction by auto only when BF16_REDUCE_GAIN
    faster; fsdp before hsdp and fp32 before bf16 on a tie), else the one that needs the least memory. `strategy`
    restricts the choice to one sharding (the reduction dtype is still chosen); the batch shape and precision are
    resolve's (or `training`'s)."""
    if settings.nodes.scaled_to_zero:  # no GPU node, no job: nothing to choose or divide by
        raise SettingsError([settings.scaled_to_zero_problem()])
    options = _options(settings, network, calibration, strategy, training)
    auto_reduce = settings.training.grad_reduce_dtype == "auto"

    def score(option: Option) -> tuple[float, int, int]:
        penalty = 1 + BF16_REDUCE_GAIN if (auto_reduce and option.reduce_dtype == "bf16") else 1.0
        return (
            option.prediction.step_time_s * penalty,
            perf.STRATEGIES.index(option.strategy),
            option.reduce_dtype == "bf16",
        )

    fitting = [o for o in options if o.fits]
    if fitting:
        return min(fitting, key=score)
    return min(options, key=lambda o: (o.memory.total_gib, score(o)))


# -- the batch shape and precision: what auto decides -----------------------------------------------------------------

AUTO_MEMORY_SHARE = 0.95
"""An auto shape must plan at most this share of the GPU's memory. The plan is the caching allocator's reserved peak
as measured (core.memory: the parts, and over them FRAGMENTATION, or ACCUMULATING_RESERVED_GRADIENTS with accumulation
on one GPU: the default 16 x 2048 x 16 reserved 78.5 GiB against 79.1 usable on the p5.4xlarge row), plus
what lies outside the allocator; 5% is left for what no measurement here covers (another driver, a longer run). It
was 0.92 while the plan was the allocated peak and the reserved one was 11% above it. With activation checkpointing
fp8 plans bf16's activations (core.memory.FP8_ACTIVATIONS), as published fp8 runs measure. On an 80 GB H100 itself
(2026-12-06, docs/BENCHMARKS.md) the fp8 16 x 2048 job at lossChunkSize 4096 ran with 74.4 GiB allocated and 77.9
reserved of the 79.18 the card has."""
MAX_AUTO_MICRO_BATCH = 64
"""The largest micro batch auto considers (beyond it the global batch per rank is rarely that large)."""
GLOBAL_BATCH_TOLERANCE = 0.02
"""Where no split reaches globalBatchTokens exactly, the splits within this share of the closest are equals, and
the fastest of them is taken."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GlobalBatch:
    """How globalBatchTokens is split: micro batch x seqLen x accumulation x data-parallel ranks."""

    target_tokens: int
    """globalBatchTokens."""
    micro_batch: int
    seq_len: int
    grad_accumulation: int
    ranks: int

    @property
    def tokens(self) -> int:
        """The global batch the split reaches, tokens per optimizer step."""
        return self.micro_batch * self.seq_len * self.grad_accumulation * self.ranks

    @property
    def exact(self) -> bool:
        return self.tokens == self.target_tokens

    @property
    def note(self) -> str | None:
        """What the plan says when the split misses globalBatchTokens."""
        if self.exact:
            return None
        return (
            f"the global batch is {self.tokens:,} tokens, not globalBatchTokens {self.target_tokens:,}: "
            f"microBatch {self.micro_batch} x seqLen {self.seq_len} x gradAccumulation {self.grad_accumulation} "
            f"x {self.ranks} ranks cannot reach it exactly"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "target_tokens": self.target_tokens,
            "tokens": self.tokens,
            "exact": self.exact,
            "micro_batch": self.micro_batch,
            "seq_len": self.seq_len,
            "grad_accumulation": self.grad_accumulation,
            "data_parallel_ranks": self.ranks,
            "note": self.note,
        }


def global_batch(settings: Settings, training: TrainingSettings | None = None) -> GlobalBatch:
    """The split of the settings' global batch as the job runs it (resolve's decisions, or `training`'s)."""
    t = training or resolve(settings).training
    assert isinstance(t.micro_batch, int) and isinstance(t.grad_accumulation, int)  # resolve decided them
    return GlobalBatch(
        target_tokens=t.global_batch_tokens,
        micro_batch=t.micro_batch,
        seq_len=t.seq_len,
        grad_accumulation=t.grad_accumulation,
        ranks=max(1, settings.world_size),
    )


def _accumulation(t: TrainingSettings, micro_batch: int, ranks: int) -> int:
    """gradAccumulation as set, or for auto the one that brings micro_batch's split closest to globalBatchTokens."""
    if t.grad_accumulation != "auto":
        return int(t.grad_accumulation)
    return max(1, round(t.global_batch_tokens / (micro_batch * t.seq_len * ranks)))


def _micro_batches(t: TrainingSettings, ranks: int) -> list[int]:
    """The micro batches auto tries: the set one; else those dividing the sequences per rank exactly (then the
    global batch is exact), or every one up to them where none does."""
    if t.micro_batch != "auto":
        return [int(t.micro_batch)]
    per_rank = max(1, t.global_batch_tokens // (t.seq_len * ranks))
    top = min(MAX_AUTO_MICRO_BATCH, per_rank)
    exact = [m for m in range(1, top + 1) if t.global_batch_tokens % (m * t.seq_len * ranks) == 0]
    return exact or list(range(1, top + 1))


def _precisions(settings: Settings) -> tuple[str, ...]:
    """precision as set; auto tries fp8 only where the GPU has fp8 tensor cores, compile is on (eager fp8 is slower
    than eager bf16 and saves no memory: core.perf.EAGER_FP8_SPEED) and the family's fp8 efficiency rests on evidence
    (measured here or published: core.catalog.gpu_constants); on an assumed one auto stays bf16 (fp8_evidence says why)."""
    t = settings.training
    if t.precision != "auto":
        return (t.precision,)
    gpu = settings.nodes.gpu_instance.gpu
    if gpu is None or not gpu.has_fp8 or not t.compile:
        return ("bf16",)
    return ("bf16", "fp8") if gpu_constants.constants_for(gpu.name).fp8_evidenced else ("bf16",)


AUTO_LOSS_CHUNKS = (4096, 2048, 1024)
"""The loss chunks auto tries, largest first: each chunk re-reads and re-writes the projection's fp32 gradient
accumulator (core.perf.LOSS_CHUNK_S), so fewer, larger chunks are faster where their logits fit."""


def _loss_chunks(t: TrainingSettings) -> tuple[int, ...]:
    return AUTO_LOSS_CHUNKS if t.loss_chunk_size == "auto" else (int(t.loss_chunk_size),)


CHECKPOINTING_CHOICES: tuple[bool | str, ...] = (False, "selective", True)
"""What auto tries for activationCheckpointing, least recompute first: none (false), selective, full (true); the
first with which the shape fits is kept (core.perf.recompute_factor: selective recomputes about a third of full's)."""


def _checkpointing(t: TrainingSettings) -> tuple[bool | str, ...]:
    return CHECKPOINTING_CHOICES if t.activation_checkpointing == "auto" else (t.activation_checkpointing,)


def _within_headroom(option: Option) -> bool:
    return option.memory.total_gib <= AUTO_MEMORY_SHARE * option.memory.capacity_gib


def _decide(settings: Settings, network: str | None, calibration: perf.Calibration | None) -> Option:
    """The option with every auto decided (its training section, strategy and reduction dtype): the fastest predicted
    candidate within AUTO_MEMORY_SHARE of the GPU's memory whose split reaches globalBatchTokens (or comes closest),
    else the one needing least memory."""
    t = settings.training
    ranks = max(1, settings.world_size)
    candidates: list[tuple[Option, float]] = []
    for precision in _precisions(settings):
        for m in _micro_batches(t, ranks):
            k = _accumulation(t, m, ranks)
            for checkpointing in _checkpointing(t):
                fits = False
                for chunk in _loss_chunks(t):
                    shape = t.model_copy(
                        update={
                            "micro_batch": m,
                            "grad_accumulation": k,
                            "precision": precision,
                            "activation_checkpointing": checkpointing,
                            "loss_chunk_size": chunk,
                        }
                    )
                    option = choose(settings, network, calibration, training=shape)
                    error = abs(m * t.seq_len * k * ranks - t.global_batch_tokens) / t.global_batch_tokens
                    candidates.append((option, error))
                    if _within_headroom(option):
                        fits = True
                        break  # the largest chunk that fits: a smaller one only saves memory this shape has
                if fits:
                    break  # checkpointing only recomputes: on where the shape does not fit without it
    fitting = [(o, e) for o, e in candidates if _within_headroom(o)]
    if not fitting:
        return min(candidates, key=lambda c: (c[0].memory.total_gib, c[1]))[0]
    closest = min(e for _, e in fitting)
    pool = [(o, e) for o, e in fitting if e <= (0.0 if closest == 0 else closest + GLOBAL_BATCH_TOLERANCE)]
    return max(pool, key=lambda c: (c[0].tokens_per_s, -c[1]))[0]


_RESOLVED: dict[tuple[Settings, str | None, perf.Calibration | None], Settings] = {}


_SHARDING_LEVERS = ("sharding", "gradReduceDtype")
"""The levers `choose` decides for a decided shape; `training.undecided` are the shape's."""


def _undecided(t: TrainingSettings) -> tuple[str, ...]:
    """Every context key still at auto: the shape's and precision's (`undecided`), then sharding and gradReduceDtype."""
    own = {"sharding": t.sharding, "gradReduceDtype": t.grad_reduce_dtype, "lossChunkSize": t.loss_chunk_size}
    return (*t.undecided, *(key for key in (*_SHARDING_LEVERS, "lossChunkSize") if own[key] == "auto"))


def resolve(settings: Settings, network: str | None = None, calibration: perf.Calibration | None = None) -> Settings:
    """The settings with every auto training lever decided (microBatch, gradAccumulation, precision,
    activationCheckpointing: `training.undecided`; then sharding and gradReduceDtype, as `choose` picks them for that
    shape): what the plan predicts and the job runs. The driver hands the workers these (training.worker), so a
    function of yours and the built-in read one decision and nothing is decided twice. Settings with nothing at auto
    come back as they are.

    Scaled to zero there is no GPU to plan for: bf16, no checkpointing, microBatch 1 and the accumulation that
    reaches globalBatchTokens on the settings' GPUs, fsdp with an fp32 reduction."""
    t = settings.training
    undecided = _undecided(t)
    if not undecided:
        return settings
    key = (settings, network, calibration)
    if key in _RESOLVED:
        return _RESOLVED[key]
    if settings.nodes.scaled_to_zero:
        m = 1 if t.micro_batch == "auto" else int(t.micro_batch)
        decided = t.model_copy(
            update={
                "micro_batch": m,
                "grad_accumulation": _accumulation(t, m, max(1, settings.nodes.gpu_instance.gpus)),
                "precision": "bf16" if t.precision == "auto" else t.precision,
                "activation_checkpointing": False
                if t.activation_checkpointing == "auto"
                else t.activation_checkpointing,
                "loss_chunk_size": memory.SUGGESTED_LOSS_CHUNK if t.loss_chunk_size == "auto" else t.loss_chunk_size,
            }
        )
        strategy = "fsdp" if t.sharding == "auto" else t.sharding
        reduce_dtype = "fp32" if t.grad_reduce_dtype == "auto" else t.grad_reduce_dtype
    else:
        option = _decide(settings, network, calibration)
        decided, strategy, reduce_dtype = option.training, option.strategy, option.reduce_dtype
    change = {
        "microBatch": decided.micro_batch,
        "gradAccumulation": decided.grad_accumulation,
        "precision": decided.precision,
        "activationCheckpointing": decided.activation_checkpointing,
        "sharding": strategy,
        "gradReduceDtype": reduce_dtype,
        "lossChunkSize": decided.loss_chunk_size,
    }
    resolved = settings.replace(**{key: change[key] for key in undecided})
    if len(_RESOLVED) > 4096:  # a long-lived process (tests, --recommend) keeps the newest only
        _RESOLVED.clear()
    _RESOLVED[key] = resolved
    return resolved


def resolve_sharding(settings: Settings, network: str | None = None) -> str:
    """The strategy the job runs: the `sharding` setting, or for auto the one `choose` picks (fsdp scaled to zero)."""
    return resolve(settings, network).training.sharding


def resolve_reduce_dtype(settings: Settings, network: str | None = None) -> str:
    """The gradient reduction dtype the job runs: the `gradReduceDtype` setting, or for auto the one `choose` picks
    (fp32 scaled to zero)."""
    return resolve(settings, network).training.grad_reduce_dtype


def estimate(settings: Settings) -> MemoryEstimate:
    """GiB per GPU of the run the settings describe, with the strategy it will run (core.memory's formulas)."""
    return choose(settings).memory


_MAX_GPU_NODES = 64
"""The largest gpuNodeCount core.settings accepts: the ceiling of the "more GPU nodes" lever."""


def _more_nodes(settings: Settings) -> dict[str, object] | None:
    """The smallest gpuNodeCount above the current one whose plan fits (FSDP shards the model state over every GPU,
    so each node added lowers the memory per GPU), or None when even the largest count does not fit."""
    for count in range(settings.nodes.gpu_node_count + 1, _MAX_GPU_NODES + 1):
        if estimate(settings.replace(gpuNodeCount=count)).fits:
            return {"gpuNodeCount": count}
    return None


def _alternatives(settings: Settings) -> list[tuple[str, object, dict[str, object]]]:
    """(key, current value, context change) for each single lever that lowers memory, cheapest in throughput first:
    the reduce schedule (gradSyncEveryMicroBatch, with accumulation under fsdp), the loss chunking, activation checkpointing, a shorter micro batch or sequence, more GPU nodes (the same GPUs,
    more of them), then every GPU with more memory."""
    t, n = settings.training, settings.nodes
    out: list[tuple[str, object, dict[str, object]]] = []
    # the reduce schedule first: with accumulation under fsdp, reduce-scattering every micro-batch holds no unsharded
    # fp32 gradients (4 bytes a parameter) for k times the gradient traffic (NVLink in one node)
    if t.accumulation_steps > 1 and t.sharding == "fsdp" and t.grad_sync_every_micro_batch is not True:
        link = n.gpu_instance.gpu_link
        if not memory.grad_sync_every_micro_batch(
            t,
            strategy="fsdp",
            nodes=n.gpu_node_count,
            gpus_per_node=n.gpu_instance.gpus,
            nvlink=link is not None and link.name.startswith("NVLink"),
        ):
            out.append(("gradSyncEveryMicroBatch", t.grad_sync_every_micro_batch, {"gradSyncEveryMicroBatch": True}))
    if t.loss_chunk_size == 0:
        out.append(("lossChunkSize", 0, {"lossChunkSize": memory.SUGGESTED_LOSS_CHUNK}))
    if t.checkpointing_mode == "none":  # the cheaper recompute first
        out.append(("activationCheckpointing", t.activation_checkpointing, {"activationCheckpointing": "selective"}))
    if t.checkpointing_mode != "full":
        out.append(("activationCheckpointing", t.activation_checkpointing, {"activationCheckpointing": True}))
    if t.micro_batch_size > 1:
        out.append(("microBatch", t.micro_batch_size, {"microBatch": t.micro_batch_size // 2}))
    if t.seq_len > 1:
        out.append(("seqLen", t.seq_len, {"seqLen": t.seq_len // 2}))
    if n.gpu_node_count < _MAX_GPU_NODES:
        out.append(("gpuNodeCount", n.gpu_node_count, _more_nodes(settings) or {"gpuNodeCount": _MAX_GPU_NODES}))
    bigger = sorted(
        (
            row
            for row in catalog.GPU_INSTANCES.values()
            # a larger GPU in a node of the same shape or larger: not a single-GPU node sharding over fewer GPUs
            if row.efa_capable
            and row.gpu.memory_gib > n.gpu_instance.gpu.memory_gib
            and row.gpus >= n.gpu_instance.gpus
            and catalog.efa_plugin_supports(row.name, settings.addons.efa_device_plugin_version)
            # sold in the stack's region (the one offering lookup, core.prices): advice names only what can be launched
            and (n.offering_check == "off" or prices.offering_problem(row.name, settings.cluster.region) is None)
        ),
        key=lambda row: (row.gpu.memory_gib, row.usd_per_hour),
    )
    for row in bigger:
        out.append(("gpuInstanceType", n.gpu_instance_type, {"gpuInstanceType": row.name}))
    return out


_PLAN_KEYS = (
    "gradSyncEveryMicroBatch",
    "lossChunkSize",
    "activationCheckpointing",
    "microBatch",
    "seqLen",
    "gpuNodeCount",
    "gpuInstanceType",
    "compile",
    "model",
    "sharding",
    "gradAccumulation",
    "precision",
)
"""The settings the memory plan depends on, in the order a refusal names them."""


def _changed_cause(settings: Settings) -> tuple[str, object, object] | None:
    """(key, value, default) of the first plan setting that differs from its default and, put back alone, fits.

    A plan that cannot fit is usually one setting away from the defaults (which fit): that setting is the one to
    name, e.g. gpuNodeCount=1 rather than activationCheckpointing, which the user never touched.
    """
    defaults, current = Settings().to_context(), settings.to_context()
    for key in _PLAN_KEYS:
        if current[key] != defaults[key] and estimate(settings.replace(**{key: defaults[key]})).fits:
            return key, current[key], defaults[key]
    return None


def _shape_decided(raw: Settings, decided: Settings) -> Settings:
    """`decided` with `raw`'s own sharding and gradReduceDtype: a lever changed on it chooses those again, for the
    changed shape, as the job would."""
    t = raw.training
    return decided.replace(sharding=t.sharding, gradReduceDtype=t.grad_reduce_dtype)


def _changed(raw: Settings, decided: Settings, change: dict[str, object]) -> Settings:
    """`decided` with a training lever changed, or `raw` with a node lever changed: other nodes decide their own
    shape and precision (a larger GPU may have no fp8)."""
    if set(change) & {"gpuInstanceType", "gpuNodeCount"}:
        return raw.replace(**change)
    return _shape_decided(raw, decided).replace(**change)


def _describe(change: dict[str, object]) -> str:
    return ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in change.items())


def check_fits(settings: Settings) -> MemoryEstimate:
    """The estimate, or SettingsError naming the setting to change and every single change that would fit.

    The problem's key is the setting that broke a plan the defaults fit (its default value fits), else the first
    lever that fits alone; the message lists each lever that fits alone with its GiB, more GPU nodes and larger
    GPUs included, or, when none does, all of them together. First, the model must be plannable at all: modelPath's
    architecture readable here, its tokenizer within its embeddings (core.model_source.model_problems).

    Only the built-in train function is judged (its model is the settings' preset or modelPath architecture): a
    trainFunction of your own builds what it builds, so its estimate is returned unjudged.
    """
    if problems := model_problems(settings.training):
        raise SettingsError(problems)
    plan = estimate(settings)
    if plan.fits or not settings.training.builtin:
        return plan
    raw, settings = settings, resolve(settings)  # the levers below change the shape the job would run
    t, n = settings.training, settings.nodes
    fixes: list[str] = []
    key, value = None, None
    cause = _changed_cause(raw)
    if cause:  # the one setting that broke a plan the defaults fit: name it first
        key, value, default = cause
        fixes.append(
            f"{_describe({key: default})}, its default ({estimate(settings.replace(**{key: default})).total_gib:.1f} GiB)"
        )
    seen_instance = False
    for lever, current, change in _alternatives(settings):
        if (lever == "gpuInstanceType" and seen_instance) or (cause and change == {cause[0]: cause[2]}):
            continue  # name only the smallest bigger GPU that fits; the default is named already
        alt = estimate(_changed(raw, settings, change))
        if alt.fits:
            fixes.append(f"{_describe(change)} ({alt.total_gib:.1f} GiB)")
            key, value = (key, value) if key else (lever, current)
            seen_instance = seen_instance or lever == "gpuInstanceType"
    if fixes:
        advice = "any one of these fits: " + "; ".join(fixes)
    else:
        combined: dict[str, object] = {}
        for lever, _, change in _alternatives(settings):
            if lever not in ("gpuInstanceType", "gpuNodeCount"):
                combined.update(change)
        alt = estimate(_shape_decided(raw, settings).replace(**combined)) if combined else plan
        verdict = "fits" if alt.fits else "still too much: lower microBatch or seqLen further"
        advice = f"no single change fits; together {_describe(combined) or 'none'} would need {alt.total_gib:.1f} GiB ({verdict})"
        key, value = ("microBatch", t.micro_batch_size) if t.micro_batch_size > 1 else ("seqLen", t.seq_len)
    parts = ", ".join(f"{name.split(' (')[0]} {gib:.1f}" for name, gib in plan.breakdown()[:-1])
    message = (
        f"the training plan needs {plan.total_gib:.1f} GiB per GPU ({parts}) but one {plan.gpu} of "
        f"{n.gpu_instance_type} holds {plan.capacity_gib:.1f} GiB (model {t.preset.name}, microBatch {t.micro_batch} x "
        f"seqLen {t.seq_len}, {plan.world_size} GPUs on {n.gpu_node_count} node{'s' if n.gpu_node_count > 1 else ''}); {advice}"
    )
    assert key is not None  # named by the cause, the first lever that fits, or the fallback above
    raise SettingsError([Problem(key, value, message)])


# -- performance: plan --json's "performance" ------------------------------------------------------------------------


def _levers(settings: Settings) -> list[dict[str, object]]:
    """Single memory levers that leave the effective batch alone, cheapest in speed first."""
    t = settings.training
    out: list[dict[str, object]] = []
    if t.loss_chunk == 0 or t.loss_chunk > memory.SUGGESTED_LOSS_CHUNK:
        out.append({"lossChunkSize": memory.SUGGESTED_LOSS_CHUNK})
    if t.checkpointing_mode == "none":
        out.append({"activationCheckpointing": "selective"})
    if t.checkpointing_mode != "full":
        out.append({"activationCheckpointing": True})
    return out


def _describe_change(change: dict[str, object]) -> str:
    return ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in change.items())


def _advice(settings: Settings, network: str, chosen: Option, others: list[Option]) -> str | None:
    """When a faster option does not fit memory as set: the one change that makes it fit, and what it would give."""
    for other in sorted(others, key=lambda o: o.prediction.step_time_s):
        if other.fits or other.prediction.step_time_s >= chosen.prediction.step_time_s:
            continue
        for change in _levers(settings):
            alt = evaluate(
                settings.replace(**change), strategy=other.strategy, reduce_dtype=other.reduce_dtype, network=network
            )
            if alt.fits and alt.prediction.step_time_s < chosen.prediction.step_time_s:
                return (
                    f"{other.strategy} ({other.reduce_dtype} reduction) would be "
                    f"{chosen.prediction.step_time_s / alt.prediction.step_time_s:.1f}x faster "
                    f"({alt.prediction.step_time_s:.2f} s per step) but needs {other.memory.total_gib:.1f} GiB per GPU; "
                    f"with {_describe_change(change)} it needs {alt.memory.total_gib:.1f} GiB and fits"
                    + (", and the auto settings pick it" if settings.training.sharding == "auto" else "")
                )
    return None


def _scaling_changes(settings: Settings, network: str) -> list[dict[str, object]]:
    """Single changes that move more bytes per second or fewer bytes per token across the nodes."""
    t, gpu = resolve(settings, network).training, settings.nodes.gpu_instance.gpu
    changes: list[dict[str, object]] = []
    if network == "tcp":
        changes.append({"network": "efa"})
    if settings.training.sharding != "auto" or settings.training.grad_reduce_dtype != "auto":
        changes.append({"sharding": "auto", "gradReduceDtype": "auto"})
    if t.precision != "fp8" and gpu is not None and gpu.has_fp8:
        changes.append({"precision": "fp8"})
    for k in (4, 8):  # the network once per k micro-batches; checkpointing where the accumulation would not fit
        if int(t.grad_accumulation) < k:
            changes.append({"gradAccumulation": k})
            changes.append({"gradAccumulation": k, "activationCheckpointing": True})
    return changes


def _scaling(settings: Settings, network: str, chosen: Option) -> dict[str, Any] | None:
    """Whether fewer nodes of the same type would train more tokens/s than the settings' nodes (None on one node)."""
    nodes = settings.nodes.gpu_node_count
    if nodes == 1:
        return None
    fewer = [(n, choose(settings.replace(gpuNodeCount=n), network)) for n in range(1, nodes)]
    fewer = [(n, o) for n, o in fewer if o.fits]
    out: dict[str, Any] = {
        "nodes": nodes,
        "tokens_per_s": round(chosen.tokens_per_s, 1),
        "slower_than_fewer_nodes": False,
    }
    if not fewer:
        return out
    best_n, best = max(fewer, key=lambda item: item[1].tokens_per_s)
    ratio = chosen.tokens_per_s / best.tokens_per_s
    out.update(
        {
            "fewer_nodes": best_n,
            "fewer_nodes_tokens_per_s": round(best.tokens_per_s, 1),
            "ratio": round(ratio, 3),
            "slower_than_fewer_nodes": ratio < 1.0,
        }
    )
    if ratio >= 1.0:
        return out
    turnarounds = []
    for change in _scaling_changes(settings, network):
        try:
            changed = settings.replace(**change)
        except SettingsError:
            continue
        net = str(change.get("network", network))
        option = choose(changed, net)
        rival = max(
            (choose(changed.replace(gpuNodeCount=n), net) for n in range(1, nodes)),
            key=lambda o: o.tokens_per_s if o.fits else 0.0,
        )
        if option.fits and option.tokens_per_s > best.tokens_per_s:
            turnarounds.append(
                {
                    "change": _describe_change(change),
                    "tokens_per_s": round(option.tokens_per_s, 1),
                    "ratio_to_fewer_nodes_now": round(option.tokens_per_s / best.tokens_per_s, 3),
                    "ratio_to_fewer_nodes_changed": round(option.tokens_per_s / max(1.0, rival.tokens_per_s), 3)
                    if rival.fits
                    else None,
                }
            )
    turnarounds.sort(key=lambda c: -c["tokens_per_s"])
    out["changes"] = turnarounds[:3]
    p = chosen.prediction
    text = (
        f"{nodes} x {settings.nodes.gpu_instance_type} are predicted at {chosen.tokens_per_s:,.0f} tokens/s, "
        f"{ratio:.2f}x of {best_n} node{'s' if best_n > 1 else ''} ({best.tokens_per_s:,.0f}) at "
        f"{nodes / best_n:.0f}x the GPU price: {p.network_s:.2f} s of the {p.step_time_s:.2f} s step is on the "
        f"{'network' if p.bottleneck == 'network' else p.bottleneck}"
    )
    if turnarounds:
        first = turnarounds[0]
        text += (
            f"; {first['change']} would give {first['tokens_per_s']:,.0f} tokens/s "
            f"({first['ratio_to_fewer_nodes_now']:.2f}x of {best_n} node{'s' if best_n > 1 else ''} now)"
        )
    else:
        text += "; no single change here turns that around: fewer nodes, or a faster network"
    out["advice"] = text
    return out


def performance(settings: Settings, calibration: perf.Calibration | None = None) -> dict[str, dict[str, Any]]:
    """`plan --json`'s "performance": for each network, the chosen option's prediction, every option's, the advice
    when a faster one does not fit as set, and the node scaling verdict; empty with the GPU node group scaled to zero."""
    out: dict[str, dict[str, Any]] = {}
    if settings.nodes.scaled_to_zero:
        return out
    for net in perf.NETWORKS:
        chosen = choose(settings, net, calibration)
        decided = resolve(settings, net, calibration)  # the shape auto takes on this network
        options = _options(
            settings.replace(sharding="auto") if settings.nodes.gpu_node_count > 1 else settings,
            net,
            calibration,
            training=chosen.training,
        )
        by_strategy: dict[str, dict] = {}
        for option in options:  # per strategy, the reduce dtype auto would take for it (or the set one)
            current = by_strategy.get(option.strategy)
            if current is None or option.reduce_dtype == chosen.reduce_dtype:
                by_strategy[option.strategy] = option.as_dict()
        out[net] = {
            **chosen.as_dict(),
            "sharding_setting": settings.training.sharding,
            "grad_reduce_dtype_setting": settings.training.grad_reduce_dtype,
            "advice": _advice(_shape_decided(settings, decided), net, chosen, options),
            "global_batch": global_batch(settings, chosen.training).as_dict(),
            "micro_batch": chosen.training.micro_batch,
            "grad_accumulation": chosen.training.grad_accumulation,
            "activation_checkpointing": chosen.training.activation_checkpointing,
            "strategies": by_strategy,
            "scaling": _scaling(settings, net, chosen),
            "calibration": calibration.source if calibration else None,
            "constants": provenance.constants(settings, net, calibration),
            "links": provenance.links(settings, net, chosen.prediction, chosen.training, calibration),
            "precision_note": fp8_evidence(settings),
        }
    # The comparison run (k8s.workload: the job's resolved levers, network flipped, nothing else): what the transport
    # alone is worth, beside what auto would pick on the other network.
    job_net = settings.workload.network
    other_net = "tcp" if job_net == "efa" else "efa"
    same = choose(resolve(settings, job_net, calibration), other_net, calibration)
    job = out[job_net]
    efa, tcp = (
        (job["tokens_per_s"], same.tokens_per_s) if job_net == "efa" else (same.tokens_per_s, job["tokens_per_s"])
    )
    out[other_net]["same_job"] = {
        "tokens_per_s": same.tokens_per_s,
        "tokens_per_s_per_gpu": same.prediction.tokens_per_s_per_gpu,
        "precision": same.training.precision,
        "strategy": same.strategy,
        "grad_reduce_dtype": same.reduce_dtype,
        "micro_batch": same.training.micro_batch,
        "grad_accumulation": same.training.grad_accumulation,
        "efa_over_tcp": efa / tcp if tcp > 0 else None,
        "note": f"the {job_net} job's levers on {other_net}, nothing else changed: the comparison RayJob "
        "(ray-efa manifests) and the transport ratio `ray-efa compare` reports",
    }
    return out
