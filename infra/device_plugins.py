"""The NVIDIA and EFA device plugins: DaemonSets that advertise nvidia.com/gpu and vpc.amazonaws.com/efa.

Both fail silently when they do not schedule (DESIRED 0), so their placement is spelled out: a nodeSelector on the
GPU node label and a toleration of the GPU taint. The NVIDIA chart's default affinity also needs
nvidia.com/gpu.present=true, which the GPU node group sets; the EFA chart has no affinity key and places itself
by its instance-type allowlist, which core.settings checks against the chosen type.
"""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ray_efa.core.addons import EFA_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN
from ray_efa.core.scheduling import GPU_NODE_LABELS, gpu_tolerations, node_selector
from ray_efa.core.settings import Settings
from ray_efa.infra._private import helm_chart

__all__ = ["GpuDevicePlugins", "device_plugin_values"]


def device_plugin_values() -> dict:
    """Values of both plugin charts: GPU nodes only, tolerating the GPU taint (the EFA chart's defaults miss it).

    Helm ignores unknown keys silently; tests check these against each chart's values.yaml.
    """
    return {"nodeSelector": node_selector(GPU_NODE_LABELS), "tolerations": gpu_tolerations()}


class GpuDevicePlugins(Construct):
    """Installs both device plugins, pinned to the chart versions of the settings."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, cluster: eks.ICluster) -> None:
        super().__init__(scope, construct_id)
        addons = settings.addons
        self.nvidia = helm_chart(self, "Nvidia", cluster, NVIDIA_DEVICE_PLUGIN, addons.nvidia_device_plugin_version, device_plugin_values())
        self.efa = helm_chart(self, "Efa", cluster, EFA_DEVICE_PLUGIN, addons.efa_device_plugin_version, device_plugin_values())

