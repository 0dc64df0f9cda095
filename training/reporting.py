"""Everything train_func does after an optimizer step, in one call (`Reporter.step`): every step's metrics in
`Reporter.history`; at measure steps the progress line, the run's metrics history, the held-out evaluation, and the
checkpoint or `ray.train.report` when due.

Ray Train v2 (2.58) holds one report per worker (worker_group/worker.py: Queue(maxsize=1)) and drains it once per
RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (default 2 s): a report per short step waited for the poll. Here each step's loss
stays on the device; a measure step (first, every reportEvery, checkpoint, last) all-reduces the pending losses and
rank 0's "report now" flag (due after REPORT_SPACING poll intervals) at once, so every rank reports at the same steps.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.distributed as dist

from ray_efa.core.pod_env import POLL_INTERVAL_ENV, RAY_DEFAULT_POLL_INTERVAL_S
from ray_efa.training.metrics import Meter, format_line

__all__ = ["REPORT_SPACING", "poll_interval_s", "Reporter"]

REPORT_SPACING = 1.25  # poll intervals between reports: the previous one is drained by then


def poll_interval_s(env: Mapping[str, str] = os.environ) -> float:
    """The controller's poll interval, as Ray Train reads it."""
    try:
        return float(env.get(POLL_INTERVAL_ENV, RAY_DEFAULT_POLL_INTERVAL_S))
    except ValueError:
        return RAY_DEFAULT_POLL_INTERVAL_S


def _all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


@dataclass
class _Pending:
    step: int
    loss: torch.Tensor
    lr: float
    mark: object  # the step's end: perf_counter() on CPU, a recorded CUDA event on GPU
    grad_norm: torch.Tensor | None = None  # the same on every rank


def _ray_report(metrics: dict[str, float]) -> None:
    import ray.train

    ray.train.report(metrics)


def _never(step: int) -> bool:
    return False


class _Log(Protocol):
    def log(self, metrics: Mapping[str, Any], step: int) -> None: ...


