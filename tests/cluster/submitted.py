"""`ray-efa submit` and `follow` against the real API server, where no operator moves the RayJob along.

The KubeRay operator cannot finish a RayJob here: it asks the head's Ray dashboard for the job, and no Ray runs. So
tests/cluster/test_submit.py starts its control plane without the operator and moves the RayJob through the states a
real one takes (the statuses under fixtures/submit, written by hand in KubeRay 1.7's format: its README says so),
writing each through the status subresource as the operator does, one state each time the command reads the job
(RecordedProgress): every state is seen, in order, and the command reads and writes everything else (the settings
ConfigMap, the objects it creates, the RayClusters, the submitter's pod and its log) on the real API server. When the
job goes Running, the submitter runs as the operator starts it: a batch Job of the RayJob's submitterPodTemplate,
owned by the RayJob, which the real Job controller turns into a pod, the scheduler puts on the system node and KWOK
runs to Succeeded; its log (the driver's output, hand-written too) comes from KWOK's kubelet API through the API
server.

Each request the command makes is in the API server's audit log (ControlPlane.audit_events): it runs as a user of its
own (SUBMITTER, or one with a narrower Role), whose requests the audit policy records.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from tests.cluster.conftest import wait_for
from tests.cluster.controlplane import ControlPlane
from tests.cluster.rbac import user_kubeconfig
from tests.ops.cli_helpers import run_cli

FIXTURES = Path(__file__).parent / "fixtures" / "submit"
SUBMITTER = "researcher-admin"
"""The user `ray-efa submit` runs as in these tests: in system:masters (as the cluster creator is on EKS), but not
admin, so that the audit log holds its requests alone."""
SUBMITTER_CONTAINER = "ray-job-submitter"
_VERBS = {
    "get": "GET",
    "list": "GET",
    "watch": "GET",
    "create": "POST",
    "patch": "PATCH",
    "update": "PUT",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def kubeconfig(
    plane: ControlPlane, folder: Path, *, user: str = SUBMITTER, groups: tuple[str, ...] = ("system:masters",)
) -> str:
    """A kubeconfig of `user` with two contexts: the current one points nowhere, so only `--kube-context research`
    reaches the API server (as a user with several clusters has it)."""
    path = user_kubeconfig(plane, folder, user=user, groups=groups)
    document = json.loads(path.read_text())
    document["clusters"].append({"name": "none", "cluster": {"server": "https://127.0.0.1:9"}})
    document["contexts"] = [
        {"name": "research", "context": {"cluster": "test", "user": user}},
        {"name": "elsewhere", "context": {"cluster": "none", "user": user}},
    ]
    document["current-context"] = "elsewhere"
    path.write_text(json.dumps(document))
    return str(path)


def settings_args(*settings: str) -> list[str]:
    """`-c KEY=VALUE` for each setting."""
    return [a for s in settings for a in ("-c", s)]


def research_cli(command: str, kubeconfig: str, *words: str, settings: Iterable[str] = ()) -> int:
    """The exit code of `ray-efa COMMAND --kube-context research --kubeconfig KUBECONFIG WORDS -c SETTING...`, run in
    this process (tests.ops.cli_helpers.run_cli): "research" is the context of these kubeconfigs that reaches the API
    server, named as a user with several clusters names it."""
    return run_cli(command, "--kube-context", "research", "--kubeconfig", kubeconfig, *words, *settings_args(*settings))


def requests(plane: ControlPlane, user: str = SUBMITTER) -> list[tuple[str, str]]:
    """(HTTP method, path) of each request `user` made, in the order the API server answered them (its audit log)."""
    return [
        (str(_VERBS.get(e["verb"], e["verb"])), str(e["requestURI"]).partition("?")[0])
        for e in plane.audit_events(user)
    ]


def writes(plane: ControlPlane, user: str = SUBMITTER) -> list[tuple[str, str]]:
    return [(method, path) for method, path in requests(plane, user) if method != "GET"]


def deployed_settings_map(*context: str) -> dict[str, Any]:
    """The settings ConfigMap that a deployment's training job wrote into the cluster for `context` (the built-in
    function's RayJob), as the chart the stacks apply makes it (k8s.objects.ray_job_objects, which it wraps)."""
    from ray_efa.core.settings import Settings
    from ray_efa.k8s.objects import ray_job_objects

    settings = Settings.from_context(dict(c.split("=", 1) for c in context))
    return next(
        o for o in ray_job_objects(settings) if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-settings")
    )


