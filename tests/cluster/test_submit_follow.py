"""`ray-efa submit`, `follow` and `verify` against the real control plane, through a kubeconfig as a user runs them.

The cluster is deployed (tests/cluster/deployment.py) with its training job's settings ConfigMap (`<job>-settings`,
what submit builds a job for) and no job running. What the real KubeRay operator does with a submitted RayJob where no
Ray runs is what these tests see: the cluster comes up on the nodes, the submitter Job's pod ends at once (KWOK), and
30 s later the operator fails the RayJob, finding no Ray job behind it. No kubelet runs: KWOK's kubelet API serves
the pod logs a test gives it (ControlPlane.serve_logs), and answers 400 for any other, which the commands take for a
container that has not started (the submitter's) or say they cannot read (an init container's). A failing init
container is KWOK's init-container-crashloop stage (stages.yaml) on pods the real operator made from a template
carrying its label, or labelled at admission (a MutatingAdmissionPolicy) where `submit` makes the template.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from ray_efa.core.settings import Settings
from tests.cluster.conftest import served_kuberay, wait_for
from tests.cluster.controlplane import ControlPlane
from tests.cluster.deployment import Deployment, exists, kubeconfig_with_context, service_account, training_job
from tests.cluster.objects import name_of, namespace_of
from tests.cluster.submitted import research_cli

NAMESPACE = "ops-submit"
DEPLOYED = {
    "jobName": "mlp-exp",
    "storagePath": "s3://research-checkpoints/runs",
    "namespace": NAMESPACE,
    "kuberayVersion": served_kuberay(),
}
"""The deployment: the defaults (2 x g6.12xlarge), its bucket, its training job mlp-exp in namespace ops-submit, for
the KubeRay version whose CRDs the API server serves (conftest.served_kuberay)."""
JOB = "mlp-exp-run1"
LOCAL = (
    "trainFunction=own_training.train:train_func",
    "codeDir=examples/own-training/src",
    "storagePath=s3://research-checkpoints/runs",
    'trainConfig={"epochs": 3}',
    "jobName=mlp-exp",
)
FAILING = "ray-efa.test/fails-init-container"
ON_THE_DEPLOYMENT = ("--deployed", f"{NAMESPACE}/mlp-exp", "--poll", "0.5", "--timeout", "120")
"""submit's flags for a job of the deployment's settings that it follows for at most two minutes."""


def settings_maps(api: ApiClient) -> list[str]:
    return [
        f"{namespace_of(c)}/{name_of(c)}"
        for c in client.CoreV1Api(api).list_config_map_for_all_namespaces().items
        if name_of(c).endswith("-settings")
    ]


@pytest.fixture(scope="module")
def deployed(control_plane: ControlPlane, api: ApiClient) -> Iterator[Deployment]:
    wait_for(lambda: not settings_maps(api), "no settings ConfigMap of an earlier test", timeout_s=90)
    made = Deployment.up(control_plane, api, Settings.from_context(DEPLOYED), job=False)
    core = client.CoreV1Api(api)
    wait_for(lambda: not exists(lambda: core.read_namespace(NAMESPACE)), f"namespace {NAMESPACE} gone", timeout_s=90)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    core.create_namespaced_service_account(
        NAMESPACE, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=service_account(made.settings)))
    )
    # the deployment's training job ran and was deleted since: its settings ConfigMap (and the code's) stay
    control_plane.apply([o for o in training_job(made.settings) if o["kind"] == "ConfigMap"])
    yield made
    made.remove()


@pytest.fixture
def kubeconfig(control_plane: ControlPlane, tmp_path: Path) -> str:
    return str(kubeconfig_with_context(control_plane, tmp_path))


def _delete_job(api: ApiClient, name: str) -> None:
    objects = client.CustomObjectsApi(api)
    try:
        objects.delete_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayjobs", name)
    except ApiException as error:
        if error.status != 404:
            raise
    wait_for(
        lambda: (
            not client.CoreV1Api(api)
            .list_namespaced_pod(NAMESPACE, label_selector=f"app.kubernetes.io/instance={name}")
            .items
        ),
        f"the pods of RayJob {name} gone",
        timeout_s=90,
    )


SUBMITTER_LOG = (
    "Job submission server address: http://mlp-exp-run1-head-svc.ops-submit.svc.cluster.local:8265\n"
    "Job 'mlp-exp-run1-wq7zt' submitted successfully\n"
)
"""What the submitter pod's container printed (KWOK's kubelet API serves it: ControlPlane.serve_logs)."""


def test_submit_builds_the_job_for_the_deployed_cluster_and_follows_the_operator_to_its_end(
    deployed: Deployment, api: ApiClient, control_plane: ControlPlane, kubeconfig: str, capsys
):
    served = control_plane.serve_logs(NAMESPACE, {"ray-job-submitter": SUBMITTER_LOG})
    # WHEN a researcher submits their function to the deployment, named with --deployed
    started = time.monotonic()
    code = research_cli("submit", kubeconfig, "--name", JOB, *ON_THE_DEPLOYMENT, settings=LOCAL)
    out, err = capsys.readouterr()
    try:
        # THEN the job was built from the ConfigMap the deployment wrote, created in its namespace
        assert f"(from ConfigMap {NAMESPACE}/mlp-exp-settings)" in err, err
        # and followed through the states the real operator gave it, in its order: Initializing while its cluster came
        # up on the nodes, Running once the submitter started, Failed when no Ray job was behind it (no Ray runs here).
        # A state may pass between two polls (KWOK readies the cluster's pods in well under the 0.5 s poll, so a run
        # may see no Initializing): the order is what must hold, not that every state was seen.
        states = [line.split("] ", 1)[1] for line in err.splitlines() if line.startswith("[")]
        seen = [s.split(" ", 2)[2].split(",")[0].split(" (")[0] for s in states]
        order = ["New", "Initializing", "Running", "Failed"]
        assert set(seen) <= set(order) and seen == sorted(seen, key=order.index), states
        assert seen[-2:] == ["Running", "Failed"], states
        assert f"RayJob {NAMESPACE}/{JOB}: Failed (FAILED)" in out
        assert "did not reach terminal state within 30s" in out  # the operator's own message
        # the log of the submitter pod the operator made, read through the API server from the node's kubelet API
        # (KWOK's), then the verdict of a log without the gate's lines
        assert SUBMITTER_LOG in out
        assert "transport gate: no verdict in the submitter's log" in out
        assert code == 1 and out.rstrip().endswith("exit code 1")
        assert time.monotonic() - started < 110
        # the objects the RayJob owns (ownerReferences written by submit) go with it: the real garbage collector
        core = client.CoreV1Api(api)
        owned = [
            name_of(c) for c in core.list_namespaced_config_map(NAMESPACE).items if name_of(c).startswith(f"{JOB}-")
        ]
        assert f"{JOB}-settings" in owned
    finally:
        client.CustomObjectsApi(api).delete_cluster_custom_object("kwok.x-k8s.io", "v1alpha1", "clusterlogs", served)
        _delete_job(api, JOB)
    wait_for(
        lambda: (
            not [
                c
                for c in client.CoreV1Api(api).list_namespaced_config_map(NAMESPACE).items
                if name_of(c).startswith(f"{JOB}-")
            ]
        ),
        "the job's ConfigMaps deleted with it",
    )


def test_a_named_deployment_that_is_not_there_is_exit_2(deployed, api, kubeconfig, capsys):
    code = research_cli("submit", kubeconfig, "--deployed", "research/train-efa", settings=LOCAL)
    assert code == 2
    assert "no ConfigMap research/train-efa-settings in the cluster (404 Not Found)" in capsys.readouterr().err


def test_a_local_value_that_contradicts_the_deployment_is_exit_2_and_nothing_is_created(
    deployed, api, kubeconfig, capsys
):
    code = research_cli("submit", kubeconfig, "--json", "--name", JOB, settings=(*LOCAL, "gpuInstanceType=p5.48xlarge"))
    out, err = capsys.readouterr()
    assert code == 2, err
    problems = {p["key"]: p for p in json.loads(out)["problems"]}
    assert "gpuInstanceType" in problems
    assert (
        f'the cluster was deployed with "g6.12xlarge" (ConfigMap {NAMESPACE}/mlp-exp-settings)'
        in problems["gpuInstanceType"]["message"]
    )
    assert not client.CustomObjectsApi(api).list_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayjobs")["items"]


def test_follow_of_a_job_that_is_not_there_is_exit_2_naming_it(deployed, kubeconfig, capsys):
    code = research_cli("follow", kubeconfig, "no-such-job", settings=[f"namespace={NAMESPACE}"])
    assert code == 2
    assert (
        f"no RayJob {NAMESPACE}/no-such-job (kubectl -n {NAMESPACE} get rayjobs lists them)" in capsys.readouterr().err
    )


# -- a failing init container ------------------------------------------------------------------------------------------


def failing_job(
    plane: ControlPlane, settings: Settings, container: str, group: str = "head", exit_code: int = 1
) -> str:
    """The settings' training job applied with `container` of its `group` pods failing (KWOK's stage); its name."""
    objects = training_job(settings)
    job = next(o for o in objects if o["kind"] == "RayJob")
    spec = job["spec"]["rayClusterSpec"]
    template = spec["headGroupSpec"]["template"] if group == "head" else spec["workerGroupSpecs"][0]["template"]
    assert container in [c["name"] for c in template["spec"]["initContainers"]], template["spec"]["initContainers"]
    template["metadata"]["labels"][FAILING] = container
    template["metadata"].setdefault("annotations", {})["ray-efa.test/exit-code"] = str(exit_code)
    plane.apply([o for o in objects if o["kind"] != "RayJob"])
    plane.apply([job])
    return job["metadata"]["name"]


def test_follow_ends_within_a_minute_naming_the_failed_pip_install(deployed, api, control_plane, kubeconfig, capsys):
    # GIVEN a job whose head's pip install of pipPackages fails (its pods as the operator made them)
    settings = Settings.from_context({**DEPLOYED, "jobName": "pip-fails", "pipPackages": '["einops==0.9.9"]'})
    name = failing_job(control_plane, settings, "install-packages")
    try:
        started = time.monotonic()
        code = research_cli(
            "follow", kubeconfig, name, "--poll", "0.5", "--timeout", "600", settings=[f"namespace={NAMESPACE}"]
        )
        elapsed = time.monotonic() - started
        err = capsys.readouterr().err
        # THEN exit 1 within a minute, not at the deadline, naming the pod, the container and its exit code
        assert code == 1, err
        assert elapsed < 60
        assert f"RayJob {NAMESPACE}/{name} cannot start: an init container of its Ray pods failed" in err
        (head,) = (
            client.CoreV1Api(api)
            .list_namespaced_pod(NAMESPACE, label_selector=f"app.kubernetes.io/instance={name},ray.io/node-type=head")
            .items
        )
        assert (
            f"pod {NAMESPACE}/{name_of(head)}: init container install-packages failed (exit code 1, "
            "CrashLoopBackOff, 3 restarts)"
        ) in err
        assert "its log cannot be read" in err  # no kubelet: said, not hidden
        assert f"kubectl -n {NAMESPACE} delete rayjob {name}" in err
    finally:
        _delete_job(api, name)


def test_verify_fails_the_init_container_check_alone_and_stops_waiting_on_it(deployed, api, control_plane):
    from ray_efa.ops.init_failures import failing_init_containers
    from ray_efa.ops.verify import INIT_CONTAINERS_CHECK, Expectations, verify_until

    # GIVEN a job whose workers' pip install fails (exit 2)
    settings = Settings.from_context({**DEPLOYED, "jobName": "pip-fails-too", "pipPackages": '["einops==0.9.9"]'})
    name = failing_job(control_plane, settings, "install-packages", group="worker", exit_code=2)
    core = client.CoreV1Api(api)
    try:
        # both workers' reports: the check below names each, and one worker's can come seconds after the other's
        wait_for(
            lambda: (
                len(
                    failing_init_containers(
                        core.list_namespaced_pod(
                            NAMESPACE, label_selector=f"app.kubernetes.io/instance={name},ray.io/node-type=worker"
                        ).items
                    )
                )
                >= 2
            ),
            "the kubelet's (KWOK's) report of the failing init container on both workers",
        )
        # WHEN verified with --wait 600
        sleeps: list[float] = []
        report = verify_until(
            api, Expectations.from_settings(settings), timeout_s=600, sleep=sleeps.append, clock=lambda: sum(sleeps)
        )
        # THEN the check names each worker's container and exit code, and nothing was waited for
        detail = next(c for c in report.failed if c.id == INIT_CONTAINERS_CHECK).detail
        assert detail.count("init container install-packages failed (exit code 2, CrashLoopBackOff, 3 restarts)") == 2
        assert "its log cannot be read" in detail
        assert sleeps == []
    finally:
        _delete_job(api, name)


def fail_init_container_at_admission(plane: ControlPlane, job: str, container: str, exit_code: int = 1) -> None:
    """A MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in 1.36) that labels the head pod of RayJob
    `job` in NAMESPACE for KWOK's init-container-crashloop stage as the API server admits it: the pods `submit`
    makes the operator create fail `container` from their first status on, as a failing pip install does."""
    name = f"fail-{job}"
    condition = (
        f"has(object.metadata.labels) && object.metadata.labels.exists(k, k == 'ray.io/node-type') && "
        f"object.metadata.labels['ray.io/node-type'] == 'head' && "
        f"object.metadata.labels.exists(k, k == 'app.kubernetes.io/instance') && "
        f"object.metadata.labels['app.kubernetes.io/instance'] == '{job}'"
    )
    mutation = (
        f'Object{{metadata: Object.metadata{{labels: {{"{FAILING}": "{container}"}}, '
        f'annotations: {{"ray-efa.test/exit-code": "{exit_code}"}}}}}}'
    )
    plane.apply(
        [
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingAdmissionPolicy",
                "metadata": {"name": name},
                "spec": {
                    "matchConstraints": {
                        "resourceRules": [
                            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                        ]
                    },
                    "matchConditions": [{"name": "the-jobs-head", "expression": condition}],
                    "failurePolicy": "Fail",
                    "reinvocationPolicy": "Never",
                    "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": mutation}}],
                },
            },
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingAdmissionPolicyBinding",
                "metadata": {"name": name},
                "spec": {
                    "policyName": name,
                    "matchResources": {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
                    },
                },
            },
        ]
    )
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "probe",
            "namespace": NAMESPACE,
            "labels": {"ray.io/node-type": "head", "app.kubernetes.io/instance": job},
        },
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }
    wait_for(
        lambda: FAILING in (plane.apply([probe], dry_run=True)[0]["metadata"].get("labels") or {}),
        "the MutatingAdmissionPolicy in force (a dry-run pod labelled)",
    )


def test_submit_ends_within_a_minute_naming_the_failed_pip_install_and_its_last_log_lines(
    deployed, api, control_plane, kubeconfig, capsys
):
    # GIVEN a job whose head's pip install of pipPackages fails: the pods the operator makes for it are labelled
    # at admission for KWOK's failing init container, whose failed run's log KWOK's kubelet API serves
    name = "pip-fails-submit"
    fail_init_container_at_admission(control_plane, name, "install-packages")
    served = control_plane.serve_logs(
        NAMESPACE,
        {"install-packages": "Collecting einops==0.9.9\n"},
        previous={
            "install-packages": "Collecting einops==0.9.9\nERROR: Could not find a version that satisfies the requirement "
            "einops==0.9.9\nERROR: No matching distribution found for einops==0.9.9\n"
        },
    )
    admission = client.AdmissionregistrationV1Api(api)
    try:
        # WHEN it is submitted (its deadline: an hour; the test stops following after 2 minutes)
        started = time.monotonic()
        code = research_cli(
            "submit", kubeconfig, "--name", name, *ON_THE_DEPLOYMENT, settings=(*LOCAL, 'pipPackages=["einops==0.9.9"]')
        )
        elapsed = time.monotonic() - started
        err = capsys.readouterr().err
        # THEN exit 1 within a minute, not at the deadline, naming the pod, the container, its exit code and the last
        # lines of its failed run's log
        assert code == 1, err
        assert elapsed < 60
        assert f"RayJob {NAMESPACE}/{name} cannot start: an init container of its Ray pods failed" in err
        core: Any = client.CoreV1Api(api)
        (head,) = core.list_namespaced_pod(
            NAMESPACE, label_selector=f"app.kubernetes.io/instance={name},ray.io/node-type=head"
        ).items
        assert (
            f"pod {NAMESPACE}/{name_of(head)}: init container install-packages failed (exit code 1, "
            "CrashLoopBackOff, 3 restarts)"
        ) in err
        assert "    ERROR: No matching distribution found for einops==0.9.9" in err
        assert f"kubectl -n {NAMESPACE} delete rayjob {name}" in err
    finally:
        admission.delete_mutating_admission_policy_binding(f"fail-{name}")
        admission.delete_mutating_admission_policy(f"fail-{name}")
        client.CustomObjectsApi(api).delete_cluster_custom_object("kwok.x-k8s.io", "v1alpha1", "clusterlogs", served)
        _delete_job(api, name)
