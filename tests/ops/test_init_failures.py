"""A Ray pod whose init container fails (the code fetch, the pip install of pipPackages) is seen by `follow`, `submit`
and `verify`: pod, container, exit code and last log lines, and a non-zero exit at once instead of at the deadline
(the RayJob stays Initializing: KubeRay issue 4637).

The detection is a pure function of pod objects, tested on the shapes a kubelet writes into
status.initContainerStatuses (as JSON dicts and as the kubernetes client's V1Pod). The API calls around it are thin;
here a local API answers them (tests/ops/kube_api_writes.py), the lead's control-plane tests drive them for real."""

from __future__ import annotations

import copy
import time

import pytest

from ray_efa.cli import follow
from ray_efa.ops.init_failures import InitContainerFailure, failing_init_containers, job_pods_selector
from ray_efa.ops.submit import InitContainerFailed, JobState, check_init_containers
from ray_efa.ops.verify import INIT_CONTAINERS_CHECK
from ray_efa.ops.verify import check_init_containers as verify_check
from tests.ops.kube_api_writes import KubeApiWithWrites
from tests.ops.test_submit import JOB, RAYJOB_PATH, _cli, _kubeconfig

HEAD = f"{JOB}-x8k2p-head-7bq4d"
WORKER = f"{JOB}-x8k2p-gpu-worker-2xw9f"
PIP_LOG = ("Collecting einops==0.9.9\n"
           "ERROR: Could not find a version that satisfies the requirement einops==0.9.9 (from versions: 0.8.1)\n"
           "ERROR: No matching distribution found for einops==0.9.9\n"
           "ray-efa: pip could not install einops==0.9.9 beside the image (its packages are pinned by "
           "/opt/ray-efa/packages/image-constraints.txt): see pip above; fix the pipPackages setting\n")


def _completed(name: str) -> dict:
    return {"name": name, "ready": True, "restartCount": 0, "started": False, "image": "dlc", "imageID": "dlc@sha256:1",
            "containerID": "containerd://a1", "state": {"terminated": {
                "exitCode": 0, "reason": "Completed", "startedAt": "2026-12-01T15:01:00Z",
                "finishedAt": "2026-12-01T15:01:04Z", "containerID": "containerd://a1"}}}


def _crash_looping(name: str, exit_code: int = 1, restarts: int = 2) -> dict:
    """What the kubelet writes while it waits to run a failed init container again (restartPolicy Always)."""
    return {"name": name, "ready": False, "restartCount": restarts, "started": False, "image": "dlc",
            "imageID": "dlc@sha256:1", "containerID": "containerd://b2",
            "state": {"waiting": {"reason": "CrashLoopBackOff",
                                  "message": f"back-off 20s restarting failed container={name} pod={HEAD}"}},
            "lastState": {"terminated": {"exitCode": exit_code, "reason": "Error", "startedAt": "2026-12-01T15:01:05Z",
                                         "finishedAt": "2026-12-01T15:01:12Z", "containerID": "containerd://b2"}}}


def _pod(name: str, init_statuses: list[dict], *, component: str = "head", phase: str = "Pending") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": "ray", "creationTimestamp": "2026-12-01T15:00:30Z",
        "labels": {"app.kubernetes.io/instance": JOB, "app.kubernetes.io/component": component,
                   "ray.io/cluster": f"{JOB}-x8k2p", "ray.io/node-type": component}},
        "spec": {"containers": []},
        "status": {"phase": phase, "initContainerStatuses": init_statuses,
                   "conditions": [{"type": "Initialized", "status": "False", "reason": "ContainersNotInitialized"}]}}


def _v1pod(pod: dict):
    from kubernetes import client

    return client.ApiClient()._ApiClient__deserialize(copy.deepcopy(pod), "V1Pod")


# -- the pure detection ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_model", [False, True], ids=["json", "V1Pod"])
def test_a_crash_looping_init_container_is_found_with_the_failed_runs_exit_code(as_model):
    pod = _pod(HEAD, [_completed("fetch-app"), _crash_looping("install-packages", exit_code=1, restarts=2)])
    (failure,) = failing_init_containers([_v1pod(pod) if as_model else pod])
    assert failure == InitContainerFailure(namespace="ray", pod=HEAD, container="install-packages", exit_code=1,
                                           reason="CrashLoopBackOff", restarts=2, previous=True)


