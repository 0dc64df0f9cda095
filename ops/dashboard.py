"""`ray-efa dashboard`: the Ray dashboard (port 8265 of a Ray cluster's head) on this machine, through the Kubernetes
API server's port-forward, with the cluster's Ray token added to every request.

    head = dashboard_target(api_client, namespace, job)    # the head pod of the job's (or the one) Ray cluster
    token = ray_token(api_client, namespace, head)          # the token KubeRay's authOptions made (None: no auth)
    with DashboardForward(api_client, head, token) as fwd:  # http://127.0.0.1:PORT/ until closed
        ...

The Ray cluster runs behind a token (k8s.security.token_auth): KubeRay 1.5.1+ with authOptions mode token generates
one per Ray cluster into a Secret named like the RayCluster (key auth_token) and sets RAY_AUTH_TOKEN from it on every
Ray container (Ray docs, "Configure Ray clusters to use token authentication",
https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/kuberay-auth.html). A browser cannot add the
Authorization header, so each request through the forward gets it here, and `Connection: close` so that every request
has a connection (and its header) of its own. Reading the Secret and port-forwarding need `get secrets` and `create
pods/portforward`, which the stack's researcher Role does not grant (k8s.researcher_rbac): DashboardRefused names
what was refused.
"""

from __future__ import annotations

import base64
import socket
import threading
from dataclasses import dataclass
from typing import Any

from ray_efa.ops.submit import RAY_GROUP, RAY_VERSION, SubmitError, api_error, job_state

__all__ = [
    "DashboardTarget",
    "DashboardRefused",
    "dashboard_target",
    "ray_token",
    "DashboardForward",
    "DASHBOARD_PORT",
    "TOKEN_SECRET_KEY",
]

DASHBOARD_PORT = 8265
"""The Ray dashboard's port on the head (KubeRay's default, and the job submitter's address)."""
TOKEN_SECRET_KEY = "auth_token"
"""The key of the token in the Secret KubeRay makes for authOptions mode token."""
_HEAD_SELECTOR = "ray.io/node-type=head"


class DashboardRefused(SubmitError):
    """The API server refused a read or the port-forward (403): the message names what and what grants it."""


@dataclass(frozen=True, slots=True)
class DashboardTarget:
    namespace: str
    cluster: str
    """The RayCluster's name."""
    pod: dict[str, Any]
    """The head pod, as the API serves it (sanitized to a dict)."""

    @property
    def pod_name(self) -> str:
        return self.pod["metadata"]["name"]


def _refused(what: str, error: Any, grant: str) -> DashboardRefused:
    return DashboardRefused(f"the API server refused to {what}: {api_error(error)} ({grant})")


def dashboard_target(api_client: Any, namespace: str, job: str | None) -> DashboardTarget:
    """The head pod of RayJob `job`'s Ray cluster; without `job`, of the one Ray cluster in `namespace` (several:
    SubmitError naming them, to pick one by its job). JobNotFound for a RayJob that is not there."""
    from kubernetes import client

    custom: Any = client.CustomObjectsApi(api_client)
    if job is not None:
        cluster = job_state(api_client, namespace, job).status.get("rayClusterName")
        if not cluster:
            raise SubmitError(
                f"RayJob {namespace}/{job} has no Ray cluster yet (or any more): `ray-efa jobs` shows its state"
            )
    else:
        clusters = [
            c["metadata"]["name"]
            for c in custom.list_namespaced_custom_object(RAY_GROUP, RAY_VERSION, namespace, "rayclusters")["items"]
        ]
        if len(clusters) != 1:
            raise SubmitError(
                f"{len(clusters) or 'no'} Ray clusters in namespace {namespace}"
                + (
                    f" ({', '.join(sorted(clusters))}): name the job, `ray-efa dashboard JOB`"
                    if clusters
                    else ": is a job running? (`ray-efa jobs`)"
                )
            )
        cluster = clusters[0]
    core: Any = client.CoreV1Api(api_client)
    pods = core.list_namespaced_pod(namespace, label_selector=f"ray.io/cluster={cluster},{_HEAD_SELECTOR}").items
    running = [p for p in pods if p.status is not None and p.status.phase == "Running"]
    if not running:
        raise SubmitError(
            f"Ray cluster {namespace}/{cluster} has no running head pod"
            + (f" ({', '.join(p.metadata.name + ' ' + str(p.status.phase) for p in pods)})" if pods else "")
        )
    return DashboardTarget(namespace, cluster, api_client.sanitize_for_serialization(running[0]))


