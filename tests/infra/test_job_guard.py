"""The job guard: a deploy that rolls or resizes the GPU nodes, or changes or deletes the stack's RayJob, fails while a
RayJob runs, before anything changes, unless `-c allowJobDisruption=true`.

The handler's decision is a pure function of CloudFormation's old and new properties and the cluster's RayJobs
(given here as a function, the seam a real API server plugs into); the handler answers CloudFormation's ResponseURL
(a local HTTP server here). The synth tests check that the guard's properties change exactly when such a deploy is
coming and that the node group and the RayJob wait for it.
"""

from __future__ import annotations

import importlib.util
import json
import re
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import ModuleType

import pytest

from ray_efa.infra import job_guard_handler as guard
from tests.infra.conftest import synthesize
from tests.infra.test_workload import find

BEFORE = {
    "ClusterName": "ray-train",
    "RollKey": "gpuInstanceType=g6.12xlarge capacityType=ON_DEMAND",
    "NodeCount": "2",
    "CapacityType": "ON_DEMAND",
    "JobHash": "aaaa",
    "JobName": "train-efa",
    "Namespace": "ray",
    "AllowJobDisruption": "false",
}
RUNNING = {"ray/train-efa": "Running"}

CKPT = "s3://ckpt-bucket/runs"  # a job on 2 GPU nodes needs shared storage (shared_storage_problem)


def jobs(listed: dict[str, str]):
    calls = []

    def list_jobs() -> dict[str, str]:
        calls.append(1)
        return listed

    return list_jobs, calls


@pytest.mark.parametrize(
    "change, says",
    [
        (
            {"RollKey": "gpuInstanceType=g6e.24xlarge capacityType=ON_DEMAND"},
            "rolls the GPU nodes (gpuInstanceType g6.12xlarge -> g6e.24xlarge)",
        ),
        ({"NodeCount": "4"}, "resizes the GPU nodes from 2 to 4"),
        ({"JobHash": "none", "JobName": "none"}, "deletes RayJob ray/train-efa"),
        ({"JobHash": "bbbb", "JobName": "train-efa-2"}, "replaces RayJob ray/train-efa with train-efa-2"),
    ],
)
def test_a_disrupting_update_fails_while_a_job_runs_naming_it_and_the_override(change, says):
    list_jobs, _ = jobs({**RUNNING, "ray/done": "Complete"})
    refusal = guard.decide("Update", BEFORE, {**BEFORE, **change}, list_jobs)
    assert refusal is not None and says in refusal
    assert "while RayJob ray/train-efa (Running) runs" in refusal and "ray/done" not in refusal
    assert "-c allowJobDisruption=true" in refusal


@pytest.mark.parametrize("state", ["Complete", "Failed", "Suspended", "ValidationFailed"])
def test_a_finished_job_is_no_reason(state):
    list_jobs, _ = jobs({"ray/train-efa": state})
    assert guard.decide("Update", BEFORE, {**BEFORE, "NodeCount": "4"}, list_jobs) is None


@pytest.mark.parametrize("state", ["", "New", "Initializing", "Running", "Retrying", "Suspending"])
def test_a_job_about_to_run_counts_as_running(state):
    list_jobs, _ = jobs({"other/job": state})
    assert guard.decide("Update", BEFORE, {**BEFORE, "NodeCount": "4"}, list_jobs) is not None


def test_the_override_and_harmless_updates_never_ask_the_api_server():
    list_jobs, calls = jobs(RUNNING)
    # THEN the override lets the roll through ...
    assert guard.decide("Update", BEFORE, {**BEFORE, "NodeCount": "4", "AllowJobDisruption": "true"}, list_jobs) is None
    # ... turning it off again changes nothing that runs, and neither does a create or a delete
    assert guard.decide("Update", {**BEFORE, "AllowJobDisruption": "true"}, BEFORE, list_jobs) is None
    assert guard.decide("Create", {}, BEFORE, list_jobs) is None
    assert guard.decide("Delete", {}, BEFORE, list_jobs) is None
    assert calls == []


BLOCK = {
    **BEFORE,
    "CapacityType": "CAPACITY_BLOCK",
    "RollKey": (
        "gpuInstanceType=p5.48xlarge gpuAvailabilityZone=us-east-2a gpuRootVolumeGib=500 "
        "capacityReservationId=cr-0123456789abcdef0 capacityType=CAPACITY_BLOCK kubernetesVersion=1.35"
    ),
}


def test_a_capacity_block_group_rolls_only_from_zero_nodes():
    rolled = {**BLOCK, "RollKey": BLOCK["RollKey"].replace("1.35", "1.36")}
    list_jobs, _ = jobs({})
    # THEN a roll with nodes up is refused, no job running and the override on ...
    refusal = guard.decide("Update", BLOCK, {**rolled, "AllowJobDisruption": "true"}, list_jobs, "ray-train-gpu")
    assert refusal is not None and "Capacity Block node group with 2 node(s) up" in refusal
    # ... with a remedy that works as written: this stack alone, at zero, with the settings it has now
    assert (
        "`npx cdk deploy ray-train-gpu --exclusively -c gpuNodeCount=0 -c gpuInstanceType=p5.48xlarge "
        "-c gpuAvailabilityZone=us-east-2a -c gpuRootVolumeGib=500 -c capacityReservationId=cr-0123456789abcdef0 "
        "-c kubernetesVersion=1.35 -c capacityReservationType=capacity-block`"
    ) in refusal
    # ... and at zero nodes it goes ahead, as does scaling to zero itself
    assert guard.decide("Update", {**BLOCK, "NodeCount": "0"}, {**rolled, "NodeCount": "0"}, list_jobs) is None
    assert guard.decide("Update", BLOCK, {**BLOCK, "NodeCount": "0"}, list_jobs) is None


