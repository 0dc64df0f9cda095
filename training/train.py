"""`train_func(config)`: the loop each Ray Train worker runs.

config["settings"] is `Settings.to_context()`; every value comes from it. Ray Train has already joined the workers
into a torch.distributed process group (NCCL on GPU, gloo on CPU) when this runs, and the driver's per-worker wrapper
(training.worker) has run the preflight probe. The loop, nanoGPT style: model, FSDP2, AdamW, resume, then steps;
rank 0 prints progress; every rank reports at the steps training.reporting agrees on (at most one per poll).

Test-only fault injection (config key "_faults", see FaultInjection) is never set by the driver.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ray_efa.core.perf import flops_per_token_causal
from ray_efa.core.settings import Problem, Settings, SettingsError, TrainingSettings
from ray_efa.training import checkpoint, efa_counters, preflight, weights
from ray_efa.training.history import open_history
from ray_efa.training.inputs import Inputs
from ray_efa.training.metrics import Meter, Throughput, format_line, peak_flops_per_s
from ray_efa.training.model import build_model
from ray_efa.training.parallelize import (
    ParallelPlan,
    after_optimizer_step,
    gradient_precision,
    parallelize,
    set_gradient_sync,
)
from ray_efa.training.reporting import Reporter

__all__ = ["train_func", "check_fp8_capability", "trained_precision", "train_step", "StepResult", "learning_rate", "build_optimizer", "FaultInjection", "InjectedFault"]

class InjectedFault(RuntimeError):
    """The failure FaultInjection raises (tests only)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FaultInjection:
    """Test-only hooks, from train_loop_config["_faults"] (a dict of these fields)."""

    raise_at_step: int | None = None
    """Rank `raise_on_rank` raises right after optimizer step k, before that step's report or checkpoint. It fires
    once: only in an attempt that started from step 0, so the restarted attempt (resumed from a checkpoint before k,
    which the test must provide) runs through."""
    raise_on_rank: int = 1
    """The rank that raises, or exits."""
    exit_at_step: int | None = None
    """Rank `raise_on_rank` ends its process (os._exit) right after optimizer step k, as a worker whose node is lost:
    the failure a run retries (training.failure_policy; an exception of the code is not retried). Once, as above."""
    stop_after_step: int | None = None
    """Every rank leaves the loop after this step (and its report, if due), keeping the full run's LR schedule: a job
    stopped between checkpoints, for resume tests."""

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> FaultInjection:
        return cls(**config.get("_faults", {}))

    def after_step(self, *, step: int, rank: int, start_step: int) -> None:
        if self.raise_at_step == step and rank == self.raise_on_rank and start_step == 0:
            raise InjectedFault(f"injected fault at step {step} on rank {rank}")
        if self.exit_at_step == step and rank == self.raise_on_rank and start_step == 0:
            # The controller takes reports (and their checkpoints) by polling: wait past a few polls, so the step
            # k-1 checkpoint is registered before the process goes, as it would be on a node lost later.
            import time

            time.sleep(3)
            sys.stdout.flush()
            os._exit(1)  # no exception, no cleanup: the worker process is gone


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
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Batch | list[Batch], *,
    lr: float, grad_clip: float, device: torch.device,
) -> StepResult:
    """One optimizer step on one batch or on a list of equal micro-batches (gradient accumulation); returns the
    (unsynchronized) mean loss over them and the gradient norm. bench/fsdp_reference.py runs it too.

    Each micro-batch's loss is scaled by 1/k before backward, so the accumulated gradient and the returned loss are
    those of the mean over all k x microBatch sequences: the same as one batch of them. Gradients cross the network
    only in the last micro-batch's backward (training.parallelize.set_gradient_sync).
    """
    for group in optimizer.param_groups:
        group["lr"] = lr
    batches = batch if isinstance(batch, list) else [batch]
    k = len(batches)
    loss = torch.zeros((), device=device)
    for index, (inputs, labels) in enumerate(batches):
        if k > 1:
            set_gradient_sync(model, index == k - 1)
        micro = model(inputs.to(device, non_blocking=True), labels.to(device, non_blocking=True))
        (micro / k).backward()
        loss = loss + micro.detach() / k
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip) if grad_clip else None
    optimizer.step()
    after_optimizer_step(model)  # fp8: the next all-gather's weight scales, in one all-reduce
    optimizer.zero_grad(set_to_none=True)  # frees the gradients before the next forward: its peak is lower
    return StepResult(loss, norm)


