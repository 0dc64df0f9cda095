"""A real Kubernetes control plane on localhost: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK
and the KubeRay operator, built from Go modules by tools/controlplane/build.py.

No kubelet runs: KWOK (sigs.k8s.io/kwok) plays it for the nodes, which are API objects shaped from the catalog, so
pods bound to them report the status a kubelet would (Running and Ready; the stages in stages.yaml say when an init
container fails instead). Everything else is the real thing: the API server with the admission plugins EKS enables,
RBAC and service-account tokens, the scheduler placing pods by requests, taints and selectors, the controllers
(Deployments, DaemonSets, Jobs, garbage collection, service-account tokens) and the operator reconciling RayClusters
and RayJobs into pods.

    plane = ControlPlane.start(workdir)      # about 10 s once the binaries are built
    api = plane.api_client()                 # a kubernetes.client.ApiClient as admin (system:masters)
    plane.stop()
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from kubernetes import client, config
from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration

from tests.cluster.lifetime import die_with_parent
from tests.cluster.objects import spec_of, status_of
from tools.controlplane import build

HERE = Path(__file__).resolve().parent

# EKS's API server admission plugins (EKS User Guide, "Amazon EKS Kubernetes versions" / platform versions: "the
# following admission controllers are enabled for all 1.3x platform versions"). ExtendedResourceToleration matters
# here: a pod that asks for nvidia.com/gpu gets a toleration of the nvidia.com/gpu taint from the API server itself.
EKS_ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "DefaultStorageClass",
    "ResourceQuota",
    "DefaultTolerationSeconds",
    "NodeRestriction",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "PodSecurity",
    "TaintNodesByCondition",
    "StorageObjectInUseProtection",
    "PersistentVolumeClaimResize",
    "ExtendedResourceToleration",
    "CertificateApproval",
    "CertificateSigning",
    "CertificateSubjectRestriction",
    "Priority",
    "RuntimeClass",
    "DefaultIngressClass",
    "ClusterTrustBundleAttest",
    "ValidatingAdmissionPolicy",
)
SERVICE_CIDR = "10.100.0.0/16"  # EKS's default service range
OPERATOR = "kuberay-operator"
"""The operator's binary (tools/controlplane/build.py) and its process among ControlPlane.processes."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kwok_stages() -> str:
    """KWOK's own "fast" pod stages (ready, complete, delete) at the pinned kwok version, then ours (stages.yaml)."""
    fast = build.module_source("kwok", "sigs.k8s.io/kwok") / "kustomize" / "stage" / "pod" / "fast"
    documents = [(fast / f"pod-{name}.yaml").read_text() for name in ("ready", "complete", "delete")]
    return "\n---\n".join([*documents, (HERE / "stages.yaml").read_text()])


KWOK_LOG_KINDS = ("logs", "clusterlogs", "clusterportforwards")
"""KWOK's Logs and ClusterLogs (kwok.x-k8s.io/v1alpha1): which file KWOK's kubelet API serves as a container's log;
and ClusterPortForward: where it sends a port-forward to a pod's port (a local server of a test's)."""


def kwok_crds() -> list[Path]:
    """The CRDs of the KWOK objects the control plane serves (KWOK_LOG_KINDS), from the kwok module at its pin."""
    bases = build.module_source("kwok", "sigs.k8s.io/kwok") / "kustomize" / "crd" / "bases"
    return [bases / f"kwok.x-k8s.io_{kind}.yaml" for kind in KWOK_LOG_KINDS]


