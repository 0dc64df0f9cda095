"""The GPU capacity in its own stack, so that `cdk destroy <cluster>-gpu` stops the expensive part first and alone."""

from __future__ import annotations

from aws_cdk import CfnOutput, Environment, Stack
from constructs import Construct

from ray_efa.core.cost import hourly_cost
from ray_efa.core.settings import Settings
from ray_efa.infra.cluster_stack import ClusterStack
from ray_efa.infra.gpu_nodegroup import EfaGpuNodegroup

__all__ = ["GpuStack"]


class GpuStack(Stack):
    """The EFA GPU node group, its launch template, EFA security group and placement group."""

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, cluster_stack: ClusterStack,
        env: Environment | None = None,
    ) -> None:
        super().__init__(scope, construct_id, env=env, description=(
            f"ray-efa: {settings.nodes.gpu_node_count} x {settings.nodes.gpu_instance_type} EFA GPU nodes "
            f"for EKS cluster {settings.cluster.cluster_name}"
        ))
        self.gpu_nodes = EfaGpuNodegroup(
            self, "GpuNodes", settings=settings, cluster=cluster_stack.ray_cluster.cluster, vpc=cluster_stack.vpc
        )
        # The device plugins must exist before GPU nodes register, or pods wait for resources nobody advertises.
        self.add_stack_dependency(cluster_stack)

        instance = settings.nodes.gpu_instance
        CfnOutput(self, "GpuNodeGroup", description="GPU node group",
                  value=f"{settings.nodes.gpu_node_count} x {instance.name} ({instance.gpus} x {instance.gpu.name}, "
                        f"{instance.efa_interfaces} EFA) in {settings.gpu_availability_zone}")
        CfnOutput(self, "EstimatedGpuUsdPerHour", value=f"{hourly_cost(settings).gpu_nodes:.2f}",
                  description="On-demand estimate of the GPU nodes alone")
