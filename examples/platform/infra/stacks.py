"""The platform's two stacks that use ray-efa-stack's constructs."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from core import naming
from infra import network
from ray_efa.core.settings import Settings
from ray_efa.infra import (
    CheckpointStorage,
    EfaGpuNodegroup,
    GpuDevicePlugins,
    KubeRayOperator,
    RayEksCluster,
    RayTrainingJob,
    RayWorkload,
    import_cluster,
)

# The training job's own configuration. Where it runs (GPU type and count, namespace, service account, node labels)
# comes from the constructs it is given, never from a second description of the cluster.
TRAINING = {"steps": 50}
# The platform's GPU side, for the stack that builds a whole cluster from settings.
PLATFORM = {"gpuInstanceType": "p5.48xlarge", "gpuNodeCount": 2, "namespace": "ml-ray"}


class ImportedClusterGpu(Stack):
    """The GPU side added to the platform's existing cluster, scheduled by the platform's own node labels."""

    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        vpc = network.imported_prod_vpc(self)
        # A role the platform granted cluster-admin (an EKS access entry) and that Lambda may assume.
        kubectl_role = iam.Role.from_role_name(self, "KubectlRole", "platform-eks-cluster-admin")
        cluster = import_cluster(
            self,
            "Prod",
            cluster_name=naming.cluster_name("prod"),
            cluster_security_group_id="sg-0a1b2c3d4e5f60718",
            vpc=vpc,
            kubernetes_version="1.35",
            kubectl_role=kubectl_role,
        )
        settings = Settings.from_context(TRAINING)  # RayTrainingJob takes the region from this stack
        gpu = EfaGpuNodegroup(
            self,
            "GpuNodes",
            cluster=cluster,
            vpc=vpc,
            instance_type="p5.48xlarge",
            node_count=2,
            availability_zone="us-west-2b",
            node_selector=naming.GPU_NODE_LABELS,
            image=settings.workload.dlc_image,
        )
        # The GPU labels are stated once, on the node group; the plugins select what it labels.
        plugins = GpuDevicePlugins(self, "DevicePlugins", cluster=cluster, gpu_nodes=gpu)
        # The platform's own system nodes are not built here: the operator is told their labels.
        kuberay = KubeRayOperator(
            self,
            "KubeRay",
            cluster=cluster,
            node_selector=naming.SYSTEM_NODE_LABELS,
            ray_version=settings.workload.ray_version,
        )
        workload = RayWorkload(
            self, "Workload", cluster=cluster, namespace="ml-ray", after=[kuberay.chart, plugins.nvidia, plugins.efa]
        )
        # The platform's cluster has no Pod Identity agent yet: the checkpoint bucket's access needs it. The
        # namespace is the workload's.
        storage = CheckpointStorage(self, "Checkpoints", cluster=cluster, workload=workload, pod_identity_agent=True)
        # 2 x p5.48xlarge in us-west-2b, namespace ml-ray, the platform's labels and bucket, the cluster's name: all
        # from the constructs above; the job is applied after the GPU node group and the service account.
        RayTrainingJob(
            self,
            "TrainingJob",
            cluster=cluster,
            settings=settings,
            gpu_nodes=gpu,
            workload=workload,
            storage=storage,
            operator=kuberay,
        )


class PlatformWithRay(Stack):
    """A whole new cluster built with the project's constructs inside one platform stack, on the platform's VPC."""

    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        vpc = network.platform_vpc(self, ["us-west-2a", "us-west-2b"])
        name = naming.cluster_name("research")
        settings = Settings.from_context(
            {
                **TRAINING,
                **PLATFORM,
                "clusterName": name,
                "region": self.region,
                "systemNodeSelector": naming.SYSTEM_NODE_LABELS,
                "gpuNodeSelector": naming.GPU_NODE_LABELS,
            }
        )
        ray = RayEksCluster.from_settings(self, "Ray", settings, vpc=vpc)
        gpu = EfaGpuNodegroup.from_settings(self, "GpuNodes", settings, cluster=ray.cluster, vpc=vpc)
        plugins = GpuDevicePlugins.from_settings(self, "DevicePlugins", settings, cluster=ray.cluster, gpu_nodes=gpu)
        # After the system node group (found by its labels) and the CRDs of its chart version.
        kuberay = KubeRayOperator.from_settings(self, "KubeRay", settings, cluster=ray.cluster, logs=ray.logs)
        workload = RayWorkload.from_settings(
            self, "Workload", settings, cluster=ray.cluster, after=[kuberay.chart, plugins.nvidia, plugins.efa]
        )
        storage = CheckpointStorage.from_settings(self, "Checkpoints", settings, cluster=ray.cluster, workload=workload)
        RayTrainingJob.from_settings(
            self, "TrainingJob", settings, cluster=ray.cluster, gpu_nodes=gpu, workload=workload, storage=storage
        )
