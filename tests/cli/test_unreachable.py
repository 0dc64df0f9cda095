"""An unreachable or refusing cluster or AWS is one line naming the endpoint, exit 1, and JSON with --json; a bad
kubeconfig is exit 2. Real CLI processes against real sockets: a closed port, a name under .invalid, a server that
accepts and never answers; for AWS also a TLS server whose self-signed certificate nobody trusts and a local server
answering 403 with EC2's error XML (AWS cannot run here). The Kubernetes API server's own refusals (401, 403, an
untrusted serving certificate) are the real API server's: tests/cluster/test_refusing_api.py."""

from __future__ import annotations

import datetime
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBE_COMMANDS = ["submit", "follow", "verify", "jobs", "logs", "cancel", "dashboard"]
KUBE_FAILURES = ["refused", "dns", "timeout"]
SILENT_SERVER_TIMEOUT = "0.25"
"""--request-timeout for the server that never answers: the wait always runs out (twice for the Kubernetes API: the
client retries a read once), so a short one proves the same as the default, in a fraction of the time."""


def _request_timeout(word: str) -> str:
    """--request-timeout for an endpoint whose error line holds `word`: short where it must run out, else 1 s, long
    enough for a TLS handshake or an answer from the local server on a busy machine."""
    return SILENT_SERVER_TIMEOUT if word == "timed out" else "1"


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "k", "cluster": {"server": server}}],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "me"}}],
            }
        )
    )
    return path


def _closed_port() -> int:
    with socket.socket() as s:  # bind, learn the port, close: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Refusing(BaseHTTPRequestHandler):
    """Answers every request with server.code and EC2's error XML."""

    def _answer(self) -> None:
        code = self.server.code  # type: ignore[attr-defined]
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        kind, body = (
            "text/xml",
            (
                '<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>UnauthorizedOperation</Code>'
                "<Message>no</Message></Error></Errors><RequestID>r</RequestID></Response>"
            ),
        )
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = _answer  # noqa: N815

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        pass


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that no CA signed, and its key."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.fixture
def endpoint(request, tmp_path) -> Iterator[tuple[str, str]]:
    """(URL, word its error line must hold) for the failure class request.param, served for the test's length."""
    failure = request.param
    if failure == "refused":
        yield f"http://127.0.0.1:{_closed_port()}", "cannot connect"
        return
    if failure == "dns":
        yield "https://no-such-cluster.invalid:443", "cannot resolve"
        return
    if failure == "timeout":
        with socket.socket() as silent:  # the kernel completes the connection; nobody ever reads or answers
            silent.bind(("127.0.0.1", 0))
            silent.listen(16)
            yield f"http://127.0.0.1:{silent.getsockname()[1]}", "timed out"
        return
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    server.code = int(failure) if failure.isdigit() else 200  # type: ignore[attr-defined]
    scheme, word = "http", failure
    if failure == "tls":
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*_self_signed(tmp_path))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme, word = "https", "TLS error"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"{scheme}://127.0.0.1:{server.server_port}", word
    finally:
        server.shutdown()
        server.server_close()


def _ray_efa(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ray_efa.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def _check_one_line(result: subprocess.CompletedProcess, *words: str, code: int = 1) -> None:
    """Exit `code`, at most 8 lines on stderr and no traceback, each of `words` in them, and (the command ran with
    --json) stdout one JSON object whose error holds the words too."""
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) <= 8, result.stderr
    assert all(w in result.stderr for w in words), result.stderr
    error = json.loads(result.stdout)["error"]
    assert all(w in error for w in words), error


def _kube_argv(command: str) -> list[str]:
    if command in ("follow", "logs", "dashboard"):
        return [command, "some-job"]
    if command == "cancel":
        return [command, "some-job", "--yes"]
    return [command, *(["-c", "storagePath=s3://b/runs"] if command == "submit" else [])]


@pytest.mark.parametrize("endpoint", KUBE_FAILURES, indirect=True)
@pytest.mark.parametrize("command", KUBE_COMMANDS)
def test_the_kubernetes_api_unreachable_or_refusing(tmp_path, command, endpoint):
    url, word = endpoint
    config = _kubeconfig(tmp_path, url)
    result = _ray_efa(
        *_kube_argv(command), "--kubeconfig", str(config), "--request-timeout", _request_timeout(word), "--json"
    )
    _check_one_line(result, url.split("://")[1], word)


@pytest.mark.parametrize("command", KUBE_COMMANDS)
def test_a_bad_kubeconfig_is_exit_2(tmp_path, command):
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")  # no context to use
    _check_one_line(_ray_efa(*_kube_argv(command), "--kubeconfig", str(config), "--json"), str(config), code=2)


@pytest.mark.parametrize("endpoint", ["refused", "dns", "tls", "timeout", "403"], indirect=True)
def test_aws_unreachable_or_refusing(tmp_path, endpoint):
    url, word = endpoint
    if word == "403":
        word = "UnauthorizedOperation"
    env = {
        "AWS_ENDPOINT_URL_EC2": url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CONFIG_FILE": str(tmp_path / "no-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-creds"),
        "AWS_MAX_ATTEMPTS": "1",
        "AWS_RETRY_MODE": "standard",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    result = _ray_efa(
        "capacity", "--region", "us-east-2", "--request-timeout", _request_timeout(word), "--json", env=env
    )
    _check_one_line(result, url.split("://")[1].split(":")[0], word)


@pytest.mark.parametrize("endpoint", ["404"], indirect=True)
@pytest.mark.parametrize("command", KUBE_COMMANDS)
def test_a_server_that_is_not_a_kubernetes_api_server_is_named_as_such(tmp_path, command, endpoint):
    # GIVEN a kubeconfig whose server answers 404 to everything, /api included (a web server, not an API server)
    url, _ = endpoint
    result = _ray_efa(
        *_kube_argv(command), "--kubeconfig", str(_kubeconfig(tmp_path, url)), "--request-timeout", "5", "--json"
    )
    # THEN one line saying that server does not answer the Kubernetes API, exit 1: not a missing ConfigMap or RayJob
    # with the raw ApiException
    _check_one_line(result, url.split("://")[1], "does not answer the Kubernetes API (404 Not Found on /api")
    assert "ConfigMap" not in result.stderr and "HTTP response headers" not in result.stderr, result.stderr
