"""The Amazon VPC CNI as an EKS managed add-on, with Kubernetes network policies enforced.

EKS installs the VPC CNI on every new cluster, but with network-policy enforcement off, so a NetworkPolicy is stored
and silently ignored. The managed add-on with `{"enableNetworkPolicy": "true"}` runs the network policy agent in every
aws-node pod (container aws-eks-nodeagent, flag --enable-network-policy=true) and the policy controller on the
control plane (EKS user guide, "Restrict Pod network traffic with Kubernetes network policies":
https://docs.aws.amazon.com/eks/latest/userguide/cni-network-policy-configure.html; VPC CNI 1.14 or later).

Version: left to EKS unless pinned. Without AddonVersion, EKS installs the latest add-on version it publishes for the
cluster's Kubernetes version (aws-cdk-lib aws_eks_v2.AddonProps.addon_version, "@default the latest version"; the
versions per Kubernetes version are `aws eks describe-addon-versions --addon-name vpc-cni --kubernetes-version 1.36`,
https://docs.aws.amazon.com/eks/latest/userguide/addon-compat.html), so it is compatible with the cluster by
construction, as the stack's eks-pod-identity-agent add-on (which aws_eks_v2 adds the same way) is.
"""

from __future__ import annotations

import re
from typing import cast

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from ray_efa.infra.nag import CNI_POLICY, acknowledge_managed_policies

__all__ = [
    "VpcCniAddon",
    "VPC_CNI_ADDON",
    "VPC_CNI_SERVICE_ACCOUNT",
    "NETWORK_POLICY_CONFIGURATION",
    "MIN_NETWORK_POLICY_VERSION",
]

VPC_CNI_ADDON = "vpc-cni"
VPC_CNI_SERVICE_ACCOUNT = "aws-node"
"""The service account of the add-on's DaemonSet (kube-system), which its Pod Identity association names."""
NETWORK_POLICY_CONFIGURATION = {"enableNetworkPolicy": "true"}
"""The add-on's configuration values: the schema types the flag as a string ("true"), not a boolean."""
MIN_NETWORK_POLICY_VERSION = (1, 14, 0)
"""The first VPC CNI that enforces network policies."""

_ADDON_VERSION = re.compile(r"^v(\d+)\.(\d+)\.(\d+)-eksbuild\.\d+$")


class VpcCniAddon(Construct):
    """The `vpc-cni` managed add-on of `cluster`, enforcing NetworkPolicies.

    It takes over the self-managed VPC CNI that EKS installed with the cluster (ResolveConflicts OVERWRITE: the
    fields EKS set itself are replaced by the add-on's, which is what the EKS guide does when it migrates a cluster
    to the managed add-on). The aws-node pods restart once, node by node; running pods keep their addresses.
    """

    def __init__(self, scope: Construct, construct_id: str, *, cluster: eks.ICluster, addon_version: str | None = None):
        """
        :param cluster: the EKS cluster.
        :param addon_version: a vpc-cni add-on version (v1.21.1-eksbuild.3), 1.14 or later; default: the latest EKS
            publishes for the cluster's Kubernetes version.
        """
        super().__init__(scope, construct_id)
        if addon_version is not None:
            match = _ADDON_VERSION.match(addon_version)
            if match is None:
                raise ValueError(f"vpc-cni addon_version must look like v1.21.1-eksbuild.3, got {addon_version!r}")
            if tuple(int(part) for part in match.groups()) < MIN_NETWORK_POLICY_VERSION:
                raise ValueError(
                    f"vpc-cni addon_version must be v1.14.0 or later (network policy enforcement), "
                    f"got {addon_version!r}"
                )
        self.role: iam.Role = iam.Role(
            self,
            "Role",
            description=f"The VPC CNI ({VPC_CNI_SERVICE_ACCOUNT}) of the cluster, by EKS Pod Identity",
            # sts:AssumeRole and sts:TagSession, what EKS Pod Identity asks of a role's trust policy. (jsii's stub of
            # PrincipalBase names a parameter differently from IPrincipal's, so pyright takes it for no IPrincipal.)
            assumed_by=cast(iam.IPrincipal, iam.ServicePrincipal("pods.eks.amazonaws.com").with_session_tags()),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(CNI_POLICY)],
        )
        acknowledge_managed_policies(
            self.role,
            (CNI_POLICY,),
            "The VPC CNI's own AWS managed policy, which AWS keeps "
            "in step with what aws-node calls; on this role alone, not on the nodes'.",
        )
        self.addon: eks.Addon = eks.Addon(
            self,
            "Addon",
            cluster=cluster,
            addon_name=VPC_CNI_ADDON,
            addon_version=addon_version,
            configuration_values=dict(NETWORK_POLICY_CONFIGURATION),
            # Deleting the stack (or this construct) must not take pod networking away from running nodes.
            preserve_on_delete=True,
        )
        # aws-cdk-lib 2.275's Addon has no resolve_conflicts or pod identity prop; the L1 properties are the same
        # CloudFormation fields.
        addon = cast(eks.CfnAddon, self.addon.node.default_child)
        addon.resolve_conflicts = "OVERWRITE"
        addon.pod_identity_associations = [
            eks.CfnAddon.PodIdentityAssociationProperty(
                role_arn=self.role.role_arn, service_account=VPC_CNI_SERVICE_ACCOUNT
            )
        ]
        if isinstance(cluster, eks.Cluster):  # the agent that serves the association's credentials on every node
            self.addon.node.add_dependency(cluster.eks_pod_identity_agent)
