"""A read-only Kubernetes API on localhost that serves recorded JSON, for a real kubernetes client to talk to.

It answers what the API server answers for GETs: a collection (`/api/v1/nodes`, honouring an equality-based
labelSelector) or one object of it by name (`.../daemonsets/NAME`), else a 404 Status. Nothing else is emulated.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from tests.ops.local_api import LocalApi, Reply, selected, status

RECORDINGS = Path(__file__).parent / "fixtures" / "verify"


def load_recording(name: str = "healthy") -> dict[str, dict]:
    """Collection path -> recorded list object (a fresh copy, so a test may change it)."""
    return copy.deepcopy(json.loads((RECORDINGS / f"{name}.json").read_text()))


class FakeKubeApi(LocalApi):
    """`with FakeKubeApi(recording) as api:` serves `recording` at `api.url`; `api.requests` lists the GET paths."""

    def __init__(self, recording: dict[str, dict]):
        super().__init__()
        self.recording = recording
        self.requests: list[str] = []

    def received(self, method: str, raw_path: str) -> None:
        self.requests.append(raw_path)

    def get(self, path: str, query: dict[str, list[str]]) -> Reply:
        if path in self.recording:
            listing = dict(self.recording[path])
            selector = query.get("labelSelector", [""])[0]
            listing["items"] = [i for i in listing["items"] if selected(i, selector)]
            return 200, listing
        collection, _, name = path.rpartition("/")
        for item in self.recording.get(collection, {}).get("items", []):
            if item["metadata"]["name"] == name:
                return 200, item
        return 404, status(404, "NotFound", f"{path} not found")

    def __enter__(self) -> FakeKubeApi:
        return super().__enter__()
