"""The step-time model: one optimizer step's time and what it waits on, from the settings alone (no torch).

- compute: FLOPs (core.models) over the GPU's bf16 peak x COMPUTE_EFFICIENCY, + MICRO_STEP_FIXED_S, at least
  LAUNCH_FLOOR_S per micro-batch; optimizer: OPTIMIZER_BYTES_PER_PARAM per local parameter at memory bandwidth.
- network: each collective's bytes on the link it crosses (inside a node NVLink or PCIe, between nodes the EFA or
  socket link below); a ring of n ranks carries (n-1)/n of a collective over each link (nccl-tests' PERFORMANCE.md).
  fsdp: per micro-batch a bf16 all-gather in forward (2P) and backward (2P less the root and last layer, which stay
  gathered); per optimizer step a reduce-scatter (rP, r = 4 or 2 bytes). Across nodes the ring crosses each node's
  interface both ways. hsdp: gathers and reduce-scatters stay in the node; per optimizer step the shards are
  all-reduced across the N nodes: 2(N-1)/N x rP through each node's interface.
- overlap: FSDP2 prefetches and reduces layer by layer, so within a micro-batch the slower of compute c and its
  collectives n sets the pace (+ 1/L of the faster). The once-per-step collective f overlaps only the last
  micro-batch's backward: step = (k-1) max(c, n) + max(c, n + f, FORWARD_SHARE c + f) + optimizer. (The first version
  spread f over all k micro-batches and missed HSDP with accumulation by 40% on 2 x H200.)

- precision fp8 (torchao float8 training of the decoder-layer linears core.fp8 converts: not the small ones, e.g. the
  k/v projections): their FLOPs run at the fp8 peak x the family's fp8 efficiency, the rest (attention, the output
  projection, norms, the small linears) at bf16; the casts and amax reductions move core.fp8.cast_bytes_per_token per
  token at the GPU's memory bandwidth; a micro-batch is at least FP8_LAUNCH_FLOOR_S (the casts and scale reductions
  add kernels); the converted linears' all-gathers carry 1 byte per parameter (FSDP2 fp8 all-gather) instead of 2.
- links: between nodes over EFA, core.catalog.network's figure for the family at the step's message size (GPUDirect RDMA:
  a published share of the line rate, lower for smaller messages; without it at most the host-staged 3 GB/s, the
  preflight's own figure); over TCP (NCCL's socket transport) the primary network card's bandwidth x
  SOCKET_LINE_SHARE, capped by the flows NCCL opens (socket_layout: what the TCP job sets NCCL_SOCKET_NTHREADS x
  NCCL_NSOCKS_PERTHREAD to) x EC2's per-flow limit and by what NCCL's host-memory socket path moves
  (SOCKET_HOST_CEILING_GB_S): see socket_gb_s. Every collective call also costs core.catalog.network's latency on its link.
- scale: per-GPU throughput falls SCALE_LOSS_PER_DOUBLING per doubling of the nodes (stragglers, jitter, the
  collectives' synchronisation), as published multi-node runs lose it.

Constants name their source or calibration: bench/calibrate.py on one H200, bench/sharding_proof.py on two;
docs/BENCHMARKS.md has the tables and what is still to measure. `Calibration` replaces the compute and link constants
with a finished run's (core.calibrate). This module is a leaf: choosing a strategy, which also needs the memory plan,
is core.strategy's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ray_efa.core import catalog, fp8, memory
from ray_efa.core.catalog import gpu_constants
from ray_efa.core.catalog import network as network_module
from ray_efa.core.models import ModelPreset
from ray_efa.core.settings import TrainingSettings

__all__ = [
    "Link",
    "Collective",
    "StepPrediction",
    "Calibration",
    "STRATEGIES",
    "NETWORKS",
    "EFA_SHARE",
    "SCALE_LOSS_PER_DOUBLING",
    "links_for",
    "socket_gb_s",
    "SocketLayout",
    "socket_layout",
    "predict",
    "flops_per_token_causal",
    "recompute_factor",
    "message_bytes",
]

STRATEGIES = ("fsdp", "hsdp")

COMPUTE_EFFICIENCY = gpu_constants.GPU_CONSTANTS["H200"].compute_efficiency  # 0.666
"""Share of the bf16 peak in fwd+bwd of compiled layers: least-squares fit over 4x2048, 8x2048, 4x4096 and 8x4096
tokens on one H200 (658 TFLOP/s of 989; matrix-product ceiling in the same call 760)."""
MICRO_STEP_FIXED_S = 0.046
"""Seconds per micro-batch that do not scale with FLOPs (launches, FSDP2 hooks): the same fit's intercept."""
LAUNCH_FLOOR_S = 0.155
"""Shortest fwd+bwd measured (0.140 s at 2x2048, 0.169 s at 1x2048, averaged): small batches are launch-bound."""
EAGER_SPEED = gpu_constants.GPU_CONSTANTS["H200"].eager_speed  # 0.946
"""Eager vs compiled layers on the H200: 35,434 vs 37,465 tokens/s/GPU, 2 x H200, 4x4096, unchunked
(the maintainers' reference notes, outside the repository). Each family has its own (core.catalog.gpu_constants: GpuConstants.eager_speed, fitted to same-machine
pairs where published; the H100's is torchtitan's 1.16x)."""
UNCHUNKED_LOSS_SPEED = 0.785
"""Unchunked vs chunked loss: 37,465 tokens/s/GPU (2 x H200, 4x4096, docs/BENCHMARKS.md) vs 47,747 (calibration)."""
LOSS_CHUNK_REFERENCE = 1024
"""The lossChunkSize every compute constant above was measured with: other chunk sizes add or save LOSS_CHUNK_S."""
LOSS_CHUNK_TRAFFIC = 1.42
"""Seconds of one loss chunk beyond its FLOPs, in units of 12 V d bytes at the GPU's memory bandwidth. Measured on one
H100 with the loss before issue 51's fused sum (each chunk's bf16 product of the projection's gradient built, then
widened into the fp32 accumulator): 3.33, from the default fp8 16 x 2048 job's 1.3056 s a step of 2 micro-batches at
lossChunkSize 1024 (32 chunks each) and 1.1720 s at 4096 (8), 2.78 ms a chunk. training.loss now sums each chunk in the
matrix product's epilogue (cuBLAS, fp32 output, beta = 1); bench/loss_chunk.py on the same H100 measured a chunk's cost
alone at 0.464 ms with it and 1.090 ms without (32,768 tokens, chunks of 1024 against 8192), so 3.33 x 0.425 (docs/
BENCHMARKS.md, 2026-12-06: the ratio is the loss's own, measured; the new value was not fitted to a whole step)."""
FORWARD_SHARE = 1 / 3
"""Forward share of a micro-batch's FLOPs (2 of 6N): gradient collectives start only in the backward."""
OPTIMIZER_BYTES_PER_PARAM = 57.0
"""Clip + fused AdamW + zero_grad per local parameter at data-sheet bandwidth: 0.0183 s for 1.544e9 on one H200."""
INTRA_NODE_SHARE = gpu_constants.LINK_SHARES["NVLink"][0]  # 0.72
"""All-reduce bus bandwidth 325 GB/s over NVLink 4 (450 per direction), 2 x H200 (docs/BENCHMARKS.md); PCIe: a lead."""
NETWORKS = ("efa", "tcp")
EFA_SHARE = catalog.EFA_LINE_SHARE
"""p4d's share of the line rate over EFA at 1 GiB (each family's own, and its fall with message size: core.catalog.network)."""
SCALE_LOSS_PER_DOUBLING = 0.009
"""Per-GPU throughput lost per doubling of the nodes, beyond what the links explain: torchtitan's Llama 3.1 8B lost 2.3%
from 8 to 128 H100s (4 doublings), Trainy's torchtitan runs 1.7% from 4 to 8 H200 nodes, torchao's MXFP8 runs about 5%
from 4 to 188 B200 nodes (5.6 doublings): 0.6%, 1.7% and 0.9% a doubling, the median taken (core/data/published_runs.csv
holds the first two)."""
AWS_EFA_OVER_TCP = 2.06
"""The AWS reference's measurement: EFA at 2.06x the steps/s of TCP on 2 x g6.12xlarge (one 40 Gbit/s card) with a
batch of 1 x 128 tokens, a step that is all network."""
SOCKET_LINE_SHARE = round(network_module.HOST_STAGED_GB_S / (40 / 8) / AWS_EFA_OVER_TCP, 3)  # 0.291
"""Share of the primary network card's bandwidth NCCL's socket transport reaches: on 2 x g6.12xlarge EFA moves the
host-staged 3 GB/s (core.catalog.network, the preflight's figure too) and TCP 1/2.06 of that (AWS_EFA_OVER_TCP), so
3 / 5 / 2.06 of the 40 Gbit/s line. Measured in pods, where NCCL's own detection gives 1 socket a connection (see
NCCL_ENA_SOCKETS) unless the run set them: with the sockets this project's TCP run sets (socket_layout) it is
probably below what TCP reaches, not its best."""
SOCKET_HOST_CEILING_GB_S = 3.4
"""What NCCL's socket path moves when the wire does not limit it: GPU -> pinned host buffer -> kernel TCP, 2 helper
threads x 8 sockets per connection (the defaults NCCL picks on an AWS ENA NIC, vendor 0x1d0f: net_socket.cc
ncclNetSocketGetNsockNthread). Measured as all-reduce bus bandwidth 3.1-3.44 GB/s with NCCL forced onto sockets
between 2 x H200 of one host (bench/results/2026-12-01-h200x2-sharding-proof-socket*.jsonl); one measurement, on
loopback: a lead for the big instances, where it, not the 100-200 Gbit/s card, binds."""
NCCL_ENA_SOCKETS = (2, 8)
"""(NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD) NCCL picks itself when /sys/class/net/<if>/device/vendor is AWS's
ENA, 0x1d0f (net_socket.cc, ncclNetSocketGetNsockNthread, NCCL 2.29). A pod's eth0 is the VPC CNI's veth, with no
`device`, so in a pod NCCL falls to 0 helper threads and 1 socket a connection: the TCP network sets them itself."""
NCCL_MAX_SOCKET_THREADS, NCCL_MAX_SOCKETS = 16, 64
"""NCCL's caps (net_socket.cc MAX_THREADS, MAX_SOCKETS): NTHREADS above 16 is cut to 16, and a product above 64 cuts
NSOCKS_PERTHREAD to 64 / NTHREADS."""
FLOW_GBPS = {"placement": 10.0, "spread": 5.0}
"""EC2's single-flow limit (one TCP 5-tuple): 10 Gbit/s inside a cluster placement group, 5 outside (EC2 User Guide,
"Amazon EC2 instance network bandwidth"); multi-flow traffic inside the Region may use the instance's full rate."""
FP8_COMPUTE_EFFICIENCY = gpu_constants.GPU_CONSTANTS["H200"].fp8_compute_efficiency  # 0.426
"""Share of the fp8 peak the decoder-layer linears reach under torchao float8 (tensorwise scaling, its casts and amax
reductions included): fitted to 1.16x bf16's tokens/s at 8 x 4096 on one H200 (bench/speed.py, torchao 0.18;
docs/BENCHMARKS.md, "The default job at the speed its hardware allows"), with the rest of the step at bf16. bench/speed.py measures it again."""
FP8_LAUNCH_FLOOR_S = 0.213
"""Shortest fp8 fwd+bwd: 0.70x bf16's tokens/s at 2 x 2048 on one H200 (bench/speed.py): the extra kernels bind there."""
EAGER_FP8_SPEED = 0.48
"""Eager fp8 vs eager bf16 micro-batch speed: 16,038 vs 33,762 tokens/s at 4 x 4096 with compile=false on one H200
through the CLI (bench/cli_defaults.sh). Without torch.compile torchao's casts and amax reductions run as separate kernels and
nothing is fused, so eager fp8 is modelled this much slower than eager bf16 (and core.strategy never chooses it)."""

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
    collectives: tuple[Collective, ...]
    precision: str = "bf16"
    reduce_dtype: str = "fp32"
    """The gradients' dtype on the wire between nodes."""
    nodes: int = 1
    gpus_per_node: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "step_time_s": round(self.step_time_s, 4),
            "compute_s": round(self.compute_s, 4),
            "network_s": round(self.network_s, 4),
            "optimizer_s": round(self.optimizer_s, 4),
            "tokens_per_s_per_gpu": round(self.tokens_per_s_per_gpu, 1),
            "mfu": round(self.mfu, 4),
            "mfu_causal": round(self.mfu_causal, 4),
            "bottleneck": self.bottleneck,
            "precision": self.precision,
            "reduce_dtype": self.reduce_dtype,
            "nodes": self.nodes,
            "tokens_per_s": round(self.tokens_per_s_per_gpu * self.nodes * self.gpus_per_node, 1),
            "collectives": [
                {
                    "name": c.name,
                    "link": c.link,
                    "size_gb": round(c.size_gb, 3),
                    "calls": c.calls,
                    "wire_gb": round(c.wire_gb, 3),
                    "per_micro_batch": c.per_micro_batch,
                }
                for c in self.collectives
            ],
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Calibration:
    """Constants measured on a real run (core.calibrate), in place of the model's own; None keeps the model's."""

    compute_efficiency: float | None = None
    """Share of the bf16 peak the compute reached."""
    inter_node_gb_s: float | None = None
    """Achieved GB/s per direction through each node's interface, on `network`."""
    network: str | None = None
    """The network the link was measured on: the link applies to predictions on it only."""
    source: str = ""
    """Which run it came from."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SocketLayout:
    """How many TCP sockets NCCL's socket transport opens per connection: threads x sockets per thread."""

    threads: int
    """NCCL_SOCKET_NTHREADS."""
    sockets_per_thread: int
    """NCCL_NSOCKS_PERTHREAD."""

    @property
    def sockets(self) -> int:
        return self.threads * self.sockets_per_thread

    def env(self) -> dict[str, str]:
        """The NCCL environment that makes the job run with this layout."""
        return {"NCCL_SOCKET_NTHREADS": str(self.threads), "NCCL_NSOCKS_PERTHREAD": str(self.sockets_per_thread)}


