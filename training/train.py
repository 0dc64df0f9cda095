"""`train_func(config)`: the loop each Ray Train worker runs.

config["settings"] is `Settings.to_context()`; every value comes from it. Ray Train has already joined the workers
into a torch.distributed process group (NCCL on GPU, gloo on CPU) when this runs, and the driver's per-worker wrapper
(training.worker) has run the preflight probe. The loop, nanoGPT style: model, FSDP2, AdamW, resume, then steps;
after each step one call, `Reporter.step`, does what is due (progress line, history, evaluation, checkpoint, report
to Ray: training.reporting), at the same steps on every rank.

Tests may break a run on purpose (training.faults, config key "_faults"): read once, before the loop.
"""

from __future__ import annotations

import logging
import math
import sys
from typing import Any, NamedTuple, Protocol

import torch
from torch.distributed.tensor import DTensor

from ray_efa.core import memory
from ray_efa.core.models import ModelPreset
from ray_efa.core.perf import flops_per_token_causal
from ray_efa.core.settings import Problem, Settings, SettingsError, TrainingSettings
from ray_efa.training import checkpoint, efa_counters, preflight, weights
from ray_efa.training.faults import FaultInjection
from ray_efa.training.history import open_history
from ray_efa.training.inputs import Inputs
from ray_efa.training.metrics import Meter, Throughput, peak_flops_per_s
from ray_efa.training.model import CausalLM, build_model
from ray_efa.training.parallelize import (
    ParallelPlan,
    after_optimizer_step,
    gradient_precision,
    parallelize,
    set_gradient_sync,
    set_hold_gathered,
)
from ray_efa.training.reporting import Reporter

__all__ = [
    "train_func",
    "check_fp8_capability",
    "trained_precision",
    "train_step",
    "clip_and_step",
    "StepResult",
    "learning_rate",
    "build_optimizer",
    "parallel_plan",
    "step_throughput",
    "run_steps",
]


def learning_rate(step: int, t: TrainingSettings) -> float:
    """Linear warm-up over warmupSteps (1-based steps), then cosine decay to 10% of the peak at the last step."""
    warmup = min(t.warmup_steps, t.steps)
    if step <= warmup:
        return t.learning_rate * step / warmup
    progress = (step - warmup) / max(1, t.steps - warmup)
    return t.learning_rate * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def build_optimizer(model: torch.nn.Module, t: TrainingSettings, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on norms or biases); fused kernels on GPU."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": t.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    fused = {"fused": True} if device.type == "cuda" else {"foreach": True}
    return torch.optim.AdamW(groups, lr=t.learning_rate, betas=(0.9, 0.95), eps=1e-8, **fused)


def _say(text: str) -> None:
    """Write a line to stdout, past Ray Train's print patch (which would also log it, showing it twice)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


Batch = tuple[torch.Tensor, torch.Tensor]


class StepResult(NamedTuple):
    """What one optimizer step returns, still on the device (reading it synchronizes: do so at report steps)."""

    loss: torch.Tensor
    """This rank's mean loss over the step's micro-batches."""
    grad_norm: torch.Tensor | None
    """The total gradient norm before clipping (clip_grad_norm_'s; the same on every rank); None when gradClip is 0."""


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch | list[Batch],
    *,
    lr: float,
    grad_clip: float,
    device: torch.device,
    sync_every_micro_batch: bool = False,
) -> StepResult:
    """One optimizer step on one batch or on a list of equal micro-batches (gradient accumulation); returns the
    (unsynchronized) mean loss over them and the gradient norm. bench/fsdp_reference.py runs it too.

    Each micro-batch's loss is scaled by 1/k before backward, so the accumulated gradient and the returned loss are
    those of the mean over all k x microBatch sequences: the same as one batch of them. Gradients cross the network
    only in the last micro-batch's backward (training.parallelize.set_gradient_sync), or in every one's with
    `sync_every_micro_batch` (gradSyncEveryMicroBatch: sharded gradients accumulate, no unsharded fp32 copy is held).
    """
    for group in optimizer.param_groups:
        group["lr"] = lr
    batches = batch if isinstance(batch, list) else [batch]
    k = len(batches)
    loss = torch.zeros((), device=device)
    for index, (inputs, labels) in enumerate(batches):
        if k > 1:
            set_gradient_sync(model, sync_every_micro_batch or index == k - 1)
            set_hold_gathered(model, index < k - 1)
        micro = model(inputs.to(device, non_blocking=True), labels.to(device, non_blocking=True))
        (micro / k).backward()
        loss = loss + micro.detach() / k
    norm = clip_and_step(model, optimizer, grad_clip)
    after_optimizer_step(model)  # fp8: the next all-gather's weight scales, in one all-reduce
    optimizer.zero_grad(set_to_none=True)  # frees the gradients before the next forward: its peak is lower
    return StepResult(loss, norm)


