"""The NVIDIA and EFA DRA drivers (deviceAllocation dra): DaemonSets that publish GPUs and EFA interfaces as
ResourceSlices, for the workers' ResourceClaimTemplate (k8s.device_claims) to claim.

The EKS User Guide recommends them over the device plugins for managed node groups on Kubernetes 1.34 or later
(device-management, device-management-efa, device-management-nvidia-dra-device-plugin): they advertise device
attributes, among them the PCIe root that pairs each GPU with its EFA interfaces. Charts, repositories and the values
the guide installs them with are in core.addons. Never next to the device plugins of the same devices on one node (the
guide warns of silent oversubscription): a stack installs one or the other, and docs/deploy.md says to switch with the
GPU nodes at zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ray_efa.core.addons import EFA_DRA_DRIVER, NVIDIA_DRA_DRIVER
from ray_efa.core.scheduling import DEFAULT_GPU_NODE_SELECTOR, DEFAULT_GPU_TAINTS, gpu_tolerations
from ray_efa.core.settings import Settings, dra_kubernetes_problem
from ray_efa.infra._private import CHART_VERSION, add_synth_check, helm_chart
from ray_efa.infra._settings import choices, default
from ray_efa.infra.gpu_nodegroup import EfaGpuNodegroup, gpu_nodes_selector, gpu_nodes_taints, unselected_gpu_nodes

__all__ = ["GpuDraDrivers", "nvidia_dra_values", "efa_dra_values"]


def nvidia_dra_values(
    node_selector: Mapping[str, str] = DEFAULT_GPU_NODE_SELECTOR, taints: Sequence[str] = DEFAULT_GPU_TAINTS
) -> dict[str, Any]:
    """GPUs only (no ComputeDomains: that is Multi-Node NVLink, GB200), on the GPU nodes, as the EKS guide installs it.
    The chart's kubelet plugin already tolerates nvidia.com/gpu and needs nvidia.com/gpu.present=true, which
    EfaGpuNodegroup sets; the node selector keeps it to this stack's GPU nodes."""
    return {
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}},
        "gpuResourcesEnabledOverride": True,
        "kubeletPlugin": {"nodeSelector": dict(node_selector), "tolerations": gpu_tolerations(list(taints))},
    }


def efa_dra_values(
    node_selector: Mapping[str, str] = DEFAULT_GPU_NODE_SELECTOR, taints: Sequence[str] = DEFAULT_GPU_TAINTS
) -> dict[str, Any]:
    """DRANET on the GPU nodes, tolerating the GPU taint (the chart tolerates only CriticalAddonsOnly by itself)."""
    return {"nodeSelector": dict(node_selector), "tolerations": gpu_tolerations(list(taints))}


class GpuDraDrivers(Construct):
    """Installs the NVIDIA DRA driver for GPUs and the EFA DRA driver (DRANET) at pinned chart versions, on the GPU
    nodes: their node selector comes from `gpu_nodes`, as GpuDevicePlugins' does (and synth checks it the same way).
    Wiring attributes, as GpuDevicePlugins': `nvidia` and `efa`, the Helm releases; `node_selector`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        kubernetes_version: str = default("kubernetesVersion"),
        nvidia_version: str = default("nvidiaDraDriverVersion"),
        efa_version: str = default("efaDraDriverVersion"),
        gpu_nodes: EfaGpuNodegroup | Sequence[EfaGpuNodegroup] | None = None,
        node_selector: Mapping[str, str] | None = None,
        taints: Sequence[str] | None = None,
    ) -> None:
        """
        :param cluster: the EKS cluster, created or imported, on Kubernetes 1.34 or later.
        :param kubernetes_version: the cluster's version, to refuse one without DRA. @default "1.36"
        :param nvidia_version: dra-driver-nvidia-gpu chart version. @default "0.4.1"
        :param efa_version: aws-dranet chart version; its allowlist must hold your GPU type. @default "1.0.0"
        :param gpu_nodes: the GPU node group(s) the drivers serve; their node_selector is the drivers'.
            @default - the EfaGpuNodegroups of `cluster` built so far in this app
        :param node_selector: labels of GPU nodes that no EfaGpuNodegroup of this app builds; it must agree with
            `gpu_nodes`. @default - gpu_nodes', else {"role": "gpu-worker"}
        :param taints: the GPU nodes' taints, which the drivers tolerate. @default - gpu_nodes', else
            nvidia.com/gpu=true:NoSchedule
        """
        super().__init__(scope, construct_id)
        if problem := dra_kubernetes_problem(kubernetes_version):
            raise ValueError(
                f"GpuDraDrivers kubernetes_version {kubernetes_version!r}: the drivers {problem[problem.index('DRA') :]}"
            )
        if not CHART_VERSION.match(nvidia_version):
            raise ValueError(f"GpuDraDrivers nvidia_version must be a chart version like 0.4.1, got {nvidia_version!r}")
        if efa_version not in choices("efaDraDriverVersion"):
            raise ValueError(
                f"GpuDraDrivers efa_version must be one of {', '.join(choices('efaDraDriverVersion'))}, "
                f"got {efa_version!r}"
            )
        node_selector = gpu_nodes_selector("GpuDraDrivers", self, cluster, gpu_nodes, node_selector)
        taints = gpu_nodes_taints("GpuDraDrivers", gpu_nodes, taints)
        self.node_selector: dict[str, str] = node_selector
        self.cluster: eks.ICluster = cluster
        self.nvidia: eks.HelmChart = helm_chart(
            self,
            "Nvidia",
            cluster,
            NVIDIA_DRA_DRIVER,
            nvidia_version,
            nvidia_dra_values(node_selector, taints),
            create_namespace=True,
        )
        self.efa: eks.HelmChart = helm_chart(
            self, "Efa", cluster, EFA_DRA_DRIVER, efa_version, efa_dra_values(node_selector, taints)
        )
        add_synth_check(self, lambda: unselected_gpu_nodes("GpuDraDrivers", self, cluster, self.node_selector))

    @classmethod
    def from_settings(
        cls,
        scope: Construct,
        construct_id: str,
        settings: Settings,
        *,
        cluster: eks.ICluster,
        gpu_nodes: EfaGpuNodegroup | Sequence[EfaGpuNodegroup] | None = None,
    ) -> GpuDraDrivers:
        """The drivers of the project's own app: the chart versions of the settings, on `gpu_nodes`, else on
        gpuNodeSelector."""
        addons = settings.addons
        return cls(
            scope,
            construct_id,
            cluster=cluster,
            kubernetes_version=settings.cluster.kubernetes_version,
            nvidia_version=addons.nvidia_dra_driver_version,
            efa_version=addons.efa_dra_driver_version,
            gpu_nodes=gpu_nodes,
            node_selector=settings.nodes.gpu_node_selector if gpu_nodes is None else None,
            taints=settings.nodes.gpu_node_taints if gpu_nodes is None else None,
        )
