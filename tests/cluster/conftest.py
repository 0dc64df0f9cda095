"""The real control plane for tests/cluster (tests/cluster/controlplane.py), once per test process, and the nodes the
stack's node groups would bring, shaped as recorded EKS nodes (fixtures/nodes.json) and labelled and tainted as the
synthesized node groups say.

Every test here is marked `cluster` (make test-fast leaves them out; `make test-cluster` runs them alone) and runs in
the xdist group "cluster", so one worker runs them, on one control plane that its modules share in turn, each reset
to how it started after a module (SharedPlane).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from ray_efa.core import catalog
from tests.cluster import baseline
from tests.cluster.controlplane import ControlPlane
from tests.cluster.objects import name_of, namespace_of, status_of
from tests.shared_reference import reference_path
from tools.controlplane import build

# The kuberay-operator chart version the stack deploys by default (core settings' kuberayVersion), whose CRDs the
# API server serves where ../shared has them. The operator binary is the newest the Go proxy serves
# (tools/controlplane/kuberay/go.mod, v1.5.0): docs/testing.md, "The control plane", says what that cannot show.
DEPLOYED_KUBERAY = "1.7.0"


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.parent.name == "cluster" and item.path.parent.parent.name == "tests":
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.xdist_group("cluster"))


def ensure_built() -> None:
    """Builds the control plane's binaries and data files where they are missing (the first run on a machine:
    minutes; make test-cluster builds them first)."""
    if not all(path.is_file() for path in build.bin_dirs().values()) or not build.operator_crds():
        build.main([])


def served_crds() -> list[Path]:
    """The RayCluster and RayJob CRDs the API server serves: the deployed version's (../shared/kuberay-crds/v1.7.0)
    where ../shared has them, as CI does; else, in a clone alone, the operator's own (v1.5.0, its Go module's
    config/crd/bases as the build cached them). tests/cluster/test_crd_versions.py validates the manifests against
    both where both are here, and says which fields the older schema lacks."""
    deployed = reference_path("kuberay-crds", f"v{DEPLOYED_KUBERAY}")
    if deployed is not None:
        return sorted(deployed.glob("ray.io_*.yaml"))
    ensure_built()
    return [path for path in build.operator_crds() if path.name != "ray.io_rayservices.yaml"]


def served_kuberay() -> str:
    """The kuberayVersion whose manifests the served CRDs (served_crds) take whole: the deployed one where ../shared
    has its CRDs; else 1.4.0, the newest whose synth the operator's own v1.5.0 schema takes whole (its 1.7.0 synth has
    two fields more, which server-side apply refuses: tests/cluster/test_crd_versions.py names them)."""
    return DEPLOYED_KUBERAY if reference_path("kuberay-crds", f"v{DEPLOYED_KUBERAY}") is not None else "1.4.0"


@contextmanager
def running_plane(*, operator: bool = True) -> Iterator[ControlPlane]:
    """A control plane in a temporary folder, stopped and removed on exit (`operator` as ControlPlane.start)."""
    crds = served_crds()
    ensure_built()
    workdir = Path(tempfile.mkdtemp(prefix="ray-efa-controlplane-"))
    plane = ControlPlane.start(workdir, crds=crds, operator=operator)
    try:
        yield plane
    finally:
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)


class SharedPlane:
    """The control plane of one test process, shared by its modules in turn (a start costs about 30 s on 2 cores, a
    reset a few): each module gets it as the plane was when it started, with the operator running or not as the
    module asks; after the module, everything it made is deleted (tests/cluster/baseline.py). A reset that fails
    stops the plane, and the next module starts a new one."""

    def __init__(self) -> None:
        self._running: contextlib.ExitStack | None = None
        self._plane: ControlPlane | None = None
        self._baseline: frozenset[str] = frozenset()

    def acquire(self, *, operator: bool = True) -> ControlPlane:
        if self._plane is None:
            self._running = contextlib.ExitStack()
            self._plane = self._running.enter_context(running_plane(operator=operator))
            self._baseline = baseline.snapshot(self._plane.api_client())
        if operator:
            self._plane.start_operator()
        else:
            self._plane.stop_operator()
        return self._plane

    def release(self) -> None:
        """Deletes what the module made and waits until it is gone (a failure stops the plane, and is raised)."""
        if self._plane is None:
            return
        try:
            baseline.restore(self._plane.api_client(), self._baseline)
        except BaseException:
            self.close()
            raise
        self._plane.audit_from = self._plane.audit_log.stat().st_size if self._plane.audit_log.exists() else 0

    def close(self) -> None:
        if self._running is not None:
            self._running.close()
        self._running, self._plane = None, None


@pytest.fixture(scope="session")
def shared_plane() -> Iterator[SharedPlane]:
    shared = SharedPlane()
    yield shared
    shared.close()


@contextmanager
def module_plane(shared: SharedPlane, *, operator: bool = True) -> Iterator[ControlPlane]:
    """The shared plane for one module (`operator` as ControlPlane.start), reset after it."""
    plane = shared.acquire(operator=operator)
    try:
        yield plane
    finally:
        shared.release()


@pytest.fixture(scope="module")
def control_plane(shared_plane: SharedPlane) -> Iterator[ControlPlane]:
    """The process's control plane, with the operator, as fresh for this module: what an earlier module left behind
    (DaemonSets, RayJobs, namespaces, nodes) was deleted after it (SharedPlane)."""
    with module_plane(shared_plane) as plane:
        yield plane


@pytest.fixture(scope="module")
def api(control_plane: ControlPlane) -> ApiClient:
    return control_plane.api_client()


# -- nodes ---------------------------------------------------------------------------------------------------------------

_node_numbers = itertools.count()


def _node_name(instance: str) -> str:
    """A name no earlier node had: a pod of an earlier test, bound to a deleted node, never lands on a new one."""
    return re.sub(r"[^a-z0-9-]", "-", f"{instance}-{next(_node_numbers)}")


NODE_SHAPES = Path(__file__).parent / "fixtures" / "nodes.json"
"""The capacity and allocatable of an EKS node of each instance type the catalog knows, as `kubectl get node -o json`
shows them (a List of Nodes, one per type, each with the source of its figures): recorded for g5.8xlarge, else by
the EKS AMI's formula over EC2's published shape (docs/testing.md, "Node shapes"). Never derived from the catalog
that sizes the pods, so a wrong kubelet reserve there is not matched by the nodes here."""


def recorded_node(instance: str) -> dict[str, Any]:
    """The recorded Node of `instance` (NODE_SHAPES)."""
    for node in json.loads(NODE_SHAPES.read_text())["items"]:
        if node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == instance:
            return node
    raise LookupError(f'{NODE_SHAPES} has no node of {instance}: record one (docs/testing.md, "Node shapes")')


def node_object(
    name: str,
    instance: catalog.InstanceType,
    *,
    labels: dict[str, str],
    taints: list[dict[str, str]],
    zone: str = "us-east-2a",
    nodegroup: str = "",
    device_plugins: bool = True,
) -> dict[str, Any]:
    """A Node as the kubelet of an EKS managed node of `instance` registers it: capacity and allocatable as recorded
    (NODE_SHAPES; `nvidia.com/gpu` and `vpc.amazonaws.com/efa` as the device plugins advertise them, not with
    `device_plugins` False: DRA drivers publish ResourceSlices instead), the well-known labels EKS sets, the node
    group's own labels and taints. KWOK keeps it Ready (the annotation is KWOK's)."""
    recorded = recorded_node(instance.name)["status"]
    plugin_resources = ("nvidia.com/gpu", "vpc.amazonaws.com/efa")
    capacity, allocatable = (
        {k: v for k, v in recorded[key].items() if device_plugins or k not in plugin_resources}
        for key in ("capacity", "allocatable")
    )
    well_known = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": instance.name,
        "topology.kubernetes.io/zone": zone,
        "topology.kubernetes.io/region": zone[:-1],
        "eks.amazonaws.com/capacityType": "ON_DEMAND",
        **({"eks.amazonaws.com/nodegroup": nodegroup} if nodegroup else {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {**well_known, **labels}, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {"taints": taints},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "v1.36.3"},
        },
    }


class Nodes:
    """Creates nodes for one test and deletes them (and every pod bound to them) after it."""

    def __init__(self, api: ApiClient):
        self.api, self.core = api, client.CoreV1Api(api)
        self.names: list[str] = []

    def add(
        self,
        instance: catalog.InstanceType,
        count: int,
        *,
        labels: dict[str, str],
        taints: list[dict[str, str]] | None = None,
        prefix: str = "",
        **kwargs: Any,
    ) -> list[str]:
        names = []
        for _ in range(count):
            name = _node_name(f"{prefix}{instance.name}")
            body = node_object(name, instance, labels=labels, taints=taints or [], **kwargs)
            # the client takes a manifest dict as the body (ApiClient.sanitize_for_serialization passes it through);
            # the kubernetes stubs name only the model class
            self.core.create_node(body)  # pyright: ignore[reportArgumentType]
            # The API server drops a Node's status on create (the kubelet sets it): set it as the kubelet would.
            self.core.patch_node_status(name, {"status": body["status"]})
            names.append(name)
        self.names += names
        wait_for(lambda: all(_ready(self.core.read_node(n)) for n in names), f"nodes {names} Ready (KWOK)")
        return names

    def remove_all(self) -> None:
        """Deletes the nodes, then the pods still bound to them, as the pod garbage collector would 40 s later (its
        orphan quarantine): the controllers make replacements at once, for the next test's nodes. In this order, so
        that no DaemonSet pod is made again for a node about to go."""
        for name in self.names:
            try:
                self.core.delete_node(name)
            except ApiException as error:
                if error.status != 404:
                    raise
        for name in self.names:
            for pod in self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items:
                try:
                    self.core.delete_namespaced_pod(name_of(pod), namespace_of(pod), grace_period_seconds=0)
                except ApiException as error:
                    if error.status != 404:
                        raise
        self.names.clear()


def _ready(node: client.V1Node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (status_of(node).conditions or []))


@pytest.fixture
def nodes(api: ApiClient) -> Iterator[Nodes]:
    made = Nodes(api)
    yield made
    made.remove_all()


def wait_for(check: Callable[[], Any], what: str, *, timeout_s: float = 60, every_s: float = 0.25) -> Any:
    """check()'s first truthy value within timeout_s; else fails the test, saying what it waited for."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every_s)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


_namespace_numbers = itertools.count()


@pytest.fixture
def namespace(api: ApiClient) -> Iterator[str]:
    """A namespace of the test's own, deleted after it (with everything in it)."""
    name = f"t{next(_namespace_numbers)}"
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    client.CoreV1Api(api).delete_namespace(name)
