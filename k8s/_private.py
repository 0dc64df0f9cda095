"""Helpers shared by the object builders of this package: the object every builder returns, and the labels every
object carries. Plain data, no cdk8s: the charts (k8s.workload) wrap these objects, and nothing else does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PART_OF = "ray-efa-stack"


def labels(name: str, component: str) -> dict[str, str]:
    """Recommended app.kubernetes.io labels: what the object is, what it belongs to and what made it."""
    return {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": "cdk8s",
    }


def api_object(
    *,
    api_version: str,
    kind: str,
    name: str,
    namespace: str | None,
    object_labels: Mapping[str, str],
    body: Mapping[str, Any],
) -> dict[str, Any]:
    """A Kubernetes object as the API server takes it: metadata, then the top-level fields in `body` (spec, data...),
    which come from typed builders' to_dict().

    Keys in the order cdk8s writes them (ApiObject.toJson sorts the keys of apiVersion, kind and metadata, then adds
    the body as JSON patches, in order), so that an object applied as it is here (infra/, `ray-efa submit`) is the
    text a chart of k8s.workload synthesizes for it."""
    metadata: dict[str, Any] = {"labels": dict(sorted(object_labels.items())), "name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, **body}
