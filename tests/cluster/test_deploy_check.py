"""`ray-efa deploy-check` against the real control plane: the RayJobs of every namespace as the real KubeRay operator
moves them (Initializing while its pods have no room, Running once its cluster is ready and the submitter runs; Complete
as the operator writes it once Ray's job ended, which needs a real Ray: written through the status subresource here),
and the GPU nodes by their labels. The diffs are the real CDK CLI's output (tests/ops/fixtures/deploy_check); the
decisions over every state are a pure function, tested in tests/ops/test_deploy_check.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.api_client import ApiClient

from ray_efa.core.settings import Settings
from ray_efa.ops.deploy_check import ClusterState, check_deploy, read_cluster, read_diff
from tests.cluster.conftest import served_kuberay, wait_for
from tests.cluster.controlplane import ControlPlane
from tests.cluster.deployment import Deployment, training_job
from tests.ops.cli_helpers import run_cli

DIFFS = Path(__file__).parents[1] / "ops" / "fixtures" / "deploy_check"
NAMESPACE = "ops-deploy"
CONTEXT = {
    "gpuInstanceType": "g6.12xlarge",
    "gpuNodeCount": 2,
    "namespace": NAMESPACE,
    "network": "efa",
    "kuberayVersion": served_kuberay(),
}  # the KubeRay version whose CRDs the API server serves
SETTINGS = Settings.from_context(CONTEXT)
CLI = ("--kubeconfig", "KUBECONFIG", *(a for k, v in CONTEXT.items() for a in ("-c", f"{k}={v}")))
JOB = f"{NAMESPACE}/train-efa"


def all_ray_jobs(api: ApiClient) -> list[dict]:
    return client.CustomObjectsApi(api).list_cluster_custom_object("ray.io", "v1", "rayjobs")["items"]


@pytest.fixture(scope="module")
def deployed(control_plane: ControlPlane, api: ApiClient) -> Iterator[Deployment]:
    # only this module's jobs in the cluster (an earlier module's namespace may still be going)
    wait_for(lambda: not all_ray_jobs(api), "no RayJob left by an earlier test", timeout_s=90)
    made = Deployment.up(control_plane, api, SETTINGS)
    wait_for(lambda: job_status(api) == "Running", f"RayJob {JOB} Running")
    yield made
    made.remove()


def job_status(api: ApiClient, name: str = "train-efa") -> str:
    job = client.CustomObjectsApi(api).get_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayjobs", name)
    return (job.get("status") or {}).get("jobDeploymentStatus", "")


def diff_file(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.txt"
    path.write_text((DIFFS / f"{name}.txt").read_text())
    return path


def cli(control_plane: ControlPlane, *argv: str) -> int:
    args = [str(control_plane.kubeconfig) if a == "KUBECONFIG" else a for a in CLI]
    return run_cli("deploy_check", *argv, *args)


def findings(api: ApiClient, diff: str | None) -> dict[str, bool]:
    state = read_cluster(api, SETTINGS)
    parsed = read_diff((DIFFS / f"{diff}.txt").read_text()) if diff else None
    return {f.id: f.overridable for f in check_deploy(parsed, state, SETTINGS)}


def test_the_running_job_and_the_gpu_nodes_are_read_from_the_api(deployed, api):
    state = read_cluster(api, SETTINGS)
    assert state == ClusterState(ray_jobs={JOB: "Running"}, gpu_nodes=tuple(sorted(deployed.gpu_nodes)))
    # a roll under it is refused; a training setting goes ahead; no diff with a job running refuses any deploy
    assert findings(api, "instance_type") == {"nodes-roll": True}
    assert findings(api, "system_type") == {"nodes-roll": True}
    assert findings(api, "scale_to_zero") == {"nodes-roll": True, "job-deleted": True}
    assert findings(api, "steps") == {}
    assert findings(api, None) == {"active-jobs": True}


def test_the_command_refuses_training_job_false_on_the_real_cli_diff(deployed, control_plane, tmp_path, capsys):
    # GIVEN the diff the real CDK CLI prints for -c trainingJob=false against a deployed stack (construct paths on)
    # and the stack's RayJob Running on the real cluster (this module's first state: later tests end it), THEN
    # deploy-check refuses: exit 1, naming the job
    code = cli(control_plane, "--diff", str(diff_file(tmp_path, "training_job_off_cli")))
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"refused: job-deleted: the deploy deletes RayJob {JOB}, which is Running" in err


def test_the_command_refuses_a_rolling_deploy_under_a_running_job(deployed, control_plane, tmp_path, capsys):
    code = cli(control_plane, "--diff", str(diff_file(tmp_path, "instance_type")), "--json")
    captured = capsys.readouterr()
    assert code == 1, captured.err
    report = json.loads(captured.out)
    assert report["ok"] is False and [f["id"] for f in report["findings"]] == ["nodes-roll"]
    assert report["active_jobs"] == {JOB: "Running"} and report["gpu_nodes"] == 2
    assert (
        "refused: nodes-roll: the deploy rolls the GPU nodes (gpuInstanceType g6.12xlarge -> g6e.24xlarge)"
        in captured.err
    )
    # --yes accepts what may be accepted
    assert cli(control_plane, "--diff", str(diff_file(tmp_path, "instance_type")), "--yes") == 0


def test_a_deploy_that_touches_nothing_running_goes_ahead(deployed, control_plane, tmp_path, capsys):
    assert cli(control_plane, "--diff", str(diff_file(tmp_path, "steps"))) == 0
    assert f"go ahead (active RayJobs: {JOB}; GPU nodes up: 2)" in capsys.readouterr().out


def test_a_job_still_initializing_holds_the_nodes(deployed, api, control_plane):
    # GIVEN a second job whose workers find no room (the first one holds the GPUs): the operator keeps it Initializing
    other = Settings.from_context({**CONTEXT, "jobName": "queued"})
    objects = training_job(other)
    control_plane.apply([o for o in objects if o["kind"] != "RayJob"])
    control_plane.apply([o for o in objects if o["kind"] == "RayJob"])
    name = next(o for o in objects if o["kind"] == "RayJob")["metadata"]["name"]
    try:
        wait_for(lambda: job_status(api, name) == "Initializing", f"RayJob {name} Initializing")
        assert read_cluster(api, SETTINGS).active_jobs == {JOB: "Running", f"{NAMESPACE}/{name}": "Initializing"}
        assert findings(api, "instance_type") == {"nodes-roll": True}
    finally:
        client.CustomObjectsApi(api).delete_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayjobs", name)
        wait_for(lambda: len(all_ray_jobs(api)) == 1, f"RayJob {name} gone")


def test_a_finished_job_lets_a_roll_go_and_a_deleted_one_comes_back(deployed, api):
    # GIVEN the job Complete (as the operator writes it when Ray's job succeeded)
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        "ray.io",
        "v1",
        NAMESPACE,
        "rayjobs",
        "train-efa",
        {"status": {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}},
    )
    wait_for(lambda: job_status(api) == "Complete", "the RayJob Complete")
    # THEN a roll may go (re-applying a finished job does not rerun it), and so may any deploy
    assert findings(api, "instance_type") == {}
    assert findings(api, None) == {}
    # and a DRA switch never goes while GPU nodes are up
    assert findings(api, "dra_nodes_up") == {"device-allocation-switch": False}
    # GIVEN the job deleted since: the deploy re-applies it, and it would run again
    client.CustomObjectsApi(api).delete_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayjobs", "train-efa")
    wait_for(lambda: not all_ray_jobs(api), "the RayJob gone")
    assert findings(api, "instance_type") == {"job-recreated": True}
    assert findings(api, "steps") == {}


def test_at_zero_gpu_nodes_the_device_switch_goes(deployed, api):
    core = client.CoreV1Api(api)
    for node in deployed.gpu_nodes:
        core.delete_node(node)
    wait_for(lambda: not read_cluster(api, SETTINGS).gpu_nodes, "the GPU nodes gone")
    # the swap is fine with no GPU node up (the job this diff re-applies was deleted by the test before: said too)
    assert findings(api, "dra_nodes_up") == {"job-recreated": True}
