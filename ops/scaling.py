"""The predicted scaling curve: core.perf's step for 1..N nodes of the settings' instance type, each strategy on EFA and
on TCP (core.strategy: with the gradient reduction dtype each would run), with memory (core.memory) and the whole
stack's hourly cost (core.cost).

`plan --json` carries it as "scaling"; `plan --plot FILE` draws it (ops.plots.scaling_chart). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from ray_efa.core.cost import hourly_cost
from ray_efa.core.perf import NETWORKS, STRATEGIES
from ray_efa.core.settings import Settings
from ray_efa.core.strategy import choose, resolve, resolve_sharding

__all__ = ["scaling", "default_max_nodes", "MAX_NODES"]


MAX_NODES = 64
"""gpuNodeCount's upper bound (core.settings)."""


def default_max_nodes(settings: Settings) -> int:
    """The sweep's last node count: at least 8, and at least twice the planned count, at most MAX_NODES."""
    return min(MAX_NODES, max(8, 2 * settings.nodes.gpu_node_count))


def scaling(settings: Settings, *, max_nodes: int | None = None) -> dict[str, Any]:
    """Predicted tokens/s, memory and USD per million tokens at 1..max_nodes nodes, per network and strategy."""
    last = max(max_nodes or default_max_nodes(settings), settings.nodes.gpu_node_count)  # the plan's own point too
    t, instance = settings.training, settings.nodes.gpu_instance
    gpu = instance.gpu
    assert gpu is not None, "gpuInstanceType is a GPU instance type (core.settings validates it)"
    cost = hourly_cost(settings)
    fixed_usd_per_hour = cost.total - cost.gpu_nodes  # system nodes, control plane, NAT: the same at any GPU count
    series = []
    for network in NETWORKS:
        for strategy in STRATEGIES:
            points = []
            for nodes in range(1, last + 1):
                # the strategy at this node count, with the gradient reduction dtype it would run (auto resolved)
                option = choose(settings.replace(gpuNodeCount=nodes), network, strategy=strategy)
                p = option.prediction
                gpus = nodes * instance.gpus
                tokens_per_s = p.tokens_per_s_per_gpu * gpus
                usd_per_hour = fixed_usd_per_hour + nodes * instance.usd_per_hour
                points.append(
                    {
                        "nodes": nodes,
                        "gpus": gpus,
                        "step_time_s": p.step_time_s,
                        "tokens_per_s": tokens_per_s,
                        "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
                        "mfu": p.mfu,
                        "bottleneck": p.bottleneck,
                        "memory_gib": option.memory.total_gib,
                        "fits": option.fits,
                        "grad_reduce_dtype": option.reduce_dtype,
                        "usd_per_hour": usd_per_hour,
                        "usd_per_million_tokens": usd_per_hour / (tokens_per_s * 3600) * 1e6 if tokens_per_s else None,
                    }
                )
            series.append({"network": network, "strategy": strategy, "points": points})
    network = settings.workload.network
    return {
        "model": t.preset.name,
        "instance": instance.name,
        "gpus_per_node": instance.gpus,
        "gpu": gpu.name,
        "capacity_gib": gpu.memory_gib,
        "max_nodes": last,
        "batch": _batch(settings),
        "chosen": {
            "nodes": settings.nodes.gpu_node_count,
            "network": network,
            "strategy": resolve_sharding(settings, network=network),
        },
        "series": series,
    }


def _batch(settings: Settings) -> str:
    """The batch shape of the settings' own node count (auto decided there; each point decides its own)."""
    if settings.nodes.scaled_to_zero:
        return "no GPU nodes"
    t = resolve(settings).training
    return f"{t.micro_batch} x {t.seq_len} tokens per GPU" + (
        f", gradAccumulation {t.grad_accumulation}" if int(t.grad_accumulation) > 1 else ""
    )