def socket_layout(instance: catalog.InstanceType, *, placement_group: bool = True) -> SocketLayout:
    """The sockets the TCP run opens per connection: enough flows to fill the primary card under EC2's per-flow limit
    (FLOW_GBPS), never fewer than NCCL's own choice on an ENA NIC (NCCL_ENA_SOCKETS, 2 x 8), in threads of 8 sockets,
    within NCCL's caps (16 threads, 64 sockets)."""
    ena_threads, per_thread = NCCL_ENA_SOCKETS
    flows = instance.primary_card_gbps / FLOW_GBPS["placement" if placement_group else "spread"]
    threads = min(
        max(ena_threads, math.ceil(flows / per_thread)), NCCL_MAX_SOCKET_THREADS, NCCL_MAX_SOCKETS // per_thread
    )
    return SocketLayout(threads=threads, sockets_per_thread=per_thread)


def socket_gb_s(instance: catalog.InstanceType, *, placement_group: bool = True) -> float:
    """GB/s per direction NCCL's socket transport achieves between two nodes of `instance` with the sockets the job
    opens (socket_layout; see the constants)."""
    line = instance.primary_card_gbps / 8 * SOCKET_LINE_SHARE
    sockets = socket_layout(instance, placement_group=placement_group).sockets
    flows = sockets * FLOW_GBPS["placement" if placement_group else "spread"] / 8
    return min(line, flows, SOCKET_HOST_CEILING_GB_S)


