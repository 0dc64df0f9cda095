"""A control plane back to how it started: everything made since a snapshot, deleted, so that the next module meets the
plane as if it were fresh (tests/cluster/conftest.py shares one plane per test process across modules).

The snapshot is the uid of every object the API server lists, taken once the plane is up. `restore` lists every
resource the server serves (its discovery, so the kinds a module added with a CRD are found too), deletes each object
that is not in the snapshot (pods at once, as a kubelet confirms a forced delete; the rest in the background, as
`kubectl delete` does) and waits until none is left: namespaces, nodes, cluster roles, admission policies, CRDs and
the objects of the operator's and KWOK's kinds alike. A namespace is deleted once what the module made in it is gone,
and finalized at once (the namespace controller would take about 6 s more to look again and find it empty). Events and leases (records of what happened, which no test
reads across modules) and the objects the controllers make again in every namespace (its `default` service account,
its `kube-root-ca.crt`) are left alone.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

IGNORED_RESOURCES = frozenset({"events", "leases", "apiservices"})
"""Records of what happened (events, leases) and the API server's own registrations (apiservices, which follow the
CRDs): never deleted."""
REMADE_BY_THE_CONTROLLERS = frozenset({("serviceaccounts", "default"), ("configmaps", "kube-root-ca.crt")})
"""(resource, name) of the objects the controllers make in every namespace, again as soon as they are deleted."""
FINALIZER_PATIENCE_S = 20.0
"""How long an object may wait on its finalizers before they are removed (their controller may not run: a module
without the operator, a CRD's controller a module stood in for)."""


@dataclass(frozen=True)
class Resource:
    path: str
    """The collection's path across namespaces, e.g. /api/v1/pods or /apis/ray.io/v1/rayjobs."""
    prefix: str
    plural: str
    namespaced: bool

    def object_path(self, metadata: dict[str, Any]) -> str:
        namespace = f"/namespaces/{metadata['namespace']}" if self.namespaced else ""
        return f"{self.prefix}{namespace}/{self.plural}/{metadata['name']}"


def _call(api: ApiClient, path: str, method: str = "GET", body: Any = None, **headers: str) -> Any:
    """The JSON the API server answers at `path`, or None where it answers 404 (a kind or object already gone)."""
    try:
        # ApiClient.call_api is the client's own (every generated call goes through it); the stubs leave it out
        response = api.call_api(  # pyright: ignore[reportAttributeAccessIssue]
            path,
            method,
            header_params={"Accept": "application/json", **headers},
            body=body,
            _preload_content=False,
            _request_timeout=30,
        )
    except ApiException as error:
        if error.status in (404, 409):
            return None
        raise
    response = response[0] if isinstance(response, tuple) else response
    return json.loads(response.data)


def resources(api: ApiClient) -> list[Resource]:
    """Every resource the server serves at its group's preferred version that can be listed and deleted (not
    IGNORED_RESOURCES, no subresources)."""
    listings = [("/api/v1", _call(api, "/api/v1"))]
    for group in (_call(api, "/apis") or {}).get("groups", []):
        version = group["preferredVersion"]["groupVersion"]
        listings.append((f"/apis/{version}", _call(api, f"/apis/{version}")))
    found = []
    for prefix, listing in listings:
        for resource in (listing or {}).get("resources", []):
            name = resource["name"]
            if "/" in name or name in IGNORED_RESOURCES or not {"list", "delete"} <= set(resource.get("verbs", ())):
                continue
            found.append(Resource(f"{prefix}/{name}", prefix, name, resource["namespaced"]))
    return found


def _objects(api: ApiClient) -> list[tuple[Resource, dict[str, Any]]]:
    listed = []
    for resource in resources(api):
        for item in (_call(api, resource.path) or {}).get("items", []):
            listed.append((resource, item.get("metadata", {})))
    return listed


def snapshot(api: ApiClient) -> frozenset[str]:
    """The uid of every object the server lists now."""
    return frozenset(metadata["uid"] for _, metadata in _objects(api))


def leftovers(api: ApiClient, baseline: frozenset[str]) -> list[tuple[Resource, dict[str, Any]]]:
    """(resource, metadata) of each object made since `baseline` (but those the controllers make again)."""
    return [
        (resource, metadata)
        for resource, metadata in _objects(api)
        if metadata["uid"] not in baseline and (resource.plural, metadata["name"]) not in REMADE_BY_THE_CONTROLLERS
    ]


def _describe(left: list[tuple[Resource, dict[str, Any]]]) -> str:
    return ", ".join(sorted(r.object_path(m) for r, m in left)[:20])


NAMESPACE_REMNANTS = (
    "/api/v1/namespaces/{}/events",
    "/api/v1/namespaces/{}/serviceaccounts",
    "/api/v1/namespaces/{}/configmaps",
    "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
)
"""What is left in a namespace once the objects a test made there are gone: the controllers' own objects and the
records of what happened."""


def _finalize(api: ApiClient, namespace: str) -> None:
    """Ends a terminating namespace whose test-made objects are gone: deletes what is left in it (nothing is created in
    a terminating namespace), then finalizes it, as the namespace controller would after a wait of seconds."""
    for collection in NAMESPACE_REMNANTS:
        _call(api, collection.format(namespace), "DELETE", {})
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}, "spec": {"finalizers": []}}
    _call(api, f"/api/v1/namespaces/{namespace}/finalize", "PUT", body)


def restore(api: ApiClient, baseline: frozenset[str], *, timeout_s: float = 180) -> None:
    """Deletes every object made since `baseline` and waits until they are gone; raises RuntimeError naming what is
    still there after timeout_s."""
    started = time.monotonic()
    first_seen: dict[str, float] = {}
    while left := leftovers(api, baseline):
        now = time.monotonic()
        if now - started > timeout_s:
            raise RuntimeError(f"the control plane still holds, {timeout_s:.0f} s after a module: {_describe(left)}")
        emptying = {m.get("namespace") for r, m in left if r.namespaced}
        for resource, metadata in left:
            path = resource.object_path(metadata)
            if resource.plural == "namespaces" and metadata["name"] in emptying:
                continue  # a namespace goes once what a test made in it is gone
            if resource.plural == "namespaces":
                _call(api, path, "DELETE", {})
                _finalize(api, metadata["name"])
            elif not metadata.get("deletionTimestamp"):
                grace = 0 if resource.plural == "pods" else None
                body = {"propagationPolicy": "Background", **({"gracePeriodSeconds": grace} if grace == 0 else {})}
                _call(api, path, "DELETE", body)
            elif metadata.get("finalizers") and now - first_seen.setdefault(path, now) > FINALIZER_PATIENCE_S:
                patch = {"metadata": {"finalizers": None}}
                _call(api, path, "PATCH", patch, **{"Content-Type": "application/merge-patch+json"})
        time.sleep(0.5)
