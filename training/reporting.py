"""When train_func calls `ray.train.report`, and every step's metrics kept in one place.

Ray Train v2 (ray 2.58) gives each worker a result queue of ONE report (`worker_group/worker.py`,
`queue.Queue(maxsize=1)`) and its controller drains it once per poll, every RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (default
2.0 s, `_internal/constants.py`; `controller.py` `_poll_workers`). A report made while the previous one still waits
blocks the training loop until the next poll: with a report every 0.2 s step, every step waited for the poll.

So the loop measures on its own rhythm and reports on the controller's:
- every step's loss is kept on the device (no host sync) with a timestamp (a CUDA event on GPU);
- at each measure step (the first step of an attempt, every `reportEvery` steps, checkpoint steps, the last) the
  pending losses and rank 0's decision whether a report is due go through ONE all-reduce; that is the only host sync,
  as before. Every pending step then gets its metrics (`history`), and rank 0 prints the progress line;
- a report is due when at least REPORT_SPACING poll intervals have passed on rank 0 since its last report (checkpoint
  steps always report). Only rank 0's clock decides, and the decision travels in the all-reduce (1.0 from rank 0,
  0.0 from the others), so every rank calls `ray.train.report` at the same steps, as Ray requires (it is a barrier).

The controller's interval is read from the same environment variable the controller reads (Ray propagates it from
the driver to the controller and the workers: ENV_VARS_TO_PROPAGATE); the driver sets it for the job
(JOB_POLL_INTERVAL_S) unless the environment already does.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ray_efa.training.metrics import Meter
from ray_efa.training.network import JOB_POLL_INTERVAL_S, POLL_INTERVAL_ENV, RAY_DEFAULT_POLL_INTERVAL_S

__all__ = [
    "POLL_INTERVAL_ENV", "RAY_DEFAULT_POLL_INTERVAL_S", "JOB_POLL_INTERVAL_S", "REPORT_SPACING", "poll_interval_s",
    "Reporter",
]

REPORT_SPACING = 1.25
"""Reports are at least this many poll intervals apart, so the previous one has been drained when the next comes
(a poll can run late by the time its RPCs take)."""


def poll_interval_s(env: Mapping[str, str] = os.environ) -> float:
    """The controller's poll interval as Ray Train reads it (the environment, else Ray's default)."""
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
    mark: object
    """time.perf_counter() value on CPU, a recorded torch.cuda.Event on GPU: the end of the step."""
    grad_norm: torch.Tensor | None = None
    """The gradient norm before clipping, the same on every rank (a local tensor); None without clipping."""


@dataclass
class Reporter:
    """Keeps every step's metrics and decides, the same way on every rank, which measure steps report to Ray."""

    meter: Meter
    report_every: int
    rank: int
    world_size: int
    device: torch.device
    min_interval_s: float = field(default_factory=lambda: REPORT_SPACING * poll_interval_s())
    """Least seconds between two reports (rank 0's clock)."""
    clock: Callable[[], float] = time.perf_counter
    reduce: Callable[[torch.Tensor], torch.Tensor] = _all_reduce_sum
    history: list[dict[str, float]] = field(default_factory=list)
    """One dict per step, in step order: step, loss (mean over ranks), lr, time/step_s and the rates it gives; the
    measure steps also carry memory and the rest of the progress line's metrics. What a history writer reads."""
    reports: int = 0
    """ray.train.report calls so far (equal on every rank)."""
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

    def record(self, step: int, loss: torch.Tensor, lr: float, grad_norm: torch.Tensor | None = None) -> None:
        """A finished optimizer step: its (unsynchronized, this rank's) loss and gradient norm. No host sync."""
        from torch.distributed.tensor import DTensor

        if isinstance(grad_norm, DTensor):  # FSDP2's norm: made whole on the device, no host sync
            grad_norm = grad_norm.full_tensor()
        norm = None if grad_norm is None else grad_norm.detach().float().reshape(())
        self._pending.append(_Pending(step=step, loss=loss.detach().float().reshape(()), lr=lr, mark=self._mark(),
                                      grad_norm=norm))

    def is_measure_step(self, step: int, *, save: bool) -> bool:
        """The steps that measure (and may report): the same on every rank."""
        return save or step == self.meter.start_step + 1 or step % self.report_every == 0

    def measure(self, step: int, *, save: bool) -> tuple[dict[str, float], bool]:
        """(the metrics at `step`, whether to report them now). One all-reduce over every rank; call on all ranks."""
        due = save or self.clock() - self._last_report >= self.min_interval_s
        flag = 1.0 if (self.rank == 0 and due) else 0.0
        losses = [p.loss for p in self._pending]
        # The gradient norms are the same on every rank: they ride the same all-reduce and come back x world size.
        norms = [p.grad_norm for p in self._pending if p.grad_norm is not None]
        # torch.full is a fill kernel: no host-to-device copy, so nothing waits before the all-reduce is queued.
        packed = torch.stack([*losses, *norms, torch.full((), flag, device=self.device)])
        values = self.reduce(packed).tolist()  # the host sync of this interval
        report = values[-1] > 0.5
        means = [v / self.world_size for v in values[:-1]]
        loss_means, norm_means = iter(means[:len(losses)]), iter(means[len(losses):])
        for pending in self._pending:
            seconds = self._seconds(self._previous_mark, pending.mark)
            self._previous_mark = pending.mark
            entry = {"step": pending.step, "loss": next(loss_means), "lr": pending.lr, "time/step_s": seconds,
                     **self.meter.rates(seconds)}
            if pending.grad_norm is not None:
                entry["grad_norm"] = next(norm_means)
            self.history.append(entry)
        self._pending.clear()
        last = self.history[-1] if self.history and self.history[-1]["step"] == step else None
        metrics = {**self.meter.measure(step, last["loss"] if last else float("nan")), "lr": last["lr"] if last else 0.0}
        if last is not None and "grad_norm" in last:
            metrics["grad_norm"] = last["grad_norm"]
        if last is not None:  # the measure step's entry: the full metrics, with its own step time
            self.history[-1] = {**metrics, "time/step_s": last["time/step_s"], **self.meter.rates(last["time/step_s"])}
        return metrics, report

    def annotate(self, values: dict[str, float]) -> None:
        """Add values measured at the last measure step (an evaluation) to that step's history entry."""
        if self.history:
            self.history[-1] = {**self.history[-1], **values}

    def take_unlogged(self) -> list[dict[str, float]]:
        """The history entries since the last call, for a history writer (rank 0) to append."""
        entries = self.history[self._logged:]
        self._logged = len(self.history)
        return entries

    def reported(self) -> None:
        """Call right after every rank's ray.train.report returned."""
        self.reports += 1
        self._last_report = self.clock()

    def restart_clock(self) -> None:
        """After work that is not a training step (a checkpoint save): the next step's time starts now."""
        self.meter.restart_clock()
        self._previous_mark = self._mark()

    def losses(self) -> list[tuple[int, float]]:
        """(step, loss) of every step so far."""
        return [(int(h["step"]), h["loss"]) for h in self.history]