@pytest.mark.parametrize("as_model", [False, True], ids=["json", "V1Pod"])
def test_an_init_container_terminated_with_a_non_zero_exit_is_found(as_model):
    terminated = {**_completed("fetch-code"), "ready": False,
                  "state": {"terminated": {"exitCode": 2, "reason": "Error", "startedAt": "2026-12-01T15:01:00Z",
                                           "finishedAt": "2026-12-01T15:01:03Z"}}}
    (failure,) = failing_init_containers([_v1pod(_pod(WORKER, [terminated], component="worker")) if as_model
                                          else _pod(WORKER, [terminated], component="worker")])
    assert (failure.pod, failure.container, failure.exit_code, failure.reason, failure.previous) == (
        WORKER, "fetch-code", 2, "Error", False)


def test_a_retry_running_after_a_failed_run_is_found():
    retrying = {**_crash_looping("install-packages", exit_code=137), "state": {"running": {
        "startedAt": "2026-12-01T15:01:40Z"}}}
    retrying["lastState"]["terminated"]["reason"] = "OOMKilled"
    (failure,) = failing_init_containers([_pod(HEAD, [retrying])])
    assert (failure.exit_code, failure.reason, failure.previous) == (137, "OOMKilled, running again", True)


def test_healthy_and_starting_pods_have_no_failure():
    starting = {"name": "install-packages", "ready": False, "restartCount": 0, "image": "dlc", "imageID": "",
                "state": {"waiting": {"reason": "PodInitializing"}}}
    running = {**starting, "state": {"running": {"startedAt": "2026-12-01T15:01:00Z"}}}
    pulling = {**starting, "state": {"waiting": {"reason": "ContainerCreating"}}}
    pods = [_pod(HEAD, [_completed("fetch-app"), running]), _pod(WORKER, [starting]), _pod("p3", [pulling]),
            _pod("ready", [_completed("fetch-app")], phase="Running"),
            {"metadata": {"name": "no-status", "namespace": "ray"}, "status": {}},
            {"metadata": {"name": "no-init", "namespace": "ray"}, "status": {"phase": "Running"}}]
    assert failing_init_containers(pods) == []
    assert failing_init_containers([_v1pod(p) for p in pods[:4]]) == []


def test_the_description_names_the_pod_the_container_the_exit_code_and_the_last_lines():
    failure = InitContainerFailure(namespace="ray", pod=HEAD, container="install-packages", exit_code=1,
                                   reason="CrashLoopBackOff", restarts=2, previous=True, log_tail=PIP_LOG)
    text = failure.describe()
    assert text.startswith(f"pod ray/{HEAD}: init container install-packages failed (exit code 1, CrashLoopBackOff, "
                           "2 restarts); its last 4 log lines:\n")
    assert "    ERROR: No matching distribution found for einops==0.9.9" in text
    assert job_pods_selector(JOB) == f"app.kubernetes.io/instance={JOB}"


def test_the_verify_check_fails_naming_the_failure_and_passes_without_one():
    failure = InitContainerFailure(namespace="ray", pod=HEAD, container="fetch-code", exit_code=1, reason="Error",
                                   restarts=0, previous=False, log_tail="fatal error: An error occurred (403)\n")
    check = verify_check([failure], JOB, "ray")
    assert (check.id, check.ok) == (INIT_CONTAINERS_CHECK, False)
    assert "init container fetch-code failed (exit code 1, Error)" in check.detail and "(403)" in check.detail
    assert verify_check([], JOB, "ray").ok


# -- the thin API layer and the commands ---------------------------------------------------------------------------------


