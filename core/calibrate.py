"""Learn from a real run: a finished run's summary (the driver's RAY_EFA_RUN_SUMMARY line) against core.perf.

`compare_run(settings, summary)` predicts the step the run ran (its shape, strategy, reduction dtype and precision
come from the summary; the rest from the settings) with the model's constants, then fits two constants to the run:
- the inter-node link: the preflight probe's all-reduce bus bandwidth at its largest size (nccl-tests' busbw is what
  each link sustained), when the run spanned nodes;
- the compute efficiency: the share of the bf16 peak that makes the predicted step equal the measured one, with the
  measured link. Where the step is network-bound it barely moves the step, so it is reported as not observable and the
  model's value is kept.
The fitted `perf.Calibration` can then replace the model's constants for that instance type (`ray-efa plan
--calibration LOG`). The probe's busbw also gives the preflight floor measured on your own nodes
(`suggested_floor`: catalog.FLOOR_MARGIN of it, for the run's network), to set as preflightMinBusbwGbps.
Pure Python: no torch, no Ray.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ray_efa.core import catalog, perf
from ray_efa.core.settings import Settings

__all__ = ["CalibrationError", "RunComparison", "SuggestedFloor", "compare_run", "settings_of_run"]

_SHAPE_KEYS = {
    "model": "model",
    "micro_batch": "microBatch",
    "seq_len": "seqLen",
    "grad_accumulation": "gradAccumulation",
    "compile": "compile",
    "loss_chunk_size": "lossChunkSize",
    "activation_checkpointing": "activationCheckpointing",
    "precision": "precision",
    "decoder_block": "decoderBlock",
}
_BEFORE_AUTO = {
    "microBatch": 2,
    "gradAccumulation": 1,
    "precision": "bf16",
    "activationCheckpointing": False,
    "decoderBlock": "transformers",
}
"""What a run summary that lacks one of these keys ran: the fixed defaults of the run summaries written before core.strategy decided them."""
_OBSERVABLE = 0.2
"""Least d(log step) / d(log efficiency) for the compute efficiency to count as measured (1 when compute-bound)."""


class CalibrationError(ValueError):
    """The summary cannot be compared: a field is missing, or it names no GPU instance the catalog knows."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SuggestedFloor:
    """The preflight floor a run measured on its own nodes: catalog.FLOOR_MARGIN of its probe's busbw at 1 GiB."""

    floor_gb_s: float
    measured_busbw_gb_s: float
    network: str
    source: str

    @property
    def setting(self) -> str:
        """The -c option that makes jobs on `network` run with it (the comparison run on the other network keeps
        its own floor: k8s.workload.build_manifests)."""
        return f"preflightMinBusbwGbps={self.floor_gb_s:g}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "floor_gb_s": self.floor_gb_s,
            "source": self.source,
            "network": self.network,
            "measured_busbw_gb_s": round(self.measured_busbw_gb_s, 3),
            "margin": catalog.FLOOR_MARGIN,
            "setting": self.setting,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class RunComparison:
    """One run's measured step against the model's prediction, before and after fitting its constants."""

    name: str
    instance_type: str
    nodes: int
    measured_step_s: float
    measured_tokens_per_s_per_gpu: float
    predicted: perf.StepPrediction
    """With the model's constants."""
    calibrated: perf.StepPrediction
    """With the run's link and compute efficiency: its compute and network times are the run's, as far as one step
    time and one probe can tell them apart."""
    calibration: perf.Calibration
    compute_observable: bool
    suggested_floor: SuggestedFloor | None = None
    """The preflight floor from the run's probe (None: a single-node run, or no probe)."""

    def as_dict(self) -> dict[str, Any]:
        def times(p: perf.StepPrediction) -> dict[str, Any]:
            return {
                "step_time_s": round(p.step_time_s, 4),
                "compute_s": round(p.compute_s, 4),
                "network_s": round(p.network_s, 4),
                "tokens_per_s_per_gpu": round(p.tokens_per_s_per_gpu, 1),
                "mfu": round(p.mfu, 4),
                "mfu_causal": round(p.mfu_causal, 4),
                "bottleneck": p.bottleneck,
            }

        return {
            "name": self.name,
            "instance_type": self.instance_type,
            "nodes": self.nodes,
            "measured": {
                "step_time_s": round(self.measured_step_s, 4),
                "tokens_per_s_per_gpu": round(self.measured_tokens_per_s_per_gpu, 1),
            },
            "predicted": times(self.predicted),
            "calibrated": times(self.calibrated),
            "predicted_over_measured": round(self.predicted.step_time_s / self.measured_step_s, 3),
            "calibration": {
                "compute_efficiency": self.calibration.compute_efficiency,
                "inter_node_gb_s": self.calibration.inter_node_gb_s,
                "source": self.calibration.source,
                "compute_observable": self.compute_observable,
                "model_compute_efficiency": perf.COMPUTE_EFFICIENCY,
            },
            "preflight": None if self.suggested_floor is None else self.suggested_floor.as_dict(),
        }


