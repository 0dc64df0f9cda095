"""`ray-efa plan --recommend`: what to rent. Every GPU instance type of the catalog (and those described in
extraGpuInstanceTypes) at 1..N nodes, each with its own chosen plan (core.strategy: batch split, precision,
sharding), ranked by predicted USD per million tokens; only plans that fit memory. Pure: settings in, dicts out.

Only what can be bought at a known price is ranked: a row's price is recorded for the stack's region (core.prices:
On-Demand, or a Capacity Block, labelled `purchase: capacity-block`; a type with both gets a row for each). A type with
neither (not offered there, offered without an On-Demand price, or a region with no record) is left out, with why
(`skipped`). Spot is not recorded. Each row says what it rests on: the price, and the step model's constants of its GPU family (core.catalog.gpu_constants: measured,
published or assumed), with a predicted range that is wider where a constant is assumed. The ranking models the
built-in train function's architecture (the settings' preset or modelPath); a trainFunction of your own builds what it
builds, and the ranking says so.
"""

from __future__ import annotations

from typing import Any

from ray_efa.core import catalog, perf, prices
from ray_efa.core.catalog import gpu_constants, network
from ray_efa.core.cost import hourly_cost
from ray_efa.core.settings import Settings, SettingsError, described_gpu_instances
from ray_efa.core.strategy import choose, global_batch

__all__ = [
    "instance_types",
    "recommend",
    "CAPACITY_CHOICES",
    "tokens_to_train",
    "TOKENS_PER_PARAMETER",
    "RANGE",
    "OWN_FUNCTION_NOTE",
]

TOKENS_PER_PARAMETER = 20
"""The default token budget: 20 tokens per parameter, the compute-optimal ratio of Hoffmann et al. 2022
("Training Compute-Optimal Large Language Models"): real hours and dollars for a real run of the model."""
RANGE = {"measured": 0.10, "published": 0.15, "assumed": 0.35}
"""+- share of the predicted tokens/s by the weakest status of the constants a row rests on: measured within 10%
(the H200's runs), published within 15% (tests/core/test_evidence.py holds the held-out runs to it), assumed 35%;
widened to the family's band (core.catalog.gpu_constants: 90% of its runs within it when their source was left out of the
fit) where that is wider."""
OWN_FUNCTION_NOTE = (
    "trainFunction is your own: the ranking models the built-in train function's architecture "
    "({model}), not what your function builds"
)


def instance_types(settings: Settings) -> list[str]:
    """The GPU types a recommendation considers: the catalog's with EFA, then the described ones."""
    built_in = [name for name, row in catalog.GPU_INSTANCES.items() if row.efa_capable and row.gpu is not None]
    described = list(described_gpu_instances(settings.nodes.extra_gpu_instance_types))
    return built_in + [name for name in described if name not in built_in]


def tokens_to_train(settings: Settings) -> int:
    """The default token budget: TOKENS_PER_PARAMETER x the model's parameters (--tokens overrides)."""
    return TOKENS_PER_PARAMETER * settings.training.preset.num_parameters


def _constants(settings: Settings, precision: str) -> dict[str, Any]:
    """Every step-model constant the row's prediction uses, each with its status; "status" is the weakest of them
    (not the compute constant's alone: an assumed eager share or network share makes the row assumed)."""
    n = settings.nodes
    family = gpu_constants.constants_for(n.gpu_instance.gpu.name)
    out: dict[str, Any] = {
        "compute_efficiency": {"value": family.compute_efficiency, "status": family.compute_status},
        # compiled predictions of a family fitted on eager rows rest on its eager share too: always used
        "eager_speed": {"value": family.eager_speed, "status": family.eager_status},
    }
    if precision == "fp8":
        out["fp8_compute_efficiency"] = {"value": family.fp8_compute_efficiency, "status": family.fp8_status}
    if n.gpu_instance.gpus > 1:
        link = n.gpu_instance.gpu_link
        share, measured, _ = gpu_constants.link_share(link.name if link else "", link.gb_s if link else None)
        out["intra_node_link_share"] = {"value": share, "status": "measured" if measured else "assumed"}
    if n.gpu_node_count > 1:
        figure = network.efa_link(n.gpu_instance)
        out["inter_node_link"] = {"value": round(figure.gb_s, 3), "status": figure.status}
        out["scale_loss_per_doubling"] = {"value": perf.SCALE_LOSS_PER_DOUBLING, "status": "published"}
    weakest = max((c["status"] for c in out.values()), key=gpu_constants.STATUSES.index)
    out["status"] = weakest
    return out


def _rows(settings: Settings, tokens: int, bought: list[prices.Price]) -> list[dict[str, Any]]:
    """One row per recorded purchase option of the settings' type and node count; none where the plan does not fit."""
    option = choose(settings)
    if not option.fits or option.tokens_per_s <= 0:
        return []
    return [_row(settings, tokens, option, price) for price in bought]


