"""What a user may do, asked of the real API server's authorizer: SubjectAccessReviews (authorization.k8s.io/v1,
created as admin, answered by RBAC as for a request of that user), and kubeconfigs of users other than admin (a
client certificate the plane's CA signs: the API server takes CN as the user name and each O as a group)."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client, config
from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration

from tests.cluster.controlplane import ControlPlane


@dataclass(frozen=True)
class Subject:
    """Whom a SubjectAccessReview asks about: a user name and its groups, as the authenticator would give them."""

    user: str
    groups: tuple[str, ...]

    @staticmethod
    def service_account(namespace: str, name: str) -> Subject:
        """A pod's service account, with the groups the token authenticator adds."""
        return Subject(
            f"system:serviceaccount:{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
        )


@dataclass(frozen=True)
class Request:
    """One API request: `verb` on `resource` (`group` its API group, "" the core one), in `namespace` (None: cluster
    scope or all namespaces), optionally one object `name` or a `subresource` (pods/log: resource pods, log)."""

    verb: str
    resource: str
    namespace: str | None = None
    group: str = ""
    subresource: str = ""
    name: str = ""

    def __str__(self) -> str:
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        api = f".{self.group}" if self.group else ""
        return f"{self.verb} {what}{api}{f' {self.name}' if self.name else ''} in {self.namespace or 'the cluster'}"


def allowed(api: ApiClient, subject: Subject, request: Request) -> tuple[bool, str]:
    """The authorizer's answer for `subject` making `request`, and its reason (RBAC names the binding that allows)."""
    attributes = {"verb": request.verb, "resource": request.resource, "group": request.group}
    for key, value in (("namespace", request.namespace), ("subresource", request.subresource), ("name", request.name)):
        if value:
            attributes[key] = value
    # a manifest dict as the body: the client takes one (the kubernetes stubs name only the model)
    review: Any = client.AuthorizationV1Api(api).create_subject_access_review(
        {  # pyright: ignore[reportArgumentType]
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": subject.user, "groups": list(subject.groups), "resourceAttributes": attributes},
        }
    )
    return bool(review.status.allowed), review.status.reason or review.status.evaluation_error or ""


def user_kubeconfig(plane: ControlPlane, folder: Path, *, user: str, groups: tuple[str, ...]) -> Path:
    """A kubeconfig of `user` in `groups`: a client certificate (CN user, O each group) signed by the plane's CA."""
    ca_key = serialization.load_pem_private_key((plane.pki.ca.parent / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, rsa.RSAPrivateKey)
    ca = x509.load_pem_x509_certificate(plane.pki.ca.read_bytes())
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, user),
            *(x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups),
        ]
    )
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=2))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / f"{user}.crt", folder / f"{user}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        )
    )
    kubeconfig = folder / f"{user}.kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": user,
                "clusters": [
                    {"name": "test", "cluster": {"server": plane.url, "certificate-authority": str(plane.pki.ca)}}
                ],
                "users": [{"name": user, "user": {"client-certificate": str(cert_path), "client-key": str(key_path)}}],
                "contexts": [{"name": user, "context": {"cluster": "test", "user": user}}],
            }
        )
    )
    return kubeconfig


def api_client_of(kubeconfig: Path) -> ApiClient:
    configuration = Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return ApiClient(configuration)
