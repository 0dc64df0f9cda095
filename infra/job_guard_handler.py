"""The Lambda handler of JobDisruptionGuard (infra/job_guard.py): fail a deploy that would disrupt a running RayJob.

CloudFormation updates the guard before the GPU node group and the stack's RayJob (they depend on it), and sends an
Update only when its properties change: what rolls or resizes the GPU nodes (RollKey, NodeCount) or the RayJob's
definition (JobHash; "none" when the stack applies no job). On such an Update, `decide` (pure) says whether the
change disrupts a job; if it does, the handler asks the API server for the RayJobs of the cluster (`kubectl get
rayjobs -A`, through the kubectl provider's layers and role, as infra/chart_crds_handler.py does) and fails the
update when one is active, naming it and the override: CloudFormation then rolls the stack back before the node
group or the RayJob changes. Create and Delete never refuse. Standard library and boto3 (as the Lambda runtime has
it) only: this module is the Lambda asset.

CloudFormation rolls a failed update back by updating each resource it updated back to its previous properties: the
guard gets another Update (RequestType Update with ResourceProperties and OldResourceProperties, CloudFormation User
Guide, crpg-ref-requesttypes-update) whose old and new properties are the forward update's, reversed, while the
stack's status is UPDATE_ROLLBACK_IN_PROGRESS (ContinueUpdateRollback, CloudFormation API Reference, puts a stack in
UPDATE_ROLLBACK_FAILED back there). The reversed Update "rolls" the nodes just as the forward one did, with the job still running: refusing it would leave the stack in UPDATE_ROLLBACK_FAILED. So before
judging an Update the handler reads its stack's status (DescribeStacks on the event's StackId, the one permission
the guard's role has on CloudFormation) and answers SUCCESS to every rollback, without asking the cluster: a
rollback restores what ran before, and an unreachable API server cannot fail it.

A Capacity Block's node group is rolled only from zero nodes ("When upgrading a managed node group with Capacity
Blocks, make sure to set the desired size of the node group to 0", EKS User Guide, capacity-blocks-mng): a roll
with nodes up is refused whatever allowJobDisruption says.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["handler", "judge", "decide", "disruption", "active_ray_jobs", "kubectl_ray_jobs",
           "cloudformation_stack_status", "rolling_back", "Unsure", "INACTIVE_STATES", "FUNCTION_TIMEOUT_S",
           "SERVICE_TIMEOUT_S"]

FUNCTION_TIMEOUT_S = 120
SERVICE_TIMEOUT_S = 300
WORK_DIR = os.environ.get("TEST_OUTDIR", "/tmp")
_TOOL_PATHS = "/opt/kubectl:/opt/awscli"

INACTIVE_STATES = ("Complete", "Failed", "Suspended", "ValidationFailed")
"""RayJob status.jobDeploymentStatus values with no Ray cluster of the job left (ops.deploy_check's, repeated here:
the Lambda asset is this file alone). Any other value, "" included, holds or is about to hold the nodes."""

OVERRIDE = "-c allowJobDisruption=true"

ListJobs = Callable[[], Mapping[str, str]]
"""The RayJobs of the cluster: namespace/name -> status.jobDeploymentStatus."""

StackStatus = Callable[[str], str]
"""A stack's StackStatus (DescribeStacks) from its id (the event's StackId)."""


def rolling_back(stack_status: str) -> bool:
    """Whether CloudFormation is rolling the stack back: UPDATE_ROLLBACK_IN_PROGRESS (a failed update, or
    continue-update-rollback), its cleanup, ROLLBACK_IN_PROGRESS (a failed create) and IMPORT_ROLLBACK_IN_PROGRESS."""
    return stack_status.endswith("ROLLBACK_IN_PROGRESS") or stack_status == "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS"


def disruption(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What an update from properties `old` to `new` does to a running job (empty: nothing)."""
    what = []
    if old.get("RollKey") != new.get("RollKey"):
        what.append(f"rolls the GPU nodes ({_changed(old.get('RollKey'), new.get('RollKey'))})")
    if str(old.get("NodeCount")) != str(new.get("NodeCount")):
        what.append(f"resizes the GPU nodes from {old.get('NodeCount')} to {new.get('NodeCount')}")
    if old.get("JobHash") != new.get("JobHash"):
        if new.get("JobHash") == "none":
            what.append(f"deletes RayJob {old.get('Namespace')}/{old.get('JobName')}")
        elif old.get("JobName") != new.get("JobName") and old.get("JobHash") != "none":
            what.append(f"replaces RayJob {old.get('Namespace')}/{old.get('JobName')} with {new.get('JobName')}")
        else:
            what.append(f"changes RayJob {new.get('Namespace')}/{new.get('JobName')}")
    return what


