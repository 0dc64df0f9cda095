"""Who may use the Kubernetes API: EKS access entries for the people who run the cluster."""

from __future__ import annotations

import hashlib

from aws_cdk import Annotations
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

__all__ = ["ClusterAdminAccess", "CLUSTER_ADMIN_POLICY", "NO_ADMIN_WARNING"]

CLUSTER_ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
"""The EKS access policy that maps to Kubernetes' cluster-admin ClusterRole (EKS User Guide, access policies)."""

NO_ADMIN_WARNING = (
    "RayEksCluster admin_principal_arns (setting adminPrincipalArns) is empty: no human IAM principal will be able to "
    "reach the Kubernetes API of this cluster (aws_eks_v2 creates it with AuthenticationMode API, and its only admin "
    "is the kubectl provider; the CloudFormation execution role too with clusterCreatorAdmin). `kubectl`, `ray-efa verify` and the README's "
    "next steps would be refused. In a CDK app of your own, pass admin_principal_arns=[your role ARN] to "
    "RayEksCluster (or adminPrincipalArns in the Settings you give its from_settings): `-c` context does not reach "
    "your constructs. In the project's own app, deploy with -c adminPrincipalArns=$(ray-efa whoami), or add your role "
    "ARN to cdk.json's context."
)


class ClusterAdminAccess(Construct):
    """One access entry per ARN in `principal_arns`, with AmazonEKSClusterAdminPolicy at cluster scope.

    With an empty list the construct adds a synth-time warning instead: the cluster would deploy, and nobody could
    use it. The principals use their own credentials with `aws eks update-kubeconfig` (no --role-arn needed when
    the ARN is the identity your AWS CLI already uses).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, cluster: eks.ICluster, principal_arns: tuple[str, ...]
    ) -> None:
        super().__init__(scope, construct_id)
        self.entries: list[eks.AccessEntry] = []
        if not principal_arns:
            Annotations.of(self).add_warning_v2("ray-efa:no-admin-principal", NO_ADMIN_WARNING)
            return
        admin = eks.AccessPolicy.from_access_policy_name(
            CLUSTER_ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER
        )
        for arn in principal_arns:
            # One id per ARN, not per position: removing one ARN must leave the others' entries untouched (EKS allows
            # one entry per principal, so a replaced entry would collide with its own predecessor).
            digest = hashlib.sha256(arn.encode()).hexdigest()[:12]
            self.entries.append(
                eks.AccessEntry(
                    self,
                    f"Admin{digest}",
                    cluster=cluster,
                    principal=arn,
                    access_policies=[admin],
                    access_entry_type=eks.AccessEntryType.STANDARD,
                )
            )
