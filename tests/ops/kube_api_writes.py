"""A Kubernetes API on localhost that accepts creates and answers reads from recorded responses, for a real
kubernetes client (ray-efa submit) to talk to.

- POST to a collection stores the object (as the API server would, with a uid and creationTimestamp) and answers 201
  with it; 409 if the name exists, 404 for a namespace the recording does not have.
- GET of an object answers the stored object; with statuses recorded for it ("statuses", by path), each GET adds
  the next one as its status (the last one repeats): a RayJob as KubeRay moves it along; else 404.
- GET of a collection lists the stored and recorded items (equality labelSelector honoured); of a resource across
  namespaces (/api/v1/configmaps), the items of that resource in every namespace.
- GET of .../pods/NAME/log answers the recorded text ("logs"), whole, also with follow=true.
- PATCH with a JSON patch of "add" operations under /metadata applies them (ray-efa submit adds ownerReferences).
Nothing else is emulated. `api.created` lists the created objects, `api.patched` every (path, patch),
`api.requests` every (method, path).
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from pathlib import Path

from tests.ops.local_api import LocalApi, Reply, selected, status

RECORDINGS = Path(__file__).parent / "fixtures" / "submit"


def load(name: str) -> dict:
    return json.loads((RECORDINGS / name).read_text())


class KubeApiWithWrites(LocalApi):
    def __init__(self, *, namespaces: tuple[str, ...] = ("ray",), statuses: dict[str, list[dict]] | None = None,
                 collections: dict[str, list[dict]] | None = None, logs: dict[str, str] | None = None,
                 refuse_patches: int | None = None):
        super().__init__()
        self.namespaces = namespaces
        self.statuses = {path: list(responses) for path, responses in (statuses or {}).items()}
        self.collections = {path: list(items) for path, items in (collections or {}).items()}
        self.logs = logs or {}
        self.created: list[dict] = []
        self.patched: list[tuple[str, list]] = []
        self.refuse_patches = refuse_patches  # an HTTP code every PATCH gets (403: RBAC without patch)
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def received(self, method: str, raw_path: str) -> None:
        self.requests.append((method, raw_path.partition("?")[0]))

    def _namespace_of(self, path: str) -> str | None:
        parts = path.split("/")
        return parts[parts.index("namespaces") + 1] if "namespaces" in parts else None

    def post(self, path: str, body: dict) -> Reply:
        with self._lock:
            namespace = self._namespace_of(path)
            if namespace not in self.namespaces:
                return 404, status(404, "NotFound", f'namespaces "{namespace}" not found')
            items = self.collections.setdefault(path, [])
            if any(i["metadata"]["name"] == body["metadata"]["name"] for i in items):
                return 409, status(409, "AlreadyExists", f'"{body["metadata"]["name"]}" already exists')
            stored = copy.deepcopy(body)
            stored["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp="2026-12-01T15:00:00Z")
            items.append(stored)
            self.created.append(copy.deepcopy(body))
            return 201, stored

    def patch(self, path: str, content_type: str, body) -> Reply:
        """A JSON patch (RFC 6902) of "add" operations on an object's metadata; anything else is 415/422."""
        with self._lock:
            if self.refuse_patches:
                return self.refuse_patches, status(self.refuse_patches, "Forbidden", f"cannot patch {path}")
            if not content_type.startswith("application/json-patch+json") or not isinstance(body, list):
                return 415, status(415, "UnsupportedMediaType", f"this fake takes JSON patches only, got {content_type}")
            collection, _, name = path.rpartition("/")
            for item in self.collections.get(collection, []):
                if item["metadata"]["name"] == name:
                    for op in body:
                        key = op["path"].removeprefix("/metadata/")
                        if op["op"] != "add" or "/" in key or not op["path"].startswith("/metadata/"):
                            return 422, status(422, "Invalid", f"unsupported patch operation {op}")
                        item["metadata"][key] = copy.deepcopy(op["value"])
                    self.patched.append((path, copy.deepcopy(body)))
                    return 200, copy.deepcopy(item)
            return 404, status(404, "NotFound", f"{path} not found")

    def stored(self, path: str) -> dict | None:
        """The object at `path` as the API now holds it (after creates and patches)."""
        collection, _, name = path.rpartition("/")
        return next((copy.deepcopy(i) for i in self.collections.get(collection, []) if i["metadata"]["name"] == name), None)

    def get(self, path: str, query: dict[str, list[str]]) -> Reply:
        with self._lock:
            if path.endswith("/log"):
                pod = path.split("/")[-2]
                return (200, self.logs[pod]) if pod in self.logs else (404, status(404, "NotFound", f"pod {pod}"))
            selector = query.get("labelSelector", [""])[0]
            across = [items for collection, items in self.collections.items()
                      if "/namespaces/" in collection and collection.replace(
                          f"/namespaces/{self._namespace_of(collection)}", "") == path]
            if path in self.collections or across:
                items = self.collections.get(path) or [i for items in across for i in items]
                return 200, {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "4711"},
                             "items": [copy.deepcopy(i) for i in items if selected(i, selector)]}
            collection, _, name = path.rpartition("/")
            for item in self.collections.get(collection, []):
                if item["metadata"]["name"] == name:
                    item = copy.deepcopy(item)
                    if path in self.statuses:
                        statuses = self.statuses[path]
                        item["status"] = statuses.pop(0) if len(statuses) > 1 else statuses[0]
                    return 200, item
            resource = collection.rpartition("/")[2]
            parts = path.strip("/").split("/")
            if len(parts) == (3 if parts[0] == "api" else 4):  # /api/v1/configmaps: a resource across namespaces
                return 200, {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "4711"}, "items": []}
            # the API server's own 404: `configmaps "x" not found`, with the name and the resource in details
            return 404, {**status(404, "NotFound", f'{resource} "{name}" not found'),
                         "details": {"name": name, "kind": resource}}

    def __enter__(self) -> KubeApiWithWrites:
        return super().__enter__()
