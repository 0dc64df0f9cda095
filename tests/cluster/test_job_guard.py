"""The deploy's job guard (infra/job_guard_handler.py) asking the real API server which RayJobs run, as its Lambda
does before CloudFormation rolls the GPU nodes or replaces the job: GET /apis/ray.io/v1/rayjobs over HTTPS, verified
with the cluster's CA, with a bearer token, authorized by the guard's own synthesized RBAC objects.

What cannot exist here: EKS's access entry and its STS token (AWS). The test stands a ServiceAccount in for the
guard's IAM role: its token (TokenRequest) is the bearer, and a binding of the guard's synthesized ClusterRole to it
stands in for the access entry's group, which the synthesized ClusterRoleBinding names. Everything else is real."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.api_client import ApiClient

from ray_efa.infra import job_guard_handler as guard
from tests.cluster.conftest import wait_for
from tests.cluster.controlplane import ControlPlane
from tests.cluster.test_workload import Stack
from tests.cluster.workload import apply_in_order, stack_manifests

pytestmark = pytest.mark.synth

GUARD_NAMESPACE = "job-guard-test"


@pytest.fixture(scope="module")
def stack() -> Stack:
    return Stack()


def guard_properties(template: Mapping[str, Any]) -> dict[str, Any]:
    """The synthesized guard's properties, as CloudFormation sends them to the handler (strings)."""
    (props,) = [
        r["Properties"] for r in template["Resources"].values() if r["Type"] == "Custom::RayEfa-JobDisruptionGuard"
    ]
    return {k: v if isinstance(v, str) else str(v) for k, v in props.items() if k != "ServiceToken"}


def guard_token(plane: ControlPlane, api: ApiClient, stack: Stack) -> str:
    """A bearer token of an identity with the guard's synthesized ClusterRole (the access entry's stand-in)."""
    (role,) = [o for o in stack_manifests(stack.gpu_template) if o["kind"] == "ClusterRole"]
    name = role["metadata"]["name"]
    plane.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GUARD_NAMESPACE}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "guard", "namespace": GUARD_NAMESPACE}},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{name}-test"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": "guard", "namespace": GUARD_NAMESPACE}],
            },
        ]
    )
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600))
    issued = client.CoreV1Api(api).create_namespaced_service_account_token("guard", GUARD_NAMESPACE, request)
    return str(issued.status.token)  # type: ignore[union-attr]


def test_the_guard_refuses_a_roll_while_the_stack_s_job_runs_and_lets_it_through_once_it_is_gone(
    control_plane: ControlPlane, api: ApiClient, stack: Stack
):
    # GIVEN both stacks' objects applied, the guard's RBAC among them
    objects = stack_manifests(stack.cluster_template) + stack_manifests(stack.gpu_template)
    apply_in_order(control_plane, [o for o in objects if o["kind"] != "RayJob"])
    token = guard_token(control_plane, api, stack)
    list_jobs = guard.api_ray_jobs(control_plane.url, control_plane.pki.ca.read_text(), lambda: token)
    old = guard_properties(stack.gpu_template)
    new = {**old, "RollKey": old["RollKey"] + " releaseVersion=next"}
    # WHEN no RayJob runs, THEN the roll goes through
    assert guard.decide("Update", old, new, list_jobs) is None
    # GIVEN the stack's own RayJob applied and reconciled by the operator (not finished)
    apply_in_order(control_plane, [o for o in objects if o["kind"] == "RayJob"])
    job = next(o for o in objects if o["kind"] == "RayJob")["metadata"]
    objects_api = client.CustomObjectsApi(api)
    wait_for(
        lambda: (
            objects_api.get_namespaced_custom_object("ray.io", "v1", job["namespace"], "rayjobs", job["name"])
            .get("status", {})
            .get("jobDeploymentStatus")
        ),
        "the operator's first status of the RayJob",
    )
    # THEN the same roll is refused, naming the job and the override; with the override it goes through
    refusal = guard.decide("Update", old, new, list_jobs)
    assert refusal is not None and f"{job['namespace']}/{job['name']}" in refusal and guard.OVERRIDE in refusal
    assert guard.decide("Update", old, {**new, "AllowJobDisruption": "true"}, list_jobs) is None
    # and deleting the job itself (trainingJob=false) is refused the same way
    assert "deletes RayJob" in (guard.decide("Update", old, {**old, "JobHash": "none"}, list_jobs) or "")
    # and the guard's identity may list RayJobs and nothing else (no pods, no secrets, no single RayJob's spec)
    for path in (
        "/api/v1/pods",
        "/api/v1/secrets",
        f"/apis/ray.io/v1/namespaces/{job['namespace']}/rayjobs/{job['name']}",
    ):
        with pytest.raises(urllib.error.HTTPError, match="403"):
            get(control_plane, path, token)
    # GIVEN the job gone, THEN the roll goes through again
    objects_api.delete_namespaced_custom_object("ray.io", "v1", job["namespace"], "rayjobs", job["name"])
    wait_for(lambda: guard.decide("Update", old, new, list_jobs) is None, "the guard to see the job gone")
    client.CoreV1Api(api).delete_namespace(job["namespace"])


def get(plane: ControlPlane, path: str, token: str) -> bytes:
    import ssl

    request = urllib.request.Request(plane.url + path, headers={"Authorization": f"Bearer {token}"})
    context = ssl.create_default_context(cadata=plane.pki.ca.read_text())
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        return response.read()


def test_the_guard_refuses_when_the_api_server_refuses_it(
    control_plane: ControlPlane, stack: Stack, monkeypatch: pytest.MonkeyPatch
):
    # GIVEN a token the API server does not accept, THEN listing fails and the guard refuses the roll rather than
    # guess, naming the override (a deploy: the stack is not rolling back)
    old = guard_properties(stack.gpu_template)
    new = {**old, "RollKey": old["RollKey"] + " releaseVersion=next"}
    list_jobs = guard.api_ray_jobs(control_plane.url, control_plane.pki.ca.read_text(), lambda: "k8s-aws-v1.bogus")
    answers: list[tuple[str, str]] = []
    monkeypatch.setattr(guard, "_respond", lambda event, status, reason, physical_id: answers.append((status, reason)))
    event = {
        "RequestType": "Update",
        "StackId": "ray-train-gpu",
        "ResourceProperties": new,
        "OldResourceProperties": old,
    }
    guard.handler(event, None, list_jobs, stack_status=lambda stack_id: "UPDATE_IN_PROGRESS")
    ((status, reason),) = answers
    assert status == "FAILED" and "could not list the cluster's RayJobs" in reason and "401" in reason
    assert guard.OVERRIDE in reason
    # ... and the same answer during the rollback is a success, the cluster not asked
    answers.clear()
    guard.handler(
        {**event, "ResourceProperties": old, "OldResourceProperties": new},
        None,
        list_jobs,
        stack_status=lambda stack_id: "UPDATE_ROLLBACK_IN_PROGRESS",
    )
    assert answers[0][0] == "SUCCESS"
