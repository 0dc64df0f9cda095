"""The kubeconfig's bearer token reaches the API server: kubernetes 36.0.0's loader stores it where its own request
code does not read it (kubernetes-client/python#2582), so `ray-efa submit|follow|verify` went out as system:anonymous
for every token kubeconfig, EKS's `aws eks get-token` included. A real kubeconfig loaded by the real loader, with an
exec plugin (a small Python script standing in for the aws CLI) whose tokens expire; the headers are what the client's
own request path (ApiClient.update_params_for_auth) puts on a request. tests/cluster/test_refusing_api.py shows the
real API server telling the tokens apart."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

from ray_efa.cli._common import kube_api_client

EXEC_PLUGIN = textwrap.dedent("""\
    import json, pathlib, sys
    counter = pathlib.Path(sys.argv[1])
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                      "status": {"token": f"token-{n}", "expirationTimestamp": "2001-01-01T00:00:00Z"}}))
""")
"""An exec credential plugin (what `aws eks get-token` is to an EKS kubeconfig) whose every token has expired: each
request asks it again, numbering its tokens."""


def _kubeconfig(tmp_path: Path, user: dict) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            }
        )
    )
    return str(path)


def _sent_authorization(api_client) -> str | None:  # noqa: ANN001 - kubernetes' ApiClient (untyped)
    headers: dict[str, str] = {}
    api_client.update_params_for_auth(headers, [], ["BearerToken"])
    return headers.get("authorization")


def _client(kubeconfig: str):  # noqa: ANN202 - kubernetes' ApiClient (untyped)
    return kube_api_client(argparse.Namespace(kubeconfig=kubeconfig, kube_context=None, request_timeout=5))


def test_a_static_token_is_sent(tmp_path):
    api_client = _client(_kubeconfig(tmp_path, {"token": "abc"}))
    assert _sent_authorization(api_client) == "Bearer abc"


def test_an_exec_plugins_token_is_sent_and_sent_anew_after_it_expires(tmp_path):
    (tmp_path / "plugin.py").write_text(EXEC_PLUGIN)
    api_client = _client(
        _kubeconfig(
            tmp_path,
            {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "command": sys.executable,
                    "args": [str(tmp_path / "plugin.py"), str(tmp_path / "count")],
                }
            },
        )
    )
    sent = [_sent_authorization(api_client) for _ in range(3)]
    assert all(header is not None and header.startswith("Bearer token-") for header in sent), sent
    # each request after the token expired carries the plugin's next token, not the first one again
    numbers = [int(str(header).rsplit("-", 1)[1]) for header in sent]
    assert numbers == sorted(set(numbers)), sent


def test_a_client_certificate_user_sends_no_token(tmp_path):
    cert = tmp_path / "c.crt"
    cert.write_text("not read until a request is made")
    api_client = _client(_kubeconfig(tmp_path, {"client-certificate": str(cert), "client-key": str(cert)}))
    assert _sent_authorization(api_client) is None