def test_a_switch_to_or_from_a_capacity_block_is_judged_as_any_roll():
    # a new node group replaces the old one: the Capacity Block rule (an update in place) is no reason, override
    # or not; a running job is, as for any roll
    on_demand = {**BEFORE, "RollKey": BLOCK["RollKey"].replace("CAPACITY_BLOCK", "ON_DEMAND")}
    for old, new in ((on_demand, BLOCK), (BLOCK, on_demand)):
        assert guard.decide("Update", old, new, jobs({})[0]) is None
        assert guard.decide("Update", old, {**new, "AllowJobDisruption": "true"}, jobs(RUNNING)[0]) is None
        assert "while RayJob ray/train-efa (Running) runs" in (guard.decide("Update", old, new, jobs(RUNNING)[0]) or "")


def test_a_roll_the_settings_key_does_not_name_is_seen_by_its_digest():
    digested = {**BEFORE, "RollDigest": "1111222233334444"}
    refusal = guard.decide("Update", digested, {**digested, "RollDigest": "5555666677778888"}, jobs(RUNNING)[0])
    assert "rolls the GPU nodes (their launch template, labels or taints)" in (refusal or "")
    # a guard deployed before the digest existed: its first digest is no change
    assert guard.decide("Update", BEFORE, digested, jobs(RUNNING)[0]) is None


def test_what_touches_no_running_pod_goes_ahead_while_jobs_run_or_wait():
    list_jobs, calls = jobs({"ray/train-efa": "Initializing", "team/other": "Running"})
    zero = {**BEFORE, "NodeCount": "0", "JobHash": "none", "JobName": "none"}
    # nodes back from zero, the job applied with them: what the waiting job needs
    assert guard.decide("Update", zero, BEFORE, list_jobs) is None
    # a roll at zero nodes
    assert guard.decide("Update", zero, {**zero, "RollKey": "gpuInstanceType=g6e.24xlarge"}, list_jobs) is None
    # the job's spec changed under its name (image, code, steps): KubeRay leaves a running RayJob as it is
    assert guard.decide("Update", BEFORE, {**BEFORE, "JobHash": "bbbb"}, list_jobs) is None
    assert calls == []


def test_the_rayjobs_are_read_from_the_api_servers_list():
    listed = {
        "items": [
            {"metadata": {"namespace": "ray", "name": "train-efa"}, "status": {"jobDeploymentStatus": "Running"}},
            {"metadata": {"namespace": "team", "name": "fresh"}},
        ]
    }
    assert guard.active_ray_jobs(listed["items"]) == {"ray/train-efa": "Running", "team/fresh": ""}


def _ended(state: str, ended: str | None = "2026-12-07T12:00:00Z", **spec: object) -> dict:
    status = {"jobDeploymentStatus": state, **({"endTime": ended} if ended else {})}
    return {
        "metadata": {"namespace": "ray", "name": "done"},
        "status": status,
        "spec": {"shutdownAfterJobFinishes": True, "ttlSecondsAfterFinished": 600, **spec},
    }


@pytest.mark.parametrize("state", ["Complete", "Failed"])
def test_a_finished_job_holds_the_nodes_until_kuberay_deletes_its_cluster(state):
    import datetime

    def at(clock: str) -> datetime.datetime:
        return datetime.datetime.fromisoformat(f"2026-12-07T{clock}+00:00")

    list_jobs = {"ray/done": _ended(state)}
    # GIVEN a job that ended at 12:00 with ttlSecondsAfterFinished 600: KubeRay deletes its Ray cluster at 12:10 ...
    during = guard.active_ray_jobs(list(list_jobs.values()), at("12:09:59"))
    assert during == {"ray/done": f"{state}, its Ray cluster deleted at 12:10:00 UTC (ttlSecondsAfterFinished)"}
    # ... until then its pods (under their PodDisruptionBudget) hold the nodes: a roll is refused, saying when
    refusal = guard.decide("Update", BEFORE, {**BEFORE, "NodeCount": "4"}, lambda: during)
    assert "RayJob ray/done (" + during["ray/done"] + ")" in (refusal or "")
    # ... and from then on it holds nothing
    after = guard.active_ray_jobs(list(list_jobs.values()), at("12:10:00"))
    assert after == {"ray/done": state}
    assert guard.decide("Update", BEFORE, {**BEFORE, "NodeCount": "4"}, lambda: after) is None
    # a cluster KubeRay never deletes (shutdownAfterJobFinishes false) holds them until the RayJob is deleted; one
    # the job only selected (clusterSelector) is not the job's
    kept = guard.job_state(_ended(state, shutdownAfterJobFinishes=False), at("23:00:00"))
    assert kept.startswith(f"{state}, its Ray cluster kept") and kept not in guard.INACTIVE_STATES
    assert (
        guard.job_state(
            _ended(state, clusterSelector={"ray.io/cluster": "x"}, shutdownAfterJobFinishes=False), at("12:05:00")
        )
        == state
    )


