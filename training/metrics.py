"""Step metrics, the rank-0 progress line and the final table.

Metrics are measured at measure steps only (the first step of an attempt, every `reportEvery` steps, checkpoint steps
and the last; training.reporting): the losses' transfer synchronizes the GPU there, so the wall time since the
previous one, divided by the steps in between, is the true step time without a sync on every step. Keys are namespaced the torchtitan way
(`throughput/...`, `memory/...`) and the same dict goes to `ray.train.report` and to the progress line.

MFU = achieved FLOP/s per device / the device's dense bf16 peak (core.catalog), with FLOPs per token from
core.models (6N + 12 * layers * hidden * seq; also causal, 6N + 6 L d S). CPUs and GPUs the catalog does not know
report no MFU.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ray_efa.core import catalog

__all__ = ["Throughput", "Meter", "peak_flops_per_s", "device_name", "format_line", "format_summary"]

_GIB = 2**30


@dataclass(frozen=True, kw_only=True, slots=True)
class Throughput:
    """The constants that turn a step time into tokens/s and MFU."""

    tokens_per_step_per_device: int
    """micro_batch x seq_len."""
    world_size: int
    flops_per_token: float
    """Training FLOPs per token (forward + backward)."""
    peak_flops_per_s: float | None
    """Dense bf16 peak of one device, FLOP/s; None: no MFU."""
    flops_per_token_causal: float | None = None
    """6N + 6 L d S (causal): a second MFU."""


def peak_flops_per_s(device: torch.device) -> float | None:
    """The catalog's dense bf16 peak of this device; None on CPU or on a GPU the catalog does not know."""
    if device.type != "cuda":
        return None
    gpu = catalog.gpu_for_device_name(torch.cuda.get_device_name(device))
    return gpu.peak_bf16_tflops * 1e12 if gpu else None