def links_for(
    instance: catalog.InstanceType,
    network: str,
    *,
    placement_group: bool = True,
    message_bytes: float = network_module.GiB,
) -> tuple[Link, Link]:
    """(intra-node link, inter-node link) of `instance` for network "efa" or "tcp", at achievable bandwidth for
    collectives of `message_bytes` (EFA's share falls with the message: core.catalog.network)."""
    if network not in NETWORKS:
        raise ValueError(f"network must be one of {', '.join(NETWORKS)}, got {network!r}")
    gpu_link = catalog.gpu_link(instance)
    intra = Link(name=gpu_link.name, gb_s=gpu_link.gb_s * gpu_constants.link_share(gpu_link.name)[0])
    if network == "efa":
        inter = Link(
            name=f"EFA {instance.network_gbps} Gbit/s", gb_s=network_module.efa_link(instance, message_bytes).gb_s
        )
    else:
        inter = Link(
            name=f"TCP sockets, {instance.primary_card_gbps:g} Gbit/s card",
            gb_s=socket_gb_s(instance, placement_group=placement_group),
        )
    return intra, inter


def _root_and_last_layer(p: ModelPreset) -> tuple[int, int]:
    layer = p.layer_parameters
    return p.num_parameters - p.num_hidden_layers * layer, layer