def _env(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    containers = (pod.get("spec") or {}).get("containers") or []
    return {e["name"]: e for c in containers[:1] for e in c.get("env") or []}


def ray_token(api_client: Any, target: DashboardTarget) -> str | None:
    """The Ray token of the target's cluster, None when its head runs without token auth (RAY_AUTH_MODE not token).
    Read from the Secret the head's RAY_AUTH_TOKEN comes from, else KubeRay's Secret named like the RayCluster."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    env = _env(target.pod)
    mode = (env.get("RAY_AUTH_MODE") or {}).get("value")
    token_env = env.get("RAY_AUTH_TOKEN") or {}
    if mode != "token" and not token_env:
        return None
    if token_env.get("value"):
        return token_env["value"]
    ref = (token_env.get("valueFrom") or {}).get("secretKeyRef") or {}
    name, key = ref.get("name") or target.cluster, ref.get("key") or TOKEN_SECRET_KEY
    try:
        secret: Any = client.CoreV1Api(api_client).read_namespaced_secret(name, target.namespace)
    except ApiException as error:
        if error.status in (401, 403):
            raise _refused(
                f"read Secret {target.namespace}/{name} (the Ray token)",
                error,
                "the stack's researcher Role reads no Secrets: a cluster admin can run this command, or "
                "give you `get` on that Secret",
            ) from None
        raise SubmitError(f"cannot read the Ray token, Secret {target.namespace}/{name}: {api_error(error)}") from None
    value = (secret.data or {}).get(key)
    if not value:
        raise SubmitError(f"Secret {target.namespace}/{name} has no {key}: is it the Ray token KubeRay made?")
    return base64.b64decode(value).decode()


def _with_token(head: bytes, token: str | None) -> bytes:
    """An HTTP request head with the Ray token's Authorization header (replacing one the browser sent) and
    Connection: close."""
    lines = head.split(b"\r\n")
    kept = [line for line in lines[1:] if line and not line.lower().startswith((b"authorization:", b"connection:"))]
    extra = [b"Authorization: Bearer " + token.encode()] if token else []
    return b"\r\n".join([lines[0], *kept, *extra, b"Connection: close"]) + b"\r\n\r\n"


class DashboardForward:
    """A listener on 127.0.0.1 (`port`, 0: any free one) whose every connection is relayed to the target's head pod,
    port DASHBOARD_PORT, through a port-forward of the API server, the request head carrying the token.

    The first connection's port-forward is opened by `check()` too, so that a refusal (403) or a pod the API server
    cannot forward to is an error before the URL is printed."""

    def __init__(self, api_client: Any, target: DashboardTarget, token: str | None, *, port: int = 0):
        self.api_client: Any = api_client
        self.target: DashboardTarget = target
        self.token: str | None = token
        self.listener: socket.socket = socket.create_server(("127.0.0.1", port))
        self.port: int = self.listener.getsockname()[1]
        self._lock = threading.Lock()  # kubernetes.stream swaps the client's request method while it connects
        self._closed = threading.Event()
        self.errors: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def _open(self) -> Any:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import portforward

        core: Any = client.CoreV1Api(self.api_client)
        try:
            with self._lock:
                forward = portforward(
                    core.connect_get_namespaced_pod_portforward,
                    self.target.pod_name,
                    self.target.namespace,
                    ports=str(DASHBOARD_PORT),
                )
        except ApiException as error:
            # a refused websocket handshake comes as status 0, its reason "Handshake status 403 Forbidden ..."
            if error.status in (401, 403) or " 403 " in f" {error.reason} ":
                raise _refused(
                    f"port-forward to pod {self.target.namespace}/{self.target.pod_name}",
                    error,
                    "the stack's researcher Role does not grant create on pods/portforward",
                ) from None
            raise SubmitError(
                f"cannot port-forward to pod {self.target.namespace}/{self.target.pod_name}: {api_error(error)}"
            ) from None
        return forward

    def check(self) -> None:
        """Open and close one port-forward: DashboardRefused or SubmitError when the API server will not."""
        self._check_allowed()
        forward = self._open()
        forward.close()

    def _check_allowed(self) -> None:
        """DashboardRefused unless the API server says this identity may create pods/portforward here. Asked first
        because a refused port-forward handshake reaches the kubernetes client (36) as an AttributeError, not a 403."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    namespace=self.target.namespace, verb="create", resource="pods", subresource="portforward"
                )
            )
        )
        try:
            answer: Any = client.AuthorizationV1Api(self.api_client).create_self_subject_access_review(review)
        except ApiException as error:
            raise SubmitError(
                f"cannot ask the API server whether this identity may port-forward: {api_error(error)}"
            ) from None
        if not answer.status.allowed:
            raise DashboardRefused(
                f"the API server refused to port-forward to pod {self.target.namespace}/{self.target.pod_name}: "
                "create pods/portforward is not allowed (the stack's researcher Role does not grant it: "
                'docs/security.md, "Why researchers get no dashboard")'
            )

    def serve_forever(self) -> None:
        """Relay connections until close() (or KeyboardInterrupt in the calling thread)."""
        self.listener.settimeout(0.5)
        while not self._closed.is_set():
            try:
                local, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            threading.Thread(target=self._relay, args=(local,), daemon=True).start()

    def _relay(self, local: socket.socket) -> None:
        try:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = local.recv(4096)
                if not chunk:
                    return
                head += chunk
            head, _, body = head.partition(b"\r\n\r\n")
            remote = self._open().socket(DASHBOARD_PORT)
            remote.sendall(_with_token(head, self.token) + body)
            pump = threading.Thread(target=_pump, args=(local, remote), daemon=True)
            pump.start()
            _pump(remote, local)
        except (OSError, SubmitError) as error:
            self.errors.append(str(error))
        finally:
            local.close()

    def close(self) -> None:
        self._closed.set()
        self.listener.close()

    def __enter__(self) -> DashboardForward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pump(source: Any, target: Any) -> None:
    """Copy bytes from `source` to `target` until `source` ends, then end `target`'s writing side."""
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass
