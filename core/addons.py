"""The Helm charts the stack installs: where each comes from and the release it becomes.

infra/ installs them (versions from the settings); `ray-efa verify` finds their workloads by these names.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HelmRelease", "NVIDIA_DEVICE_PLUGIN", "EFA_DEVICE_PLUGIN", "KUBERAY_OPERATOR"]


@dataclass(frozen=True, kw_only=True, slots=True)
class HelmRelease:
    chart: str
    repository: str
    release: str
    """Helm release name; the charts name their DaemonSet or Deployment after it."""
    namespace: str


NVIDIA_DEVICE_PLUGIN = HelmRelease(
    chart="nvidia-device-plugin", repository="https://nvidia.github.io/k8s-device-plugin",
    release="nvidia-device-plugin", namespace="kube-system",
)
EFA_DEVICE_PLUGIN = HelmRelease(
    chart="aws-efa-k8s-device-plugin", repository="https://aws.github.io/eks-charts",
    release="aws-efa-k8s-device-plugin", namespace="kube-system",
)
KUBERAY_OPERATOR = HelmRelease(
    chart="kuberay-operator", repository="https://ray-project.github.io/kuberay-helm/",
    release="kuberay-operator", namespace="kuberay-system",
)
