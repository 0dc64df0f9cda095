"""The inter-node link of every GPU family over EFA, as measured and published: one source for the step model
(core.perf) and the preflight's all-reduce floor (core.catalog.healthy_efa_busbw, training.preflight).

- No GPUDirect RDMA (g5, g6, g6e): every byte is staged through host memory and more EFA cards do not help:
  nccl-tests on g6e "max out at 3 GBps" with EFA on 4 network cards, and the aws-ofi-nccl maintainers confirm that
  G6e has no GPUDirect RDMA, only the P-series from p4d on (aws/aws-ofi-nccl#547). Such a node never gets more than
  HOST_STAGED_GB_S between nodes, whatever its line rate (40-400 Gbit/s).
- GPUDirect RDMA (p4d and later): NCCL reaches a share of the aggregate line rate that depends on the family and on
  the message size (EFA_SHARE, MESSAGE_SIZE_SHARE): per-layer FSDP collectives of a 1.5B model are 10-100 MB, where
  EFA reaches less than at the 1 GiB of the preflight's probe.
- Every collective call also pays a latency (COLLECTIVE_LATENCY_S) that grows with the ranks it crosses.

Arithmetic over the families' records (core.catalog.families), nothing above them: training/ (in the container) reads it
through core.catalog.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from ray_efa.core.catalog.families import FAMILIES


class _GpuLink(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def gb_s(self) -> float: ...


class InstanceType(Protocol):
    """What this module reads of a catalog row (core.catalog.InstanceType), without importing it."""

    @property
    def family(self) -> str: ...
    @property
    def network_gbps(self) -> int: ...
    @property
    def efa_interfaces(self) -> int: ...
    @property
    def primary_card_gbps(self) -> float: ...
    @property
    def gpudirect_rdma(self) -> bool: ...
    @property
    def gpu_link(self) -> _GpuLink | None: ...


__all__ = [
    "HOST_STAGED_GB_S",
    "EFA_SHARE",
    "MESSAGE_SIZE_SHARE",
    "COLLECTIVE_LATENCY_S",
    "GiB",
    "MiB",
    "LinkFigure",
    "efa_share",
    "efa_link",
    "collective_latency_s",
]

GiB: int = 1 << 30
MiB: int = 1 << 20

HOST_STAGED_GB_S = 3.0
"""All-reduce bus bandwidth a healthy EFA pair reaches without GPUDirect RDMA, GB/s: nccl-tests on g6e
(aws/aws-ofi-nccl#547), applied to every family without GPUDirect RDMA (all PCIe Gen4)."""
HOST_STAGED_SOURCE = (
    "aws/aws-ofi-nccl#547: nccl-tests on g6e max out at 3 GB/s; no GPUDirect RDMA, so every byte is "
    "staged through host memory"
)

EFA_SHARE: dict[str, tuple[float, str, str]] = {
    family.name: family.efa_share for family in FAMILIES if family.efa_share is not None
}
"""(share of the aggregate EFA line rate at >= 1 GiB, status, source) of each family with GPUDirect RDMA that records
one (its record in core.catalog.families: GpuFamily.efa_share)."""
_DEFAULT_SHARE = (0.6, "assumed", "a family without its own nccl-tests here: p5's published 0.6")

MESSAGE_SIZE_SHARE: tuple[tuple[int, float], ...] = ((16 * MiB, 0.25), (128 * MiB, 0.4 / 0.6), (GiB, 1.0))
"""The share at a message size relative to the share at >= 1 GiB (log-linear between the points, flat outside):
p5's 0.4 at 128 MiB against 0.6 at 1 GiB; 16 MiB is where nccl-tests' busbw curves on p5 are still rising steeply
(a lead: a quarter, until measured)."""

COLLECTIVE_LATENCY_S: dict[str, float] = {"NVLink": 10e-6, "PCIe": 20e-6, "efa": 13e-6, "tcp": 60e-6}
"""Seconds one collective call costs before its first byte, by link: 12.9 us for an 8-byte all-reduce on 2 x
p5.48xlarge over EFA (aws/aws-k8s-tester#503); NVLink and PCIe inside a node and NCCL's socket transport are leads
(nccl-tests' small-message times on such links are 5-15, 15-30 and 50-100 us). Between nodes a ring's latency grows
with the nodes it crosses: collective_latency_s."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkFigure:
    """What NCCL achieves on the link between two nodes, per node and direction, with its evidence."""

    gb_s: float
    status: str
    """"measured", "published" or "assumed"."""
    source: str


def _size_factor(message_bytes: float) -> float:
    points = MESSAGE_SIZE_SHARE
    if message_bytes <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if message_bytes <= x1:
            t = (math.log(message_bytes) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return y0 + t * (y1 - y0)
    return points[-1][1]


def efa_share(instance: InstanceType, message_bytes: float = GiB) -> tuple[float, str, str]:
    """(share of the line rate, status, source) NCCL reaches over EFA between GPUDirect RDMA nodes of `instance` at
    `message_bytes` per collective."""
    share, status, source = EFA_SHARE.get(instance.family, _DEFAULT_SHARE)
    return share * _size_factor(message_bytes), status, source


def efa_link(instance: InstanceType, message_bytes: float = GiB) -> LinkFigure:
    """GB/s per node and direction over EFA between nodes of `instance` at `message_bytes` per collective: the
    family's share of the line with GPUDirect RDMA, at most HOST_STAGED_GB_S without it; never above the
    intra-node link the ring also crosses."""
    line = instance.network_gbps / 8
    cards = f"{instance.efa_interfaces} EFA x {instance.primary_card_gbps:g} Gbit/s"
    if instance.gpudirect_rdma:
        share, status, source = efa_share(instance, message_bytes)
        figure = LinkFigure(
            gb_s=line * share,
            status=status,
            source=f"GPUDirect RDMA, {cards}: {share:.2f} of {instance.network_gbps} Gbit/s at "
            f"{message_bytes / MiB:,.0f} MiB per collective ({source})",
        )
    else:
        staged = min(HOST_STAGED_GB_S, line * EFA_SHARE["p4d"][0])
        figure = LinkFigure(
            gb_s=staged,
            status="published",
            source=f"no GPUDirect RDMA, {cards}: staged through host memory, at most "
            f"{HOST_STAGED_GB_S:g} GB/s ({HOST_STAGED_SOURCE})"
            + (
                ""
                if staged == HOST_STAGED_GB_S
                else f", here {EFA_SHARE['p4d'][0]:g} of the {instance.network_gbps} Gbit/s line"
            ),
        )
    link = instance.gpu_link
    if link is not None and link.gb_s < figure.gb_s:
        figure = LinkFigure(
            gb_s=link.gb_s,
            status=figure.status,
            source=f"{figure.source}; capped by the intra-node {link.name} at {link.gb_s:g} GB/s",
        )
    return figure


def collective_latency_s(link: str, nodes: int = 1) -> float:
    """Latency of one collective call on `link` ("NVLink", "PCIe", "efa" or "tcp"): between nodes it grows with
    log2 of the nodes (NCCL's tree and PAT algorithms cross log2(n) hops; its ring would cross n)."""
    base = COLLECTIVE_LATENCY_S.get(link, COLLECTIVE_LATENCY_S["PCIe"])
    return base * max(1.0, math.log2(max(1, nodes)))