def flops_per_token_causal(p: ModelPreset, seq_len: int) -> float:
    """Training FLOPs per token with causal attention counted at half: 6N + 6 L d S (the 12LdS convention's sibling;
    heads x head_dim for d, sliding-window layers at the keys they attend: ModelPreset.flops_per_token_causal)."""
    return p.flops_per_token_causal(seq_len)


def _collectives(
    t: TrainingSettings,
    p: ModelPreset,
    strategy: str,
    nodes: int,
    gpus_per_node: int,
    reduce_bytes: int,
    use_fp8: bool = False,
    sync_every: bool = False,
) -> list[Collective]:
    params = p.num_parameters
    root, last = _root_and_last_layer(p)
    k = t.accumulation_steps
    world = nodes * gpus_per_node
    # fp8 all-gather: the converted linears' weights travel as 1 byte; the root, norms and small linears stay bf16
    saved = fp8.fp8_parameters(p) if use_fp8 else 0
    last_saved = saved / p.num_hidden_layers
    gather_fwd = (_BF16 * params - saved) / 1e9
    gather_bwd = (_BF16 * (params - root - last) - (saved - last_saved)) / 1e9
    grads = reduce_bytes * params / 1e9
    out: list[Collective] = []
    if strategy == "fsdp" or nodes == 1:
        if world == 1:
            return out
        link = "inter" if nodes > 1 else "intra"
        share = (world - 1) / world
        for name, size, calls, every in (
            ("all-gather parameters (forward)", gather_fwd, k, True),
            ("all-gather parameters (backward)", gather_bwd, k, True),
            # gradSyncEveryMicroBatch: every micro-batch's backward reduce-scatters (k calls), else the last one's
            ("reduce-scatter gradients", grads, k if sync_every else 1, sync_every),
        ):
            for on in (link, "intra") if link == "inter" else (link,):  # the ring also runs through each node's GPUs
                out.append(
                    Collective(
                        name=name,
                        link=on,
                        size_gb=size,
                        calls=calls,
                        wire_gb=size * calls * share,
                        per_micro_batch=every,
                    )
                )
        return out
    # hsdp across nodes
    if gpus_per_node > 1:
        share = (gpus_per_node - 1) / gpus_per_node
        for name, size, calls in (
            ("all-gather parameters (forward)", gather_fwd, k),
            ("all-gather parameters (backward)", gather_bwd, k),
            ("reduce-scatter gradients", grads, k),
        ):
            out.append(
                Collective(
                    name=name,
                    link="intra",
                    size_gb=size,
                    calls=calls,
                    wire_gb=size * calls * share,
                    per_micro_batch=True,
                )
            )
    out.append(
        Collective(
            name="all-reduce gradient shards across nodes",
            link="inter",
            size_gb=grads,
            calls=1,
            wire_gb=grads * 2 * (nodes - 1) / nodes,
            per_micro_batch=False,
        )
    )
    return out


