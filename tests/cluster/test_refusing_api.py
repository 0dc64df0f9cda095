"""A Kubernetes API server that refuses the caller is one line naming the endpoint, exit 1, and JSON with --json: the
real API server's own refusals, to real CLI processes. A token it never issued is its 401, a user RBAC grants nothing
is its 403, and a kubeconfig that does not trust its serving certificate fails TLS. (Unreachable endpoints, where no
API server answers at all, are tests/cli/test_unreachable.py's: a closed port, a name under .invalid, a silent socket.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.controlplane import ControlPlane
from tests.cluster.rbac import user_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
KUBE_COMMANDS = ["submit", "follow", "verify"]


def _with_user(plane: ControlPlane, path: Path, user: dict, *, trusted: bool = True) -> Path:
    """A kubeconfig for the plane's URL with `user`'s credentials; `trusted` False leaves the plane's CA out."""
    cluster = {"server": plane.url, **({"certificate-authority": str(plane.pki.ca)} if trusted else {})}
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "k", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            }
        )
    )
    return path


def _refusing(plane: ControlPlane, folder: Path, refusal: str) -> tuple[Path, str]:
    """(kubeconfig, the word its error line must hold) for a request the real API server refuses as `refusal`."""
    folder.mkdir(parents=True, exist_ok=True)
    if refusal == "401":  # a bearer token no authenticator of the server knows
        return _with_user(plane, folder / "kubeconfig", {"token": "not-a-token-this-server-issued"}), "401"
    if refusal == "403":  # authenticated by a client certificate of the plane's CA, in no group RBAC binds
        return user_kubeconfig(plane, folder, user="nobody-bound", groups=()), "403"
    # the server's certificate is signed by the plane's CA, which this kubeconfig does not trust
    return _with_user(plane, folder / "kubeconfig", {"token": "t"}, trusted=False), "TLS error"


def _ray_efa(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ray_efa.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=dict(os.environ),
    )


def _kube_argv(command: str) -> list[str]:
    return [
        command,
        *(["some-job"] if command == "follow" else ["-c", "storagePath=s3://b/runs"] if command == "submit" else []),
    ]


@pytest.mark.parametrize("refusal", ["401", "403", "tls"])
@pytest.mark.parametrize("command", KUBE_COMMANDS)
def test_a_refusing_api_server_is_one_line_naming_it_and_exit_1(control_plane, tmp_path, command, refusal):
    # GIVEN a kubeconfig the real API server refuses (an unknown token, a user with no RBAC, an untrusted server)
    config, word = _refusing(control_plane, tmp_path / "user", refusal)
    # WHEN a cluster-facing command runs with it
    result = _ray_efa(*_kube_argv(command), "--kubeconfig", str(config), "--request-timeout", "5", "--json")
    # THEN exit 1, at most 8 lines on stderr and no traceback, naming the endpoint and the refusal; stdout one JSON
    # object whose error says the same
    endpoint = control_plane.url.split("://")[1]
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) <= 8, result.stderr
    assert endpoint in result.stderr and word in result.stderr, result.stderr
    error = json.loads(result.stdout)["error"]
    assert endpoint in error and word in error, error


@pytest.mark.parametrize("command", KUBE_COMMANDS)
def test_a_token_the_server_issued_is_sent_and_names_its_user(control_plane, api, tmp_path, command):
    # GIVEN a service account's token from the API server's TokenRequest (what a bearer-token kubeconfig, EKS's
    # `aws eks get-token` included, carries), for an account RBAC grants nothing
    from kubernetes import client

    core = client.CoreV1Api(api)
    name = f"token-user-{command}"
    core.create_namespaced_service_account("default", client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
    issued = core.create_namespaced_service_account_token(
        name,
        "default",
        client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)),
    )
    assert issued.status is not None  # the API server answers a TokenRequest with its status: the token
    config = _with_user(control_plane, tmp_path / "kubeconfig", {"token": issued.status.token})
    # WHEN a cluster-facing command runs with it
    result = _ray_efa(*_kube_argv(command), "--kubeconfig", str(config), "--request-timeout", "5", "--json")
    # THEN the server knew the caller by the token (403 for that account, not system:anonymous: the token was sent)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert f"system:serviceaccount:default:{name}" in result.stderr and "403" in result.stderr, result.stderr
