"""A Ray pod whose init container fails (the code fetch, the pip install of pipPackages) is seen by `follow`, `submit`
and `verify`: pod, container, exit code and last log lines, and a non-zero exit at once instead of at the deadline
(the RayJob stays Initializing: KubeRay issue 4637).

The detection is a pure function of pod objects, tested here on the shapes a kubelet writes into
status.initContainerStatuses (as JSON dicts and as the kubernetes client's V1Pod). The commands, on pods the real
KubeRay operator made and KWOK reports failing, run against the real control plane: tests/cluster/test_submit_follow.py."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from ray_efa.ops.init_failures import InitContainerFailure, failing_init_containers, job_pods_selector
from ray_efa.ops.verify import INIT_CONTAINERS_CHECK
from ray_efa.ops.verify import check_init_containers as verify_check
from tests.ops.test_submit import JOB

HEAD = f"{JOB}-x8k2p-head-7bq4d"
WORKER = f"{JOB}-x8k2p-gpu-worker-2xw9f"
PIP_LOG = (
    "Collecting einops==0.9.9\n"
    "ERROR: Could not find a version that satisfies the requirement einops==0.9.9 (from versions: 0.8.1)\n"
    "ERROR: No matching distribution found for einops==0.9.9\n"
    "ray-efa: pip could not install einops==0.9.9 beside the image (its packages are pinned by "
    "/opt/ray-efa/packages/image-constraints.txt): see pip above; fix the pipPackages setting\n"
)


def _completed(name: str) -> dict:
    return {
        "name": name,
        "ready": True,
        "restartCount": 0,
        "started": False,
        "image": "dlc",
        "imageID": "dlc@sha256:1",
        "containerID": "containerd://a1",
        "state": {
            "terminated": {
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": "2026-12-01T15:01:00Z",
                "finishedAt": "2026-12-01T15:01:04Z",
                "containerID": "containerd://a1",
            }
        },
    }


def _crash_looping(name: str, exit_code: int = 1, restarts: int = 2) -> dict:
    """What the kubelet writes while it waits to run a failed init container again (restartPolicy Always)."""
    return {
        "name": name,
        "ready": False,
        "restartCount": restarts,
        "started": False,
        "image": "dlc",
        "imageID": "dlc@sha256:1",
        "containerID": "containerd://b2",
        "state": {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off 20s restarting failed container={name} pod={HEAD}",
            }
        },
        "lastState": {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Error",
                "startedAt": "2026-12-01T15:01:05Z",
                "finishedAt": "2026-12-01T15:01:12Z",
                "containerID": "containerd://b2",
            }
        },
    }


def _pod(name: str, init_statuses: list[dict], *, component: str = "head", phase: str = "Pending") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ray",
            "creationTimestamp": "2026-12-01T15:00:30Z",
            "labels": {
                "app.kubernetes.io/instance": JOB,
                "app.kubernetes.io/component": component,
                "ray.io/cluster": f"{JOB}-x8k2p",
                "ray.io/node-type": component,
            },
        },
        "spec": {"containers": []},
        "status": {
            "phase": phase,
            "initContainerStatuses": init_statuses,
            "conditions": [{"type": "Initialized", "status": "False", "reason": "ContainersNotInitialized"}],
        },
    }


def _v1pod(pod: dict):
    from kubernetes.client import V1Pod
    from kubernetes.client.api_client import ApiClient

    # the public deserialize reads an HTTP response's body: the pod's JSON is that body
    return ApiClient().deserialize(_Response(json.dumps(pod)), V1Pod)


@dataclass
class _Response:
    """What ApiClient.deserialize reads of an HTTP response: its body."""

    data: str


# -- the pure detection ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_model", [False, True], ids=["json", "V1Pod"])
def test_a_crash_looping_init_container_is_found_with_the_failed_runs_exit_code(as_model):
    pod = _pod(HEAD, [_completed("fetch-app"), _crash_looping("install-packages", exit_code=1, restarts=2)])
    (failure,) = failing_init_containers([_v1pod(pod) if as_model else pod])
    assert failure == InitContainerFailure(
        namespace="ray",
        pod=HEAD,
        container="install-packages",
        exit_code=1,
        reason="CrashLoopBackOff",
        restarts=2,
        previous=True,
    )


@pytest.mark.parametrize("as_model", [False, True], ids=["json", "V1Pod"])
def test_an_init_container_terminated_with_a_non_zero_exit_is_found(as_model):
    terminated = {
        **_completed("fetch-code"),
        "ready": False,
        "state": {
            "terminated": {
                "exitCode": 2,
                "reason": "Error",
                "startedAt": "2026-12-01T15:01:00Z",
                "finishedAt": "2026-12-01T15:01:03Z",
            }
        },
    }
    (failure,) = failing_init_containers(
        [
            _v1pod(_pod(WORKER, [terminated], component="worker"))
            if as_model
            else _pod(WORKER, [terminated], component="worker")
        ]
    )
    assert (failure.pod, failure.container, failure.exit_code, failure.reason, failure.previous) == (
        WORKER,
        "fetch-code",
        2,
        "Error",
        False,
    )


def test_a_retry_running_after_a_failed_run_is_found():
    retrying = {
        **_crash_looping("install-packages", exit_code=137),
        "state": {"running": {"startedAt": "2026-12-01T15:01:40Z"}},
    }
    retrying["lastState"]["terminated"]["reason"] = "OOMKilled"
    (failure,) = failing_init_containers([_pod(HEAD, [retrying])])
    assert (failure.exit_code, failure.reason, failure.previous) == (137, "OOMKilled, running again", True)


def test_healthy_and_starting_pods_have_no_failure():
    starting = {
        "name": "install-packages",
        "ready": False,
        "restartCount": 0,
        "image": "dlc",
        "imageID": "",
        "state": {"waiting": {"reason": "PodInitializing"}},
    }
    running = {**starting, "state": {"running": {"startedAt": "2026-12-01T15:01:00Z"}}}
    pulling = {**starting, "state": {"waiting": {"reason": "ContainerCreating"}}}
    pods = [
        _pod(HEAD, [_completed("fetch-app"), running]),
        _pod(WORKER, [starting]),
        _pod("p3", [pulling]),
        _pod("ready", [_completed("fetch-app")], phase="Running"),
        {"metadata": {"name": "no-status", "namespace": "ray"}, "status": {}},
        {"metadata": {"name": "no-init", "namespace": "ray"}, "status": {"phase": "Running"}},
    ]
    assert failing_init_containers(pods) == []
    assert failing_init_containers([_v1pod(p) for p in pods[:4]]) == []


def test_the_description_names_the_pod_the_container_the_exit_code_and_the_last_lines():
    failure = InitContainerFailure(
        namespace="ray",
        pod=HEAD,
        container="install-packages",
        exit_code=1,
        reason="CrashLoopBackOff",
        restarts=2,
        previous=True,
        log_tail=PIP_LOG,
    )
    text = failure.describe()
    assert text.startswith(
        f"pod ray/{HEAD}: init container install-packages failed (exit code 1, CrashLoopBackOff, "
        "2 restarts); its last 4 log lines:\n"
    )
    assert "    ERROR: No matching distribution found for einops==0.9.9" in text
    assert job_pods_selector(JOB) == f"app.kubernetes.io/instance={JOB}"


def test_the_verify_check_fails_naming_the_failure_and_passes_without_one():
    failure = InitContainerFailure(
        namespace="ray",
        pod=HEAD,
        container="fetch-code",
        exit_code=1,
        reason="Error",
        restarts=0,
        previous=False,
        log_tail="fatal error: An error occurred (403)\n",
    )
    check = verify_check([failure], JOB, "ray")
    assert (check.id, check.ok) == (INIT_CONTAINERS_CHECK, False)
    assert "init container fetch-code failed (exit code 1, Error)" in check.detail and "(403)" in check.detail
    assert verify_check([], JOB, "ray").ok
