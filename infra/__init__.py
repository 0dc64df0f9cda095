"""The AWS CDK constructs of ray-efa-stack, importable from here: `from ray_efa.infra import RayEksCluster`.

Each is documented where it is defined (props with their `@default`s, wiring attributes); docs/embedding.md lists them
with a line each.
"""

from ray_efa.infra.access import ClusterAdminAccess
from ray_efa.infra.app import build_stacks
from ray_efa.infra.chart_crds import HelmChartCrds
from ray_efa.infra.checkpoints import CheckpointStorage
from ray_efa.infra.cluster import RayEksCluster
from ray_efa.infra.cluster_stack import ClusterStack
from ray_efa.infra.device_plugins import GpuDevicePlugins
from ray_efa.infra.dra_drivers import GpuDraDrivers
from ray_efa.infra.gpu_nodegroup import EfaGpuNodegroup, launch_template_network_interfaces
from ray_efa.infra.gpu_stack import GpuStack
from ray_efa.infra.imported_cluster import import_cluster
from ray_efa.infra.kuberay import KubeRayOperator
from ray_efa.infra.log_groups import StackLogs
from ray_efa.infra.network import ClusterVpc, default_gpu_zone, gpu_subnet
from ray_efa.infra.researcher_access import ResearcherAccess
from ray_efa.infra.training_job import RayTrainingJob
from ray_efa.infra.vpc_cni import VpcCniAddon
from ray_efa.infra.workload import RayWorkload

__all__ = [
    "RayEksCluster",
    "EfaGpuNodegroup",
    "GpuDevicePlugins",
    "GpuDraDrivers",
    "KubeRayOperator",
    "RayWorkload",
    "CheckpointStorage",
    "RayTrainingJob",
    "import_cluster",
    "ClusterVpc",
    "StackLogs",
    "ClusterAdminAccess",
    "ResearcherAccess",
    "VpcCniAddon",
    "HelmChartCrds",
    "ClusterStack",
    "GpuStack",
    "build_stacks",
    "launch_template_network_interfaces",
    "default_gpu_zone",
    "gpu_subnet",
]
