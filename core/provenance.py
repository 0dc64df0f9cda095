"""What each prediction of the plan rests on: the step model's constants (measured, published or assumed), the links
it gave each collective, and why precision auto stayed bf16. `plan --json`'s performance.<net>.constants, .links and
.precision_note (core.strategy.performance)."""

from __future__ import annotations

from typing import Any

from ray_efa.core import catalog, perf
from ray_efa.core.catalog import gpu_constants
from ray_efa.core.catalog import network as network_module
from ray_efa.core.settings import Settings, TrainingSettings

__all__ = ["fp8_evidence", "links", "constants"]


def fp8_evidence(settings: Settings) -> str | None:
    """What the plan says when precision auto stays bf16 on a GPU with fp8 tensor cores because the family's fp8
    constant is only assumed: what would change its mind. None where auto may pick fp8 (or fp8 is no option)."""
    t, gpu = settings.training, settings.nodes.gpu_instance.gpu
    if t.precision != "auto" or gpu is None or not gpu.has_fp8 or not t.compile:
        return None
    family = gpu_constants.constants_for(gpu.name)
    if family.fp8_evidenced:
        return None
    return (
        f"precision auto stays bf16 on {gpu.name}: its fp8 efficiency is assumed, not measured or published "
        f"({family.fp8_source}). What would change it: a measurement on this family (a run with -c precision=fp8 "
        f"and one with bf16, each read by `ray-efa calibrate`) or a published fp8 training run; set "
        f"precision=fp8 to run fp8 anyway"
    )


def links(
    settings: Settings,
    network: str,
    p: perf.StepPrediction,
    training: TrainingSettings,
    calibration: perf.Calibration | None,
) -> dict[str, Any]:
    """`plan --json`'s performance.<net>.links: the GB/s the prediction gave each link (intra-node per GPU, between
    nodes per node, per direction), with its status and source (core.catalog.network for EFA, the socket model for TCP)."""
    n = settings.nodes
    instance = n.gpu_instance
    gpu_link = catalog.gpu_link(instance)
    share, measured, source = gpu_constants.link_share(gpu_link.name, gpu_link.gb_s)
    intra, inter = perf.links_for(
        instance,
        network,
        placement_group=n.use_placement_group,
        message_bytes=perf.message_bytes(
            training.preset, p.strategy, p.nodes, p.gpus_per_node, 2 if p.reduce_dtype == "bf16" else 4
        ),
    )
    out: dict[str, Any] = {
        "intra": {
            "name": intra.name,
            "gb_s": round(intra.gb_s, 2),
            "status": "measured" if measured else "assumed",
            "source": f"{share:g} of the data sheet's {gpu_link.gb_s:g} GB/s: {source}",
        }
    }
    if calibration and calibration.inter_node_gb_s and calibration.network in (None, network):
        out["inter"] = {
            "name": f"{inter.name}, measured",
            "gb_s": round(calibration.inter_node_gb_s, 2),
            "status": "measured",
            "source": f"ray-efa calibrate: {calibration.source}",
        }
    elif network == "efa":
        figure = network_module.efa_link(
            instance,
            perf.message_bytes(
                training.preset, p.strategy, p.nodes, p.gpus_per_node, 2 if p.reduce_dtype == "bf16" else 4
            ),
        )
        out["inter"] = {
            "name": inter.name,
            "gb_s": round(figure.gb_s, 2),
            "status": figure.status,
            "source": figure.source,
        }
    else:
        out["inter"] = {
            "name": inter.name,
            "gb_s": round(inter.gb_s, 2),
            "status": "assumed",
            "source": "the socket model (core.perf.socket_gb_s): SOCKET_LINE_SHARE of card 0, EC2's "
            "per-flow limit x NCCL's sockets, NCCL's host-memory socket ceiling",
        }
    return out


def constants(settings: Settings, network: str, calibration: perf.Calibration | None) -> dict[str, dict[str, object]]:
    """The step-model constants the prediction on `network` used, each measured or assumed with its source: the
    GPU family's (core.catalog.gpu_constants), and what a calibration replaced (core.perf.predict takes its values first)."""
    link = catalog.gpu_link(settings.nodes.gpu_instance)
    out = gpu_constants.describe(settings.nodes.gpu_instance.gpu.name, link.name, link.gb_s)
    if calibration is None:
        return out
    source = f"ray-efa calibrate: {calibration.source}" if calibration.source else "ray-efa calibrate"
    if calibration.compute_efficiency:
        out["compute_efficiency"] = {
            "value": round(calibration.compute_efficiency, 3),
            "status": "measured",
            "source": source,
        }
    if calibration.inter_node_gb_s and calibration.network in (None, network):
        out["inter_node_gb_s"] = {
            "value": round(calibration.inter_node_gb_s, 2),
            "status": "measured",
            "source": source,
        }
    return out
