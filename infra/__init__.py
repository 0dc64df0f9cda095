"""The AWS CDK constructs of ray-efa-stack, importable from here: `from ray_efa.infra import RayEksCluster`.

Each is documented where it is defined (props with their `@default`s, wiring attributes); docs/embedding.md lists them
with a line each.

The constructs load aws_cdk (jsii's node process) on first use, so a module of the package that needs no CDK stays
cheap to import: ops.deploy_check reads the job guard's rules from infra.job_guard_handler (standard library only, the
guard's Lambda asset) without starting jsii.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what __getattr__ below imports on first use, visible to type checkers and editors
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

_LAZY = {
    "ClusterAdminAccess": "ray_efa.infra.access",
    "build_stacks": "ray_efa.infra.app",
    "HelmChartCrds": "ray_efa.infra.chart_crds",
    "CheckpointStorage": "ray_efa.infra.checkpoints",
    "RayEksCluster": "ray_efa.infra.cluster",
    "ClusterStack": "ray_efa.infra.cluster_stack",
    "GpuDevicePlugins": "ray_efa.infra.device_plugins",
    "GpuDraDrivers": "ray_efa.infra.dra_drivers",
    "EfaGpuNodegroup": "ray_efa.infra.gpu_nodegroup",
    "launch_template_network_interfaces": "ray_efa.infra.gpu_nodegroup",
    "GpuStack": "ray_efa.infra.gpu_stack",
    "import_cluster": "ray_efa.infra.imported_cluster",
    "KubeRayOperator": "ray_efa.infra.kuberay",
    "StackLogs": "ray_efa.infra.log_groups",
    "ClusterVpc": "ray_efa.infra.network",
    "default_gpu_zone": "ray_efa.infra.network",
    "gpu_subnet": "ray_efa.infra.network",
    "ResearcherAccess": "ray_efa.infra.researcher_access",
    "RayTrainingJob": "ray_efa.infra.training_job",
    "VpcCniAddon": "ray_efa.infra.vpc_cni",
    "RayWorkload": "ray_efa.infra.workload",
}
"""Each exported name -> the module that defines it."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ray_efa.infra' has no attribute {name!r}")
