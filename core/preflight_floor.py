"""The all-reduce floor of the preflight probe (training.preflight): the lowest bus bandwidth between nodes a job
accepts before step 1, and where that number comes from.

Pure on purpose: the job's preflight applies it in the container, and `ray-efa plan` shows it (as `preflight`) on a
machine without torch. Over EFA it is a share of what a healthy pair of nodes of the family reaches
(core.catalog.healthy_efa_busbw: GPUDirect RDMA or not, EFA cards, intra-node link), over TCP a share of the socket
model (core.perf.socket_gb_s, with the sockets the TCP job opens), or the preflightMinBusbwGbps setting.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ray_efa.core import catalog, perf

if TYPE_CHECKING:
    from ray_efa.core.settings import Settings

__all__ = ["PreflightFloor", "network_floor", "preflight_floor", "floor_gbps"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PreflightFloor:
    """The all-reduce floor a job runs with, and where it comes from."""

    floor_gb_s: float
    """Lowest all-reduce bus bandwidth (GB/s) at 1 GiB the preflight accepts between nodes."""
    source: str
    """"setting preflightMinBusbwGbps", or the catalog's / the socket model's reasoning with its sources."""
    network: str
    """The network it is for: "efa" or "tcp" (the job's `network` setting)."""
    healthy_gb_s: float | None = None
    """What a healthy pair of nodes reaches on that network (None with the setting)."""
    judged: bool = True
    """Whether the preflight applies it: only between nodes (gpuNodeCount > 1)."""

    def as_dict(self) -> dict[str, object]:
        return {
            "floor_gb_s": self.floor_gb_s,
            "source": self.source,
            "network": self.network,
            "healthy_gb_s": None if self.healthy_gb_s is None else round(self.healthy_gb_s, 3),
            "margin": catalog.FLOOR_MARGIN if self.healthy_gb_s is not None else None,
            "judged": self.judged,
        }


def network_floor(instance: catalog.InstanceType, network: str, *, placement_group: bool = True) -> PreflightFloor:
    """The floor of a job on `network` between `instance` nodes, from the catalog (EFA) or the socket model (TCP),
    never one network's floor for the other: the TCP comparison run must finish to be compared."""
    if network == "efa":
        healthy = catalog.healthy_efa_busbw(instance)
        gb_s, source = healthy.gb_s, f"catalog: {healthy.source}"
    elif network == "tcp":
        layout = perf.socket_layout(instance, placement_group=placement_group)
        gb_s = perf.socket_gb_s(instance, placement_group=placement_group)
        source = (
            f"socket model (core.perf.socket_gb_s): TCP on the {instance.primary_card_gbps:g} Gbit/s card 0, "
            f"{layout.threads} threads x {layout.sockets_per_thread} sockets a connection, "
            f"{'in' if placement_group else 'outside'} a placement group"
        )
    else:
        raise ValueError(f"network must be one of {', '.join(perf.NETWORKS)}, got {network!r}")
    floor = round(gb_s * catalog.FLOOR_MARGIN, 2)
    return PreflightFloor(
        floor_gb_s=floor,
        source=f"{source}; floor {catalog.FLOOR_MARGIN:g} of {gb_s:.2f} GB/s",
        network=network,
        healthy_gb_s=gb_s,
    )


def preflight_floor(settings: Settings) -> PreflightFloor:
    """The floor the job of `settings` runs with: preflightMinBusbwGbps if set, else its network's (network_floor)."""
    n = settings.nodes
    network, judged = settings.workload.network, n.gpu_node_count > 1
    configured = settings.workload.preflight_min_busbw_gbps
    if configured is not None:
        return PreflightFloor(
            floor_gb_s=configured, source="setting preflightMinBusbwGbps", network=network, judged=judged
        )
    return dataclasses.replace(
        network_floor(n.gpu_instance, network, placement_group=n.use_placement_group), judged=judged
    )


def floor_gbps(settings: Settings) -> float:
    """The bus-bandwidth floor of a run, GB/s (preflight_floor's)."""
    return preflight_floor(settings).floor_gb_s