def _changed(old: Any, new: Any) -> str:
    """The `key=value` words of two roll keys that differ, as `key old -> new`."""
    before = dict(w.split("=", 1) for w in str(old or "").split() if "=" in w)
    after = dict(w.split("=", 1) for w in str(new or "").split() if "=" in w)
    return ", ".join(f"{k} {before.get(k)} -> {after.get(k)}" for k in sorted(before.keys() | after.keys())
                     if before.get(k) != after.get(k)) or "its definition"


def decide(request_type: str, old: Mapping[str, Any], new: Mapping[str, Any], list_jobs: ListJobs) -> str | None:
    """Why the guard fails this request (None: it succeeds). `list_jobs` is called only when the update disrupts."""
    if request_type != "Update":
        return None
    what = disruption(old, new)
    if not what:
        return None
    rolled = old.get("RollKey") != new.get("RollKey")
    if rolled and new.get("CapacityType") == "CAPACITY_BLOCK" and str(old.get("NodeCount")) != "0":
        return (f"the deploy {'; '.join(what)} of a Capacity Block node group with {old.get('NodeCount')} node(s) up; "
                "EKS updates a Capacity Block's node group only at desired size 0. Deploy -c gpuNodeCount=0 first "
                "(with the settings it has now), then this change, then the node count back")
    if str(new.get("AllowJobDisruption")).lower() == "true":
        return None
    active = {name: state for name, state in list_jobs().items() if state not in INACTIVE_STATES}
    if not active:
        return None
    running = ", ".join(f"{name} ({state or 'new'})" for name, state in sorted(active.items()))
    return (f"the deploy {'; '.join(what)} while RayJob {running} runs: it would die. Nothing was changed. Wait for it "
            f"(ray-efa follow NAME), or stop it (kubectl -n NAMESPACE delete rayjob NAME), or deploy with {OVERRIDE} "
            "to accept losing it")


def active_ray_jobs(items: list[Mapping[str, Any]]) -> dict[str, str]:
    """namespace/name -> jobDeploymentStatus of a RayJob list's items (the API server's JSON)."""
    return {f"{j['metadata']['namespace']}/{j['metadata']['name']}": (j.get("status") or {}).get(
        "jobDeploymentStatus", "") for j in items}


def kubectl_ray_jobs(cluster_name: str, run: Callable[[list[str]], str] | None = None) -> ListJobs:
    """The cluster's RayJobs through kubectl (the Lambda's kubeconfig from `aws eks update-kubeconfig`); `run`
    returns a command's standard output and raises on failure."""
    run = run or _run

    def list_jobs() -> dict[str, str]:
        kubeconfig = os.path.join(WORK_DIR, "kubeconfig")
        run(["aws", "eks", "update-kubeconfig", "--name", cluster_name, "--kubeconfig", kubeconfig])
        listed = json.loads(run(["kubectl", "get", "rayjobs.ray.io", "--all-namespaces", "-o", "json",
                                 "--kubeconfig", kubeconfig, "--request-timeout", "30s"]))
        return active_ray_jobs(listed.get("items", []))

    return list_jobs


