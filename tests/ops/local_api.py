"""What the tests' fake Kubernetes APIs share: a threaded HTTP server on 127.0.0.1 for a real kubernetes client,
JSON (or plain-text) replies, the API server's Status body, and its equality-based labelSelector.

A subclass answers by overriding `get`, `post` or `patch`; a method it does not override answers 405, as the API
server does for a verb a resource does not take.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

Reply = tuple[int, "dict | str"]


def status(code: int, reason: str, message: str) -> dict:
    """The API server's Status object for a failed request."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def selected(item: dict, selector: str) -> bool:
    """Whether `item`'s labels match an equality-based labelSelector (`a=b,c==d`)."""
    labels = item.get("metadata", {}).get("labels", {}) or {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.strip().lstrip("="):
            return False
    return True


class LocalApi:
    """`with Subclass(...) as api:` serves the subclass's answers at `api.url` until the block ends."""

    def __init__(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                api.received(method, self.path)
                if method == "GET":
                    code, reply = api.get(url.path, parse_qs(url.query))
                elif method == "POST":
                    code, reply = api.post(url.path, body)
                else:
                    code, reply = api.patch(url.path, self.headers.get("Content-Type", ""), body)
                data = (reply if isinstance(reply, str) else json.dumps(reply)).encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain" if isinstance(reply, str) else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802 (http.server's naming)
                self._serve("GET")

            def do_POST(self):  # noqa: N802
                self._serve("POST")

            def do_PATCH(self):  # noqa: N802
                self._serve("PATCH")

            def log_message(self, format: str, *args: object) -> None:  # keep test output clean
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def received(self, method: str, raw_path: str) -> None:
        """Called with every request before it is answered (the path with its query string)."""

    def get(self, path: str, query: dict[str, list[str]]) -> Reply:
        return self._not_allowed("GET", path)

    def post(self, path: str, body) -> Reply:
        return self._not_allowed("POST", path)

    def patch(self, path: str, content_type: str, body) -> Reply:
        return self._not_allowed("PATCH", path)

    @staticmethod
    def _not_allowed(method: str, path: str) -> Reply:
        return 405, status(405, "MethodNotAllowed", f"this fake does not take {method} {path}")

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
