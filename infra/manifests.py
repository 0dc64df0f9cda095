"""Kubernetes objects applied one custom resource each, with their custom-resource payload checked at synth.

Each object gets its own KubernetesManifest (aws_eks_v2), so that a change to one object is a change to one
resource: `cdk diff` shows that object alone, and an update sends only its old and new text to the kubectl handler.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from ray_efa.k8s.code_bundle import ManifestError

__all__ = ["apply_objects", "check_payload", "CUSTOM_RESOURCE_PAYLOAD_BYTES"]

CUSTOM_RESOURCE_PAYLOAD_BYTES = 1_000_000
"""The payload limit that applies to a KubernetesManifest's request: Lambda's asynchronous one.

CloudFormation invokes a custom resource's Lambda function asynchronously, with an event that includes the callback
URL (https://docs.aws.amazon.com/lambda/latest/dg/services-cloudformation.html); aws_eks_v2's kubectl provider is
such a function (the provider framework's onEvent handler, which then invokes the kubectl handler synchronously,
where 6 MB applies). Lambda caps an asynchronous payload at 1 MB ("For asynchronous invocations, the maximum payload
size is 1 MB", https://docs.aws.amazon.com/lambda/latest/dg/API_Invoke.html; 256 KB before AWS raised it, which
InvokeAsync's page still states). An update's event carries ResourceProperties and OldResourceProperties, so the old
and the new manifest count together. 1,000,000 bytes: the decimal reading of "1 MB", the stricter one."""

_REQUEST_OVERHEAD_BYTES = 4 * 1024
"""The rest of the request: ResponseURL (a presigned S3 URL), ids, ARNs, ClusterName, PruneLabel."""


def check_payload(obj: dict[str, Any]) -> int:
    """Bytes of the update request that applying `obj` sends (old and new properties of the same size, plus the
    request's other fields); raise ManifestError naming the object when it exceeds CUSTOM_RESOURCE_PAYLOAD_BYTES.

    The manifest is a JSON string inside the JSON request, so its quotes are escaped: json.dumps twice counts that.
    Checking every version against half the budget keeps old + new under it on any later update.
    """
    manifest = json.dumps(json.dumps([obj], separators=(",", ":")))
    request = 2 * len(manifest.encode()) + _REQUEST_OVERHEAD_BYTES
    if request > CUSTOM_RESOURCE_PAYLOAD_BYTES:
        what = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"
        raise ManifestError(
            f"{what} would make a custom-resource update request of about {request:,} bytes (old and new manifest), "
            f"over the {CUSTOM_RESOURCE_PAYLOAD_BYTES:,}-byte limit of CloudFormation's asynchronous Lambda invocation "
            "of the kubectl provider; ship less code in it, or apply it with kubectl"
        )
    return request


def apply_objects(
    scope: Construct,
    cluster: eks.ICluster,
    objects: Sequence[dict[str, Any]],
    *,
    after: Sequence[IConstruct] = (),
) -> list[eks.KubernetesManifest]:
    """One KubernetesManifest per object, in the given order (each waits for the one before and for `after`).

    Construct ids are `<Kind>-<name>`, so an object keeps its logical id as long as it keeps its kind and name.
    """
    applied: list[eks.KubernetesManifest] = []
    for obj in objects:
        check_payload(obj)
        manifest = eks.KubernetesManifest(
            scope,
            f"{obj['kind']}-{obj['metadata']['name']}",
            cluster=cluster,
            manifest=[obj],
        )
        for dependency in [*after, *applied[-1:]]:
            manifest.node.add_dependency(dependency)
        applied.append(manifest)
    return applied