def test_the_eks_token_is_a_presigned_sts_call_naming_the_cluster(monkeypatch):
    """What `aws eks get-token` prints, made by botocore's signer alone (no AWS call: signing is local)."""
    import base64
    import urllib.parse

    from boto3.session import Session

    session = Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", region_name="us-east-2")
    token = guard.eks_token("ray-train", "us-east-2", session)
    assert token.startswith("k8s-aws-v1.") and "=" not in token
    url = base64.urlsafe_b64decode(token.removeprefix("k8s-aws-v1.") + "==").decode()
    parsed = urllib.parse.urlparse(url)
    query = urllib.parse.parse_qs(parsed.query)
    assert parsed.scheme == "https" and parsed.netloc == "sts.us-east-2.amazonaws.com"
    assert query["Action"] == ["GetCallerIdentity"] and query["X-Amz-Expires"] == ["60"]
    assert query["X-Amz-SignedHeaders"] == ["host;x-k8s-aws-id"] and "X-Amz-Signature" in query


def test_the_network_waits_fit_the_functions_timeout():
    # THEN the handler answers CloudFormation before Lambda stops it, and CloudFormation waits for it
    assert guard.worst_case_s() < guard.FUNCTION_TIMEOUT_S < guard.SERVICE_TIMEOUT_S


class _Recorder(BaseHTTPRequestHandler):
    bodies: list[dict] = []

    def do_PUT(self):  # noqa: N802 - http.server's name
        type(self).bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def _handle(event_props: tuple[dict, dict], list_jobs) -> dict:
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.handle_request)
    thread.start()
    old, new = event_props
    event = {
        "RequestType": "Update",
        "ResponseURL": f"http://127.0.0.1:{server.server_port}/",
        "StackId": "s",
        "RequestId": "r",
        "LogicalResourceId": "JobGuard",
        "PhysicalResourceId": "ray-train/job-guard",
        "OldResourceProperties": old,
        "ResourceProperties": new,
    }
    guard.handler(event, None, list_jobs, stack_status=lambda stack_id: "UPDATE_IN_PROGRESS")
    thread.join(10)
    server.server_close()
    return _Recorder.bodies.pop()


def test_the_handler_answers_cloudformation_and_refuses_what_it_cannot_check():
    list_jobs, _ = jobs(RUNNING)
    failed = _handle((BEFORE, {**BEFORE, "NodeCount": "4"}), list_jobs)
    assert failed["Status"] == "FAILED" and failed["Reason"].startswith("ray-efa job guard: the deploy resizes")
    assert failed["PhysicalResourceId"] == "ray-train/job-guard"
    assert _handle((BEFORE, {**BEFORE, "NodeCount": "4"}), jobs({})[0])["Status"] == "SUCCESS"

    def unreachable() -> dict[str, str]:
        raise RuntimeError("kubectl get failed: i/o timeout")

    # an API server it cannot reach: refused (not knowing is no licence), naming the override
    answer = _handle((BEFORE, {**BEFORE, "NodeCount": "4"}), unreachable)
    assert answer["Status"] == "FAILED" and "could not list the cluster's RayJobs (" in answer["Reason"]
    assert "i/o timeout" in answer["Reason"] and "-c allowJobDisruption=true" in answer["Reason"]


# -- CloudFormation's sequences, against the handler CloudFormation runs (the synthesized asset) ----------------------

STACK_ID = "arn:aws:cloudformation:us-east-2:111122223333:stack/ray-train-gpu/0a1b2c3d"


