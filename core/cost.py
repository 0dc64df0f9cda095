"""What the deployed stack costs per hour, from the instance catalog (on-demand list prices; an estimate)."""

from __future__ import annotations

from dataclasses import dataclass

from ray_efa.core import catalog
from ray_efa.core.settings import Settings

__all__ = ["HourlyCost", "hourly_cost", "S3_STANDARD_USD_PER_GB_MONTH", "retained_after_destroy"]

S3_STANDARD_USD_PER_GB_MONTH = 0.023
"""S3 Standard storage in us-east-2, first 50 TB (AWS price list, recorded 2026-11; an estimate)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HourlyCost:
    """USD per hour while everything runs, by item. Excludes data transfer, NAT data processing, EBS and S3."""

    gpu_nodes: float
    system_nodes: float
    control_plane: float
    nat_gateways: float

    @property
    def total(self) -> float:
        return self.gpu_nodes + self.system_nodes + self.control_plane + self.nat_gateways

    @property
    def without_gpu_stack(self) -> float:
        """What keeps running after the GPU stack alone is destroyed."""
        return self.total - self.gpu_nodes


def hourly_cost(settings: Settings) -> HourlyCost:
    nodes = settings.nodes
    # An existing VPC's NAT gateways are paid for by whoever owns that VPC.
    nat = 0 if settings.cluster.vpc_id else settings.cluster.nat_gateways
    return HourlyCost(
        gpu_nodes=nodes.gpu_node_count * nodes.gpu_instance.usd_per_hour,
        system_nodes=nodes.system_node_count * nodes.system_instance.usd_per_hour,
        control_plane=catalog.EKS_CONTROL_PLANE_USD_PER_HOUR,
        nat_gateways=nat * catalog.NAT_GATEWAY_USD_PER_HOUR,
    )


def retained_after_destroy(settings: Settings) -> tuple[str, ...]:
    """What `cdk destroy` of both stacks leaves in the account, with its monthly cost (docs/deploy.md says the rest)."""
    if settings.workload.storage_path is not None:
        return ()
    return (f"the checkpoint S3 bucket, kept on purpose (checkpoints outlive the cluster): "
            f"USD {S3_STANDARD_USD_PER_GB_MONTH} per GB-month of checkpoints, old versions for 30 days included; "
            f"empty and delete it yourself when done",)
