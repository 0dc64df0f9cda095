"""ray-efa dashboard asks the API server before it port-forwards: its answer, or its error, is a named refusal."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest
from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration

from ray_efa.ops.dashboard import DashboardForward, DashboardTarget
from ray_efa.ops.submit import SubmitError


class _Broken(http.server.BaseHTTPRequestHandler):
    """A server that answers 500 to everything (a broken or overloaded API server)."""

    def do_POST(self) -> None:
        body = b'{"kind":"Status","message":"etcd is down","code":500}'
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # the base class names it format
        pass


@pytest.fixture
def broken_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Broken)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_an_access_review_the_server_cannot_answer_is_a_named_error(broken_server: str):
    # GIVEN an API server that fails every request
    api = ApiClient(Configuration(host=broken_server))
    target = DashboardTarget("ray", "train-efa-abc", {"metadata": {"name": "train-efa-abc-head"}})
    forward = DashboardForward(api, target, None)
    try:
        # WHEN the dashboard checks it may port-forward THEN the error names what it asked, no raw ApiException
        with pytest.raises(SubmitError, match=r"cannot ask the API server whether this identity may port-forward: "):
            forward.check()
    finally:
        forward.close()