@dataclass
class Reporter:
    """Every step's metrics, and which measure steps report to Ray (the same on every rank); `step` does what is due
    after each optimizer step, with what train_func hands it (evaluation, checkpoint, history)."""

    meter: Meter
    report_every: int
    rank: int
    world_size: int
    device: torch.device
    min_interval_s: float = field(default_factory=lambda: REPORT_SPACING * poll_interval_s())
    clock: Callable[[], float] = time.perf_counter
    reduce: Callable[[torch.Tensor], torch.Tensor] = _all_reduce_sum
    history: list[dict[str, float]] = field(default_factory=list)  # per step: loss, lr, time/step_s, rates (+ more)
    reports: int = 0  # ray.train.report calls
    checkpoint_every: int = 0
    """Checkpoint (with its report) every K steps and at the last one; 0: only at the last."""
    save: Callable[[dict[str, float], int], None] | None = None
    """Checkpoint and report with these metrics at this step (training.checkpoint.save_and_report, bound); None: a
    plain report at those steps."""
    eval_due: Callable[[int], bool] = _never
    """Whether the held-out evaluation runs after this step."""
    evaluate: Callable[[], dict[str, float]] | None = None
    """The held-out evaluation (training.inputs.Inputs.evaluate, bound)."""
    log: _Log | None = None
    """The run's metrics history (rank 0: training.history), given every step at the next measure step."""
    say: Callable[[str], None] | None = None
    """Where rank 0 writes its progress line; None: nowhere."""
    report: Callable[[dict[str, float]], None] = _ray_report
    after_record: Callable[[int], None] | None = None
    """Called with the step right after it is recorded, before anything is reported (training.faults: tests only)."""
    last_eval: dict[str, float] = field(default_factory=dict)
    """The latest evaluation's metrics, with its "eval_step"."""
    _pending: list[_Pending] = field(default_factory=list)
    _previous_mark: object = None
    _last_report: float = -math.inf
    _logged: int = 0

    def __post_init__(self) -> None:
        self._previous_mark = self._mark()

    def _mark(self) -> object:
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return self.clock()

    def _seconds(self, start: object, end: object) -> float:
        if isinstance(start, torch.cuda.Event) and isinstance(end, torch.cuda.Event):
            return start.elapsed_time(end) / 1000.0
        return float(end) - float(start)  # type: ignore[arg-type]

    def step(self, step: int, loss: torch.Tensor, lr: float, grad_norm: torch.Tensor | None = None) -> None:
        """After optimizer step `step`, on every rank: record it; at a measure step (the same on every rank) measure,
        evaluate when due, print rank 0's progress line, hand the history its entries, then checkpoint (its report
        carries the checkpoint) or report when due."""
        self.record(step, loss, lr, grad_norm=grad_norm)
        if self.after_record is not None:
            self.after_record(step)
        total = self.meter.total_steps
        save = step == total or (self.checkpoint_every > 0 and step % self.checkpoint_every == 0)
        evaluate = self.evaluate is not None and self.eval_due(step)
        if not self.is_measure_step(step, save=save or evaluate):
            return
        metrics, report = self.measure(step, save=save)  # report: agreed by every rank
        if evaluate:  # after measure: the held-out pass is not a training step
            assert self.evaluate is not None
            self.last_eval = {**self.evaluate(), "eval_step": step}
            metrics.update(self.last_eval)
            self.annotate(self.last_eval)
            self.restart_clock()
        if self.say is not None and self.rank == 0:
            self.say(format_line(metrics, total))
        if self.log is not None:  # every step since the last measure step
            for entry in self.take_unlogged():
                self.log.log(entry, int(entry["step"]))
        if save and self.save is not None:
            self.save(metrics, step)
            self.reported()
            self.restart_clock()  # the save is not a training step
        elif report or save:
            self.report(metrics)
            self.reported()

    def record(self, step: int, loss: torch.Tensor, lr: float, grad_norm: torch.Tensor | None = None) -> None:
        """A finished step's loss and gradient norm, left on the device."""
        from torch.distributed.tensor import DTensor

        if isinstance(grad_norm, DTensor):
            grad_norm = grad_norm.full_tensor()
        norm = None if grad_norm is None else grad_norm.detach().float().reshape(())
        self._pending.append(
            _Pending(step=step, loss=loss.detach().float().reshape(()), lr=lr, mark=self._mark(), grad_norm=norm)
        )

    def is_measure_step(self, step: int, *, save: bool) -> bool:
        """The steps that measure (and may report)."""
        return save or step == self.meter.start_step + 1 or step % self.report_every == 0

    def measure(self, step: int, *, save: bool) -> tuple[dict[str, float], bool]:
        """(metrics at `step`, whether to report now): one all-reduce, on every rank."""
        due = save or self.clock() - self._last_report >= self.min_interval_s
        flag = 1.0 if (self.rank == 0 and due) else 0.0
        losses = [p.loss for p in self._pending]
        norms = [p.grad_norm for p in self._pending if p.grad_norm is not None]
        # torch.full: a fill kernel, no host-to-device copy before the all-reduce
        packed = torch.stack([*losses, *norms, torch.full((), flag, device=self.device)])
        values = self.reduce(packed).tolist()  # the host sync of this interval
        report = values[-1] > 0.5
        means = [v / self.world_size for v in values[:-1]]
        loss_means, norm_means = iter(means[: len(losses)]), iter(means[len(losses) :])
        for pending in self._pending:
            seconds = self._seconds(self._previous_mark, pending.mark)
            self._previous_mark = pending.mark
            entry = {
                "step": pending.step,
                "loss": next(loss_means),
                "lr": pending.lr,
                "time/step_s": seconds,
                **self.meter.rates(seconds),
            }
            if pending.grad_norm is not None:
                entry["grad_norm"] = next(norm_means)
            self.history.append(entry)
        self._pending.clear()
        last = self.history[-1] if self.history and self.history[-1]["step"] == step else None
        metrics = {
            **self.meter.measure(step, last["loss"] if last else float("nan")),
            "lr": last["lr"] if last else 0.0,
        }
        if last is not None and "grad_norm" in last:
            metrics["grad_norm"] = last["grad_norm"]
        if last is not None:
            self.history[-1] = {**metrics, "time/step_s": last["time/step_s"], **self.meter.rates(last["time/step_s"])}
        return metrics, report

    def annotate(self, values: dict[str, float]) -> None:
        """Add values (an evaluation) to the last step's entry."""
        if self.history:
            self.history[-1] = {**self.history[-1], **values}

    def take_unlogged(self) -> list[dict[str, float]]:
        """The entries since the last call (for the history writer)."""
        entries = self.history[self._logged :]
        self._logged = len(self.history)
        return entries

    def reported(self) -> None:
        """After ray.train.report returned."""
        self.reports += 1
        self._last_report = self.clock()

    def restart_clock(self) -> None:
        """After work that is not a step (a save, an evaluation)."""
        self.meter.restart_clock()
        self._previous_mark = self._mark()

    def losses(self) -> list[tuple[int, float]]:
        """(step, loss) of every step."""
        return [(int(h["step"]), h["loss"]) for h in self.history]
