"""What the deployed stack costs per hour: the GPU nodes at the stack's region's recorded price (core.prices: On-Demand,
else a recorded Capacity Block, else us-east-2's list price said to be a lower bound), the rest at the catalog's
us-east-2 list prices (an estimate)."""

from __future__ import annotations

from dataclasses import dataclass

from ray_efa.core import catalog, prices
from ray_efa.core.settings import Settings

__all__ = ["HourlyCost", "hourly_cost", "gpu_node_price", "S3_STANDARD_USD_PER_GB_MONTH", "retained_after_destroy"]

S3_STANDARD_USD_PER_GB_MONTH = 0.023
"""S3 Standard storage in us-east-2, first 50 TB (AWS price list, recorded 2026-11; an estimate)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HourlyCost:
    """USD per hour while everything runs, by item. Excludes data transfer, NAT data processing, EBS and S3."""

    gpu_nodes: float
    system_nodes: float
    control_plane: float
    nat_gateways: float
    gpu_price: prices.Price | None = None
    """The GPU node price used, with its option, region and whether it is recorded for the region (None: not asked)."""

    @property
    def total(self) -> float:
        return self.gpu_nodes + self.system_nodes + self.control_plane + self.nat_gateways

    @property
    def without_gpu_stack(self) -> float:
        """What keeps running after the GPU stack alone is destroyed."""
        return self.total - self.gpu_nodes


def gpu_node_price(settings: Settings) -> prices.Price:
    """A GPU node's price per hour in the stack's region: On-Demand where recorded, else a recorded Capacity Block
    (labelled so), else the On-Demand figure marked not recorded (a lower bound, or the catalog's stand-in)."""
    instance, region = settings.nodes.gpu_instance, settings.cluster.region
    return next(iter(prices.buyable(instance, region)), None) or prices.on_demand(instance, region)


def hourly_cost(settings: Settings) -> HourlyCost:
    nodes = settings.nodes
    price = gpu_node_price(settings)
    # An existing VPC's NAT gateways are paid for by whoever owns that VPC.
    nat = 0 if settings.cluster.vpc_id else settings.cluster.nat_gateways
    return HourlyCost(
        gpu_nodes=nodes.gpu_node_count * price.usd_per_hour,
        system_nodes=nodes.system_node_count * nodes.system_instance.usd_per_hour,
        control_plane=catalog.EKS_CONTROL_PLANE_USD_PER_HOUR,
        nat_gateways=nat * catalog.NAT_GATEWAY_USD_PER_HOUR,
        gpu_price=price,
    )


def retained_after_destroy(settings: Settings) -> tuple[str, ...]:
    """What `cdk destroy` of both stacks leaves in the account, with its monthly cost (docs/deploy.md says the rest)."""
    if settings.workload.storage_path is not None:
        return ()
    return (
        f"the checkpoint S3 bucket, kept on purpose (checkpoints outlive the cluster): "
        f"USD {S3_STANDARD_USD_PER_GB_MONTH} per GB-month of checkpoints, old versions for 30 days included; "
        f"empty and delete it yourself when done",
    )
