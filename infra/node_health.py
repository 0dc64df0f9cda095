"""GPU node health: EKS node auto repair on a managed node group, and the EKS node monitoring agent add-on that
reports the faults it repairs.

The agent (add-on `eks-node-monitoring-agent`, a DaemonSet on every node) reads the kernel log, NVIDIA's XID errors
and DCGM, the network interfaces, the container runtime and the disks, and sets node conditions:
AcceleratedHardwareReady, NetworkingReady, KernelReady, ContainerRuntimeReady and StorageReady (EKS User Guide,
"Detect node health issues with the EKS node monitoring agent",
https://docs.aws.amazon.com/eks/latest/userguide/node-health-nma.html). With node auto repair on
(AWS::EKS::Nodegroup NodeRepairConfig Enabled; "Update requires: No interruption"), EKS reboots or replaces a node
whose condition stays false: AcceleratedHardwareReady after 10 minutes, the others and Ready after 30 (EKS User
Guide, "Automatically repair nodes in EKS clusters", https://docs.aws.amazon.com/eks/latest/userguide/node-repair.html).
EKS holds repairs back in a node group where more than 20 % of more than five nodes are unhealthy (the same page).
"""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ray_efa.core.addons import NODE_MONITORING_AGENT_ADDON

__all__ = ["NodeMonitoringAgent", "enable_node_repair"]


def enable_node_repair(nodegroup: eks.Nodegroup, enabled: bool) -> None:
    """Set the node group's NodeRepairConfig (the L1 property: the same field aws-cdk-lib's
    `enable_node_auto_repair` writes); `enabled` False writes Enabled false, which EKS takes as off, its default."""
    cfn = nodegroup.node.default_child
    assert isinstance(cfn, eks.CfnNodegroup)
    cfn.node_repair_config = eks.CfnNodegroup.NodeRepairConfigProperty(enabled=enabled)


class NodeMonitoringAgent(Construct):
    """The `eks-node-monitoring-agent` managed add-on of `cluster`: node conditions for GPU (XID, DCGM), network,
    kernel, container runtime and storage faults, which node auto repair acts on (see the module's docstring).

    Wiring attribute: `addon` (the eks.Addon).
    """

    def __init__(self, scope: Construct, construct_id: str, *, cluster: eks.ICluster, addon_version: str | None = None):
        """
        :param cluster: the EKS cluster.
        :param addon_version: an add-on version (v1.4.0-eksbuild.1). @default - the latest EKS publishes for the
            cluster's Kubernetes version
        """
        super().__init__(scope, construct_id)
        self.addon: eks.Addon = eks.Addon(
            self,
            "Addon",
            cluster=cluster,
            addon_name=NODE_MONITORING_AGENT_ADDON,
            addon_version=addon_version,
            # the nodes keep their health reports while the stack is changed or deleted
            preserve_on_delete=True,
        )