def _row(settings: Settings, tokens: int, option: Any, price: prices.Price) -> dict[str, Any]:
    n, region = settings.nodes, settings.cluster.region
    on_demand = prices.on_demand(n.gpu_instance, region)
    block = prices.capacity_block(n.gpu_instance, region)
    cost = hourly_cost(settings)
    fixed = cost.total - cost.gpu_nodes  # system nodes, control plane, NAT: the same whatever the GPUs
    usd_per_hour = fixed + n.gpu_node_count * price.usd_per_hour
    hours = tokens / option.tokens_per_s / 3600
    t, split = option.training, global_batch(settings, option.training)
    constants = _constants(settings, t.precision)
    band = gpu_constants.constants_for(n.gpu_instance.gpu.name).band
    spread = max(RANGE[constants["status"]], band or 0.0)  # the observed spread by source, where there is one
    return {
        "instance_type": n.gpu_instance_type,
        "nodes": n.gpu_node_count,
        "purchase": price.option,
        "gpus": settings.world_size,
        "gpu": n.gpu_instance.gpu.name,
        "tokens_per_s": option.tokens_per_s,
        "tokens_per_s_per_gpu": option.prediction.tokens_per_s_per_gpu,
        "tokens_per_s_range": [option.tokens_per_s * (1 - spread), option.tokens_per_s * (1 + spread)],
        "usd_per_hour": usd_per_hour,
        "usd_per_million_tokens": usd_per_hour / (option.tokens_per_s * 3600) * 1e6,
        "hours": hours,
        "hours_range": [hours / (1 + spread), hours / (1 - spread)],
        "usd": hours * usd_per_hour,
        "usd_range": [hours * usd_per_hour / (1 + spread), hours * usd_per_hour / (1 - spread)],
        "price": {
            "ranked": price.as_dict(),
            "on_demand": on_demand.as_dict(),
            "capacity_block": None
            if block is None
            else {
                **block.as_dict(),
                "usd_per_hour_total": fixed + n.gpu_node_count * block.usd_per_hour,
                "usd": hours * (fixed + n.gpu_node_count * block.usd_per_hour),
            },
            "capacity_blocks_offered": n.gpu_instance.capacity_blocks,
            "spot": None,
            "spot_note": prices.SPOT_NOTE,
        },
        "constants": constants,
        "mfu_causal": option.prediction.mfu_causal,
        "memory_gib": option.memory.total_gib,
        "capacity_gib": option.memory.capacity_gib,
        "strategy": option.strategy,
        "grad_reduce_dtype": option.reduce_dtype,
        "precision": t.precision,
        "micro_batch": t.micro_batch,
        "grad_accumulation": t.grad_accumulation,
        "activation_checkpointing": t.activation_checkpointing,
        "global_batch_tokens": split.tokens,
        "bottleneck": option.prediction.bottleneck,
    }


def _left_out_because(settings: Settings) -> str:
    instance, region = settings.nodes.gpu_instance, settings.cluster.region
    price = prices.on_demand(instance, region)
    if not price.offered:
        return price.source
    if instance.described:
        return f"a described type: no price recorded for {region} ({price.source})"
    if prices.offering(instance.name, region) == "no-price":
        return f"no On-Demand or Capacity Block price recorded for {region}: {price.source}"
    return f"no price recorded for {region}: {price.source}"


CAPACITY_CHOICES = ("any", "on-demand", "capacity-block")
"""What `plan --recommend --capacity` takes: every purchase option, or only On-Demand, or only Capacity Blocks."""


def recommend(
    settings: Settings,
    *,
    tokens: int | None = None,
    max_nodes: int = 8,
    budget_usd: float | None = None,
    max_hours: float | None = None,
    capacity: str = "any",
) -> dict[str, Any]:
    """{"tokens", "model", "region", "prices_recorded", "max_nodes", "note", "recommendations": every fitting
    (instance type, nodes, purchase option) sorted by usd_per_million_tokens, "skipped": the types the settings refuse,
    the region does not offer, or that have no price recorded for the region, with why}.

    `budget_usd`, `max_hours`: only rows whose predicted USD, and hours, to train `tokens` are within them (the
    point prediction); `capacity`: only rows of that purchase option (CAPACITY_CHOICES). "limits" says what was asked
    and "left_out_by_limits" how many fitting rows they removed."""
    if capacity not in CAPACITY_CHOICES:
        raise ValueError(f"capacity must be one of {', '.join(CAPACITY_CHOICES)}, got {capacity!r}")
    ranking = _ranking(settings, tokens=tokens, max_nodes=max_nodes)
    rows = ranking["recommendations"]
    kept = [
        r
        for r in rows
        if (capacity == "any" or r["purchase"] == capacity)
        and (budget_usd is None or r["usd"] <= budget_usd)
        and (max_hours is None or r["hours"] <= max_hours)
    ]
    ranking["recommendations"] = kept
    ranking["limits"] = {"budget_usd": budget_usd, "max_hours": max_hours, "capacity": capacity}
    ranking["left_out_by_limits"] = len(rows) - len(kept)
    return ranking


def _ranking(settings: Settings, *, tokens: int | None, max_nodes: int) -> dict[str, Any]:
    given = tokens is not None
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
            bought = prices.buyable(candidate.nodes.gpu_instance, candidate.cluster.region)
            if not bought:  # nothing to buy at a price recorded for the region: never ranked at a borrowed one
                skipped[name] = _left_out_because(candidate)
                break
            rows.extend(_rows(candidate, tokens, bought))
    rows.sort(key=lambda r: (r["usd_per_million_tokens"], -r["tokens_per_s"]))
    model = settings.training.preset
    region = settings.cluster.region
    return {
        "tokens": tokens,
        "tokens_default": None
        if given
        else (f"{TOKENS_PER_PARAMETER} tokens per parameter x {model.num_parameters:,} (Hoffmann et al. 2022)"),
        "model": model.name,
        "model_parameters": model.num_parameters,
        "region": region,
        "prices_recorded": region in prices.RECORDED_REGIONS,
        "note": None if settings.training.builtin else OWN_FUNCTION_NOTE.format(model=model.name),
        "max_nodes": max_nodes,
        "recommendations": rows,
        "skipped": skipped,
    }
