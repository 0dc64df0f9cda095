"""Who may submit and follow training jobs without being cluster admins: EKS access entries mapped to a Kubernetes
group, and the RBAC objects that say what that group may do."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from ray_efa.infra.manifests import apply_objects
from ray_efa.k8s.admission_policy import researcher_admission

__all__ = ["ResearcherAccess", "RESEARCHER_GROUP", "researcher_rbac"]

RESEARCHER_GROUP = "ray-efa-researchers"
"""The Kubernetes group of the researchers' access entries, the subject of their RoleBinding and ClusterRoleBinding."""

_READ = ["get", "list", "watch"]

NAMESPACE_RULES: tuple[dict[str, Any], ...] = (
    # ray-efa submit: create the job's ConfigMaps (code, settings), its NetworkPolicy and the RayJob, then make the
    # RayJob their owner (a JSON patch of ownerReferences: ops/submit.own_by_job); read `<job>-settings` (--deployed);
    # list the RayClusters that hold the GPU nodes (gpu_holders).
    # ray-efa cancel: delete a RayJob (its RayCluster and what else it owns go with it, deleted by the garbage
    # collector, not by the researcher); the admission policy admits the delete of their own RayJobs alone.
    {"apiGroups": ["ray.io"], "resources": ["rayjobs"], "verbs": ["create", "delete", *_READ]},
    {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": _READ},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "patch", *_READ]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["create", "patch", *_READ]},
    # ray-efa follow / submit / verify: the submitter's and the Ray pods' status, init containers and logs.
    {"apiGroups": [""], "resources": ["pods", "events"], "verbs": _READ},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": _READ},
)
"""What a researcher may do in the workload namespace. Nothing deletes, updates or patches a RayCluster, updates or
patches a RayJob, or deletes anything but a RayJob (of their own: k8s.admission_policy); nothing creates pods, execs
into them or port-forwards to them, and Secrets are not named (RBAC grants only what a rule names). Not
pods/portforward: a port-forward reaches any pod of the namespace past its NetworkPolicy, and neither RBAC nor an
admission policy can limit it to one's own pods (docs/security.md, "Researcher access")."""

CLUSTER_RULES: tuple[dict[str, Any], ...] = (
    # ray-efa verify: the GPU nodes and their allocatable devices (ResourceSlices with deviceAllocation dra), the device
    # plugins' and the VPC CNI's DaemonSets and the operator's Deployment (kube-system and the operator's namespace).
    {"apiGroups": [""], "resources": ["nodes"], "verbs": _READ},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": _READ},
    {"apiGroups": ["apps"], "resources": ["daemonsets", "deployments"], "verbs": _READ},
)
"""What a researcher may read across the cluster: read-only, and no Secrets, ConfigMaps or pods outside the
workload namespace."""


def researcher_rbac(namespace: str, group: str = RESEARCHER_GROUP) -> list[dict[str, Any]]:
    """The Role and RoleBinding in `namespace` and the ClusterRole and ClusterRoleBinding (named after the namespace,
    so that two workload namespaces have two) that give `group` NAMESPACE_RULES and CLUSTER_RULES."""
    name, cluster_name = "ray-efa-researcher", f"ray-efa-researcher-{namespace}"
    subjects = [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": group}]
    labels = {"app.kubernetes.io/part-of": "ray-efa-stack", "app.kubernetes.io/component": "researcher-access"}
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {
            "apiVersion": rbac,
            "kind": "Role",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "rules": [dict(rule) for rule in NAMESPACE_RULES],
        },
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": subjects,
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {"name": cluster_name, "labels": labels},
            "rules": [dict(rule) for rule in CLUSTER_RULES],
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": cluster_name, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_name},
            "subjects": subjects,
        },
    ]


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
