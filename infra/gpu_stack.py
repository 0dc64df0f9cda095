"""The GPU capacity in its own stack, so that `cdk destroy <cluster>-gpu` stops the expensive part first and alone."""

from __future__ import annotations

from aws_cdk import Annotations, CfnOutput, Environment, Stack
from constructs import Construct

from ray_efa.core.cost import hourly_cost
from ray_efa.core.image import image_digest
from ray_efa.core.settings import Settings
from ray_efa.infra.cluster_stack import ClusterStack
from ray_efa.infra.gpu_nodegroup import EfaGpuNodegroup
from ray_efa.infra.job_guard import JobDisruptionGuard
from ray_efa.infra.training_job import RayTrainingJob

__all__ = ["GpuStack", "gpu_nodes_roll_key"]


def gpu_nodes_roll_key(nodes: EfaGpuNodegroup) -> str:
    """What, changed, rolls the GPU nodes (or, the count, resizes them under a running job), as one line: `cdk diff`
    shows this output changed exactly when such a deploy is coming (the launch template's own diff says nothing
    of the nodes; the node group's refers to LatestVersionNumber)."""
    return (
        f"gpuInstanceType={nodes.instance_type} gpuNodeCount={nodes.node_count} "
        f"gpuAvailabilityZone={nodes.availability_zone} gpuRootVolumeGib={nodes.root_volume_gib} "
        f"capacityReservationId={nodes.capacity_reservation_id or 'none'} "
        f"capacityType={nodes.capacity_type} kubernetesVersion={nodes.kubernetes_version or 'unchanged'}"
    )


class GpuStack(Stack):
    """The EFA GPU node group, its launch template, EFA security group and placement group."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        cluster_stack: ClusterStack,
        env: Environment | None = None,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            env=env,
            description=(
                f"ray-efa: {settings.nodes.gpu_node_count} x {settings.nodes.gpu_instance_type} EFA GPU nodes "
                f"for EKS cluster {settings.cluster.cluster_name}"
            ),
        )
        self.gpu_nodes: EfaGpuNodegroup = EfaGpuNodegroup.from_settings(
            self, "GpuNodes", settings, cluster=cluster_stack.ray_cluster.cluster, vpc=cluster_stack.vpc
        )
        # The device plugins must exist before GPU nodes register, or pods wait for resources nobody advertises; the
        # job needs the namespace, its service account and the checkpoint bucket of the cluster stack.
        self.add_stack_dependency(cluster_stack)
        # Scaled to zero (gpuNodeCount 0) there is no GPU to run on: no job, so nothing waits for one. The job comes
        # back (created anew, so it runs again) with the nodes. Where it runs comes from the constructs that build it:
        # these GPU nodes (the job is applied after their node group: the RayJob's deadline starts when it is
        # created), the cluster stack's namespace and checkpoint storage (whose service account also reads codeDir
        # when it ships as an S3 asset). Without a job its settings ConfigMap stays: `ray-efa submit` reads the
        # deployment's settings from it (trainingJob false is the way to run jobs outside the stack).
        runs = settings.workload.training_job and not settings.nodes.scaled_to_zero
        job = RayTrainingJob.from_settings(
            self,
            "TrainingJob",
            settings,
            cluster=cluster_stack.ray_cluster.cluster,
            gpu_nodes=self.gpu_nodes,
            workload=cluster_stack.workload,
            storage=cluster_stack.checkpoints,
            apply_job=runs,
        )
        self.training_job: RayTrainingJob | None = job if runs else None
        """The training job, when the stack applies one (its settings ConfigMap is applied either way)."""

        # The deploy path's own protection of a running job: a change that rolls or resizes the GPU nodes, or changes
        # or deletes the RayJob, fails before anything changes while a RayJob runs (infra.job_guard).
        self.job_guard: JobDisruptionGuard = JobDisruptionGuard(
            self,
            "JobGuard",
            cluster=cluster_stack.ray_cluster.cluster,
            gpu_nodes=self.gpu_nodes,
            job=self.training_job.job if self.training_job else None,
            job_object=self.training_job.job_object if self.training_job else None,
            job_name=self.training_job.name if self.training_job else None,
            namespace=settings.workload.namespace,
            allow=settings.workload.allow_job_disruption,
            logs=cluster_stack.logs,
        )

        if settings.workload.allow_job_disruption:
            # the guard forces the node group's update for this deploy: say so in its outputs
            message = JobDisruptionGuard.force_message("GPU nodes")
            CfnOutput(self, "JobDisruptionAllowed", value="ForceUpdateEnabled=true", description=message)

        image = settings.workload.dlc_image
        if self.training_job and image_digest(image) is None:
            # A tag moves (core.image): pin what was tested, and move the pin on purpose (docs/changes.md).
            # An info, not a warning: the default image floats until a digest is recorded (core.image), and a
            # deploy configured as documented synthesizes without warnings.
            Annotations.of(self).add_info(
                f"dlcImage {image} names a tag, which AWS moves: nodes that pull at different times can run different "
                f"builds. Pin the digest you tested: dlcImage={image}@sha256:<digest> (docs/changes.md, 'Pin the "
                "image')"
            )
        instance = settings.nodes.gpu_instance
        cost = hourly_cost(settings)
        CfnOutput(
            self,
            "GpuNodeGroup",
            description="GPU node group",
            value=f"{settings.nodes.gpu_node_count} x {instance.name} ({instance.gpus} x {instance.gpu.name}, "
            f"{instance.efa_interfaces} EFA) in {settings.gpu_availability_zone}",
        )
        CfnOutput(
            self,
            "GpuNodesRollWhen",
            value=gpu_nodes_roll_key(self.gpu_nodes),
            description=(
                "A deploy that changes one of these drains every GPU node (the node count: adds or removes nodes, which a "
                "running job cannot use): a running RayJob dies. `ray-efa deploy-check` first (docs/changes.md)"
            ),
        )
        CfnOutput(
            self, "GpuAvailabilityZone", value=settings.gpu_availability_zone, description="The one AZ of the GPU nodes"
        )
        CfnOutput(
            self,
            "EstimatedGpuUsdPerHour",
            value=f"{cost.gpu_nodes:.2f}",
            description="On-demand estimate of the GPU nodes alone",
        )
        CfnOutput(
            self,
            "EstimatedUsdPerHour",
            value=f"{cost.total:.2f}",
            description="On-demand estimate with both stacks deployed (GPU + system nodes, control plane, NAT)",
        )
        if settings.nodes.scaled_to_zero:
            CfnOutput(
                self,
                "ComeBackCommand",
                value=settings.scale_commands[1],
                description="The GPU node group is scaled to zero and no job is applied: this brings them back",
            )
        if self.training_job:
            CfnOutput(
                self,
                "TrainingJobWatchCommand",
                description="Watch the RayJob this stack applied",
                value=f"kubectl -n {settings.workload.namespace} get rayjob {self.training_job.name} -w",
            )
