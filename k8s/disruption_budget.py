"""The PodDisruptionBudget of a RayJob's Ray pods: no voluntary eviction while the job's Ray cluster runs.

A distributed job needs every pod: one evicted worker (a node drained by a node group update, `kubectl drain`)
stops the collective of all of them. With maxUnavailable 0 an eviction is refused, so a managed node group update
(ForceUpdateEnabled false: infra.gpu_nodegroup) fails with PodEvictionFailure instead of terminating the node under
the job; the job guard (infra.job_guard) refuses such a deploy before that. KubeRay deletes the job's Ray cluster
after it ends (jobTtlSecondsAfterFinished), and then the budget selects no pod and blocks nothing.
"""

from __future__ import annotations

from typing import Any

from ray_efa.k8s._private import labels
from ray_efa.k8s.security import RAY_NODE_COMPONENT, pod_labels

__all__ = ["ray_pods_disruption_budget", "disruption_budget_name"]


def disruption_budget_name(owner: str) -> str:
    """The PodDisruptionBudget of the Ray pods of `owner` (a RayJob)."""
    return f"{owner}-ray-pods"


def ray_pods_disruption_budget(owner: str, namespace: str) -> dict[str, Any]:
    """The policy/v1 PodDisruptionBudget (as the API server takes it) of the head and workers of RayJob `owner`."""
    name = disruption_budget_name(owner)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace, "labels": labels(name, "disruption-budget")},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": pod_labels(owner, RAY_NODE_COMPONENT)}},
    }
