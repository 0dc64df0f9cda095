"""The Helm charts the stack installs: where each comes from and the release it becomes.

infra/ installs them (versions from the settings); `ray-efa verify` finds their workloads by these names.
"""

from __future__ import annotations

from dataclasses import dataclass

from ray_efa.core import catalog

__all__ = [
    "HelmRelease",
    "NVIDIA_DEVICE_PLUGIN",
    "EFA_DEVICE_PLUGIN",
    "KUBERAY_OPERATOR",
    "NVIDIA_DRA_DRIVER",
    "EFA_DRA_DRIVER",
    "GPU_DEVICE_CLASS",
    "EFA_DEVICE_CLASS",
    "DRA_MIN_KUBERNETES",
    "EFA_DRA_DRIVER_ALLOWLISTS",
    "NODE_MONITORING_AGENT_ADDON",
    "NODE_HEALTH_CONDITIONS",
]

NODE_MONITORING_AGENT_ADDON = "eks-node-monitoring-agent"
"""The EKS add-on that reports node health (infra.node_health installs it; not a Helm chart)."""

NODE_HEALTH_CONDITIONS = (
    "AcceleratedHardwareReady",
    "NetworkingReady",
    "KernelReady",
    "ContainerRuntimeReady",
    "StorageReady",
)
"""The node conditions the EKS node monitoring agent sets; False names a fault that EKS node auto repair acts on
(EKS User Guide, "Detect node health issues with the EKS node monitoring agent"). `ray-efa verify` reports them."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HelmRelease:
    chart: str
    repository: str
    release: str
    """Helm release name; the charts name their DaemonSet or Deployment after it."""
    namespace: str


NVIDIA_DEVICE_PLUGIN = HelmRelease(
    chart="nvidia-device-plugin",
    repository="https://nvidia.github.io/k8s-device-plugin",
    release="nvidia-device-plugin",
    namespace="kube-system",
)
EFA_DEVICE_PLUGIN = HelmRelease(
    chart="aws-efa-k8s-device-plugin",
    repository="https://aws.github.io/eks-charts",
    release="aws-efa-k8s-device-plugin",
    namespace="kube-system",
)
KUBERAY_OPERATOR = HelmRelease(
    chart="kuberay-operator",
    repository="https://ray-project.github.io/kuberay-helm/",
    release="kuberay-operator",
    namespace="kuberay-system",
)

# -- Dynamic Resource Allocation (deviceAllocation dra) --------------------------------------------------------------
# EKS User Guide, "Use the NVIDIA DRA driver or device plugin on Amazon EKS" and "Manage EFA devices on Amazon EKS"
# (awsdocs/amazon-eks-user-guide latest/ug/ml/device-management-nvidia-dra-device-plugin.adoc, device-management-efa.adoc):
# the NVIDIA DRA driver for GPUs from the Kubernetes SIG OCI registry (chart 0.4.1 there, DeviceClass gpu.nvidia.com,
# installed with resources.computeDomains.enabled=false and gpuResourcesEnabledOverride=true), and the EFA DRA driver
# (DRANET) from the EKS charts (chart aws-dranet 1.0.0, driver dra.net, DeviceClass efa.networking.k8s.aws). Neither
# may run on a node next to the device plugin of the same devices ("silent oversubscription").

NVIDIA_DRA_DRIVER = HelmRelease(
    chart="dra-driver-nvidia-gpu",
    repository="oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu",
    release="dra-driver-nvidia-gpu",
    namespace="nvidia",
)
EFA_DRA_DRIVER = HelmRelease(
    chart="aws-dranet",
    repository="https://aws.github.io/eks-charts",
    release="aws-dranet",
    namespace="kube-system",
)
GPU_DEVICE_CLASS = "gpu.nvidia.com"
EFA_DEVICE_CLASS = "efa.networking.k8s.aws"
DRA_MIN_KUBERNETES = (1, 34)
"""DRA (resource.k8s.io/v1) is GA from Kubernetes 1.34; both DRA drivers need it (EKS User Guide)."""

# The GPU types in aws-dranet's instance allowlist by chart version (values.yaml supportedInstanceLabels.values,
# aws/eks-charts stable/aws-dranet): like the EFA device plugin's, the DaemonSet schedules only on listed types. Each
# catalog row says which versions list it (core.catalog.InstanceType.allowlisted_by).
EFA_DRA_DRIVER_ALLOWLISTS: dict[str, frozenset[str]] = catalog.EFA_DRA_DRIVER_ALLOWLISTS