def clip_and_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float) -> torch.Tensor | None:
    """The optimizer step after clipping the gradients' total norm to `grad_clip` (0: no clipping); returns the norm
    before clipping (clip_grad_norm_'s), None without clipping.

    A fused Adam/AdamW divides each gradient by its `grad_scale` inside its own kernel (GradScaler's unscaling), so
    there the clip is that divisor, max(1, (norm + 1e-6) / grad_clip), the reciprocal of clip_grad_norm_'s clamped
    coefficient: one pass over the gradients fewer (clip_grad_norm_'s in-place multiply reads and writes every fp32
    gradient once more, about 4 ms a step of a 1.5B model on an H100). Elsewhere, clip_grad_norm_ itself."""
    if not grad_clip:
        optimizer.step()
        return None
    if not (isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW) and optimizer.defaults.get("fused")):
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        return norm
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads, foreach=True)
    whole = norm.full_tensor() if isinstance(norm, DTensor) else norm  # a plain scalar: replicated on every rank
    optimizer.grad_scale = torch.clamp((whole + 1e-6) / grad_clip, min=1.0)  # type: ignore[attr-defined]
    try:
        optimizer.step()
    finally:
        optimizer.grad_scale = None  # type: ignore[attr-defined]
    return norm


FP8_COMPUTE_CAPABILITY = (8, 9)
"""The oldest CUDA compute capability with fp8 tensor cores (Ada L4/L40S 8.9, Hopper 9.0): torchao float8's own check."""


def check_fp8_capability(capability: tuple[int, int], device_name: str) -> None:
    """At run time, whatever the plan said: SettingsError naming precision on a GPU without fp8 tensor cores."""
    if tuple(capability) < FP8_COMPUTE_CAPABILITY:
        major, minor = capability
        raise SettingsError(
            [
                Problem(
                    "precision",
                    "fp8",
                    f"must be bf16 on this {device_name}: compute capability "
                    f"{major}.{minor} has no fp8 tensor cores (fp8 needs "
                    f"{FP8_COMPUTE_CAPABILITY[0]}.{FP8_COMPUTE_CAPABILITY[1]} or later)",
                )
            ]
        )


def trained_precision(policy: Any, *, fp8: bool) -> str:
    """The precision the decoder layers' matrix products ran in, for the run summary: fp8, bf16 (FSDP2's bf16
    parameters), or fp32 where no mixed-precision policy applies (a CPU run: the precision setting is a GPU's)."""
    if fp8:
        return "fp8"
    return "bf16" if policy is not None and getattr(policy, "param_dtype", None) == torch.bfloat16 else "fp32"


def parallel_plan(t: TrainingSettings, device: torch.device, world: int, local_world: int) -> tuple[str, ParallelPlan]:
    """(strategy, plan): the resolved sharding, gradReduceDtype, activationCheckpointing and precision (decided once,
    by core.strategy.resolve; nothing is chosen here) on the ranks Ray started. HSDP replicates across the nodes
    actually present (world / ranks per node); on one node it is plain FSDP. fp8 runs on GPU only."""
    if "auto" in (t.sharding, t.grad_reduce_dtype):
        raise ValueError("sharding and gradReduceDtype must be decided first (core.strategy.resolve), not auto")
    nodes = world // max(1, local_world)
    replicas = nodes if t.sharding == "hsdp" and nodes > 1 and world % nodes == 0 else 1
    policy, bf16_wire = gradient_precision(device, t.grad_reduce_dtype, t.accumulation_steps)
    return ("hsdp" if replicas > 1 else "fsdp"), ParallelPlan(
        activation_checkpointing=t.checkpointing_mode,
        compile=t.compile,
        tune_kernels=t.compile_tuning,
        mixed_precision=policy,
        replicas=replicas,
        bf16_wire=bf16_wire,
        fp8=t.precision == "fp8" and device.type == "cuda",
    )


class _Batches(Protocol):
    def batch(self, index: int) -> Batch: ...


class _StepReporter(Protocol):
    def step(self, step: int, loss: torch.Tensor, lr: float, grad_norm: torch.Tensor | None = None) -> None: ...


