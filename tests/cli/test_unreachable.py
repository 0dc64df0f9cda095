"""An unreachable or refusing cluster is one line naming the endpoint, exit 1, and JSON with --json (real CLI process,
real sockets: a closed port, a name under .invalid, a server that never answers, a local server answering 401/403)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "users": [{"name": "me", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "me"}}]}))
    return path


def _closed_port() -> int:
    with socket.socket() as s:  # bind, learn the port, close: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_efa(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ray_efa.cli", *argv], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def _check_one_line(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) <= 8, result.stderr
    assert all(w in result.stderr for w in words), result.stderr


@pytest.mark.parametrize("command", ["submit", "follow"])
def test_a_closed_port_is_one_line_and_json(tmp_path, command):
    port = _closed_port()
    config = _kubeconfig(tmp_path, f"http://127.0.0.1:{port}")
    argv = [command, *(["some-job"] if command == "follow" else ["-c", "storagePath=s3://b/runs"]),
            "--kubeconfig", str(config)]
    _check_one_line(_ray_efa(*argv), f"127.0.0.1:{port}", "cannot connect")
    result = _ray_efa(*argv, "--json")
    assert result.returncode == 1 and f"127.0.0.1:{port}" in json.loads(result.stdout)["error"]


def test_a_name_that_does_not_resolve(tmp_path):
    config = _kubeconfig(tmp_path, "https://no-such-cluster.invalid:443")
    _check_one_line(_ray_efa("follow", "j", "--kubeconfig", str(config)), "no-such-cluster.invalid")


class _Refusing(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        code = self.server.code  # type: ignore[attr-defined]
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps({"kind": "Status", "code": code, "message": "no"}).encode())

    def log_message(self, *_):
        pass


@pytest.mark.parametrize("code", [401, 403])
def test_a_refusing_api_server(tmp_path, code):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    server.code = code  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = _kubeconfig(tmp_path, f"http://127.0.0.1:{server.server_port}")
        _check_one_line(_ray_efa("follow", "j", "--kubeconfig", str(config)), str(code))
    finally:
        server.shutdown()
