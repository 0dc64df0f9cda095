"""The step-time model: one optimizer step's time and what it waits on, from the settings alone (no torch).

- compute: FLOPs (core.models) over the GPU's bf16 peak x COMPUTE_EFFICIENCY, + MICRO_STEP_FIXED_S, at least
  LAUNCH_FLOOR_S per micro-batch; optimizer: OPTIMIZER_BYTES_PER_PARAM per local parameter at memory bandwidth.
- network: each collective's bytes on the link it crosses (inside a node NVLink or PCIe, between nodes network_gbps
  x NETWORK_SHARE); a ring of n ranks carries (n-1)/n of a collective over each link (nccl-tests' PERFORMANCE.md).
  fsdp: per micro-batch a bf16 all-gather in forward (2P) and backward (2P less the root and last layer, which stay
  gathered); per optimizer step a reduce-scatter (rP, r = 4 or 2 bytes). Across nodes the ring crosses each node's
  interface both ways. hsdp: gathers and reduce-scatters stay in the node; per optimizer step the shards are
  all-reduced across the N nodes: 2(N-1)/N x rP through each node's interface.
- overlap: FSDP2 prefetches and reduces layer by layer, so within a micro-batch the slower of compute c and its
  collectives n sets the pace (+ 1/L of the faster). The once-per-step collective f overlaps only the last
  micro-batch's backward: step = (k-1) max(c, n) + max(c, n + f, FORWARD_SHARE c + f) + optimizer. (The first version
  spread f over all k micro-batches and missed HSDP with accumulation by 40% on 2 x H200.)

Constants name their source or calibration: bench/calibrate.py on one H200, bench/sharding_proof.py on two;
docs/BENCHMARKS.md has the tables and what is still to measure.
"""
from __future__ import annotations

from dataclasses import dataclass

from ray_efa.core import catalog
from ray_efa.core.memory import estimate_for
from ray_efa.core.models import ModelPreset
from ray_efa.core.settings import Settings, TrainingSettings

__all__ = [
    "Link",
    "Collective",
    "StepPrediction",
    "STRATEGIES",
    "NETWORK_SHARE",
    "links_for",
    "predict",
    "predict_settings",
    "resolve_sharding",
    "performance",
]

STRATEGIES = ("fsdp", "hsdp")

COMPUTE_EFFICIENCY = 0.666
"""Share of the bf16 peak in fwd+bwd of compiled layers: least-squares fit over 4x2048, 8x2048, 4x4096 and 8x4096
tokens on one H200 (658 TFLOP/s of 989; matrix-product ceiling in the same call 760)."""
MICRO_STEP_FIXED_S = 0.046
"""Seconds per micro-batch that do not scale with FLOPs (launches, FSDP2 hooks): the same fit's intercept."""
LAUNCH_FLOOR_S = 0.155
"""Shortest fwd+bwd measured (0.140 s at 2x2048, 0.169 s at 1x2048, averaged): small batches are launch-bound."""
EAGER_SPEED = 0.946
"""Eager vs compiled layers: 35,434 vs 37,465 tokens/s/GPU, 2 x H200, 4x4096, unchunked (reference/FACTS.md)."""
UNCHUNKED_LOSS_SPEED = 0.785
"""Unchunked vs chunked loss: 37,465 tokens/s/GPU (2 x H200, 4x4096, reference/FACTS.md) vs 47,747 (calibration)."""
FORWARD_SHARE = 1 / 3
"""Forward share of a micro-batch's FLOPs (2 of 6N): gradient collectives start only in the backward."""
OPTIMIZER_BYTES_PER_PARAM = 57.0
"""Clip + fused AdamW + zero_grad per local parameter at data-sheet bandwidth: 0.0183 s for 1.544e9 on one H200."""
INTRA_NODE_SHARE = 0.72
"""All-reduce bus bandwidth 325 GB/s over NVLink 4 (450 per direction), 2 x H200 (reference/FACTS.md); PCIe: a lead."""
NETWORK_SHARE: dict[str, float] = {"efa": 0.8, "tcp": 0.8 / 2.06}
"""Achievable share of the instance's network_gbps. efa: the catalog's reading that NCCL over EFA rarely beats ~80% of
line rate (core.catalog's all-reduce floor). tcp: the AWS reference measured EFA at 2.06x the steps/s of TCP on
2 x g6.12xlarge with a batch of 1 x 128 tokens, a step that is all network, so TCP reaches 1/2.06 of EFA's share."""

