"""The cluster stack's admission policies (k8s.admission_policy) on the real API server, with the real KubeRay
operator, Job controller and scheduler: the stack's own training job and a researcher's `ray-efa submit` are admitted
all the way to their pods, and every escalation a RayJob could carry into the pods the operator creates is refused,
as are a researcher's changes to objects they did not create."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from ray_efa.k8s.admission_policy import SUBMITTED_BY_ANNOTATION
from tests.cluster.conftest import wait_for
from tests.cluster.controlplane import ControlPlane
from tests.cluster.deployment import Deployment, ray_cluster_ready, ray_job_cluster
from tests.cluster.objects import labels_of, meta_of, name_of, spec_of
from tests.cluster.rbac import api_client_of, user_kubeconfig
from tests.cluster.workload import apply_in_order, stack_manifests

pytestmark = pytest.mark.synth  # the objects come from a real synth of the stacks

NS = "guarded"
RESEARCHER_ARN = "arn:aws:iam::111122223333:role/Researcher"
JOB = "train-efa"  # the deployment's training job (jobName's default)
RAY = "ray.io"


class Guarded:
    """The default stacks with one researcher and the workload in NS, synthesized once, their cluster-stack objects
    (namespace, service account, RBAC, admission policies) applied, nodes and add-ons up, and two researchers'
    kubeconfigs."""

    def __init__(self, plane: ControlPlane, api: ApiClient, folder: Path) -> None:
        from tests.infra.conftest import synthesize

        synth = synthesize(researcherPrincipalArns=RESEARCHER_ARN, namespace=NS)
        self.settings = synth.settings
        self.gpu_objects = [o for o in stack_manifests(dict(synth.gpu.to_json())) if o["kind"] != "Namespace"]
        cluster_objects = stack_manifests(dict(synth.cluster.to_json()))
        assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= {o["kind"] for o in cluster_objects}
        (entry,) = [
            r["Properties"]
            for r in synth.cluster.to_json()["Resources"].values()
            if r["Type"] == "AWS::EKS::AccessEntry" and r["Properties"]["PrincipalArn"] == RESEARCHER_ARN
        ]
        (self.group,) = entry["KubernetesGroups"]
        self.deployment = Deployment.up(plane, api, self.settings, job=False)
        apply_in_order(plane, cluster_objects)
        self.kubeconfig = user_kubeconfig(plane, folder / "alice", user="alice", groups=(self.group,))
        self.other_kubeconfig = user_kubeconfig(plane, folder / "bob", user="bob", groups=(self.group,))
        self.alice, self.bob = api_client_of(self.kubeconfig), api_client_of(self.other_kubeconfig)
        # A policy is enforced once the API server's informer has it (about a second): wait for a refusal.
        wait_for(
            lambda: (_refusal(lambda: _create_service(api, "probe", "LoadBalancer", dry_run="All")) or (0,))[0] == 422,
            "the workload admission policy enforced",
        )


def _create_service(api: ApiClient, name: str, service_type: str, **kwargs: Any) -> Any:
    # a manifest dict as the body: the client takes one (the kubernetes stubs name only the model)
    return client.CoreV1Api(api).create_namespaced_service(
        NS,
        {  # pyright: ignore[reportArgumentType]
            "metadata": {"name": name},
            "spec": {"type": service_type, "ports": [{"port": 8265}]},
        },
        **kwargs,
    )


def _refusal(call: Callable[[], Any]) -> tuple[int, str] | None:
    """(status, message) of the API server's refusal of call(), None when it succeeds."""
    try:
        call()
    except ApiException as error:
        return error.status or 0, json.loads(error.body or "{}").get("message", str(error.body))
    return None


