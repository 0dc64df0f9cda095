"""A read-only Kubernetes API on localhost that serves recorded JSON, for a real kubernetes client to talk to.

It answers what the API server answers for GETs: a collection (`/api/v1/nodes`, honouring an equality-based
labelSelector) or one object of it by name (`.../daemonsets/NAME`), else a 404 Status. Nothing else is emulated.
"""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

RECORDINGS = Path(__file__).parent / "fixtures" / "verify"


def load_recording(name: str = "healthy") -> dict[str, dict]:
    """Collection path -> recorded list object (a fresh copy, so a test may change it)."""
    return copy.deepcopy(json.loads((RECORDINGS / f"{name}.json").read_text()))


def _selected(item: dict, selector: str) -> bool:
    labels = item.get("metadata", {}).get("labels", {}) or {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.strip().lstrip("="):
            return False
    return True


def _not_found(path: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f"{path} not found", "reason": "NotFound", "code": 404}


class FakeKubeApi:
    """`with FakeKubeApi(recording) as api:` serves `recording` at `api.url`; `api.requests` lists the GET paths."""

    def __init__(self, recording: dict[str, dict]):
        self.recording = recording
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                url = urlsplit(self.path)
                server.requests.append(self.path)
                code, body = server.answer(url.path, parse_qs(url.query))
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_):  # keep test output clean
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, dict]:
        if path in self.recording:
            listing = dict(self.recording[path])
            selector = query.get("labelSelector", [""])[0]
            listing["items"] = [i for i in listing["items"] if _selected(i, selector)]
            return 200, listing
        collection, _, name = path.rpartition("/")
        for item in self.recording.get(collection, {}).get("items", []):
            if item["metadata"]["name"] == name:
                return 200, item
        return 404, _not_found(path)

    def __enter__(self) -> FakeKubeApi:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