_BF16 = 2


@dataclass(frozen=True, kw_only=True, slots=True)
class Link:
    """One kind of link the collectives cross, with the bandwidth NCCL achieves on it."""

    name: str
    gb_s: float
    """Achievable GB/s per direction (per GPU inside a node, per node between nodes)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Collective:
    """One collective of the step: its full size per call, calls per optimizer step and bytes each link carries."""

    name: str
    link: str
    """"intra" (inside a node) or "inter" (between nodes)."""
    size_gb: float
    """The collective's full tensor size per call, GB (1e9 bytes)."""
    calls: int
    """Calls per optimizer step."""
    wire_gb: float
    """GB per direction on the busiest link of this kind, per optimizer step."""
    per_micro_batch: bool
    """Sent in every micro-batch (the all-gathers; hsdp's reduce-scatter inside the node), not once per step."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepPrediction:
    """The predicted optimizer step of one strategy on one network."""

    strategy: str
    network: str
    compute_s: float
    """Forward + backward of every micro-batch of the step."""
    network_s: float
    """Busy time of the busiest link."""
    optimizer_s: float
    step_time_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    """Model FLOPs utilization, 0..1, with FLOPs per token 6N + 12 L d S (core.models, the convention of the
    project's metrics)."""
    mfu_causal: float
    """The same with the causal attention count 6N + 6 L d S (half the attention FLOPs)."""
    bottleneck: str
    """"compute", "network" (between nodes) or "intra-node link"."""
    memory_gib: float
    fits: bool
    collectives: tuple[Collective, ...]

    def as_dict(self) -> dict:
        return {
            "strategy": self.strategy, "step_time_s": round(self.step_time_s, 4), "compute_s": round(self.compute_s, 4),
            "network_s": round(self.network_s, 4), "optimizer_s": round(self.optimizer_s, 4),
            "tokens_per_s_per_gpu": round(self.tokens_per_s_per_gpu, 1), "mfu": round(self.mfu, 4),
            "mfu_causal": round(self.mfu_causal, 4), "bottleneck": self.bottleneck,
            "memory_gib": round(self.memory_gib, 2), "fits": self.fits,
            "collectives": [
                {"name": c.name, "link": c.link, "size_gb": round(c.size_gb, 3), "calls": c.calls,
                 "wire_gb": round(c.wire_gb, 3), "per_micro_batch": c.per_micro_batch}
                for c in self.collectives
            ],
        }


def links_for(instance: catalog.InstanceType, network: str) -> tuple[Link, Link]:
    """(intra-node link, inter-node link) of `instance` for network "efa" or "tcp", at achievable bandwidth."""
    if network not in NETWORK_SHARE:
        raise ValueError(f"network must be one of {', '.join(NETWORK_SHARE)}, got {network!r}")
    gpu_link = catalog.gpu_link(instance)
    intra = Link(name=gpu_link.name, gb_s=gpu_link.gb_s * INTRA_NODE_SHARE)
    inter = Link(name=f"{network.upper()} {instance.network_gbps} Gbit/s", gb_s=instance.network_gbps / 8 * NETWORK_SHARE[network])
    return intra, inter


def _root_and_last_layer(p: ModelPreset) -> tuple[int, int]:
    d, kv, inter = p.hidden_size, p.num_key_value_heads * p.head_dim, p.intermediate_size
    layer = (d * d + d) + 2 * (d * kv + kv) + d * d + 3 * d * inter + 2 * d
    return p.num_parameters - p.num_hidden_layers * layer, layer


def _flops_causal(p: ModelPreset, seq_len: int) -> float:
    return 6 * p.num_parameters + 6 * p.num_hidden_layers * p.hidden_size * seq_len


def _collectives(
    t: TrainingSettings, strategy: str, nodes: int, gpus_per_node: int, reduce_bytes: int
) -> list[Collective]:
    p = t.preset
    params = p.num_parameters
    root, last = _root_and_last_layer(p)
    k = t.grad_accumulation
    world = nodes * gpus_per_node
    gather_fwd, gather_bwd, grads = _BF16 * params / 1e9, _BF16 * (params - root - last) / 1e9, reduce_bytes * params / 1e9
    out: list[Collective] = []
    if strategy == "fsdp" or nodes == 1:
        if world == 1:
            return out
        link = "inter" if nodes > 1 else "intra"
        share = (world - 1) / world
        for name, size, calls, every in (
            ("all-gather parameters (forward)", gather_fwd, k, True),
            ("all-gather parameters (backward)", gather_bwd, k, True),
            ("reduce-scatter gradients", grads, 1, False),
        ):
            for on in (link, "intra") if link == "inter" else (link,):  # the ring also runs through each node's GPUs
                out.append(Collective(name=name, link=on, size_gb=size, calls=calls, wire_gb=size * calls * share,
                                      per_micro_batch=every))
        return out
    # hsdp across nodes
    if gpus_per_node > 1:
        share = (gpus_per_node - 1) / gpus_per_node
        for name, size, calls in (
            ("all-gather parameters (forward)", gather_fwd, k),
            ("all-gather parameters (backward)", gather_bwd, k),
            ("reduce-scatter gradients", grads, k),
        ):
            out.append(Collective(name=name, link="intra", size_gb=size, calls=calls, wire_gb=size * calls * share,
                                  per_micro_batch=True))
    out.append(Collective(name="all-reduce gradient shards across nodes", link="inter", size_gb=grads, calls=1,
                          wire_gb=grads * 2 * (nodes - 1) / nodes, per_micro_batch=False))
    return out


def predict(
    t: TrainingSettings, *, instance: catalog.GpuInstanceType, nodes: int, network: str, strategy: str,
    gpus_per_node: int | None = None, links: tuple[Link, Link] | None = None, reduce_dtype: str | None = None,
) -> StepPrediction:
    """The step of training `t` with `strategy` ("fsdp" or "hsdp") on `nodes` x `instance` over `network`.

    gpus_per_node and links override the instance's (a benchmark on fewer GPUs, or a measured link); reduce_dtype
    overrides the settings' gradReduceDtype.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    p, gpu = t.preset, instance.gpu
    g = gpus_per_node or instance.gpus
    world = nodes * g
    intra, inter = links or links_for(instance, network)
    reduce_bytes = 2 if (reduce_dtype or t.grad_reduce_dtype) == "bf16" else 4

    tokens = t.micro_batch * t.seq_len
    flops = tokens * p.flops_per_token(t.seq_len) * (4 / 3 if t.activation_checkpointing else 1)
    rate = (gpu.peak_bf16_tflops * 1e12 * COMPUTE_EFFICIENCY * (1.0 if t.compile else EAGER_SPEED)
            * (1.0 if t.loss_chunk_size else UNCHUNKED_LOSS_SPEED))
    micro = max(flops / rate + MICRO_STEP_FIXED_S, LAUNCH_FLOOR_S)
    compute = micro * t.grad_accumulation

    shard = g if strategy == "hsdp" and nodes > 1 else world
    optimizer = OPTIMIZER_BYTES_PER_PARAM * p.num_parameters / shard / (gpu.memory_bandwidth_gb_s * 1e9)

    collectives = tuple(_collectives(t, strategy, nodes, g, reduce_bytes))
    # Seconds each link is busy: with one micro-batch's collectives, and with those sent once per optimizer step.
    each, once = {"intra": 0.0, "inter": 0.0}, {"intra": 0.0, "inter": 0.0}
    for c in collectives:
        seconds = c.wire_gb / (intra.gb_s if c.link == "intra" else inter.gb_s)
        if c.per_micro_batch:
            each[c.link] += seconds / c.calls
        else:
            once[c.link] += seconds
    k, layers = t.grad_accumulation, p.num_hidden_layers
    busy = {link: k * each[link] + once[link] for link in each}
    network_s = max(busy.values())
    n_each, n_last = max(each.values()), max(each[link] + once[link] for link in each)
    before_last = max(micro, n_each) + min(micro, n_each) / layers
    last = max(micro, n_last, FORWARD_SHARE * micro + max(once.values())) + min(micro, n_last) / layers
    step = (k - 1) * before_last + last + optimizer
    if step - compute - optimizer < 0.1 * step:  # under a tenth of the step waits on the wire
        bottleneck = "compute"
    else:
        bottleneck = "network" if busy["inter"] >= busy["intra"] else "intra-node link"

    per_gpu = tokens * t.grad_accumulation / step
    peak = gpu.peak_bf16_tflops * 1e12
    memory = estimate_for(t, world_size=world, gpu=gpu, shard_size=shard, strategy=strategy)
    return StepPrediction(
        strategy=strategy, network=network, compute_s=compute, network_s=network_s, optimizer_s=optimizer,
        step_time_s=step, tokens_per_s_per_gpu=per_gpu, mfu=per_gpu * p.flops_per_token(t.seq_len) / peak,
        mfu_causal=per_gpu * _flops_causal(p, t.seq_len) / peak, bottleneck=bottleneck,
        memory_gib=memory.total_gib, fits=memory.fits, collectives=collectives,
    )


def predict_settings(settings: Settings, *, network: str | None = None, strategy: str | None = None) -> StepPrediction:
    """The step the settings describe; network and strategy default to the settings' (auto resolved)."""
    net = network or settings.workload.network
    return predict(
        settings.training, instance=settings.nodes.gpu_instance, nodes=settings.nodes.gpu_node_count, network=net,
        strategy=strategy or resolve_sharding(settings, network=net),
    )


def _best(predictions: list[StepPrediction]) -> StepPrediction:
    """The fastest prediction that fits memory, else the one that needs the least memory."""
    fitting = [p for p in predictions if p.fits]
    if fitting:
        return min(fitting, key=lambda p: (p.step_time_s, STRATEGIES.index(p.strategy)))
    return min(predictions, key=lambda p: p.memory_gib)


def resolve_sharding(settings: Settings, network: str | None = None) -> str:
    """The strategy the job runs: the `sharding` setting, or for auto the fastest predicted that fits memory.

    One node has nothing to replicate across, so hsdp is plain fsdp there and auto says fsdp.
    """
    t = settings.training
    if t.sharding != "auto":
        return t.sharding
    if settings.nodes.gpu_node_count <= 1:  # 0: scaled to zero, no job to shard
        return "fsdp"
    net = network or settings.workload.network
    options = [
        predict(t, instance=settings.nodes.gpu_instance, nodes=settings.nodes.gpu_node_count, network=net, strategy=s)
        for s in STRATEGIES
    ]
    return _best(options).strategy


def _levers(t: TrainingSettings) -> list[dict[str, object]]:
    """Single memory levers that leave the effective batch alone, cheapest in speed first."""
    out: list[dict[str, object]] = []
    if t.loss_chunk_size == 0 or t.loss_chunk_size > 2048:
        out.append({"lossChunkSize": 2048})
    if not t.activation_checkpointing:
        out.append({"activationCheckpointing": True})
    return out


def _advice(settings: Settings, network: str, chosen: StepPrediction, others: dict[str, StepPrediction]) -> str | None:
    """When a faster strategy does not fit memory as set: the one change that makes it fit, and what it would give."""
    for strategy, other in others.items():
        if strategy == chosen.strategy or other.fits or other.step_time_s >= chosen.step_time_s:
            continue
        for change in _levers(settings.training):
            alt = predict_settings(settings.replace(**change), network=network, strategy=strategy)
            if alt.fits and alt.step_time_s < chosen.step_time_s:
                what = ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in change.items())
                return (
                    f"{strategy} would be {chosen.step_time_s / alt.step_time_s:.1f}x faster "
                    f"({alt.step_time_s:.2f} s per step) but needs {other.memory_gib:.1f} GiB per GPU; with {what} it "
                    f"needs {alt.memory_gib:.1f} GiB and fits, and sharding auto picks {strategy}"
                )
    return None


def performance(settings: Settings) -> dict[str, dict]:
    """`plan --json`'s "performance": for each network, the chosen strategy's prediction and every strategy's; empty
    with the GPU node group scaled to zero (no GPU, no step)."""
    out: dict[str, dict] = {}
    if settings.nodes.scaled_to_zero:
        return out
    for net in NETWORK_SHARE:
        chosen = predict_settings(settings, network=net)
        others = {s: predict_settings(settings, network=net, strategy=s) for s in STRATEGIES}
        out[net] = {
            **chosen.as_dict(),
            "sharding_setting": settings.training.sharding,
            "advice": _advice(settings, net, chosen, others),
            "strategies": {s: p.as_dict() for s, p in others.items()},
        }
    return out