def run_steps(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    data: _Batches,
    reporter: _StepReporter,
    t: TrainingSettings,
    *,
    start: int,
    last_step: int,
    device: torch.device,
    sync_every_micro_batch: bool = False,
) -> None:
    """The loop: optimizer steps start+1 .. last_step, each at its own step's learning rate (a resumed run goes on
    with the schedule where it stopped) on its own micro-batches, then `reporter.step`. `sync_every_micro_batch`:
    gradSyncEveryMicroBatch as the plan decided it (core.memory)."""
    k = t.accumulation_steps
    model.train()
    for step in range(start + 1, last_step + 1):
        lr = learning_rate(step, t)
        # micro-batches (step-1)k+1 .. sk: random tokens are a function of the index; a dataset's shard comes in order
        batches = [data.batch((step - 1) * k + i) for i in range(1, k + 1)]
        loss, grad_norm = train_step(
            model,
            optimizer,
            batches,
            lr=lr,
            grad_clip=t.grad_clip,
            device=device,
            sync_every_micro_batch=sync_every_micro_batch,
        )
        reporter.step(step, loss, lr, grad_norm)  # progress line, history, evaluation, checkpoint, report: when due


def step_throughput(t: TrainingSettings, arch: ModelPreset, world: int, device: torch.device) -> Throughput:
    """What turns the loop's measured step time into tokens/s and MFU: every token of the step's k micro-batches
    (microBatch x seqLen x gradAccumulation per device), FLOPs per token by both conventions, the device's peak."""
    return Throughput(
        tokens_per_step_per_device=t.micro_batch_size * t.seq_len * t.accumulation_steps,
        world_size=world,
        flops_per_token=arch.flops_per_token(t.seq_len),
        peak_flops_per_s=peak_flops_per_s(device),
        flops_per_token_causal=flops_per_token_causal(arch, t.seq_len),
    )


def _optimizer_steps(optimizer: torch.optim.Optimizer) -> int:
    """AdamW's own step count: every optimizer step ever applied to the state, across restarts."""
    return max((int(state["step"]) for state in optimizer.state.values()), default=0)


def _load_model(t: TrainingSettings, device: torch.device, rank: int) -> CausalLM:
    """The model on `device`: modelPath's weights (its files on this node: s3:// and hf:// downloaded once per node;
    the architecture is its config.json), else the preset's, randomly initialized."""
    folder = weights.fetch_model(t.model_path) if t.model_path else None
    model = build_model(
        t.preset,
        seed=t.seed,
        device=device,
        model_path=str(folder) if folder else None,
        loss_chunk_size=t.loss_chunk,
        decoder=t.decoder_block,
    )
    if rank == 0 and model.decoder_fallback:
        _say(f"decoderBlock lean does not cover this model ({model.decoder_fallback}): transformers' own layer runs")
    if rank == 0 and folder is not None and t.model_path is not None:
        _say(weights.describe_loaded(t.model_path, folder, model))
    return model