def device_name(device: torch.device) -> str:
    """ "cpu", or the GPU's name as torch reports it (what the catalog matches for the MFU peak)."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def _peak_memory(device: torch.device) -> dict[str, float]:
    if device.type == "cuda":
        return {
            "memory/peak_allocated_gib": torch.cuda.max_memory_allocated(device) / _GIB,
            "memory/peak_reserved_gib": torch.cuda.max_memory_reserved(device) / _GIB,
        }
    # Linux reports ru_maxrss in KiB: the process's peak resident memory, the closest CPU analogue.
    return {"memory/peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


class Meter:
    """Times the steps between reports and turns them into metrics; also keeps what the final table needs."""

    def __init__(
        self,
        *,
        throughput: Throughput,
        total_steps: int,
        start_step: int,
        device: torch.device,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.throughput: Throughput
        self.total_steps: int
        self.start_step: int
        self.device: torch.device
        self.throughput, self.total_steps, self.start_step, self.device = throughput, total_steps, start_step, device
        self._clock = clock
        self._started = self._last_time = clock()
        self._last_step = start_step
        self._intervals: list[tuple[int, float]] = []  # (steps, seconds) per report interval
        self.history: list[tuple[int, float]] = []  # (step, loss) at every report
        self.last: dict[str, float] = {}

    def restart_clock(self) -> None:
        """Start the next interval now: call after work that is not a training step (a checkpoint save)."""
        self._last_time = self._clock()

    def measure(self, step: int, loss: float) -> dict[str, float]:
        """Metrics at `step` (call after the loss is on the host, which synchronizes the device)."""
        now = self._clock()
        steps = step - self._last_step
        step_time = (now - self._last_time) / steps
        self._intervals.append((steps, now - self._last_time))
        self._last_step, self._last_time = step, now
        self.history.append((step, loss))
        metrics = {
            "step": step,
            "loss": loss,
            "time/step_s": step_time,
            "time/elapsed_s": now - self._started,
            "time/eta_s": step_time * (self.total_steps - step),
            **self.rates(step_time),
            **_peak_memory(self.device),
        }
        self.last = metrics
        return metrics

    def rates(self, step_time: float) -> dict[str, float]:
        """tokens/s and MFU of one step of `step_time` seconds."""
        t = self.throughput
        per_device = t.tokens_per_step_per_device / step_time
        rates = {"throughput/tokens_per_s": per_device * t.world_size, "throughput/tokens_per_s_per_device": per_device}
        if t.peak_flops_per_s:
            rates["throughput/mfu_pct"] = 100.0 * per_device * t.flops_per_token / t.peak_flops_per_s
            if t.flops_per_token_causal:
                rates["throughput/mfu_causal_pct"] = 100.0 * per_device * t.flops_per_token_causal / t.peak_flops_per_s
        return rates

    def summary(self) -> dict[str, float | str]:
        """Steady-state figures of this attempt: the first interval (warm-up, compilation) is left out when others exist."""
        steady = self._intervals[1:] or self._intervals
        steps = sum(n for n, _ in steady)
        step_time = sum(s for _, s in steady) / steps if steps else float("nan")
        first_step, first_loss = self.history[0] if self.history else (self.start_step, float("nan"))
        return {
            "device": device_name(self.device),
            "steps": self.total_steps,
            "start_step": self.start_step,
            "first_step": first_step,
            "first_loss": first_loss,
            "final_loss": self.history[-1][1] if self.history else float("nan"),
            "time/step_s": step_time,
            "time/elapsed_s": self._clock() - self._started,
            **self.rates(step_time),
            **{k: v for k, v in self.last.items() if k.startswith("memory/")},
        }


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else (f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s")
    )


def _memory_text(metrics: dict[str, float]) -> str:
    if "memory/peak_allocated_gib" in metrics:
        return f"mem {metrics['memory/peak_allocated_gib']:.1f}/{metrics['memory/peak_reserved_gib']:.1f} GiB"
    return f"rss {metrics.get('memory/peak_rss_gib', float('nan')):.2f} GiB"


def format_line(metrics: dict[str, float], total_steps: int) -> str:
    """One progress line: step, loss, step time, tokens/s, MFU (GPU), eval loss (when evaluated), peak memory, ETA."""
    width = len(str(total_steps))
    parts = [
        f"step {int(metrics['step']):>{width}}/{total_steps}",
        f"loss {metrics['loss']:.4f}",
        f"{metrics['time/step_s'] * 1000:.0f} ms/step",
        f"{metrics['throughput/tokens_per_s']:,.0f} tok/s ({metrics['throughput/tokens_per_s_per_device']:,.0f}/device)",
    ]
    if "throughput/mfu_pct" in metrics:
        causal = metrics.get("throughput/mfu_causal_pct")
        parts.append(f"MFU {metrics['throughput/mfu_pct']:.1f}%" + (f" (causal {causal:.1f}%)" if causal else ""))
    if "eval_loss" in metrics:
        unigram = f", unigram {metrics['eval_unigram_entropy']:.4f}" if "eval_unigram_entropy" in metrics else ""
        parts.append(f"eval loss {metrics['eval_loss']:.4f} (ppl {metrics['eval_perplexity']:.2f}{unigram})")
    parts += [_memory_text(metrics), f"ETA {_duration(metrics['time/eta_s'])}"]
    return " | ".join(parts)


def format_summary(summary: dict[str, float | str], *, title: str = "training summary") -> str:
    """The final table, plain text (the container has no rich)."""
    rows = [
        (
            "steps",
            f"{int(summary['start_step']) + 1}..{int(summary['steps'])}"
            + (f" (resumed after step {int(summary['start_step'])})" if summary["start_step"] else ""),
        ),
        ("loss", f"{summary['first_loss']:.4f} (step {int(summary['first_step'])}) -> {summary['final_loss']:.4f}"),
        ("step time", f"{summary['time/step_s'] * 1000:.1f} ms (steady state)"),
        (
            "tokens/s",
            f"{summary['throughput/tokens_per_s']:,.0f} ({summary['throughput/tokens_per_s_per_device']:,.0f} per device)",
        ),
        (
            "MFU",
            f"{summary['throughput/mfu_pct']:.1f}% of the {summary['device']} bf16 peak (6N + 12 L d S)"
            + (
                f", {summary['throughput/mfu_causal_pct']:.1f}% causal (6N + 6 L d S)"
                if "throughput/mfu_causal_pct" in summary
                else ""
            )
            if "throughput/mfu_pct" in summary
            else f"n/a ({summary['device']}: no bf16 peak in the catalog)",
        ),
    ]
    if "memory/peak_allocated_gib" in summary:
        rows.append(
            (
                "peak memory",
                f"{summary['memory/peak_allocated_gib']:.2f} GiB allocated, "
                f"{summary['memory/peak_reserved_gib']:.2f} GiB reserved (rank 0)",
            )
        )
    else:
        rows.append(
            ("peak memory", f"{summary.get('memory/peak_rss_gib', float('nan')):.2f} GiB resident (rank 0, CPU)")
        )
    if summary.get("dataset"):
        rows.append(("data", str(summary["dataset"])))
    if "eval_loss" in summary:
        rows.append(
            (
                "eval loss",
                f"{summary['eval_loss']:.4f} (perplexity {summary['eval_perplexity']:.2f}, "
                f"step {int(summary['eval_step'])}, {int(summary['eval_tokens']):,} tokens)",
            )
        )
    if "eval_unigram_entropy" in summary:
        rows.append(
            (
                "unigram",
                f"{summary['eval_unigram_entropy']:.4f} (the held-out tokens' entropy: the eval loss of "
                "a model that ignores context)",
            )
        )
    rows.append(("wall time", _duration(float(summary["time/elapsed_s"]))))
    width = max(len(k) for k, _ in rows)
    rule = "-" * (width + 2 + max(len(v) for _, v in rows))
    return "\n".join([title, rule, *(f"{k:<{width}}  {v}" for k, v in rows), rule])
