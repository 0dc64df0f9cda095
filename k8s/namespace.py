"""The namespace of the RayCluster, the RayJobs and their code."""

from __future__ import annotations

from typing import Any

from ray_efa.k8s._private import api_object, labels

__all__ = ["workload_namespace"]


def workload_namespace(name: str) -> dict[str, Any]:
    """The v1 Namespace `name` (settings workload.namespace). Apply it before anything that lives in it."""
    return api_object(
        api_version="v1",
        kind="Namespace",
        name=name,
        namespace=None,
        object_labels=labels(name, "namespace"),
        body={},
    )