def cri_log(text: str, stream: str = "stdout") -> str:
    """`text` in the CRI log format the kubelet's container runtime writes and KWOK's kubelet API reads
    (`<RFC 3339 time> <stream> F <line>`, one entry a line)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return "".join(f"{now} {stream} F {line}\n" for line in text.splitlines())


# -- certificates ------------------------------------------------------------------------------------------------------


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def _certificate(
    subject: x509.Name,
    key: rsa.RSAPrivateKey,
    issuer: x509.Name,
    issuer_key: rsa.RSAPrivateKey,
    *,
    ca: bool = False,
    hosts: Iterable[str] = (),
    client_auth: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if not ca:
        usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH if client_auth else x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


@dataclass(frozen=True)
class Pki:
    ca: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path
    service_account_pub: Path

    @staticmethod
    def make(folder: Path) -> Pki:
        folder.mkdir(parents=True, exist_ok=True)
        ca_key, serving_key, admin_key, sa_key = _key(), _key(), _key(), _key()
        ca_name = _name("ray-efa-test-ca")
        ca = _certificate(ca_name, ca_key, ca_name, ca_key, ca=True)
        serving = _certificate(
            _name("kube-apiserver"),
            serving_key,
            ca_name,
            ca_key,
            hosts=(
                "127.0.0.1",
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
                "10.100.0.1",
            ),
        )
        # system:masters: the group RBAC never refuses, as the cluster creator's access entry is on EKS
        admin = _certificate(_name("admin", "system:masters"), admin_key, ca_name, ca_key, client_auth=True)
        files = {
            "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
            "ca.key": _pem_key(ca_key),  # signs the client certificates of other users (tests/cluster/rbac.py)
            "serving.crt": serving.public_bytes(serialization.Encoding.PEM),
            "serving.key": _pem_key(serving_key),
            "admin.crt": admin.public_bytes(serialization.Encoding.PEM),
            "admin.key": _pem_key(admin_key),
            "sa.key": _pem_key(sa_key),
            "sa.pub": sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        }
        for name, data in files.items():
            (folder / name).write_bytes(data)
        return Pki(
            *(
                folder / n
                for n in ("ca.crt", "serving.crt", "serving.key", "admin.crt", "admin.key", "sa.key", "sa.pub")
            )
        )


# -- processes ---------------------------------------------------------------------------------------------------------


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    _file: IO[bytes]

    def tail(self, lines: int = 30) -> str:
        self._file.flush()
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


class ControlPlaneError(RuntimeError):
    pass


@dataclass
class ControlPlane:
    workdir: Path
    url: str
    kubeconfig: Path
    pki: Pki
    processes: dict[str, Process] = field(default_factory=dict)
    kubelet_port: int = 0
    """Where KWOK serves the kubelet API of every node (127.0.0.1, the nodes' InternalIP)."""
    audit_from: int = 0
    """Where in the audit log audit_events starts reading: past what earlier modules of a shared plane asked."""

    # -- start and stop ------------------------------------------------------------------------------------------------

    @classmethod
    def start(cls, workdir: Path, *, crds: Iterable[Path], operator: bool = True) -> ControlPlane:
        """`operator` False: no KubeRay operator runs, so a test may move a RayJob through its states itself (the
        status subresource) where the operator could not (it asks the head's Ray dashboard, which does not run)."""
        binaries = build.bin_dirs()
        missing = [str(path) for path in binaries.values() if not path.is_file()]
        if missing:
            raise ControlPlaneError(
                f"control-plane binaries not built ({', '.join(missing)}): run "
                "`python tools/controlplane/build.py` (make test-cluster does)"
            )
        pki = Pki.make(workdir / "pki")
        port = free_port()
        plane = cls(workdir, f"https://127.0.0.1:{port}", workdir / "admin.kubeconfig", pki)
        plane._write_kubeconfig()
        try:
            plane._start_all(binaries, port, list(crds), operator=operator)
        except BaseException:
            plane.stop()
            raise
        return plane

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        log = self.workdir / f"{name}.log"
        handle = log.open("wb")
        popen = subprocess.Popen(
            argv,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )  # killed when this process dies (lifetime.py)
        process = Process(name, popen, log, handle)
        self.processes[name] = process
        return process

    def _start_all(self, binaries: dict[str, Path], port: int, crds: list[Path], *, operator: bool = True) -> None:
        etcd_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._spawn(
            "etcd",
            [
                str(binaries["etcd"]),
                "--data-dir",
                str(self.workdir / "etcd"),
                "--name",
                "test",
                "--listen-client-urls",
                etcd_url,
                "--advertise-client-urls",
                etcd_url,
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"test=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
            ],
        )
        self._spawn(
            "kube-apiserver",
            [
                str(binaries["kube-apiserver"]),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
                f"--tls-cert-file={self.pki.serving_cert}",
                f"--tls-private-key-file={self.pki.serving_key}",
                f"--client-ca-file={self.pki.ca}",
                f"--service-account-key-file={self.pki.service_account_pub}",
                f"--service-account-signing-key-file={self.pki.service_account_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--authorization-mode=Node,RBAC",
                f"--enable-admission-plugins={','.join(EKS_ADMISSION_PLUGINS)}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                # pods/log, /exec, /attach: the API server calls the node's kubelet API, which KWOK serves (below) at the
                # node's InternalIP and kubeletEndpoint port (its node stage writes both); the node's Hostname address (its
                # name) resolves nowhere here. No --kubelet-certificate-authority: KWOK's certificate is not checked.
                f"--kubelet-client-certificate={self.pki.admin_cert}",
                f"--kubelet-client-key={self.pki.admin_key}",
                "--kubelet-preferred-address-types=InternalIP",
                # the API server's own record of the requests of every user but admin (audit_events)
                f"--audit-policy-file={self._write_audit_policy()}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-mode=blocking",
                "--v=1",
            ],
        )
        self._wait("kube-apiserver", self._ready, timeout_s=240)
        kubeconfig = f"--kubeconfig={self.kubeconfig}"
        self._spawn(
            "kube-controller-manager",
            [
                str(binaries["kube-controller-manager"]),
                kubeconfig,
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--service-account-private-key-file={self.pki.service_account_key}",
                f"--root-ca-file={self.pki.ca}",
                "--use-service-account-credentials=false",
                "--controllers=*,-nodeipam,-cloud-node-lifecycle",
                "--v=1",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(binaries["kube-scheduler"]),
                kubeconfig,
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--v=1",
            ],
        )
        stages = self.workdir / "kwok-stages.yaml"
        stages.write_text(kwok_stages())
        # KWOK serves the kubelet API (containerLogs) for every node at --node-port, with the container logs that
        # Logs and ClusterLogs objects name (serve_logs); its CRDs first, so that its watch finds them.
        self.apply_files(kwok_crds())
        self._wait("KWOK's CRDs", lambda: self._crds_established("kwok.x-k8s.io"), timeout_s=120)
        self.kubelet_port = free_port()
        self._spawn(
            "kwok",
            [
                str(binaries["kwok"]),
                kubeconfig,
                "--manage-all-nodes=true",
                f"--config={stages}",
                "--node-ip=127.0.0.1",
                "--cidr=10.0.0.1/16",
                f"--node-port={self.kubelet_port}",
                f"--server-address=127.0.0.1:{self.kubelet_port}",
                f"--tls-cert-file={self.pki.serving_cert}",
                f"--tls-private-key-file={self.pki.serving_key}",
                "--enable-crds=Logs,ClusterLogs,ClusterPortForward",
            ],
        )
        # The RayCluster and RayJob CRDs asked for (tests/cluster/conftest.py's served_crds); the operator also
        # watches RayServices: its own CRD, as the build cached it.
        self.apply_files([*crds, *(p for p in build.operator_crds() if p.name == "ray.io_rayservices.yaml")])
        self._wait("the KubeRay CRDs", self._crds_established, timeout_s=120)
        if operator:
            self.start_operator()
        self._wait("the default service account", self._default_service_account, timeout_s=180)

    @property
    def operator_running(self) -> bool:
        process = self.processes.get(OPERATOR)
        return process is not None and process.popen.poll() is None

    def start_operator(self) -> None:
        """Starts the KubeRay operator (a plane shared across modules runs it for those that want it)."""
        if self.operator_running:
            return
        self._spawn(
            OPERATOR,
            [
                str(build.bin_dirs()[OPERATOR]),
                f"--metrics-addr=127.0.0.1:{free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{free_port()}",
                "--enable-leader-election=false",
            ],
            env={"KUBECONFIG": str(self.kubeconfig)},
        )

    def stop_operator(self) -> None:
        """Stops the KubeRay operator, for a module that moves RayJobs through their states itself."""
        process = self.processes.pop(OPERATOR, None)
        if process is not None:
            self._stop(process)

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def _write_audit_policy(self) -> Path:
        """Metadata of each request of a user other than admin (the control plane's own components and the test
        setup are admin): what a test's own user (tests/cluster/rbac.py's user_kubeconfig) asked, in order."""
        path = self.workdir / "audit-policy.yaml"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": [
                        {"level": "None", "users": ["admin"]},
                        {"level": "None", "userGroups": ["system:serviceaccounts", "system:nodes"]},
                        {"level": "Metadata"},
                    ],
                }
            )
        )
        return path

    def audit_events(self, user: str) -> list[dict]:
        """The audit events (audit.k8s.io/v1 Event: verb, requestURI, objectRef, responseStatus) of `user`'s requests,
        in the order the API server completed them, since `audit_from`; read once the log has stopped growing for a
        moment."""
        size = None
        for _ in range(50):
            now = self.audit_log.stat().st_size if self.audit_log.exists() else 0
            if now == size:
                break
            size = now
            time.sleep(0.3)
        if not self.audit_log.exists():
            return []
        with self.audit_log.open("rb") as log:
            log.seek(self.audit_from)
            lines = log.read().decode().splitlines()
        events = [json.loads(line) for line in lines if line.strip()]
        return [e for e in events if e.get("user", {}).get("username") == user and e.get("stage") == "ResponseComplete"]

    def stop(self) -> None:
        """Each process in turn, the last started first: the operator, KWOK and the controllers, then the API server
        while etcd still runs, then etcd. So stopped, the API server exits cleanly in about a second; terminated
        together with etcd, it waited out its graceful termination until killed (1.2 s against 17.1 s a plane,
        measured on 2 cores)."""
        for process in reversed(list(self.processes.values())):
            self._stop(process)

    @staticmethod
    def _stop(process: Process) -> None:
        if process.popen.poll() is None:
            process.popen.terminate()
        try:
            process.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.popen.kill()
            process.popen.wait()
        process._file.close()

    def _wait(self, what: str, check, *, timeout_s: float) -> None:  # noqa: ANN001
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for process in self.processes.values():
                if process.popen.poll() is not None:
                    raise ControlPlaneError(
                        f"{process.name} exited ({process.popen.returncode}) while waiting for "
                        f"{what}:\n{process.tail()}"
                    )
            try:
                if check():
                    return
            except Exception:  # noqa: BLE001 (not up yet)
                pass
            time.sleep(0.2)
        raise ControlPlaneError(
            f"timed out after {timeout_s} s waiting for {what}:\n"
            + "\n".join(f"--- {p.name}\n{p.tail(10)}" for p in self.processes.values())
        )

    def _ready(self) -> bool:
        # ApiClient.call_api is the client's own (every generated call goes through it); the stubs leave it out
        response = self.api_client().call_api(  # pyright: ignore[reportAttributeAccessIssue]
            "/readyz", "GET", _preload_content=False, _request_timeout=2
        )
        return getattr(response[0] if isinstance(response, tuple) else response, "status", 0) == 200

    def _crds_established(self, group: str = "ray.io") -> bool:
        ext = client.ApiextensionsV1Api(self.api_client())
        for crd in ext.list_custom_resource_definition(_request_timeout=5).items:
            if spec_of(crd).group == group and not any(
                c.type == "Established" and c.status == "True" for c in (status_of(crd).conditions or [])
            ):
                return False
        return True

    def _default_service_account(self) -> bool:
        client.CoreV1Api(self.api_client()).read_namespaced_service_account("default", "default", _request_timeout=5)
        return True

    # -- clients -------------------------------------------------------------------------------------------------------

    def _write_kubeconfig(self) -> None:
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": str(self.pki.ca)}}],
            "users": [
                {
                    "name": "admin",
                    "user": {"client-certificate": str(self.pki.admin_cert), "client-key": str(self.pki.admin_key)},
                }
            ],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
        }
        self.kubeconfig.write_text(json.dumps(document))

    def api_client(self) -> ApiClient:
        configuration = Configuration()
        config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=configuration)
        return ApiClient(configuration)

    # -- objects -------------------------------------------------------------------------------------------------------

    def apply(
        self,
        objects: Iterable[dict],
        *,
        field_manager: str = "ray-efa-test",
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> list[dict]:
        """Server-side apply of each object (what `kubectl apply --server-side` sends); returns what the server
        stored. An object the server refuses raises kubernetes.client.ApiException with the server's reason."""
        from kubernetes.dynamic import DynamicClient

        dynamic = DynamicClient(self.api_client())
        stored = []
        for obj in objects:
            resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            ns = obj.get("metadata", {}).get("namespace") or (namespace if resource.namespaced else None)
            if resource.namespaced and ns:
                obj = {**obj, "metadata": {**obj["metadata"], "namespace": ns}}
            result = resource.server_side_apply(
                body=obj,
                name=obj["metadata"]["name"],
                namespace=ns,
                field_manager=field_manager,
                force_conflicts=True,
                dry_run="All" if dry_run else None,
            )
            stored.append(result.to_dict())
        return stored

    def apply_files(self, paths: Iterable[Path], **kwargs) -> list[dict]:  # noqa: ANN003
        # libyaml's safe loader where PyYAML has it (the same objects): a KubeRay CRD is 1 MB of YAML, 1.5 s for
        # the pure-Python loader, and each plane start and CRD swap loads three of them
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        objects = [doc for path in paths for doc in yaml.load_all(path.read_text(), Loader=loader) if doc]
        return self.apply(objects, **kwargs)

    # -- pod logs ------------------------------------------------------------------------------------------------------

    def serve_logs(
        self, namespace: str, logs: dict[str, str], *, previous: dict[str, str] | None = None, pods: Iterable[str] = ()
    ) -> str:
        """Make the kubelet API (KWOK) answer the logs of the pods in `namespace` (only `pods`, if named): container
        name -> its log text; `previous`: container name -> the log of its previous instance (a crash-looping
        container's failed run, read with previous=true). Writes each as a CRI log file under the workdir and creates
        a ClusterLogs object naming them; returns its name. KWOK v0.7.0 cannot end a followed log (follow=true: it
        takes every container for running), so a test serves the log of a container that has ended."""
        folder = self.workdir / "pod-logs"
        folder.mkdir(exist_ok=True)
        name = f"logs-{namespace}-{len(list(folder.iterdir()))}"
        entries = []
        for container, text in logs.items():
            entry: dict[str, object] = {"containers": [container]}
            for key, content, suffix in (
                ("logsFile", text, ""),
                ("previousLogsFile", (previous or {}).get(container), ".previous"),
            ):
                if content is not None:
                    path = folder / f"{name}-{container}{suffix}.log"
                    path.write_text(cri_log(content))
                    entry[key] = str(path)
            entries.append(entry)
        selector: dict[str, list[str]] = {"matchNamespaces": [namespace]}
        if pods:
            selector["matchNames"] = list(pods)
        client.CustomObjectsApi(self.api_client()).create_cluster_custom_object(
            "kwok.x-k8s.io",
            "v1alpha1",
            "clusterlogs",
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "ClusterLogs",
                "metadata": {"name": name},
                "spec": {"selector": selector, "logs": entries},
            },
        )
        return name