def _reduce_dtype(t: TrainingSettings, reduce_dtype: str | None) -> str:
    value = reduce_dtype or t.grad_reduce_dtype
    return "fp32" if value == "auto" else value  # auto is core.strategy's to resolve; unresolved it counts as fp32


def message_bytes(p: ModelPreset, strategy: str, nodes: int, gpus_per_node: int, reduce_bytes: int) -> float:
    """Bytes of one collective call that crosses the nodes: FSDP2 gathers and reduces one decoder layer at a time (its
    bf16 parameters; its gradients); hsdp all-reduces each layer's gradient shard of the node's GPUs."""
    _, layer = _root_and_last_layer(p)
    if strategy == "hsdp" and nodes > 1:
        return reduce_bytes * layer / max(1, gpus_per_node)
    return _BF16 * layer


def _collective_calls(p: ModelPreset, strategy: str, nodes: int, gpus_per_node: int) -> tuple[int, int]:
    """(calls per micro-batch, calls once per step) of each link's collectives: FSDP2 issues one per decoder layer and
    root unit for each all-gather and reduce-scatter."""
    units = p.num_hidden_layers + 1
    if strategy == "hsdp" and nodes > 1:
        return 3 * units if gpus_per_node > 1 else 0, units
    return 2 * units, units


def loss_chunk_seconds(p: ModelPreset, t: TrainingSettings, gpu: catalog.Gpu) -> float:
    """Seconds per micro-batch the loss's chunk count adds (negative: saves) against LOSS_CHUNK_REFERENCE's."""
    chunk, tokens = t.loss_chunk, t.micro_batch_size * t.seq_len
    if chunk <= 0 or not gpu.memory_bandwidth_gb_s:
        return 0.0
    chunks, reference = math.ceil(tokens / chunk), math.ceil(tokens / LOSS_CHUNK_REFERENCE)
    per_chunk = LOSS_CHUNK_TRAFFIC * 12 * p.vocab_size * p.hidden_size / (gpu.memory_bandwidth_gb_s * 1e9)
    return (chunks - reference) * per_chunk


def recompute_factor(p: ModelPreset, mode: str, seq_len: int) -> float:
    """Compute of a micro-batch with activation checkpointing `mode` over the same without: none 1, full 4/3 (the
    forward again), selective 1 + the recomputed linears' share (ModelPreset.recompute_flops_per_token: every other
    matrix product's forward, torchtitan's per-op policy; about 1.12 for a Llama 3 70B layer, where torchtitan's
    Llama 3.1 70B and 405B runs on H100s checkpoint selectively, benchmarks/llama3_h100_202412_torchtitan.md)."""
    if mode == "full":
        return 4 / 3
    return 1 + p.recompute_flops_per_token(mode, seq_len) / p.flops_per_token(seq_len)


def _micro_batch_seconds(
    p: ModelPreset, t: TrainingSettings, gpu: catalog.Gpu, *, use_fp8: bool, calibration: Calibration | None
) -> float:
    """Seconds of one micro-batch's forward and backward on one GPU (the loss's chunking included), at the GPU's
    compute rate (core.catalog.gpu_constants: measured, published or assumed; or the calibration's)."""
    tokens = t.micro_batch_size * t.seq_len
    recompute = recompute_factor(p, t.checkpointing_mode, t.seq_len)
    flops = tokens * p.flops_per_token(t.seq_len) * recompute
    family = gpu_constants.constants_for(gpu.name)
    efficiency = (
        calibration.compute_efficiency if calibration and calibration.compute_efficiency else family.compute_efficiency
    )
    rate = (
        gpu.peak_bf16_tflops
        * 1e12
        * efficiency
        * (1.0 if t.compile else family.eager_speed)
        * (1.0 if t.loss_chunk else UNCHUNKED_LOSS_SPEED)
    )
    if use_fp8 and not t.compile:  # measured, not derived: eager fp8 is slower than eager bf16 (EAGER_FP8_SPEED)
        micro = max(flops / rate + MICRO_STEP_FIXED_S, LAUNCH_FLOOR_S) / EAGER_FP8_SPEED
    elif use_fp8:
        linear = tokens * 6 * fp8.fp8_parameters(p) * recompute
        fp8_rate = gpu.peak_fp8_tflops * 1e12 * (family.fp8_compute_efficiency or FP8_COMPUTE_EFFICIENCY)
        casts = tokens * fp8.cast_bytes_per_token(p) * recompute / (gpu.memory_bandwidth_gb_s * 1e9)
        micro = max((flops - linear) / rate + linear / fp8_rate + casts + MICRO_STEP_FIXED_S, FP8_LAUNCH_FLOOR_S)
    else:
        micro = max(flops / rate + MICRO_STEP_FIXED_S, LAUNCH_FLOOR_S)
    return micro + loss_chunk_seconds(p, t, gpu) + _selective_traffic_seconds(p, t, gpu)