class _LogsByQuery(KubeApiWithWrites):
    """Answers a pod's log only for the query that reads the failed run's last lines."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.log_queries: list[dict] = []

    def get(self, path: str, query: dict[str, list[str]]):
        if path.endswith("/log"):
            self.log_queries.append({k: v[0] for k, v in query.items()})
        return super().get(path, query)


def _initializing_job(pods: list[dict]) -> _LogsByQuery:
    initializing = {"jobDeploymentStatus": "Initializing", "rayClusterName": f"{JOB}-x8k2p",
                    "startTime": "2026-12-01T15:00:02Z", "observedGeneration": 1}
    api = _LogsByQuery(statuses={RAYJOB_PATH: [{}, initializing]},
                       collections={"/api/v1/namespaces/ray/pods": pods}, logs={HEAD: PIP_LOG})
    api.collections["/apis/ray.io/v1/namespaces/ray/rayjobs"] = [
        {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": JOB, "namespace": "ray", "uid": "u-9"}}]
    return api


def test_follow_ends_at_once_with_exit_1_printing_the_failed_init_container_and_its_last_log_lines(tmp_path, capsys):
    pods = [_pod(HEAD, [_completed("fetch-app"), _crash_looping("install-packages")]),
            _pod(WORKER, [{"name": "install-packages", "ready": False, "restartCount": 0, "image": "dlc",
                           "imageID": "", "state": {"waiting": {"reason": "PodInitializing"}}}], component="worker")]
    with _initializing_job(pods) as api:
        started = time.monotonic()
        # the failure ends it, not the timeout (the RayJob stays Initializing: it would never end by itself)
        code = _cli(follow, "follow", JOB, "--kube-context", "research", "--kubeconfig",
                    str(_kubeconfig(tmp_path, api.url)), "--poll", "0.01", "--timeout", "30")
        elapsed = time.monotonic() - started
    _, err = capsys.readouterr()
    assert code == 1, err
    assert elapsed < 20 and "after 30 s" not in err
    assert f"RayJob ray/{JOB} cannot start: an init container of its Ray pods failed" in err
    assert f"pod ray/{HEAD}: init container install-packages failed (exit code 1, CrashLoopBackOff, 2 restarts)" in err
    assert "    ERROR: No matching distribution found for einops==0.9.9" in err
    assert f"kubectl -n ray delete rayjob {JOB}" in err and WORKER not in err
    # the failed run's log: the container named, its previous instance, the last lines only
    assert api.log_queries == [{"container": "install-packages", "tailLines": "20", "previous": "True"}]
    assert [m for m, _ in api.requests if m != "GET"] == []  # it reads, never writes


def test_the_check_says_nothing_while_the_init_containers_work_or_when_pods_cannot_be_listed():
    from kubernetes import client

    pods = [_pod(HEAD, [_completed("fetch-app")], phase="Running")]
    state = JobState(deployment="Initializing", job="")
    with _initializing_job(pods) as api:
        configuration = client.Configuration()
        configuration.host = api.url
        check_init_containers(client.ApiClient(configuration), "ray", JOB, state)  # no failure: returns
        check_init_containers(client.ApiClient(configuration), "elsewhere", JOB, state)  # nothing listed there
    failing = [_pod(f"{JOB}-x8k2p-head-9zz9z", [_crash_looping("fetch-app", exit_code=1)])]
    with _initializing_job(failing) as api:
        configuration = client.Configuration()
        configuration.host = api.url
        with pytest.raises(InitContainerFailed) as raised:
            check_init_containers(client.ApiClient(configuration), "ray", JOB, state)
    assert [(f.container, f.exit_code) for f in raised.value.failures] == [("fetch-app", 1)]
    assert "(its log cannot be read: 404" in str(raised.value)  # no log recorded for it: said, not hidden


def test_verify_fails_the_init_container_check_alone_and_stops_waiting_on_it():
    from kubernetes import client

    from ray_efa.ops.verify import verify_until
    from tests.ops.kube_server import FakeKubeApi, load_recording
    from tests.ops.test_verify import EXPECTED

    # GIVEN the healthy recording whose head pod's install-packages init container crash-loops
    recording = load_recording()
    head = next(p for p in recording["/api/v1/namespaces/ray/pods"]["items"] if p["metadata"]["name"].endswith("m2x9d"))
    head["status"]["initContainerStatuses"] = [_completed("fetch-app"), _crash_looping("install-packages", 1, 3)]
    sleeps: list[float] = []
    with FakeKubeApi(recording) as api:
        # WHEN verified with --wait 600
        report = verify_until(client.ApiClient(client.Configuration(host=api.url)), EXPECTED, timeout_s=600,
                              sleep=sleeps.append, clock=lambda: sum(sleeps))
    # THEN that check alone fails, naming the pod, the container and the exit code, and nothing was waited for
    assert [c.id for c in report.failed] == [INIT_CONTAINERS_CHECK]
    assert ("pod ray/train-efa-x7k2p-head-m2x9d: init container install-packages failed (exit code 1, "
            "CrashLoopBackOff, 3 restarts)") in report.failed[0].detail
    assert sleeps == []
