"""The deploy's job guard (infra/job_guard_handler.py) asking the real API server, through the real kubectl, which
RayJobs run, as its Lambda does before CloudFormation rolls the GPU nodes or replaces the job.

What cannot exist here: the Lambda's `aws eks update-kubeconfig` (AWS). The test answers that one command by copying
the control plane's kubeconfig where the handler asked for it; every other command is real."""

from __future__ import annotations

import copy
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.api_client import ApiClient

from ray_efa.infra import job_guard_handler as guard
from tests.cluster.conftest import wait_for
from tests.cluster.controlplane import ControlPlane
from tests.cluster.test_workload import Stack
from tests.cluster.workload import apply_in_order, stack_manifests
from tools.controlplane import build

pytestmark = pytest.mark.synth


@pytest.fixture(scope="module")
def stack() -> Stack:
    return Stack()


def guard_properties(template: Mapping[str, Any]) -> dict[str, Any]:
    """The synthesized guard's properties, as CloudFormation sends them to the handler (strings)."""
    (props,) = [r["Properties"] for r in template["Resources"].values()
                if r["Type"] == guard.__dict__.get("JOB_GUARD_RESOURCE_TYPE", "Custom::RayEfa-JobDisruptionGuard")]
    return {k: v if isinstance(v, str) else str(v) for k, v in props.items() if k != "ServiceToken"}


def runner(plane: ControlPlane, workdir: Path):
    """The handler's command runner: the real kubectl on PATH; `aws eks update-kubeconfig` answered with the plane's
    kubeconfig at the path the handler passes."""
    kubectl = str(build.bin_dirs()["kubectl"])

    def run(command: list[str]) -> str:
        if command[:3] == ["aws", "eks", "update-kubeconfig"]:
            shutil.copy(plane.kubeconfig, command[command.index("--kubeconfig") + 1])
            return ""
        assert command[0] == "kubectl", command
        result = subprocess.run([kubectl, *command[1:]], capture_output=True, text=True, timeout=60, cwd=workdir)
        if result.returncode:
            raise RuntimeError(result.stderr)
        return result.stdout
    return run


def test_the_guard_refuses_a_roll_while_the_stack_s_job_runs_and_lets_it_through_once_it_is_gone(
        control_plane: ControlPlane, api: ApiClient, stack: Stack, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(guard, "WORK_DIR", str(tmp_path))
    list_jobs = guard.kubectl_ray_jobs("ray-train", runner(control_plane, tmp_path))
    old = guard_properties(stack.gpu_template)
    new = {**old, "RollKey": old["RollKey"] + " releaseVersion=next"}
    # GIVEN no RayJob on the cluster, THEN the roll goes through
    assert guard.decide("Update", old, new, list_jobs) is None
    # GIVEN the stack's own RayJob applied and reconciled by the operator (not finished)
    objects = stack_manifests(stack.cluster_template) + stack_manifests(stack.gpu_template)
    apply_in_order(control_plane, objects)
    job = next(o for o in objects if o["kind"] == "RayJob")["metadata"]
    objects_api = client.CustomObjectsApi(api)
    wait_for(lambda: objects_api.get_namespaced_custom_object("ray.io", "v1", job["namespace"], "rayjobs", job["name"])
             .get("status", {}).get("jobDeploymentStatus"), "the operator's first status of the RayJob")
    # THEN the same roll is refused, naming the job and the override; with the override it goes through
    refusal = guard.decide("Update", old, new, list_jobs)
    assert refusal is not None and f"{job['namespace']}/{job['name']}" in refusal and guard.OVERRIDE in refusal
    assert guard.decide("Update", old, {**new, "AllowJobDisruption": "true"}, list_jobs) is None
    # and deleting the job itself (trainingJob=false) is refused the same way
    deleting = {**old, "JobHash": "none"}
    assert "deletes RayJob" in (guard.decide("Update", old, deleting, list_jobs) or "")
    # GIVEN the job gone, THEN the roll goes through again
    objects_api.delete_namespaced_custom_object("ray.io", "v1", job["namespace"], "rayjobs", job["name"])
    wait_for(lambda: guard.decide("Update", old, new, list_jobs) is None, "the guard to see the job gone")
    client.CoreV1Api(api).delete_namespace(job["namespace"])


def test_the_guard_refuses_when_kubectl_cannot_list_the_jobs(control_plane: ControlPlane, stack: Stack,
                                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # GIVEN a kubeconfig the API server refuses (a client certificate of another CA), THEN kubectl fails and the
    # guard refuses the roll rather than guess, naming the override
    monkeypatch.setattr(guard, "WORK_DIR", str(tmp_path))
    stranger = copy.copy(control_plane)
    broken = tmp_path / "stranger.kubeconfig"
    broken.write_text(control_plane.kubeconfig.read_text().replace(str(control_plane.pki.admin_cert),
                                                                   str(control_plane.pki.serving_cert)).replace(
        str(control_plane.pki.admin_key), str(control_plane.pki.serving_key)))
    stranger.kubeconfig = broken
    old = guard_properties(stack.gpu_template)
    new = {**old, "RollKey": old["RollKey"] + " releaseVersion=next"}
    list_jobs = guard.kubectl_ray_jobs("ray-train", runner(stranger, tmp_path))
    answers: list[tuple[str, str]] = []
    monkeypatch.setattr(guard, "_respond", lambda event, status, reason, physical_id: answers.append((status, reason)))
    event = {"RequestType": "Update", "StackId": "ray-train-gpu", "ResourceProperties": new,
             "OldResourceProperties": old}
    guard.handler(event, None, list_jobs, stack_status=lambda stack_id: "UPDATE_IN_PROGRESS")
    ((status, reason),) = answers
    assert status == "FAILED" and "could not list the cluster's RayJobs" in reason and guard.OVERRIDE in reason