def _selective_traffic_seconds(p: ModelPreset, t: TrainingSettings, gpu: catalog.Gpu) -> float:
    """Seconds a micro-batch's selective recompute spends moving the recomputed elementwise tensors (norms, RoPE, the
    MLP's activation and product: ModelPreset.selective_recompute_bytes_per_token) at the GPU's memory bandwidth;
    their FLOPs are nothing, their traffic is what they cost (full checkpointing's is in its 4/3)."""
    if t.checkpointing_mode != "selective" or not gpu.memory_bandwidth_gb_s:
        return 0.0
    tokens = t.micro_batch_size * t.seq_len
    return tokens * p.selective_recompute_bytes_per_token() / (gpu.memory_bandwidth_gb_s * 1e9)


def _link_seconds(
    collectives: Sequence[Collective],
    p: ModelPreset,
    intra: Link,
    inter: Link,
    *,
    network: str,
    strategy: str,
    nodes: int,
    gpus_per_node: int,
) -> tuple[dict[str, float], dict[str, float]]:
    """Seconds each link is busy: with one micro-batch's collectives, and with those sent once per optimizer step;
    each call also pays its link's latency (core.catalog.network)."""
    hsdp_across = strategy == "hsdp" and nodes > 1
    each, once = {"intra": 0.0, "inter": 0.0}, {"intra": 0.0, "inter": 0.0}
    for c in collectives:
        seconds = c.wire_gb / (intra.gb_s if c.link == "intra" else inter.gb_s)
        if c.per_micro_batch:
            each[c.link] += seconds / c.calls
        else:
            once[c.link] += seconds
    calls_each, calls_once = _collective_calls(p, strategy, nodes, gpus_per_node)
    intra_kind = "NVLink" if intra.name.startswith("NVLink") else "PCIe"
    for link, kind, used in (("intra", intra_kind, gpus_per_node > 1), ("inter", network, nodes > 1)):
        if used:
            latency = network_module.collective_latency_s(kind, nodes if link == "inter" else 1)
            each[link] += calls_each * latency if (link == "intra" or not hsdp_across) else 0.0
            once[link] += calls_once * latency
    return each, once