def _sync_every_micro_batch(
    settings: Settings, strategy: str, world: int, local_world: int, device: torch.device
) -> bool:
    """The plan's answer (core.memory) to gradSyncEveryMicroBatch, on the ranks Ray started."""
    link = settings.nodes.gpu_instance.gpu_link
    local = max(1, local_world)
    return memory.grad_sync_every_micro_batch(
        settings.training,
        strategy=strategy,
        nodes=max(1, world // local),
        gpus_per_node=local,
        nvlink=device.type == "cuda" and link is not None and link.name.startswith("NVLink"),
    )


def _what_ran(t: TrainingSettings, model: CausalLM, strategy: str, plan: ParallelPlan) -> dict[str, Any]:
    """What ran, for `ray-efa calibrate`: the `model` setting as given, and the architecture trained (modelPath's or
    modelConfig's config.json where set, else that preset; model_type: its transformers family)."""
    return {
        "model": t.model,
        "architecture": t.preset.name,
        "model_type": model.model_type,
        "micro_batch": t.micro_batch_size,
        "seq_len": t.seq_len,
        "grad_accumulation": t.accumulation_steps,
        "compile": t.compile,
        "loss_chunk_size": t.loss_chunk,
        "decoder_block": model.decoder,
        # whose post-backward the gradients took: training.one_rank's on a rank alone in its shard group, else FSDP2's
        "gradient_path": "one-rank" if model.one_rank_units else "fsdp2",
        "activation_checkpointing": t.checkpointing,
        "checkpointing_mode": t.checkpointing_mode,
        "sharding": strategy,
        "replicas": plan.replicas,
        "grad_reduce_dtype": t.grad_reduce_dtype if plan.mixed_precision is not None else "fp32",
        "precision": trained_precision(plan.mixed_precision, fp8=plan.fp8),
        "preflight_busbw_gb_s": preflight.measured_busbw_gb_s(),
        "dataset": t.dataset,
    }


def train_func(config: dict[str, Any]) -> dict[str, Any]:
    """Train as the settings say; rank 0 returns {"summary", "history": [(step, loss)], "step_metrics": a dict per
    step (Reporter.history), "optimizer_steps"} (Result.return_value)."""
    import ray.train
    import ray.train.torch

    # Ray logs every ray.train.report at INFO through the root logger (one line per rank per report); our progress
    # line says it once. Ray Train's own "ray.train" logger keeps its level and handlers.
    logging.getLogger().setLevel(logging.WARNING)
    from ray_efa.core.strategy import resolve

    # every auto lever decided as the plan decides it (microBatch, gradAccumulation, precision, activationCheckpointing,
    # sharding, gradReduceDtype): the same function `ray-efa plan` shows them from, so the job runs the planned split.
    # The driver's config holds them decided already; resolve returns decided settings as they are.
    settings = resolve(Settings.from_context(config["settings"]))
    faults = FaultInjection.from_config(config)  # tests only: None in every real run
    t = settings.training
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()
    if t.precision == "fp8" and device.type == "cuda":
        check_fp8_capability(torch.cuda.get_device_capability(device), torch.cuda.get_device_name(device))

    arch = t.preset
    model = _load_model(t, device, rank)
    strategy, plan = parallel_plan(t, device, world, context.get_local_world_size())
    replicas, reduce_dtype = plan.replicas, t.grad_reduce_dtype
    if rank == 0:
        _say(
            f"sharding: {strategy}"
            + (f" ({replicas} replicas x {world // replicas} shards)" if replicas > 1 else "")
            + (f", gradients {reduce_dtype} on the wire" if device.type == "cuda" else "")
            + (", fp8 decoder linears" if plan.fp8 else "")
        )
    model = parallelize(model, plan)
    optimizer = build_optimizer(model, t, device)
    start, train_state = checkpoint.restore_with_state(model, optimizer)  # 0 unless Ray hands us this run's checkpoint
    shape = checkpoint.run_shape(t, world)
    train_state = checkpoint.remap_train_state(train_state, shape)  # the plan may differ from the checkpoint's
    data = Inputs(
        settings, rank=rank, world_size=world, vocab_size=arch.vocab_size, data_state=train_state.get("data", {})
    )
    meter = Meter(
        throughput=step_throughput(t, arch, world, device), total_steps=t.steps, start_step=start, device=device
    )
    if rank == 0 and start:
        _say(f"resumed from the checkpoint of step {start}")
    history = open_history(start)  # rank 0: metrics.jsonl and TensorBoard events in the run folder; else None

    def save(metrics: dict[str, float], step: int) -> None:
        checkpoint.save_and_report(
            metrics,
            step=step,
            model=model,
            optimizer=optimizer,
            rank=rank,
            train_state={**data.state(), "shape": shape},
        )

    reporter = Reporter(
        meter=meter,
        report_every=t.report_every,
        rank=rank,
        world_size=world,
        device=device,
        checkpoint_every=t.checkpoint_every,
        save=save,
        eval_due=data.eval_due,
        evaluate=(lambda: data.evaluate(model, device)) if data.eval_split is not None else None,
        log=history,
        say=_say,
        after_record=faults.hook(rank=rank, start_step=start) if faults else None,
    )
    last_step = faults.last_step(t.steps) if faults else t.steps
    sync_every = _sync_every_micro_batch(settings, strategy, world, context.get_local_world_size(), device)
    if rank == 0 and sync_every and t.accumulation_steps > 1:
        _say("gradients reduce-scattered after every micro-batch (gradSyncEveryMicroBatch)")
    run_steps(
        model,
        optimizer,
        data,
        reporter,
        t,
        start=start,
        last_step=last_step,
        device=device,
        sync_every_micro_batch=sync_every,
    )
    if history:
        history.close()

    efa_counters.snapshot_ray_worker("after", steps=max(0, last_step - start), settings=settings)
    where = {"devices": world, "hosts": max(1, world // max(1, context.get_local_world_size()))}  # where it ran
    ran = _what_ran(t, model, strategy, plan)
    return {
        "summary": {**meter.summary(), **reporter.last_eval, **where, **ran, "reports": reporter.reports},
        "history": reporter.losses(),
        "step_metrics": reporter.history,
        "optimizer_steps": _optimizer_steps(optimizer),
    }
