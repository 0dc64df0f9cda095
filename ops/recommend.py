"""`ray-efa plan --recommend`: what to rent. Every GPU instance type of the catalog (and those described in
extraGpuInstanceTypes) at 1..N nodes, each with its own chosen plan (core.strategy: batch split, precision,
sharding), ranked by predicted USD per million tokens; only plans that fit memory. Pure: settings in, dicts out.
"""

from __future__ import annotations

from typing import Any

from ray_efa.core import catalog
from ray_efa.core.cost import hourly_cost
from ray_efa.core.settings import Settings, SettingsError, described_gpu_instances
from ray_efa.core.strategy import choose, global_batch

__all__ = ["instance_types", "recommend", "tokens_to_train"]


def instance_types(settings: Settings) -> list[str]:
    """The GPU types a recommendation considers: the catalog's with EFA, then the described ones."""
    built_in = [name for name, row in catalog.GPU_INSTANCES.items() if row.efa_capable and row.gpu is not None]
    described = list(described_gpu_instances(settings.nodes.extra_gpu_instance_types))
    return built_in + [name for name in described if name not in built_in]


def tokens_to_train(settings: Settings) -> int:
    """The tokens of the run the settings describe: steps x globalBatchTokens (--tokens overrides)."""
    return settings.training.steps * settings.training.global_batch_tokens


def _row(settings: Settings, tokens: int) -> dict[str, Any] | None:
    option = choose(settings)
    if not option.fits or option.tokens_per_s <= 0:
        return None
    usd_per_hour = hourly_cost(settings).total
    hours = tokens / option.tokens_per_s / 3600
    t, split = option.training, global_batch(settings, option.training)
    return {
        "instance_type": settings.nodes.gpu_instance_type, "nodes": settings.nodes.gpu_node_count,
        "gpus": settings.world_size, "gpu": settings.nodes.gpu_instance.gpu.name,
        "tokens_per_s": option.tokens_per_s, "tokens_per_s_per_gpu": option.prediction.tokens_per_s_per_gpu,
        "usd_per_hour": usd_per_hour, "usd_per_million_tokens": usd_per_hour / (option.tokens_per_s * 3600) * 1e6,
        "hours": hours, "usd": hours * usd_per_hour, "mfu_causal": option.prediction.mfu_causal,
        "memory_gib": option.memory.total_gib, "capacity_gib": option.memory.capacity_gib,
        "strategy": option.strategy, "grad_reduce_dtype": option.reduce_dtype, "precision": t.precision,
        "micro_batch": t.micro_batch, "grad_accumulation": t.grad_accumulation,
        "activation_checkpointing": t.activation_checkpointing, "global_batch_tokens": split.tokens,
        "bottleneck": option.prediction.bottleneck,
    }


def recommend(settings: Settings, *, tokens: int | None = None, max_nodes: int = 8) -> dict[str, Any]:
    """{"tokens", "max_nodes", "recommendations": every fitting (instance type, nodes) sorted by
    usd_per_million_tokens, "skipped": the types the settings refuse, with why}."""
    tokens = tokens or tokens_to_train(settings)
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for name in instance_types(settings):
        for nodes in range(1, max_nodes + 1):
            try:  # the settings' other values decide: a device plugin that does not run there, fp8 set on an A100
                candidate = settings.replace(gpuInstanceType=name, gpuNodeCount=nodes)
            except SettingsError as error:
                skipped[name] = "; ".join(f"{p.key}: {p.message}" for p in error.problems)
                break
            row = _row(candidate, tokens)
            if row is not None:
                rows.append(row)
    rows.sort(key=lambda r: (r["usd_per_million_tokens"], -r["tokens_per_s"]))
    return {"tokens": tokens, "max_nodes": max_nodes, "recommendations": rows, "skipped": skipped}
