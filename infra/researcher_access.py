"""Who may submit and follow training jobs without being cluster admins: EKS access entries mapped to a Kubernetes
group, and the RBAC objects that say what that group may do."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from ray_efa.infra.manifests import apply_objects
from ray_efa.k8s.admission_policy import researcher_admission
from ray_efa.k8s.researcher_rbac import CLUSTER_RULES, NAMESPACE_RULES, RESEARCHER_GROUP, researcher_rbac

# the group and its RBAC objects live in k8s.researcher_rbac (plain data, no CDK); named here as well, where they
# were first
__all__ = ["ResearcherAccess", "RESEARCHER_GROUP", "NAMESPACE_RULES", "CLUSTER_RULES", "researcher_rbac"]


class ResearcherAccess(Construct):
    """One EKS access entry per ARN in `principal_arns`, in Kubernetes group `group` with no EKS access policy, and
    the RBAC objects of researcher_rbac(namespace, group) and the group's admission policy
    (k8s.admission_policy.researcher_admission), applied after `after` (the namespace).

    No access policy: EKS's AmazonEKSEditPolicy would let a researcher delete the RayCluster, and no EKS policy
    grants create on RayJobs alone, so Kubernetes RBAC authorizes the group (EKS User Guide, "Create an access entry
    using Kubernetes groups", https://docs.aws.amazon.com/eks/latest/userguide/create-k8s-group-access-entry.html; and
    "Associate access policies with access entries": when no access policy fits, associate none and give the entry
    group names bound by RBAC, https://docs.aws.amazon.com/eks/latest/userguide/access-policies.html).

    Wiring attributes: `entries` (the access entries), `manifests` (the RBAC objects' KubernetesManifests).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        namespace: str,
        principal_arns: Sequence[str],
        group: str = RESEARCHER_GROUP,
        after: Sequence[IConstruct] = (),
    ) -> None:
        """
        :param cluster: the EKS cluster, created or imported.
        :param namespace: the workload namespace (RayWorkload's) where researchers submit and follow jobs.
        :param principal_arns: IAM role/user ARNs (not STS sessions) of the researchers; none of them an admin's.
        :param group: the Kubernetes group their access entries carry. @default "ray-efa-researchers"
        :param after: what the RBAC objects wait for (the namespace's manifest). @default - nothing
        """
        super().__init__(scope, construct_id)
        if len(set(principal_arns)) != len(principal_arns):
            raise ValueError(
                f"ResearcherAccess principal_arns must not repeat an ARN (EKS allows one access entry per "
                f"principal), got {list(principal_arns)}"
            )
        self.group = group
        self.entries: list[eks_l1.CfnAccessEntry] = []
        for arn in principal_arns:
            # One id per ARN (as ClusterAdminAccess): removing one ARN leaves the others' entries untouched.
            digest = hashlib.sha256(arn.encode()).hexdigest()[:12]
            self.entries.append(
                eks_l1.CfnAccessEntry(
                    self,
                    f"Researcher{digest}",
                    cluster_name=cluster.cluster_name,
                    principal_arn=arn,
                    kubernetes_groups=[group],
                    type="STANDARD",
                )
            )
        # RBAC lets the group create and patch ConfigMaps and NetworkPolicies and create and delete RayJobs; the
        # admission policy narrows that to immutable ConfigMaps and objects of their own (k8s.admission_policy).
        self.manifests: list[eks.KubernetesManifest] = apply_objects(
            self,
            cluster,
            [*researcher_rbac(namespace, group), *researcher_admission(namespace, group=group)],
            after=after,
        )