FP8_COMPUTE_CAPABILITY = (8, 9)
"""The oldest CUDA compute capability with fp8 tensor cores (Ada L4/L40S 8.9, Hopper 9.0): torchao float8's own check."""


def check_fp8_capability(capability: tuple[int, int], device_name: str) -> None:
    """At run time, whatever the plan said: SettingsError naming precision on a GPU without fp8 tensor cores."""
    if tuple(capability) < FP8_COMPUTE_CAPABILITY:
        major, minor = capability
        raise SettingsError([Problem("precision", "fp8", f"must be bf16 on this {device_name}: compute capability "
                                     f"{major}.{minor} has no fp8 tensor cores (fp8 needs "
                                     f"{FP8_COMPUTE_CAPABILITY[0]}.{FP8_COMPUTE_CAPABILITY[1]} or later)")])


def trained_precision(policy: Any, *, fp8: bool) -> str:
    """The precision the decoder layers' matrix products ran in, for the run summary: fp8, bf16 (FSDP2's bf16
    parameters), or fp32 where no mixed-precision policy applies (a CPU run: the precision setting is a GPU's)."""
    if fp8:
        return "fp8"
    return "bf16" if policy is not None and getattr(policy, "param_dtype", None) == torch.bfloat16 else "fp32"


def _sharding(settings: Settings, world: int, local_world: int) -> tuple[str, int, str]:
    """(strategy, HSDP replicas, gradient reduction dtype): core.strategy's choice, on the ranks Ray started.

    HSDP replicates across the nodes actually present (world / ranks per node); on one node it is plain FSDP.
    """
    from ray_efa.core.strategy import choose

    option = choose(settings)
    nodes = world // max(1, local_world)
    if option.strategy == "hsdp" and nodes > 1 and world % nodes == 0:
        return option.strategy, nodes, option.reduce_dtype
    return "fsdp", 1, option.reduce_dtype


def _optimizer_steps(optimizer: torch.optim.Optimizer) -> int:
    """AdamW's own step count: every optimizer step ever applied to the state, across restarts."""
    return max((int(state["step"]) for state in optimizer.state.values()), default=0)