def _run(command: list[str]) -> str:
    env = {**os.environ, "PATH": f"{_TOOL_PATHS}:{os.environ.get('PATH', '')}", "HOME": WORK_DIR}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    if result.returncode:
        raise RuntimeError(f"{command[0]} {command[1]} failed: {(result.stdout + result.stderr).strip()[-1500:]}")
    return result.stdout


def _respond(event: Mapping[str, Any], status: str, reason: str, physical_id: str) -> None:
    """Answer CloudFormation at the presigned ResponseURL."""
    body = json.dumps({
        "Status": status, "Reason": reason[:3500], "PhysicalResourceId": physical_id, "StackId": event["StackId"],
        "RequestId": event["RequestId"], "LogicalResourceId": event["LogicalResourceId"], "Data": {},
    }).encode()
    request = urllib.request.Request(event["ResponseURL"], data=body, method="PUT",
                                     headers={"Content-Type": "", "Content-Length": str(len(body))})
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - CloudFormation's https URL
        print(f"CloudFormation response: {response.status}", flush=True)


class Unsure(RuntimeError):
    """The guard could not read what it needs (the stack's status, the cluster's RayJobs): it refuses."""


def cloudformation_stack_status(stack_id: str) -> str:
    """The StackStatus of stack `stack_id` (DescribeStacks, boto3 as the Lambda runtime has it; a few retries)."""
    import boto3  # the Lambda runtime's; imported here so that the pure functions above need no AWS SDK
    from botocore.config import Config

    config = Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 4, "mode": "standard"})
    stacks = boto3.client("cloudformation", config=config).describe_stacks(StackName=stack_id)["Stacks"]
    return str(stacks[0]["StackStatus"])


def judge(event: Mapping[str, Any], list_jobs: ListJobs, stack_status: StackStatus) -> str | None:
    """Why the guard fails this request (None: it succeeds): `decide`, but never on CloudFormation's rollback.

    The stack's status is read only for an Update that disrupts (the others succeed without it), and the cluster
    is asked only when the stack is not rolling back. An error reading either raises (the handler refuses)."""
    request_type = event["RequestType"]
    old, new = event.get("OldResourceProperties", {}), event.get("ResourceProperties", {})
    if request_type != "Update" or not disruption(old, new):
        return None
    try:
        status = stack_status(str(event["StackId"]))
    except Exception as error:
        raise Unsure(f"could not read the stack's status ({error})") from error
    if rolling_back(status):
        print(f"the stack is {status}: a rollback restores what ran before; never refused", flush=True)
        return None

    def listed() -> Mapping[str, str]:
        try:
            return list_jobs()
        except Exception as error:
            raise Unsure(f"could not list the cluster's RayJobs ({error})") from error

    return decide(request_type, old, new, listed)


def handler(event: Mapping[str, Any], context: Any = None, list_jobs: ListJobs | None = None,
            stack_status: StackStatus | None = None) -> None:
    """The Lambda's entry point: judge the request and answer CloudFormation at its ResponseURL, always.

    `list_jobs` (the cluster's RayJobs) and `stack_status` (a stack's status from its id) default to the API server
    and CloudFormation; tests pass their own."""
    new = event.get("ResourceProperties", {})
    physical_id = event.get("PhysicalResourceId") or f"{new.get('ClusterName')}/job-guard"
    print(json.dumps({key: value for key, value in event.items() if key != "ResponseURL"}), flush=True)
    try:
        refusal = judge(event, list_jobs or kubectl_ray_jobs(str(new.get("ClusterName"))),
                        stack_status or cloudformation_stack_status)
        status, reason = ("FAILED", f"ray-efa job guard: {refusal}") if refusal else ("SUCCESS", "no running job "
                                                                                      "disrupted")
    except Exception as error:  # noqa: BLE001 - every failure must reach CloudFormation; unknown means refuse
        why = str(error) if isinstance(error, Unsure) else f"failed ({type(error).__name__}: {error})"
        status, reason = "FAILED", f"ray-efa job guard: {why}; deploy with {OVERRIDE} if no job runs"
    print(reason, flush=True)
    _respond(event, status, reason, physical_id)
