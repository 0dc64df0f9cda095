"""The RBAC objects of the researchers' Kubernetes group: what they may do in the workload namespace (a Role and its
RoleBinding) and read across the cluster (a ClusterRole and its ClusterRoleBinding). Plain data, no CDK:
infra.researcher_access.ResearcherAccess applies them with the group's access entries, and the cluster tests apply
them to a real API server."""

from __future__ import annotations

from typing import Any

__all__ = ["RESEARCHER_GROUP", "NAMESPACE_RULES", "CLUSTER_RULES", "researcher_rbac"]

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