def train_func(config: dict[str, Any]) -> dict[str, Any]:
    """Train as the settings say; rank 0 returns {"summary", "history": [(step, loss)], "step_metrics": a dict per
    step (Reporter.history), "optimizer_steps"} (Result.return_value)."""
    import ray.train
    import ray.train.torch

    # Ray logs every ray.train.report at INFO through the root logger (one line per rank per report); our progress
    # line says it once. Ray Train's own "ray.train" logger keeps its level and handlers.
    logging.getLogger().setLevel(logging.WARNING)
    from ray_efa.core.strategy import resolve

    # the plan's decisions (microBatch, gradAccumulation, precision, activationCheckpointing at auto): the same
    # function `ray-efa plan` shows them from, on the same settings, so the job runs the planned split
    settings = resolve(Settings.from_context(config["settings"]))
    faults = FaultInjection.from_config(config)
    t = settings.training
    rank, world = ray.train.get_context().get_world_rank(), ray.train.get_context().get_world_size()
    device = ray.train.torch.get_device()
    if t.precision == "fp8" and device.type == "cuda":
        check_fp8_capability(torch.cuda.get_device_capability(device), torch.cuda.get_device_name(device))

    # modelPath's files on this node (s3:// and hf:// downloaded once per node); the architecture is its config.json
    folder = weights.fetch_model(t.model_path) if t.model_path else None
    arch = t.preset
    model = build_model(arch, seed=t.seed, device=device, model_path=str(folder) if folder else None,
                        loss_chunk_size=t.loss_chunk_size)
    if rank == 0 and folder is not None and t.model_path is not None:
        _say(weights.describe_loaded(t.model_path, folder, model))
    strategy, replicas, reduce_dtype = _sharding(settings, world, ray.train.get_context().get_local_world_size())
    policy, bf16_wire = gradient_precision(device, reduce_dtype, t.accumulation_steps)
    plan = ParallelPlan(
        activation_checkpointing=t.checkpointing, compile=t.compile, mixed_precision=policy,
        replicas=replicas, bf16_wire=bf16_wire, fp8=t.precision == "fp8" and device.type == "cuda",
    )
    if rank == 0:
        _say(f"sharding: {strategy}" + (f" ({replicas} replicas x {world // replicas} shards)" if replicas > 1 else "")
             + (f", gradients {reduce_dtype} on the wire" if device.type == "cuda" else "")
             + (", fp8 decoder linears" if plan.fp8 else ""))
    model = parallelize(model, plan)
    optimizer = build_optimizer(model, t, device)
    start, train_state = checkpoint.restore_with_state(model, optimizer)  # 0 unless Ray hands us this run's checkpoint
    shape = checkpoint.run_shape(t, world)
    train_state = checkpoint.remap_train_state(train_state, shape)  # the plan may differ from the checkpoint's
    data = Inputs(settings, rank=rank, world_size=world, vocab_size=arch.vocab_size, data_state=train_state.get("data", {}))
    last_eval: dict[str, float] = {}
    meter = Meter(
        throughput=Throughput(
            tokens_per_step_per_device=t.micro_batch_size * t.seq_len * t.accumulation_steps, world_size=world,
            flops_per_token=arch.flops_per_token(t.seq_len), peak_flops_per_s=peak_flops_per_s(device),
            flops_per_token_causal=flops_per_token_causal(arch, t.seq_len),
        ),
        total_steps=t.steps, start_step=start, device=device,
    )
    if rank == 0 and start:
        _say(f"resumed from the checkpoint of step {start}")
    history = open_history(start)  # rank 0: metrics.jsonl and TensorBoard events in the run folder; else None

    reporter = Reporter(meter=meter, report_every=t.report_every, rank=rank, world_size=world, device=device)
    model.train()
    steps_run = 0
    for step in range(start + 1, t.steps + 1):
        steps_run += 1
        lr = learning_rate(step, t)
        k = t.accumulation_steps  # micro-batch ids (step-1)k+1 .. sk: with k = 1, batch `step` as always
        batches = [data.batch((step - 1) * k + i + 1) for i in range(k)]  # random tokens: a function of the id
        loss, grad_norm = train_step(model, optimizer, batches, lr=lr, grad_clip=t.grad_clip, device=device)
        reporter.record(step, loss, lr, grad_norm=grad_norm)
        faults.after_step(step=step, rank=rank, start_step=start)

        save = step == t.steps or (t.checkpoint_every > 0 and step % t.checkpoint_every == 0)
        evaluate = data.eval_due(step)
        if reporter.is_measure_step(step, save=save or evaluate):  # the same steps on every rank
            metrics, report = reporter.measure(step, save=save)  # report: agreed by every rank
            if evaluate:  # after measure: the held-out pass is not a training step
                last_eval = {**data.evaluate(model, device), "eval_step": step}
                metrics.update(last_eval)
                reporter.annotate(last_eval)
                reporter.restart_clock()
            if rank == 0:
                _say(format_line(metrics, t.steps))
            if history:  # every step since the last measure step
                for entry in reporter.take_unlogged():
                    history.log(entry, int(entry["step"]))
            if save:
                checkpoint.save_and_report(metrics, step=step, model=model, optimizer=optimizer, rank=rank,
                                           train_state={**data.state(), "shape": shape})
                reporter.reported()
                reporter.restart_clock()  # the save is not a training step
            elif report:
                ray.train.report(metrics)
                reporter.reported()
        if faults.stop_after_step == step:
            break
    if history:
        history.close()

    efa_counters.snapshot_ray_worker("after", steps=steps_run, settings=settings)
    context = ray.train.get_context()
    where = {"devices": world, "hosts": max(1, world // max(1, context.get_local_world_size()))}  # where it ran
    # what ran, for `ray-efa calibrate`
    ran = {"model": t.model, "micro_batch": t.micro_batch_size, "seq_len": t.seq_len,
             "grad_accumulation": t.accumulation_steps, "compile": t.compile, "loss_chunk_size": t.loss_chunk_size,
             "activation_checkpointing": t.checkpointing, "sharding": strategy, "replicas": replicas,
             "grad_reduce_dtype": reduce_dtype if policy is not None else "fp32",
             "precision": trained_precision(policy, fp8=plan.fp8),
             "preflight_busbw_gb_s": preflight.measured_busbw_gb_s(), "dataset": t.dataset}
    return {"summary": {**meter.summary(), **last_eval, **where, **ran, "reports": reporter.reports},
            "history": reporter.losses(),
            "step_metrics": reporter.history, "optimizer_steps": _optimizer_steps(optimizer)}