def predict(
    t: TrainingSettings,
    *,
    instance: catalog.GpuInstanceType,
    nodes: int,
    network: str,
    strategy: str,
    gpus_per_node: int | None = None,
    links: tuple[Link, Link] | None = None,
    reduce_dtype: str | None = None,
    precision: str | None = None,
    placement_group: bool = True,
    calibration: Calibration | None = None,
    model: ModelPreset | None = None,
) -> StepPrediction:
    """The step of training `t` with `strategy` ("fsdp" or "hsdp") on `nodes` x `instance` over `network`.

    gpus_per_node and links override the instance's (a benchmark on fewer GPUs, or a measured link); reduce_dtype and
    precision override the settings' gradReduceDtype and precision; calibration replaces the compute and inter-node
    constants with measured ones; model replaces the settings' architecture (a published run's, core.evidence).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if t.undecided:
        raise ValueError(f"{', '.join(t.undecided)} must be decided first (core.strategy.resolve), not auto")
    p, gpu = model or t.preset, instance.gpu
    g = gpus_per_node or instance.gpus
    world = nodes * g
    reduce = _reduce_dtype(t, reduce_dtype)
    # With accumulation, gradients are accumulated in fp32 and only the wire copy is bf16 (training.parallelize),
    # inside the node and, under hsdp, across nodes too (its own all-reduce: FSDP2's native one would send fp32).
    reduce_bytes = 2 if reduce == "bf16" else 4
    intra, inter = links or links_for(
        instance,
        network,
        placement_group=placement_group,
        message_bytes=message_bytes(p, strategy, nodes, g, reduce_bytes),
    )
    if calibration and calibration.inter_node_gb_s and calibration.network in (None, network):
        inter = Link(name=f"{inter.name}, measured", gb_s=calibration.inter_node_gb_s)
    use_fp8 = (precision or t.precision) == "fp8"
    if use_fp8 and not gpu.has_fp8:  # core.settings refuses precision fp8 here first, naming it
        raise ValueError(f"precision fp8 needs fp8 tensor cores; the {gpu.name} of {instance.name} has none")
    hsdp_across = strategy == "hsdp" and nodes > 1

    tokens = t.micro_batch_size * t.seq_len
    micro = _micro_batch_seconds(p, t, gpu, use_fp8=use_fp8, calibration=calibration)
    compute = micro * t.accumulation_steps

    shard = g if hsdp_across else world
    optimizer = OPTIMIZER_BYTES_PER_PARAM * p.num_parameters / shard / (gpu.memory_bandwidth_gb_s * 1e9)

    sync_every = memory.grad_sync_every_micro_batch(
        t,
        strategy=strategy,
        nodes=nodes,
        gpus_per_node=g,
        nvlink=instance.gpu_link is not None and instance.gpu_link.name.startswith("NVLink"),
    )
    collectives = tuple(_collectives(t, p, strategy, nodes, g, reduce_bytes, use_fp8, sync_every))
    each, once = _link_seconds(
        collectives, p, intra, inter, network=network, strategy=strategy, nodes=nodes, gpus_per_node=g
    )
    k, layers = t.accumulation_steps, p.num_hidden_layers
    busy = {link: k * each[link] + once[link] for link in each}
    network_s = max(busy.values())
    n_each, n_last = max(each.values()), max(each[link] + once[link] for link in each)
    before_last = max(micro, n_each) + min(micro, n_each) / layers
    last = max(micro, n_last, FORWARD_SHARE * micro + max(once.values())) + min(micro, n_last) / layers
    step = ((k - 1) * before_last + last + optimizer) * (1 + SCALE_LOSS_PER_DOUBLING * math.log2(max(1, nodes)))
    if step - compute - optimizer < 0.1 * step:  # under a tenth of the step waits on the wire
        bottleneck = "compute"
    else:
        bottleneck = "network" if busy["inter"] >= busy["intra"] else "intra-node link"

    per_gpu = tokens * t.accumulation_steps / step
    peak = gpu.peak_bf16_tflops * 1e12
    return StepPrediction(
        strategy=strategy,
        network=network,
        compute_s=compute,
        network_s=network_s,
        optimizer_s=optimizer,
        step_time_s=step,
        tokens_per_s_per_gpu=per_gpu,
        mfu=per_gpu * p.flops_per_token(t.seq_len) / peak,
        mfu_causal=per_gpu * flops_per_token_causal(p, t.seq_len) / peak,
        bottleneck=bottleneck,
        collectives=collectives,
        precision="fp8" if use_fp8 else "bf16",
        reduce_dtype="fp32" if reduce_bytes == 4 else "bf16",
        nodes=nodes,
        gpus_per_node=g,
    )
