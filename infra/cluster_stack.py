"""The long-lived stack: VPC, EKS cluster, system nodes, KubeRay operator and the device plugins."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from aws_cdk import CfnOutput, CfnResource, Environment, Stack
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from ray_efa.core.cost import hourly_cost, retained_after_destroy
from ray_efa.core.settings import Settings
from ray_efa.infra.checkpoints import CheckpointStorage
from ray_efa.infra.cluster import RayEksCluster
from ray_efa.infra.device_plugins import GpuDevicePlugins
from ray_efa.infra.dra_drivers import GpuDraDrivers
from ray_efa.infra.job_guard import JobDisruptionGuard
from ray_efa.infra.kuberay import KubeRayOperator
from ray_efa.infra.log_groups import StackLogs
from ray_efa.infra.network import ClusterVpc
from ray_efa.infra.workload import RayWorkload

if TYPE_CHECKING:
    from ray_efa.infra.vpc_cni import VpcCniAddon

__all__ = ["ClusterStack"]


class ClusterStack(Stack):
    """Everything but the GPU nodes. `vpc` overrides the VPC the settings would create or look up."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        env: Environment | None = None,
        vpc: ec2.IVpc | None = None,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            env=env,
            description=(
                f"ray-efa: EKS cluster {settings.cluster.cluster_name} with system nodes, KubeRay operator and device plugins"
            ),
        )
        self.settings = settings
        # One KMS key and one retention for every log group of the stack.
        self.logs: StackLogs = StackLogs(self, "Logs", retention_days=settings.cluster.log_retention_days)
        self.vpc: ec2.IVpc = vpc or ClusterVpc.from_settings(self, "Network", settings, logs=self.logs).vpc
        self.ray_cluster: RayEksCluster = RayEksCluster.from_settings(
            self, "Eks", settings, vpc=self.vpc, logs=self.logs
        )
        cluster = self.ray_cluster.cluster
        # The deploy path's protection of a running job's Ray head, on the system nodes: a change that rolls them
        # (kubernetesVersion, systemInstanceType, their launch template) fails while a RayJob runs, before the control
        # plane or the node group changes (infra.job_guard: the cluster and the node group wait for it).
        self.job_guard: JobDisruptionGuard = JobDisruptionGuard(
            self,
            "SystemJobGuard",
            system_nodes=self.ray_cluster,
            allow=settings.workload.allow_job_disruption,
            logs=self.logs,
        )
        # RayEksCluster enforces the workload's NetworkPolicies (the vpc-cni add-on). Its logical id is the one it
        # had when this stack created the add-on itself: a deployed stack updates in place (a new id would create a
        # second vpc-cni add-on, which EKS refuses, before deleting the first).
        self.vpc_cni: VpcCniAddon | None = self.ray_cluster.vpc_cni
        assert self.vpc_cni is not None
        cast(CfnResource, self.vpc_cni.addon.node.default_child).override_logical_id("VpcCniAddon0A9AF95A")
        # After the system nodes (its release waits for its pod, which only they run) and its version's CRDs.
        self.kuberay: KubeRayOperator = KubeRayOperator.from_settings(
            self, "KubeRay", settings, cluster=cluster, logs=self.logs
        )
        # Device plugins, or the DRA drivers (deviceAllocation dra): never both on one node.
        self.device_plugins: GpuDevicePlugins | GpuDraDrivers = (
            GpuDraDrivers.from_settings(self, "DraDrivers", settings, cluster=cluster)
            if settings.addons.device_allocation == "dra"
            else GpuDevicePlugins.from_settings(self, "DevicePlugins", settings, cluster=cluster)
        )
        # The namespace after the CRDs (KubeRay chart) and the device plugins; the job (GPU stack) after both.
        self.workload: RayWorkload = RayWorkload.from_settings(
            self,
            "Workload",
            settings,
            cluster=cluster,
            after=[self.kuberay.chart, self.device_plugins.nvidia, self.device_plugins.efa],
        )
        self.checkpoints: CheckpointStorage = CheckpointStorage.from_settings(
            self, "Checkpoints", settings, cluster=cluster, after=self.workload.namespace
        )
        self._export_private_subnets()
        self._export_what_the_job_imports()

        # Nothing here depends on the GPU settings (type, count, AZ, reservation) or the training settings: changing
        # those changes the GPU stack alone. The GPU stack has its own outputs.
        region = settings.cluster.region
        CfnOutput(self, "ClusterName", value=cluster.cluster_name, description="EKS cluster name")
        CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            description="Point kubectl at the cluster",
            value=f"aws eks update-kubeconfig --region {region} --name {settings.cluster.cluster_name}",
        )
        # Named outputs for a platform that builds on this stack (outputs add no resource: a day-2 diff adds them alone).
        CfnOutput(self, "VpcId", value=self.vpc.vpc_id, description="VPC of the cluster")
        CfnOutput(self, "ClusterArn", value=cluster.cluster_arn, description="EKS cluster ARN")
        CfnOutput(
            self,
            "ClusterSecurityGroupId",
            value=cluster.cluster_security_group_id,
            description="Security group EKS created for the control plane and the managed node groups",
        )
        CfnOutput(
            self,
            "CheckpointStoragePath",
            value=self.checkpoints.storage_path,
            description="Ray Train storagePath of the training job (pass it as -c storagePath=... to make manifests)",
        )
        cost = hourly_cost(settings)
        CfnOutput(
            self,
            "EstimatedUsdPerHourWithoutGpuStack",
            value=f"{cost.without_gpu_stack:.2f}",
            description="On-demand estimate of this stack alone (system nodes, control plane, NAT)",
        )
        CfnOutput(
            self,
            "RetainedAfterDestroy",
            description="What `cdk destroy` of both stacks leaves, and its monthly cost",
            value="; ".join(retained_after_destroy(settings)) or "nothing",
        )

    def _export_what_the_job_imports(self) -> None:
        """Export what the GPU stack's training job imports (the kubectl provider's service token, the checkpoint
        bucket's name, the Ray pods' role), whether or not the GPU stack has a job now.

        CDK exports a value only while another stack imports it. Without these, scaling the GPU nodes to zero (or
        trainingJob false) would remove the exports from this stack, which CloudFormation refuses while the deployed
        GPU stack still imports them; Stack.export_value keeps the name CDK would have given them (aws-cdk-lib
        Stack.exportValue, written for this case).
        """
        provider = self.ray_cluster.cluster.kubectl_provider
        assert provider is not None  # RayEksCluster always creates one
        self.export_value(provider.service_token)
        if self.checkpoints.bucket is not None:
            self.export_value(self.checkpoints.bucket.bucket_name)
        # The job's policy that lets the Ray pods' role read its code assets names the role.
        self.export_value(self.checkpoints.service_account.role.role_name)

    def _export_private_subnets(self) -> None:
        """Export every private subnet of a created VPC, whichever the GPU stack uses.

        The GPU stack imports the subnet of its AZ; with exports made only on demand, moving the GPU AZ would remove
        the export the running GPU stack still imports, and CloudFormation refuses to update the cluster stack.
        Exporting them all keeps this stack's template the same for every GPU AZ.
        """
        if self.settings.cluster.vpc_id:
            return  # a looked-up VPC's subnet ids are literals in the GPU stack: no exports
        for subnet in self.vpc.private_subnets:
            self.export_value(subnet.subnet_id)
