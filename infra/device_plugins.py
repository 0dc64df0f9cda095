"""The NVIDIA and EFA device plugins: DaemonSets that advertise nvidia.com/gpu and vpc.amazonaws.com/efa.

Both fail silently when they do not schedule (DESIRED 0), so their placement is spelled out: a nodeSelector on the
GPU nodes' labels and a toleration of the GPU taint. The NVIDIA chart's default affinity also needs
nvidia.com/gpu.present=true, which EfaGpuNodegroup sets; the EFA chart has no affinity key and places itself
by its instance-type allowlist, which core.settings checks against the chosen type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ray_efa.core.addons import EFA_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN
from ray_efa.core.scheduling import DEFAULT_GPU_NODE_SELECTOR, DEFAULT_GPU_TAINTS, gpu_tolerations
from ray_efa.core.settings import Settings
from ray_efa.infra._private import CHART_VERSION, add_synth_check, check_node_selector, helm_chart
from ray_efa.infra._settings import choices, default
from ray_efa.infra.gpu_nodegroup import EfaGpuNodegroup, gpu_nodes_selector, gpu_nodes_taints, unselected_gpu_nodes

__all__ = ["GpuDevicePlugins", "device_plugin_values"]


def device_plugin_values(
    node_selector: Mapping[str, str] = DEFAULT_GPU_NODE_SELECTOR, taints: Sequence[str] = DEFAULT_GPU_TAINTS
) -> dict[str, Any]:
    """Values of both plugin charts: GPU nodes only, tolerating their taints (the EFA chart's defaults miss them).

    Helm ignores unknown keys silently; tests check these against each chart's values.yaml.
    """
    return {"nodeSelector": dict(node_selector), "tolerations": gpu_tolerations(list(taints))}


class GpuDevicePlugins(Construct):
    """Installs both device plugins at pinned chart versions, on the GPU nodes.

    Their node selector is the GPU node groups' (`gpu_nodes`): stated once, on EfaGpuNodegroup. Synth fails, naming
    `gpu_nodes`, when an EfaGpuNodegroup of the same cluster anywhere in the app carries labels the plugins do not
    select: the plugins would never run there, and the GPU nodes would advertise no GPU.

    Wiring attributes: `nvidia` and `efa`, the Helm releases (what the workload namespace waits for);
    `node_selector`, the labels they select.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        nvidia_version: str = default("nvidiaDevicePluginVersion"),
        efa_version: str = default("efaDevicePluginVersion"),
        gpu_nodes: EfaGpuNodegroup | Sequence[EfaGpuNodegroup] | None = None,
        node_selector: Mapping[str, str] | None = None,
        taints: Sequence[str] | None = None,
    ) -> None:
        """
        :param cluster: the EKS cluster, created or imported.
        :param nvidia_version: nvidia-device-plugin chart version. @default "0.20.0"
        :param efa_version: aws-efa-k8s-device-plugin chart version; its allowlist must hold your GPU instance type.
            @default "v0.5.30"
        :param gpu_nodes: the GPU node group(s) the plugins serve; their node_selector is the plugins'.
            @default - the EfaGpuNodegroups of `cluster` built so far in this app
        :param node_selector: labels of GPU nodes that no EfaGpuNodegroup of this app builds (your own, on an imported
            cluster); it must agree with `gpu_nodes`. @default - gpu_nodes', else {"role": "gpu-worker"}
        :param taints: the GPU nodes' taints, which the plugins tolerate. @default - gpu_nodes', else
            nvidia.com/gpu=true:NoSchedule
        """
        super().__init__(scope, construct_id)
        node_selector = gpu_nodes_selector("GpuDevicePlugins", self, cluster, gpu_nodes, node_selector)
        taints = gpu_nodes_taints("GpuDevicePlugins", gpu_nodes, taints)
        if not CHART_VERSION.match(nvidia_version):
            raise ValueError(
                f"GpuDevicePlugins nvidia_version must be a chart version like 0.20.0, got {nvidia_version!r}"
            )
        if efa_version not in choices("efaDevicePluginVersion"):
            raise ValueError(
                f"GpuDevicePlugins efa_version must be one of "
                f"{', '.join(choices('efaDevicePluginVersion'))}, got {efa_version!r}"
            )
        check_node_selector("GpuDevicePlugins node_selector", node_selector)
        self.node_selector: dict[str, str] = dict(node_selector)
        self.cluster: eks.ICluster = cluster
        values = device_plugin_values(node_selector, taints)
        self.nvidia: eks.HelmChart = helm_chart(self, "Nvidia", cluster, NVIDIA_DEVICE_PLUGIN, nvidia_version, values)
        self.efa: eks.HelmChart = helm_chart(self, "Efa", cluster, EFA_DEVICE_PLUGIN, efa_version, values)
        add_synth_check(self, lambda: unselected_gpu_nodes("GpuDevicePlugins", self, cluster, self.node_selector))

    @classmethod
    def from_settings(
        cls,
        scope: Construct,
        construct_id: str,
        settings: Settings,
        *,
        cluster: eks.ICluster,
        gpu_nodes: EfaGpuNodegroup | Sequence[EfaGpuNodegroup] | None = None,
    ) -> GpuDevicePlugins:
        """The plugins of the project's own app: the chart versions of the settings, on `gpu_nodes`, else on
        gpuNodeSelector."""
        addons = settings.addons
        return cls(
            scope,
            construct_id,
            cluster=cluster,
            nvidia_version=addons.nvidia_device_plugin_version,
            efa_version=addons.efa_device_plugin_version,
            gpu_nodes=gpu_nodes,
            node_selector=settings.nodes.gpu_node_selector if gpu_nodes is None else None,
            taints=settings.nodes.gpu_node_taints if gpu_nodes is None else None,
        )