def asset_handler(synth, stack: str = "gpu") -> ModuleType:
    """The guard's handler module as the Lambda runs it: loaded from the function's asset in the cloud assembly (of
    the `stack` "gpu" or "cluster")."""
    (function,) = [
        r
        for r in getattr(synth, stack).find_resources("AWS::Lambda::Function").values()
        if r["Properties"]["Handler"] == "job_guard_handler.handler"
    ]
    # Code.S3Key is the asset's hash and ".zip"; the stack's asset manifest says which folder of the assembly it is
    asset_hash = function["Properties"]["Code"]["S3Key"].removesuffix(".zip")
    assembly = Path(synth.assembly.directory)
    manifest = json.loads((assembly / f"{getattr(synth.stacks, stack).stack_name}.assets.json").read_text())
    asset = assembly / manifest["files"][asset_hash]["source"]["path"]
    assert sorted(p.name for p in asset.iterdir()) == ["job_guard_handler.py"]  # the handler alone, stdlib + boto3
    spec = importlib.util.spec_from_file_location("job_guard_asset", asset / "job_guard_handler.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CloudFormation:
    """CloudFormation's side of the custom-resource contract for one guard in one stack, as its documentation
    describes it (CloudFormation User Guide: crpg-ref-requesttypes-create/-update, crpg-ref-responses; API Reference:
    ContinueUpdateRollback): a request per change of the properties, answered at the ResponseURL (a local HTTP
    server here), the stack's status what DescribeStacks would say while the request is out (the handler's
    `stack_status` seam: the one AWS call, which cannot run here), and a failed update rolled back by an Update with
    the properties reversed; a failed rollback leaves the stack in UPDATE_ROLLBACK_FAILED."""

    def __init__(
        self, handler: ModuleType, list_jobs: Callable[[], Mapping[str, str]] | None, stack_id: str = STACK_ID
    ) -> None:
        """`list_jobs` None: the handler's own (DescribeCluster, then the API server)."""
        self.handler, self.list_jobs, self.stack_id = handler, list_jobs, stack_id
        self.status, self.properties, self.pending = "", {}, {}
        self.answers: list[tuple[str, str, str]] = []  # (stack status when asked, request, answer)
        self.reasons: list[str] = []  # the answers' Reason

    def _ask(self, request_type: str, old: dict, new: dict) -> bool:
        server = HTTPServer(("127.0.0.1", 0), _Recorder)
        thread = threading.Thread(target=server.handle_request)
        thread.start()
        event = {
            "RequestType": request_type,
            "ResponseURL": f"http://127.0.0.1:{server.server_port}/",
            "StackId": self.stack_id,
            "RequestId": f"r{len(self.answers)}",
            "LogicalResourceId": "JobGuard",
            "ResourceType": "Custom::RayEfa-JobDisruptionGuard",
            "ResourceProperties": new,
        }
        if request_type != "Create":
            event |= {"PhysicalResourceId": "ray-train/job-guard", "OldResourceProperties": old}

        def stack_status(stack_id: str) -> str:
            assert stack_id == self.stack_id  # the event's own stack, which the role may describe
            return self.status

        self.handler.handler(event, None, list_jobs=self.list_jobs, stack_status=stack_status)
        thread.join(10)
        server.server_close()
        answer = _Recorder.bodies.pop()
        self.answers.append((self.status, request_type, answer["Status"]))
        self.reasons.append(answer["Reason"])
        return answer["Status"] == "SUCCESS"

    def create(self, properties: dict) -> str:
        self.status = "CREATE_IN_PROGRESS"
        assert self._ask("Create", {}, properties)
        self.properties, self.status = properties, "CREATE_COMPLETE"
        return self.status

    def update(self, properties: dict, later_failure: bool = False) -> str:
        """Deploy `properties`; `later_failure`: a resource after the guard fails (the node group's update)."""
        self.status, self.pending = "UPDATE_IN_PROGRESS", properties
        if self._ask("Update", self.properties, properties) and not later_failure:
            self.properties, self.status = properties, "UPDATE_COMPLETE"
            return self.status
        self.status = "UPDATE_ROLLBACK_IN_PROGRESS"
        return self._roll_back()

    def continue_update_rollback(self) -> str:
        assert self.status == "UPDATE_ROLLBACK_FAILED"
        self.status = "UPDATE_ROLLBACK_IN_PROGRESS"
        return self._roll_back()

    def _roll_back(self) -> str:
        rolled_back = self._ask("Update", self.pending, self.properties)
        self.status = "UPDATE_ROLLBACK_COMPLETE" if rolled_back else "UPDATE_ROLLBACK_FAILED"
        return self.status


@pytest.fixture(scope="module")
def asset_guard() -> ModuleType:
    return asset_handler(synthesize())


def unreachable() -> dict[str, str]:
    raise TimeoutError("dial tcp 10.0.1.5:443: i/o timeout")


def test_a_refused_roll_is_rolled_back_and_the_stack_can_be_deployed_again(asset_guard):
    cloudformation = CloudFormation(asset_guard, jobs(RUNNING)[0])
    assert cloudformation.create(BEFORE) == "CREATE_COMPLETE"
    # WHEN a deploy rolls the nodes under a running job, THEN the guard refuses it, and its rollback (the same
    # change reversed, the job still running) succeeds: the stack is deployable again
    assert cloudformation.update({**BEFORE, "NodeCount": "4"}) == "UPDATE_ROLLBACK_COMPLETE"
    assert cloudformation.answers[1:] == [
        ("UPDATE_IN_PROGRESS", "Update", "FAILED"),
        ("UPDATE_ROLLBACK_IN_PROGRESS", "Update", "SUCCESS"),
    ]
    assert cloudformation.properties == BEFORE


def test_an_override_that_fails_later_is_rolled_back(asset_guard):
    cloudformation = CloudFormation(asset_guard, jobs(RUNNING)[0])
    cloudformation.create(BEFORE)
    allowed = {**BEFORE, "RollKey": "gpuInstanceType=g6e.24xlarge", "AllowJobDisruption": "true"}
    # the override passes the guard; the node group's update fails after it; the rollback (AllowJobDisruption
    # false again, a job running) is not refused
    assert cloudformation.update(allowed, later_failure=True) == "UPDATE_ROLLBACK_COMPLETE"
    assert [answer for _, _, answer in cloudformation.answers[1:]] == ["SUCCESS", "SUCCESS"]


def test_an_unreachable_api_server_fails_the_deploy_but_never_its_rollback(asset_guard):
    cloudformation = CloudFormation(asset_guard, unreachable)
    cloudformation.create(BEFORE)
    assert cloudformation.update({**BEFORE, "JobHash": "none", "JobName": "none"}) == "UPDATE_ROLLBACK_COMPLETE"
    assert [answer for _, _, answer in cloudformation.answers[1:]] == ["FAILED", "SUCCESS"]


def test_a_capacity_block_roll_is_refused_and_rolled_back(asset_guard):
    block = {**BEFORE, "CapacityType": "CAPACITY_BLOCK"}
    cloudformation = CloudFormation(asset_guard, jobs({})[0])
    cloudformation.create(block)
    assert cloudformation.update({**block, "RollKey": "kubernetesVersion=1.36"}) == "UPDATE_ROLLBACK_COMPLETE"
    assert [answer for _, _, answer in cloudformation.answers[1:]] == ["FAILED", "SUCCESS"]


def test_continue_update_rollback_of_a_stranded_stack_passes_the_guard(asset_guard):
    # GIVEN a stack an earlier guard left in UPDATE_ROLLBACK_FAILED (it refused the rollback), a job running
    cloudformation = CloudFormation(asset_guard, jobs(RUNNING)[0])
    cloudformation.create(BEFORE)
    cloudformation.status, cloudformation.pending = "UPDATE_ROLLBACK_FAILED", {**BEFORE, "NodeCount": "4"}
    # THEN `aws cloudformation continue-update-rollback` completes it, the cluster not asked
    list_jobs, calls = jobs(RUNNING)
    cloudformation.list_jobs = list_jobs
    assert cloudformation.continue_update_rollback() == "UPDATE_ROLLBACK_COMPLETE" and calls == []


def test_what_disrupts_nothing_needs_neither_the_stack_status_nor_the_cluster(asset_guard):
    def no_call(*_: object) -> str:
        raise AssertionError("not asked")

    event = {
        "RequestType": "Update",
        "StackId": STACK_ID,
        "OldResourceProperties": BEFORE,
        "ResourceProperties": {**BEFORE, "AllowJobDisruption": "true"},
    }
    assert asset_guard.judge(event, no_call, no_call) is None
    assert asset_guard.judge({**event, "RequestType": "Delete"}, no_call, no_call) is None
    # and a stack status it cannot read, for a change that disrupts, refuses (a deploy; never a rollback it read)
    with pytest.raises(asset_guard.Unsure, match="could not read the stack's status"):
        asset_guard.judge({**event, "ResourceProperties": {**BEFORE, "NodeCount": "4"}}, no_call, no_call)


# -- the guard in the GPU stack ------------------------------------------------------------------------------------


def _guard(synth) -> tuple[str, dict]:
    resources = synth.gpu.to_json()["Resources"]
    ((logical_id, resource),) = [
        (i, r) for i, r in resources.items() if r["Type"] == "Custom::RayEfa-JobDisruptionGuard"
    ]
    return logical_id, resource


def _properties(context: dict) -> dict:
    props = dict(_guard(synthesize(**context))[1]["Properties"])
    for token in ("ServiceToken", "ClusterName"):
        props.pop(token)
    return props


def test_the_node_group_and_the_rayjob_wait_for_the_guard():
    synth = synthesize()
    logical_id, _ = _guard(synth)
    resources = synth.gpu.to_json()["Resources"]
    (nodegroup,) = [r for r in resources.values() if r["Type"] == "AWS::EKS::Nodegroup"]
    (job,) = [r for i, r in resources.items() if i.startswith("TrainingJobRayJob")]
    assert logical_id in nodegroup["DependsOn"] and logical_id in job["DependsOn"]


def test_the_guard_runs_as_its_own_role_that_may_read_little_and_imports_no_layer():
    synth = synthesize()
    template = synth.gpu.to_json()["Resources"]
    (function,) = [
        r
        for r in template.values()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"]["Handler"] == "job_guard_handler.handler"
    ]
    role_id = function["Properties"]["Role"]["Fn::GetAtt"][0]
    assert template[role_id]["Type"] == "AWS::IAM::Role" and "Layers" not in function["Properties"]
    statements = [
        statement
        for policy in template.values()
        if policy["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    # THEN its stack's status (this stack only) and the cluster's endpoint, nothing else of AWS ...
    assert sorted((s["Action"], json.dumps(s["Resource"])) for s in statements) == [
        ("cloudformation:DescribeStacks", json.dumps({"Ref": "AWS::StackId"})),
        ("eks:DescribeCluster", json.dumps(function_cluster_arn(synth))),
    ]
    # ... and in the cluster, an access entry whose group may list RayJobs, nothing else
    ((entry_id, entry),) = synth.gpu.find_resources("AWS::EKS::AccessEntry").items()
    assert entry["Properties"]["PrincipalArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    assert entry["Properties"]["KubernetesGroups"] == ["ray-train-gpu-job-guard"]
    assert "AccessPolicies" not in entry["Properties"]
    _, _, role = find(synth.gpu, "ClusterRole", "ray-train-gpu-job-guard")
    assert role["rules"] == [{"apiGroups": ["ray.io"], "resources": ["rayjobs"], "verbs": ["list"]}]
    _, _, binding = find(synth.gpu, "ClusterRoleBinding", "ray-train-gpu-job-guard")
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "ray-train-gpu-job-guard"}
    ]
    # ... which exist before CloudFormation first asks the guard
    _, guard_resource = _guard(synth)
    assert entry_id in guard_resource["DependsOn"]


def function_cluster_arn(synth) -> dict:
    """The cluster's ARN as the GPU stack refers to it: an import of the cluster stack's export of it."""
    (cluster_id,) = synth.cluster.find_resources("AWS::EKS::Cluster")
    exports = {o["Export"]["Name"]: o["Value"] for o in synth.cluster.to_json()["Outputs"].values() if "Export" in o}
    (name,) = [name for name, value in exports.items() if value == {"Fn::GetAtt": [cluster_id, "Arn"]}]
    return {"Fn::ImportValue": name}


def test_the_guards_properties_change_exactly_when_a_running_job_would_be_disrupted():
    base = _properties({})
    assert base["JobName"] == "train-efa" and base["AllowJobDisruption"] == "false" and base["NodeCount"] == "2"
    # a training setting (the settings ConfigMap alone): no update of the guard, so no question asked
    assert _properties({"steps": 40}) == base
    # what rolls or resizes the nodes, or deletes the job: an update, which the handler judges
    assert _properties({"gpuInstanceType": "g6e.24xlarge"})["RollKey"] != base["RollKey"]
    assert _properties({"gpuNodeCount": 4})["NodeCount"] == "4"
    off = _properties({"trainingJob": False})
    assert (off["JobHash"], off["JobName"]) == ("none", "none") and off["RollKey"] == base["RollKey"]
    assert _properties({"jobName": "train-efa-2"})["JobHash"] != base["JobHash"]
    # what rolls the nodes without a roll-key setting: the launch template's placement, a taint
    assert _properties({"placementGroup": "off"})["RollDigest"] != base["RollDigest"]
    assert _properties({"gpuNodeTaints": "team=ml:NoExecute"})["RollDigest"] != base["RollDigest"]
    assert len(base["RollDigest"]) == 16
    # the override is a property of its own, which the handler reads from the new properties
    assert _properties({"allowJobDisruption": True}) == {**base, "AllowJobDisruption": "true"}


def test_the_override_forces_the_gpu_node_groups_update_and_says_so():
    def forced(synth) -> bool:
        (nodegroup,) = synth.gpu.find_resources("AWS::EKS::Nodegroup").values()
        return nodegroup["Properties"]["ForceUpdateEnabled"]

    allowed, default = synthesize(allowJobDisruption=True), synthesize()
    # THEN the deploy that allows disruption drains past the job's PodDisruptionBudget (EKS would fail the update
    # after 15 minutes, and the rollback would follow) ...
    assert forced(allowed) is True and forced(default) is False
    # ... and says so, in the deploy's outputs
    outputs = allowed.gpu.to_json()["Outputs"]
    assert "PodDisruptionBudget" in outputs["JobDisruptionAllowed"]["Description"]
    assert "JobDisruptionAllowed" not in default.gpu.to_json()["Outputs"]


def test_the_jobs_ray_pods_have_a_disruption_budget_that_refuses_every_eviction():
    synth = synthesize()
    budget_id, _, budget = find(synth.gpu, "PodDisruptionBudget", "train-efa-ray-pods")
    job_id, job_resource, job = find(synth.gpu, "RayJob", "train-efa")
    # THEN no voluntary eviction of the job's head or workers (a drain fails instead) ...
    assert budget["apiVersion"] == "policy/v1" and budget["spec"]["maxUnavailable"] == 0
    selector = budget["spec"]["selector"]["matchLabels"]
    spec = job["spec"]["rayClusterSpec"]
    templates = [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]
    for template in templates:
        assert selector.items() <= template["metadata"]["labels"].items()
    # ... and not the submitter's pod, which is no Ray node
    submitter = job["spec"]["submitterPodTemplate"]["metadata"]["labels"]
    assert not selector.items() <= submitter.items()
    # ... and it exists before the job starts
    assert budget_id in job_resource["DependsOn"]


# -- the GPU nodes' taints flow to what runs on them, as their labels do ---------------------------------------------


def test_the_gpu_taints_reach_the_node_group_the_ray_workers_and_the_device_plugins():
    taints = "team=ml:NoSchedule,dedicated:NoExecute"
    synth = synthesize(gpuNodeTaints=taints)
    (nodegroup,) = synth.gpu.find_resources("AWS::EKS::Nodegroup").values()
    assert nodegroup["Properties"]["Taints"] == [
        {"Effect": "NO_SCHEDULE", "Key": "team", "Value": "ml"},
        {"Effect": "NO_EXECUTE", "Key": "dedicated"},
    ]
    expected = [
        {"key": "team", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
    ]
    _, _, job = find(synth.gpu, "RayJob")
    (workers,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert workers["template"]["spec"]["tolerations"] == expected
    charts = synth.cluster.find_resources("Custom::AWSCDK-EKS-HelmChart").values()
    plugins = [json.loads(c["Properties"]["Values"]) for c in charts if "device-plugin" in c["Properties"]["Chart"]]
    assert len(plugins) == 2 and all(v["tolerations"] == expected for v in plugins)


def test_a_platforms_gpu_node_group_taints_are_what_its_job_tolerates():
    import aws_cdk as cdk

    from ray_efa.infra.cluster import RayEksCluster
    from ray_efa.infra.gpu_nodegroup import EfaGpuNodegroup
    from ray_efa.infra.network import ClusterVpc
    from ray_efa.infra.training_job import RayTrainingJob

    app = cdk.App()
    stack = cdk.Stack(app, "Platform", env=cdk.Environment(region="us-east-2"))
    vpc = ClusterVpc(stack, "Vpc").vpc
    cluster = RayEksCluster(stack, "Eks", vpc=vpc).cluster
    nodes = EfaGpuNodegroup(stack, "Gpu", cluster=cluster, vpc=vpc, taints=["pool=gpu:NoSchedule"])
    job = RayTrainingJob(stack, "Job", cluster=cluster, gpu_nodes=nodes, storage_path=CKPT)
    # THEN the job's settings take the node group's taints (no setting repeats them) ...
    assert job.settings.nodes.gpu_node_taints == ("pool=gpu:NoSchedule",)
    # ... and a bad taint is the prop's error
    with pytest.raises(ValueError, match="EfaGpuNodegroup taints: taint 'pool' must be key=value:Effect"):
        EfaGpuNodegroup(stack, "Bad", cluster=cluster, vpc=vpc, taints=["pool"])


# -- the system nodes' guard, in the cluster stack ------------------------------------------------------------------

CLUSTER_STACK_ID = "arn:aws:cloudformation:us-east-2:111122223333:stack/ray-train-cluster/4e5f6a7b"


def _system_guard(synth) -> tuple[str, dict]:
    ((logical_id, resource),) = synth.cluster.find_resources(guard.JOB_GUARD_RESOURCE_TYPE).items()
    return logical_id, resource


def _system_properties(synth) -> dict:
    return {k: v for k, v in _system_guard(synth)[1]["Properties"].items() if k != "ServiceToken"}


def _refs(node) -> set[str]:
    """The logical ids (and parameters) that `node` refers to: Ref, Fn::GetAtt, Fn::Sub's ${...}."""
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    if isinstance(node.get("Ref"), str):
        return {node["Ref"]}
    if "Fn::GetAtt" in node:
        target = node["Fn::GetAtt"]
        return {target[0] if isinstance(target, list) else target.split(".", 1)[0]}
    if "Fn::Sub" in node:
        sub = node["Fn::Sub"]
        text, variables = (sub, {}) if isinstance(sub, str) else (sub[0], sub[1])
        return set(re.findall(r"\$\{([A-Za-z0-9]+)[.}]", text)) - set(variables) | _refs(variables)
    return set().union(*(_refs(v) for v in node.values())) if node else set()


def _direct(resources: dict, logical_id: str) -> set[str]:
    """What CloudFormation creates and updates before `logical_id` ("Resource B is updated before resource A",
    CloudFormation User Guide, aws-attribute-dependson): its DependsOn and what its properties refer to."""
    resource = resources[logical_id]
    depends = resource.get("DependsOn", [])
    return ({depends} if isinstance(depends, str) else set(depends)) | _refs(resource.get("Properties", {})) & set(
        resources
    )


def _before(resources: dict, logical_id: str) -> set[str]:
    """Every resource CloudFormation creates and updates before `logical_id` (its dependencies, transitively)."""
    seen: set[str] = set()
    todo = [logical_id]
    while todo:
        for dependency in _direct(resources, todo.pop()) - seen:
            seen.add(dependency)
            todo.append(dependency)
    return seen


def _cycle(resources: dict) -> list[str]:
    """The resources on or behind a dependency cycle (CloudFormation refuses such a template): empty when none."""
    waiting = {i: _direct(resources, i) for i in resources}
    done: set[str] = set()
    while ready := [i for i, deps in waiting.items() if deps <= done]:
        done |= set(ready)
        for i in ready:
            del waiting[i]
    return sorted(waiting)


@pytest.mark.parametrize("endpoint", ["public_and_private", "private"])
def test_the_cluster_and_the_system_nodes_wait_for_a_guard_that_waits_for_nothing_of_the_cluster(endpoint):
    """CloudFormation updates the control plane before the node group (the node group refers to it), and EKS has no
    update back to a lower version: the guard must come before both, or its refusal's rollback fails. (It runs in
    the VPC, as the kubectl provider does, wherever the endpoint has private access.)"""
    synth = synthesize(endpointAccess=endpoint)
    resources = synth.cluster.to_json()["Resources"]
    guard_id, guard_resource = _system_guard(synth)
    (cluster_id,) = synth.cluster.find_resources("AWS::EKS::Cluster")
    (nodegroup_id,) = synth.cluster.find_resources("AWS::EKS::Nodegroup")
    # THEN the template's dependencies have no cycle ...
    assert _cycle(resources) == []
    # ... the cluster and the system node group wait for the guard ...
    assert guard_id in resources[cluster_id]["DependsOn"] and guard_id in resources[nodegroup_id]["DependsOn"]
    # ... and the guard for nothing that is, or waits for, the cluster
    after_cluster = {i for i in resources if cluster_id in _before(resources, i)} | {cluster_id}
    assert not _before(resources, guard_id) & after_cluster, sorted(_before(resources, guard_id) & after_cluster)
    # ... its properties name the cluster by the literal it is created under, referring to its own function alone
    properties = guard_resource["Properties"]
    assert properties["ClusterName"] == "ray-train"
    assert _refs(properties) == {guard_resource["Properties"]["ServiceToken"]["Fn::GetAtt"][0]}
    # ... and its access to the cluster (an access entry, RBAC objects) comes after the cluster: a Create of the
    # guard, before the cluster exists, asks the cluster nothing
    ((entry_id, entry),) = [
        (i, r)
        for i, r in synth.cluster.find_resources("AWS::EKS::AccessEntry").items()
        if r["Properties"].get("KubernetesGroups") == ["ray-train-cluster-job-guard"]
    ]
    role_binding_id, _, binding = find(synth.cluster, "ClusterRoleBinding", "ray-train-cluster-job-guard")
    role_id, _, role = find(synth.cluster, "ClusterRole", "ray-train-cluster-job-guard")
    for access in (entry_id, role_id, role_binding_id):
        assert cluster_id in _before(resources, access), access
    assert "AccessPolicies" not in entry["Properties"]
    assert role["rules"] == [{"apiGroups": ["ray.io"], "resources": ["rayjobs"], "verbs": ["list"]}]
    assert binding["subjects"][0]["name"] == "ray-train-cluster-job-guard"
    function_id = properties["ServiceToken"]["Fn::GetAtt"][0]
    assert "VpcConfig" in resources[function_id]["Properties"]


def test_the_system_guard_reaches_the_endpoint_with_a_security_group_of_its_own():
    synth = synthesize()
    resources = synth.cluster.to_json()["Resources"]
    (function,) = [
        r
        for r in synth.cluster.find_resources("AWS::Lambda::Function").values()
        if r["Properties"]["Handler"] == "job_guard_handler.handler"
    ]
    (group_ref,) = function["Properties"]["VpcConfig"]["SecurityGroupIds"]
    group_id = group_ref["Fn::GetAtt"][0]
    # THEN its own group, HTTPS out only ...
    assert [
        (e["IpProtocol"], e["FromPort"], e["ToPort"]) for e in resources[group_id]["Properties"]["SecurityGroupEgress"]
    ] == [("tcp", 443, 443)]
    # ... which the cluster's security group (on the endpoint's interfaces) lets in on 443
    (cluster_id,) = synth.cluster.find_resources("AWS::EKS::Cluster")
    (ingress,) = [
        r["Properties"]
        for r in synth.cluster.find_resources("AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"].get("SourceSecurityGroupId") == group_ref
    ]
    assert ingress["GroupId"] == {"Fn::GetAtt": [cluster_id, "ClusterSecurityGroupId"]} and ingress["FromPort"] == 443
    # ... and its role reads the cluster by a name it builds, not by a reference to the cluster
    role_id = function["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = [
        statement
        for policy in synth.cluster.find_resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert sorted(s["Action"] for s in statements) == ["cloudformation:DescribeStacks", "eks:DescribeCluster"]
    (describe,) = [s for s in statements if s["Action"] == "eks:DescribeCluster"]
    assert json.dumps(describe["Resource"]).endswith(':cluster/ray-train"]]}') and cluster_id not in json.dumps(
        describe["Resource"]
    )


def test_the_system_guards_properties_say_what_rolls_the_system_nodes():
    properties = _system_properties(synthesize())
    assert properties["RollKey"] == "systemInstanceType=m7i.xlarge kubernetesVersion=1.36"
    assert properties["Nodes"] == "system nodes" and len(properties["RollDigest"]) == 16
    # (no node count, job or capacity type: a resize of the system nodes or a RayJob's change is no question for it)
    assert set(properties) == {"ClusterName", "RollKey", "RollDigest", "Nodes", "AllowJobDisruption", "ServiceTimeout"}


@pytest.fixture(scope="module")
def cluster_asset_guard() -> ModuleType:
    return asset_handler(synthesize(), "cluster")


def test_a_kubernetes_upgrade_under_a_running_job_is_refused_and_rolled_back(cluster_asset_guard):
    old, new = _system_properties(synthesize(kubernetesVersion="1.35")), _system_properties(synthesize())
    cloudformation = CloudFormation(cluster_asset_guard, jobs(RUNNING)[0], CLUSTER_STACK_ID)
    assert cloudformation.create(old) == "CREATE_COMPLETE"
    # WHEN the deploy upgrades the cluster while a RayJob runs (its head on the system nodes), THEN the guard refuses
    # it before the control plane changes, and its rollback (the properties reversed, the job running) succeeds
    assert cloudformation.update(new) == "UPDATE_ROLLBACK_COMPLETE"
    assert cloudformation.answers[1:] == [
        ("UPDATE_IN_PROGRESS", "Update", "FAILED"),
        ("UPDATE_ROLLBACK_IN_PROGRESS", "Update", "SUCCESS"),
    ]
    assert (
        "the deploy rolls the system nodes (kubernetesVersion 1.35 -> 1.36) while RayJob ray/train-efa (Running) runs"
        in cloudformation.reasons[1]
    )
    # ... and once no job runs, the same deploy goes ahead
    cloudformation.list_jobs = jobs({"ray/train-efa": "Complete"})[0]
    assert cloudformation.update(new) == "UPDATE_COMPLETE"


def test_the_system_guard_is_created_before_its_cluster_asking_nothing(cluster_asset_guard):
    list_jobs, calls = jobs(RUNNING)
    cloudformation = CloudFormation(cluster_asset_guard, list_jobs, CLUSTER_STACK_ID)
    # THEN its Create (the cluster created after it) succeeds without asking the cluster
    assert cloudformation.create(_system_properties(synthesize())) == "CREATE_COMPLETE" and calls == []


def test_a_cluster_that_is_not_there_runs_no_job(cluster_asset_guard, monkeypatch):
    """The handler's own DescribeCluster, against moto's EKS (AWS cannot be reached here): ResourceNotFound."""
    from moto import mock_aws

    for variable, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-2"),
        ("AWS_REGION", "us-east-2"),
    ):
        monkeypatch.setenv(variable, value)
    old, new = _system_properties(synthesize(kubernetesVersion="1.35")), _system_properties(synthesize())
    with mock_aws():
        cloudformation = CloudFormation(cluster_asset_guard, None, CLUSTER_STACK_ID)
        cloudformation.create(old)
        # THEN an upgrade of a cluster EKS does not find (a first deploy that failed, a cluster deleted) goes ahead
        assert cloudformation.update(new) == "UPDATE_COMPLETE", cloudformation.reasons


def test_the_guard_guards_one_node_group():
    import aws_cdk as cdk

    from ray_efa.infra.cluster import RayEksCluster
    from ray_efa.infra.job_guard import JobDisruptionGuard
    from ray_efa.infra.network import ClusterVpc

    stack = cdk.Stack(cdk.App(), "Platform", env=cdk.Environment(region="us-east-2"))
    ray = RayEksCluster(stack, "Eks", vpc=ClusterVpc(stack, "Vpc").vpc)
    with pytest.raises(ValueError, match="JobDisruptionGuard guards one node group: give gpu_nodes or system_nodes"):
        JobDisruptionGuard(stack, "Neither", cluster=ray.cluster)
    other = cdk.Stack(cdk.App(), "Other", env=cdk.Environment(region="us-east-2"))
    elsewhere = RayEksCluster(other, "Eks", vpc=ClusterVpc(other, "Vpc").vpc)
    with pytest.raises(ValueError, match="cluster must be system_nodes' own cluster"):
        JobDisruptionGuard(stack, "Mixed", cluster=elsewhere.cluster, system_nodes=ray)