class RecordedProgress:
    """Moves RayJob `namespace/name` through `statuses` (the last one stays), one state each time the command reads
    it, writing each through the status subresource; the submitter starts when the job goes Running and its log is
    `log`. Installed in place of ops.submit.job_state, which it then calls: the command reads the real object."""

    def __init__(self, plane: ControlPlane, namespace: str, name: str, statuses: list[dict[str, Any]], log: str | None):
        self.plane, self.namespace, self.name, self.log = plane, namespace, name, log
        self.statuses = list(statuses)
        self.api = plane.api_client()
        self.written: list[dict[str, Any]] = []
        self.submitter_pod = ""

    def wrap(self, job_state: Callable[..., Any]) -> Callable[..., Any]:
        def read(api_client: Any, namespace: str, name: str) -> Any:
            if (namespace, name) == (self.namespace, self.name):
                self.advance()
            return job_state(api_client, namespace, name)

        return read

    def advance(self) -> None:
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        if not status or status in self.written[-1:]:
            return
        if (
            status.get("jobDeploymentStatus") in ("Running", "Complete", "Failed")
            and not self.submitter_pod
            and self.log is not None
        ):
            self.start_submitter()
        objects: Any = client.CustomObjectsApi(self.api)
        job = objects.get_namespaced_custom_object("ray.io", "v1", self.namespace, "rayjobs", self.name)
        stored = objects.replace_namespaced_custom_object_status(
            "ray.io", "v1", self.namespace, "rayjobs", self.name, {**job, "status": status}
        )
        # the API server kept every recorded field (adding the CRD's defaults): the status fits the CRD it serves
        assert contains(stored.get("status"), status), (status, stored.get("status"))
        self.written.append(status)

    def start_submitter(self) -> None:
        """The submitter as KubeRay starts it: a Job of the RayJob's submitterPodTemplate, owned by the RayJob; KWOK
        runs its pod to Succeeded, and serves `log` as its container's log."""
        objects: Any = client.CustomObjectsApi(self.api)
        job = objects.get_namespaced_custom_object("ray.io", "v1", self.namespace, "rayjobs", self.name)
        owner = {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "name": self.name,
            "uid": job["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        # a manifest dict as the body: the client takes one (the kubernetes stubs name only the model)
        client.BatchV1Api(self.api).create_namespaced_job(
            self.namespace,
            {  # pyright: ignore[reportArgumentType]
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": self.name, "namespace": self.namespace, "ownerReferences": [owner]},
                "spec": {"backoffLimit": 2, "template": job["spec"]["submitterPodTemplate"]},
            },
        )
        core: Any = client.CoreV1Api(self.api)
        pod = wait_for(
            lambda: next(
                iter(core.list_namespaced_pod(self.namespace, label_selector=f"job-name={self.name}").items), None
            ),
            f"the submitter pod of Job {self.namespace}/{self.name}",
        )
        self.submitter_pod = pod.metadata.name
        assert self.log is not None
        self.plane.serve_logs(self.namespace, {SUBMITTER_CONTAINER: self.log}, pods=[self.submitter_pod])
        wait_for(
            lambda: core.read_namespaced_pod(self.submitter_pod, self.namespace).status.phase == "Succeeded",
            f"pod {self.namespace}/{self.submitter_pod} Succeeded (KWOK)",
            timeout_s=60,
        )
        wait_for(lambda: self._log_served(core), f"KWOK serving the log of {self.submitter_pod}")

    def _log_served(self, core: Any) -> bool:
        try:
            response: Any = core.read_namespaced_pod_log(
                self.submitter_pod, self.namespace, container=SUBMITTER_CONTAINER, _preload_content=False
            )
        except ApiException:
            return False
        return response.data.decode() == self.log


def progress(
    monkeypatch: Any, plane: ControlPlane, namespace: str, name: str, outcome: str, *, submitter: bool = True
) -> RecordedProgress:
    """RayJob `name` in `namespace` moved through the recorded statuses of `outcome` (complete, unproven) while the
    command runs, with the recorded submitter log of that outcome (`submitter` False: no submitter is started)."""
    from ray_efa.ops import submit as ops_submit

    moved = RecordedProgress(
        plane,
        namespace,
        name,
        load(f"statuses_{outcome}.json"),
        (FIXTURES / f"submitter_{outcome}.log").read_text() if submitter else None,
    )
    monkeypatch.setattr(ops_submit, "job_state", moved.wrap(ops_submit.job_state))
    return moved


def clear(api: ApiClient, namespace: str) -> None:
    """Everything a test left in `namespace`: RayJobs (their Jobs and owned ConfigMaps go with them, the garbage
    collector's work), RayClusters, ConfigMaps and NetworkPolicies; waits until they are gone."""
    objects: Any = client.CustomObjectsApi(api)
    core: Any = client.CoreV1Api(api)
    networking: Any = client.NetworkingV1Api(api)
    batch: Any = client.BatchV1Api(api)
    for plural in ("rayjobs", "rayclusters"):
        for item in objects.list_namespaced_custom_object("ray.io", "v1", namespace, plural)["items"]:
            _gone(
                lambda p=plural, n=item["metadata"]["name"]: objects.delete_namespaced_custom_object(
                    "ray.io", "v1", namespace, p, n
                )
            )
    for job in batch.list_namespaced_job(namespace).items:
        _gone(lambda n=job.metadata.name: batch.delete_namespaced_job(n, namespace, propagation_policy="Background"))
    for config_map in core.list_namespaced_config_map(namespace).items:
        if config_map.metadata.name != "kube-root-ca.crt":
            _gone(lambda n=config_map.metadata.name: core.delete_namespaced_config_map(n, namespace))
    for policy in networking.list_namespaced_network_policy(namespace).items:
        _gone(lambda n=policy.metadata.name: networking.delete_namespaced_network_policy(n, namespace))
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    wait_for(lambda: not _left(api, namespace), f"namespace {namespace} emptied", timeout_s=90)


def _left(api: ApiClient, namespace: str) -> list[str]:
    objects: Any = client.CustomObjectsApi(api)
    core: Any = client.CoreV1Api(api)
    batch: Any = client.BatchV1Api(api)
    return [
        *(
            f"{p}/{i['metadata']['name']}"
            for p in ("rayjobs", "rayclusters")
            for i in objects.list_namespaced_custom_object("ray.io", "v1", namespace, p)["items"]
        ),
        *(
            f"configmap/{c.metadata.name}"
            for c in core.list_namespaced_config_map(namespace).items
            if c.metadata.name != "kube-root-ca.crt"
        ),
        *(f"job/{j.metadata.name}" for j in batch.list_namespaced_job(namespace).items),
        *(f"pod/{p.metadata.name}" for p in core.list_namespaced_pod(namespace).items),
    ]


def _gone(call: Callable[[], Any]) -> None:
    try:
        call()
    except ApiException as error:
        if error.status != 404:
            raise


def contains(stored: Any, written: Any) -> bool:
    """Whether `stored` (what the API server holds) has every field of `written` with its value; the server adds
    its own (metadata, defaults), never changes or drops one of ours."""
    if isinstance(written, dict):
        return isinstance(stored, dict) and all(k in stored and contains(stored[k], v) for k, v in written.items())
    if isinstance(written, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(written)
            and all(contains(s, w) for s, w in zip(stored, written, strict=True))
        )
    return stored == written


@contextmanager
def module_nodes(api: ApiClient, labels: dict[str, str]) -> Iterator[list[str]]:
    """A system node for the submitter pods (the template's nodeSelector: the default system labels and `labels`),
    for a module; removed after it."""
    from ray_efa.core import catalog
    from ray_efa.core.scheduling import SYSTEM_NODE_LABELS
    from tests.cluster.conftest import Nodes

    made = Nodes(api)
    names = made.add(
        catalog.SYSTEM_INSTANCES["m7i.large"],
        1,
        labels={**SYSTEM_NODE_LABELS, **labels},
        prefix="sys-",
        nodegroup="systemnodes",
    )
    try:
        yield names
    finally:
        made.remove_all()
