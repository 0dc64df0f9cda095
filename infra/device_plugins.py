"""The NVIDIA and EFA device plugins: DaemonSets that advertise nvidia.com/gpu and vpc.amazonaws.com/efa.

Both fail silently when they do not schedule (DESIRED 0), so their placement is spelled out: a nodeSelector on the
GPU nodes' labels and a toleration of the GPU taint. The NVIDIA chart's default affinity also needs
nvidia.com/gpu.present=true, which EfaGpuNodegroup sets; the EFA chart has no affinity key and places itself
by its instance-type allowlist, which core.settings checks against the chosen type.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ray_efa.core.addons import EFA_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN
from ray_efa.core.scheduling import DEFAULT_GPU_NODE_SELECTOR, gpu_tolerations
from ray_efa.core.settings import Settings
from ray_efa.infra._private import check_node_selector, helm_chart
from ray_efa.infra._settings import choices, default

__all__ = ["GpuDevicePlugins", "device_plugin_values"]

_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")


def device_plugin_values(node_selector: Mapping[str, str] = DEFAULT_GPU_NODE_SELECTOR) -> dict[str, Any]:
    """Values of both plugin charts: GPU nodes only, tolerating the GPU taint (the EFA chart's defaults miss it).

    Helm ignores unknown keys silently; tests check these against each chart's values.yaml.
    """
    return {"nodeSelector": dict(node_selector), "tolerations": gpu_tolerations()}


class GpuDevicePlugins(Construct):
    """Installs both device plugins at pinned chart versions, on the GPU nodes.

    Wiring attributes: `nvidia` and `efa`, the Helm releases (what the workload namespace waits for).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, cluster: eks.ICluster,
        nvidia_version: str = default("nvidiaDevicePluginVersion"), efa_version: str = default("efaDevicePluginVersion"),
        node_selector: Mapping[str, str] = default("gpuNodeSelector"),
    ) -> None:
        """
        :param cluster: the EKS cluster, created or imported.
        :param nvidia_version: nvidia-device-plugin chart version. @default "0.20.0"
        :param efa_version: aws-efa-k8s-device-plugin chart version; its allowlist must hold your GPU instance type.
            @default "v0.5.30"
        :param node_selector: labels of the GPU nodes (EfaGpuNodegroup's node_selector). @default {"role": "gpu-worker"}
        """
        super().__init__(scope, construct_id)
        if not _SEMVER.match(nvidia_version):
            raise ValueError(f"GpuDevicePlugins nvidia_version must be a chart version like 0.20.0, got {nvidia_version!r}")
        if efa_version not in choices("efaDevicePluginVersion"):
            raise ValueError(f"GpuDevicePlugins efa_version must be one of "
                             f"{', '.join(choices('efaDevicePluginVersion'))}, got {efa_version!r}")
        check_node_selector("GpuDevicePlugins node_selector", node_selector)
        values = device_plugin_values(node_selector)
        self.nvidia: eks.HelmChart = helm_chart(self, "Nvidia", cluster, NVIDIA_DEVICE_PLUGIN, nvidia_version, values)
        self.efa: eks.HelmChart = helm_chart(self, "Efa", cluster, EFA_DEVICE_PLUGIN, efa_version, values)

    @classmethod
    def from_settings(cls, scope: Construct, construct_id: str, settings: Settings, *, cluster: eks.ICluster) -> GpuDevicePlugins:
        """The plugins of the project's own app: the chart versions of the settings, on gpuNodeSelector."""
        addons = settings.addons
        return cls(scope, construct_id, cluster=cluster, nvidia_version=addons.nvidia_device_plugin_version,
                   efa_version=addons.efa_device_plugin_version, node_selector=settings.nodes.gpu_node_selector)
