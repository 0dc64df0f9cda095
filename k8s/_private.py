"""Helpers shared by the constructs of this package: the ApiObject wrapper and the labels every object carries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cdk8s
from constructs import Construct

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
    scope: Construct,
    id: str,
    *,
    api_version: str,
    kind: str,
    name: str,
    namespace: str | None,
    object_labels: Mapping[str, str],
    body: Mapping[str, Any],
) -> cdk8s.ApiObject:
    """A cdk8s ApiObject with metadata and the top-level fields in `body` (spec, data...), which come from typed
    builders' to_dict(); cdk8s's ApiObject props carry metadata only, so the body goes in as JSON patches."""
    obj = cdk8s.ApiObject(
        scope,
        id,
        api_version=api_version,
        kind=kind,
        metadata=cdk8s.ApiObjectMetadata(name=name, namespace=namespace, labels=dict(object_labels)),
    )
    for field, value in body.items():
        obj.add_json_patch(cdk8s.JsonPatch.add(f"/{field}", value))
    return obj