@pytest.fixture(scope="module")
def guarded(control_plane: ControlPlane, api: ApiClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    made = Guarded(control_plane, api, tmp_path_factory.mktemp("users"))
    yield made
    made.deployment.remove()


def _submitted_by(config_map: client.V1ConfigMap) -> str | None:
    return (meta_of(config_map).annotations or {}).get(SUBMITTED_BY_ANNOTATION)


def _ray_pods(api: ApiClient) -> list[client.V1Pod]:
    return client.CoreV1Api(api).list_namespaced_pod(NS).items


def test_the_stacks_own_job_is_admitted_to_its_pods(control_plane: ControlPlane, api: ApiClient, guarded: Guarded):
    # WHEN the GPU stack's objects (the training RayJob, its ConfigMaps and NetworkPolicy) are applied as admin
    apply_in_order(control_plane, guarded.gpu_objects)
    # THEN the operator's RayCluster and its head and worker pods, and the Job controller's submitter pod, pass the
    # policy: the cluster becomes ready, the submitter runs
    cluster = ray_job_cluster(api, NS, JOB)
    ray_cluster_ready(api, NS, cluster)
    wait_for(
        lambda: [p for p in _ray_pods(api) if labels_of(p).get("app.kubernetes.io/component") == "ray-job-submitter"],
        f"the submitter pod of RayJob {JOB}",
    )
    # AND every pod has no service-account token and the runtime's default seccomp profile
    for pod in _ray_pods(api):
        spec = spec_of(pod)
        assert spec.automount_service_account_token is False, name_of(pod)
        seccomp = spec.security_context.seccomp_profile if spec.security_context else None
        assert seccomp is not None and seccomp.type == "RuntimeDefault", name_of(pod)
        assert not any(
            v.projected and any(s.service_account_token for s in v.projected.sources or []) for v in spec.volumes or []
        ), name_of(pod)


def test_a_researcher_submits_a_job_of_their_own(guarded: Guarded, api: ApiClient, capsys: pytest.CaptureFixture[str]):
    from ray_efa.cli import main

    code = main(
        [
            "submit",
            "--kubeconfig",
            str(guarded.kubeconfig),
            "--deployed",
            f"{NS}/{JOB}",
            "--name",
            "mine",
            "--timeout",
            "3",
            "--poll",
            "0.5",
        ]
    )
    out = capsys.readouterr()
    text = out.out + out.err
    assert f"submitted RayJob {NS}/mine" in text and "warning: could not make" not in text, f"exit {code}: {text}"
    # the operator's RayCluster of it and its head pod were admitted too
    cluster = ray_job_cluster(api, NS, "mine")
    wait_for(
        lambda: [p for p in _ray_pods(api) if labels_of(p).get("ray.io/cluster") == cluster],
        f"the pods of RayCluster {cluster}",
    )
    config_maps = client.CoreV1Api(api).list_namespaced_config_map(NS).items
    mine = [c for c in config_maps if _submitted_by(c) == "alice"]
    assert mine and all(c.immutable and meta_of(c).owner_references for c in mine), mine


def _the_stacks_job(guarded: Guarded, name: str) -> dict[str, Any]:
    job = copy.deepcopy(next(o for o in guarded.gpu_objects if o["kind"] == "RayJob"))
    # marked as alice's, as `ray-efa submit` marks hers: the researchers' policy admits it, so a refusal is the field's
    job["metadata"] = {"name": name, "namespace": NS, "annotations": {SUBMITTED_BY_ANNOTATION: "alice"}}
    return job


def _head(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]


def _worker(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]


def _set(path: Callable[[dict[str, Any]], dict[str, Any]], **fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda job: path(job).update(fields)


def _container(path: Callable[[dict[str, Any]], dict[str, Any]], **fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda job: path(job)["containers"][0].update(fields)


def _security(path: Callable[[dict[str, Any]], dict[str, Any]], **fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda job: path(job)["containers"][0]["securityContext"].update(fields)


def _add_volume(volume: dict[str, Any], *, read_only: bool = True) -> Callable[[dict[str, Any]], None]:
    def change(job: dict[str, Any]) -> None:
        _head(job)["volumes"].append({"name": "extra", **volume})
        _head(job)["containers"][0]["volumeMounts"].append(
            {"name": "extra", "mountPath": "/extra", "readOnly": read_only}
        )

    return change


def _submitter(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["submitterPodTemplate"]["spec"]


ESCALATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "privileged worker": (_security(_worker, privileged=True), "privileged"),
    "privileged submitter": (_security(_submitter, privileged=True), "privileged"),
    "host network": (_set(_head, hostNetwork=True), "hostNetwork"),
    "host PID": (_set(_head, hostPID=True), "hostPID"),
    "host IPC": (_set(_worker, hostIPC=True), "hostIPC"),
    "hostPath /": (_add_volume({"hostPath": {"path": "/"}}), "hostPath.path"),
    "writable /sys/devices": (_add_volume({"hostPath": {"path": "/sys/devices"}}, read_only=False), "readOnly"),
    "another service account": (_set(_head, serviceAccountName="kuberay-operator"), "serviceAccountName"),
    "a Secret volume": (_add_volume({"secret": {"secretName": "any"}}), "secret"),
    "a projected Secret": (_add_volume({"projected": {"sources": [{"secret": {"name": "any"}}]}}), "projected"),
    "env from a Secret": (
        _container(
            _head,
            env=[
                {
                    "name": "RAY_AUTH_TOKEN",
                    "valueFrom": {"secretKeyRef": {"name": "another-cluster", "key": "auth_token"}},
                }
            ],
        ),
        "secretKeyRef",
    ),
    "envFrom a Secret": (_container(_head, envFrom=[{"secretRef": {"name": "any"}}]), "envFrom"),
    "SYS_ADMIN": (_security(_worker, capabilities={"add": ["SYS_ADMIN"], "drop": ["ALL"]}), "capabilities.add"),
    "privilege escalation": (_security(_head, allowPrivilegeEscalation=True), "allowPrivilegeEscalation"),
    "a service-account token": (_set(_head, automountServiceAccountToken=True), "automountServiceAccountToken"),
    "a LoadBalancer": (
        lambda job: job["spec"]["rayClusterSpec"]["headGroupSpec"].update(serviceType="LoadBalancer"),
        "serviceType",
    ),
    "another cluster": (
        lambda job: job["spec"].update(clusterSelector={"ray.io/cluster": "theirs"}),
        "clusterSelector",
    ),
    "the autoscaler": (
        lambda job: job["spec"]["rayClusterSpec"].update(enableInTreeAutoscaling=True),
        "enableInTreeAutoscaling",
    ),
}


@pytest.mark.parametrize("escalation", ESCALATIONS)
def test_an_escalating_rayjob_is_refused_naming_the_field(guarded: Guarded, escalation: str):
    change, field = ESCALATIONS[escalation]
    job = _the_stacks_job(guarded, "escalating")
    change(job)
    refusal = _refusal(
        lambda: client.CustomObjectsApi(guarded.alice).create_namespaced_custom_object(RAY, "v1", NS, "rayjobs", job)
    )
    assert refusal is not None, f"{escalation}: admitted"
    status, message = refusal
    assert status == 422 and "ValidatingAdmissionPolicy" in message and field in message, (status, message)


def test_no_escalated_pod_or_service_comes_of_them(guarded: Guarded, api: ApiClient):
    # A Pod or a Service in the namespace made directly (by anyone: here the admin) is held to the same rules as
    # the operator's
    pod = {
        "metadata": {"name": "host"},
        "spec": {
            "hostNetwork": True,
            "automountServiceAccountToken": False,
            "containers": [{"name": "x", "image": "busybox"}],
        },
    }
    core = client.CoreV1Api(api)
    refusal = _refusal(lambda: core.create_namespaced_pod(NS, pod))  # pyright: ignore[reportArgumentType]
    assert refusal is not None and "hostNetwork" in refusal[1], refusal
    refusal = _refusal(lambda: _create_service(api, "exposed", "LoadBalancer"))
    assert refusal is not None and "spec.type" in refusal[1], refusal
    # AND nothing in the namespace is privileged, on a host namespace, or exposed
    for pod in _ray_pods(api):
        spec = spec_of(pod)
        assert not (spec.host_network or spec.host_pid or spec.host_ipc), name_of(pod)
        assert not any(c.security_context and c.security_context.privileged for c in spec.containers), name_of(pod)
    services = client.CoreV1Api(api).list_namespaced_service(NS).items
    types = {name_of(s): spec_of(s).type for s in services}
    assert set(types.values()) <= {"ClusterIP"}, types


def test_a_researcher_cannot_patch_what_they_did_not_create(guarded: Guarded, api: ApiClient):
    # GIVEN the deployment's settings ConfigMap (the admin's) and alice's job's code ConfigMap
    core, as_alice, as_bob = (client.CoreV1Api(api), client.CoreV1Api(guarded.alice), client.CoreV1Api(guarded.bob))
    admins = f"{JOB}-settings"
    core.read_namespaced_config_map(admins, NS)
    alices = wait_for(
        lambda: [name_of(c) for c in core.list_namespaced_config_map(NS).items if _submitted_by(c) == "alice"],
        "alice's ConfigMaps",
    )[0]
    data = {"data": {"settings.json": "{}"}}
    label = {"metadata": {"labels": {"x": "y"}}}
    # THEN a researcher patches neither the admin's ConfigMap (its data, or only its labels) nor another's
    for who, api_, name, body in (
        ("alice", as_alice, admins, data),
        ("alice", as_alice, admins, label),
        ("bob", as_bob, alices, label),
    ):
        refusal = _refusal(lambda a=api_, n=name, b=body: a.patch_namespaced_config_map(n, NS, b))
        assert refusal is not None and refusal[0] == 422 and SUBMITTED_BY_ANNOTATION in refusal[1], (who, name, refusal)
    # AND cannot slip in a ConfigMap that is not marked as theirs, or that can change
    create = as_alice.create_namespaced_config_map
    for marks, immutable in (
        ({}, True),
        ({SUBMITTED_BY_ANNOTATION: "bob"}, True),
        ({SUBMITTED_BY_ANNOTATION: "alice"}, False),
    ):
        made = {
            "metadata": {"name": f"{JOB}-settings-x", "annotations": marks},
            "immutable": immutable,
            "data": {"settings.json": "{}"},
        }
        refusal = _refusal(lambda b=made: create(NS, b))  # pyright: ignore[reportArgumentType]
        assert refusal is not None and refusal[0] == 422, (marks, immutable, refusal)
    assert core.read_namespaced_config_map(admins, NS).data != data["data"]


def test_a_researcher_cancels_their_own_job_and_no_one_elses(
    guarded: Guarded, api: ApiClient, capsys: pytest.CaptureFixture[str]
):
    from ray_efa.cli import main

    # GIVEN alice's own job, submitted with `ray-efa submit` (its RayJob annotated with her user name), and the
    # deployment's training job
    submitted = main(
        [
            "submit",
            "--kubeconfig",
            str(guarded.kubeconfig),
            "--deployed",
            f"{NS}/{JOB}",
            "--name",
            "alices",
            "--timeout",
            "1",
            "--poll",
            "0.5",
        ]
    )
    text = "".join(capsys.readouterr())
    assert f"submitted RayJob {NS}/alices" in text, f"exit {submitted}: {text}"
    custom = client.CustomObjectsApi(api)
    job: Any = custom.get_namespaced_custom_object(RAY, "v1", NS, "rayjobs", "alices")
    assert job["metadata"]["annotations"][SUBMITTED_BY_ANNOTATION] == "alice"
    custom.get_namespaced_custom_object(RAY, "v1", NS, "rayjobs", JOB)

    def cancel(kubeconfig: Path, name: str) -> tuple[int, str]:
        code = main(["cancel", name, "--yes", "--kubeconfig", str(kubeconfig), "-c", f"namespace={NS}"])
        return code, "".join(capsys.readouterr())

    # WHEN bob cancels alice's job, or alice the deployment's, THEN the admission policy refuses it (exit 1, the
    # annotation named) and both are still there
    for who, kubeconfig, name in (("bob", guarded.other_kubeconfig, "alices"), ("alice", guarded.kubeconfig, JOB)):
        code, text = cancel(kubeconfig, name)
        assert code == 1 and "422" in text and SUBMITTED_BY_ANNOTATION in text, (who, name, code, text)
        assert "delete only the RayJobs they submitted" in text, text
        custom.get_namespaced_custom_object(RAY, "v1", NS, "rayjobs", name)
    # WHEN alice cancels her own, THEN it is deleted (exit 0) and goes
    code, text = cancel(guarded.kubeconfig, "alices")
    assert code == 0 and f"deleted RayJob {NS}/alices" in text, (code, text)
    wait_for(
        lambda: _refusal(lambda: custom.get_namespaced_custom_object(RAY, "v1", NS, "rayjobs", "alices")),
        "RayJob alices gone",
    )