def _number(summary: dict[str, Any], key: str) -> float | None:
    value = summary.get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def settings_of_run(settings: Settings, summary: dict[str, Any]) -> Settings:
    """The settings with the run's hardware and shape (the summary's values win)."""
    instance = summary.get("instance_type")
    hosts = summary.get("hosts", summary.get("nodes"))
    if not isinstance(instance, str) or instance == "local":
        raise CalibrationError(
            f"the run names no GPU instance type (instance_type {instance!r}): a local CPU run has nothing to calibrate"
        )
    context: dict[str, object] = {"gpuInstanceType": instance}
    if isinstance(hosts, int) and hosts >= 1:
        context["gpuNodeCount"] = hosts
    if summary.get("network") in perf.NETWORKS:
        context["network"] = summary["network"]
    for key, setting in _SHAPE_KEYS.items():
        if key in summary and summary[key] is not None:
            context[setting] = summary[key]
        elif setting in _BEFORE_AUTO:  # a summary from before auto ran what the defaults were then
            context[setting] = _BEFORE_AUTO[setting]
    try:
        return settings.replace(**context)
    except ValueError as error:
        raise CalibrationError(f"the run's settings are not valid here: {error}") from None


def _predict(settings: Settings, summary: dict[str, Any], calibration: perf.Calibration | None) -> perf.StepPrediction:
    from ray_efa.core.strategy import choose

    option = choose(settings)
    n = settings.nodes
    devices = summary.get("devices")
    gpus_per_node = devices // n.gpu_node_count if isinstance(devices, int) and devices >= n.gpu_node_count else None
    return perf.predict(
        settings.training,
        instance=n.gpu_instance,
        nodes=n.gpu_node_count,
        network=settings.workload.network,
        strategy=str(summary.get("sharding") or option.strategy),
        reduce_dtype=str(summary.get("grad_reduce_dtype") or option.reduce_dtype),
        gpus_per_node=gpus_per_node,
        placement_group=n.use_placement_group,
        calibration=calibration,
    )


def compare_run(settings: Settings, summary: dict[str, Any]) -> RunComparison:
    """The run's measured step against the prediction, and the constants fitted to it (see the module docstring)."""
    step = _number(summary, "time/step_s")
    per_gpu = _number(summary, "throughput/tokens_per_s_per_device")
    if step is None or per_gpu is None or step <= 0:
        raise CalibrationError(
            "the summary has no steady-state step time (time/step_s) or tokens/s: "
            "a run of at least two measure steps is needed"
        )
    run = settings_of_run(settings, summary)
    busbw = _number(summary, "preflight_busbw_gb_s")
    link = busbw if (busbw and run.nodes.gpu_node_count > 1) else None
    source = f"run {summary.get('name', '?')} on {run.nodes.gpu_node_count} x {run.nodes.gpu_instance_type}"
    predicted = _predict(run, summary, None)

    def step_at(efficiency: float) -> float:
        return _predict(run, summary, perf.Calibration(compute_efficiency=efficiency, inter_node_gb_s=link)).step_time_s

    low, high = 0.02, 1.0
    if step_at(high) >= step:  # faster than the model can explain at the full peak: the model's ceiling
        efficiency = high
    elif step_at(low) <= step:
        efficiency = low
    else:
        for _ in range(60):
            mid = (low + high) / 2
            low, high = (mid, high) if step_at(mid) > step else (low, mid)
        efficiency = (low + high) / 2
    sensitivity = abs(math.log(step_at(efficiency * 1.1) / step_at(efficiency / 1.1))) / (2 * math.log(1.1))
    observable = sensitivity >= _OBSERVABLE
    calibration = perf.Calibration(
        compute_efficiency=round(efficiency, 4) if observable else None,
        inter_node_gb_s=round(link, 3) if link else None,
        network=run.workload.network,
        source=source,
    )
    calibrated = _predict(run, summary, calibration)
    return RunComparison(
        name=str(summary.get("name", "?")),
        instance_type=run.nodes.gpu_instance_type,
        nodes=run.nodes.gpu_node_count,
        measured_step_s=step,
        measured_tokens_per_s_per_gpu=per_gpu,
        predicted=predicted,
        calibrated=calibrated,
        calibration=calibration,
        compute_observable=observable,
        suggested_floor=None
        if link is None
        else SuggestedFloor(
            floor_gb_s=round(link * catalog.FLOOR_MARGIN, 2),
            measured_busbw_gb_s=link,
            network=run.workload.network,
            source=f"calibration: {source}, probe busbw {link:.2f} GB/s x {catalog.FLOOR_MARGIN:g}",
        ),
    )
