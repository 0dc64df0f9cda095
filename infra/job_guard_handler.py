"""The Lambda handler of JobDisruptionGuard (infra/job_guard.py): fail a deploy that would disrupt a running RayJob.

CloudFormation updates the guard before what it guards (the GPU node group and the stack's RayJob; in the cluster
stack the EKS cluster and the system node group: they depend on it), and sends an Update only when its properties
change: what rolls the nodes (RollKey, RollDigest), what resizes the GPU nodes (NodeCount) or the RayJob's definition
(JobHash; "none" when the stack applies no job; the system nodes' guard has no NodeCount nor JobHash). On such an Update, `decide` (pure) says whether the
change disrupts a job; if it does, the handler asks the API server for the RayJobs of the cluster (GET
/apis/ray.io/v1/rayjobs over HTTPS, verified with the cluster's CA from DescribeCluster, as the guard's own role:
an EKS token made from a presigned STS GetCallerIdentity URL, no kubectl, no layer) and fails the update when one is
active, naming it and the override: CloudFormation then rolls the stack back before the node
group or the RayJob changes. Create and Delete never refuse, and ask the cluster nothing (the system nodes' guard is
created before its cluster). A cluster DescribeCluster does not find runs no job: the update goes ahead. Standard library and boto3 (as the Lambda runtime has
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

import base64
import datetime
import json
import ssl
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "handler",
    "judge",
    "decide",
    "disruption",
    "node_disruption",
    "job_disruption",
    "active_ray_jobs",
    "job_state",
    "eks_ray_jobs",
    "api_ray_jobs",
    "eks_token",
    "cloudformation_stack_status",
    "rolling_back",
    "Unsure",
    "INACTIVE_STATES",
    "JOB_GUARD_RESOURCE_TYPE",
    "SYSTEM_NODES",
    "FUNCTION_TIMEOUT_S",
    "SERVICE_TIMEOUT_S",
]

JOB_GUARD_RESOURCE_TYPE = "Custom::RayEfa-JobDisruptionGuard"
"""The guard's CloudFormation resource type (infra.job_guard; `ray-efa deploy-check` finds it in `cdk diff`)."""

SYSTEM_NODES = "system nodes"
"""The system nodes' guard's Nodes property: its messages say what rolls (the GPU nodes' guard has none)."""

FUNCTION_TIMEOUT_S = 180
"""The Lambda's timeout: more than the AWS calls' and the API server's timeouts with their retries, and the answer's
(`worst_case_s`)."""
SERVICE_TIMEOUT_S = 300
HTTP_TIMEOUT_S = 20
"""Each request to the API server and to CloudFormation's ResponseURL."""
_AWS_TIMEOUTS = {"connect_timeout": 5, "read_timeout": 10}
_AWS_RETRIES = {"max_attempts": 3, "mode": "standard"}

INACTIVE_STATES = ("Complete", "Failed", "Suspended", "ValidationFailed")
"""RayJob status.jobDeploymentStatus values (KubeRay's JobDeploymentStatus) of a job that runs no more: Complete and
Failed are terminal, a Suspended job has deleted its cluster, ValidationFailed never made one. Any other value (New
"", Initializing, Running, Waiting, Retrying, Suspending) holds or is about to hold the nodes. A Complete or Failed
job's Ray cluster lives on until KubeRay deletes it (`job_state`): until then its pods, under their
PodDisruptionBudget, hold the nodes too."""

OVERRIDE = "-c allowJobDisruption=true"

ListJobs = Callable[[], Mapping[str, str]]
"""The RayJobs of the cluster: namespace/name -> status.jobDeploymentStatus."""

StackStatus = Callable[[str], str]
"""A stack's StackStatus (DescribeStacks) from its id (the event's StackId)."""


def rolling_back(stack_status: str) -> bool:
    """Whether CloudFormation is rolling the stack back: UPDATE_ROLLBACK_IN_PROGRESS (a failed update, or
    continue-update-rollback), its cleanup, ROLLBACK_IN_PROGRESS (a failed create) and IMPORT_ROLLBACK_IN_PROGRESS."""
    return (
        stack_status.endswith("ROLLBACK_IN_PROGRESS") or stack_status == "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS"
    )


def disruption(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What an update from properties `old` to `new` does to a running job (empty: nothing): to its nodes, then to
    the stack's RayJob."""
    return [*node_disruption(old, new), *job_disruption(old, new)]


def node_disruption(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What an update from properties `old` to `new` does to the guarded nodes (empty: nothing). Rolling or resizing a
    node group of 0 nodes touches no pod (nodes coming back from 0 are what a waiting RayJob needs).

    `ray-efa deploy-check` (ops.deploy_check) judges the properties that `cdk diff` prints changed by this same
    function: an absent property is one that does not change."""
    what = []
    nodes_up = str(old.get("NodeCount")) != "0"
    if nodes_up and old.get("RollKey") != new.get("RollKey"):
        what.append(f"rolls the {_nodes(new)} ({_changed(old.get('RollKey'), new.get('RollKey'))})")
    # (a guard deployed before RollDigest existed has none: no change known)
    digest_changed = old.get("RollDigest") not in (None, new.get("RollDigest"))
    if nodes_up and digest_changed and old.get("RollKey") == new.get("RollKey"):
        what.append(f"rolls the {_nodes(new)} (their launch template, labels or taints)")
    if nodes_up and str(old.get("NodeCount")) != str(new.get("NodeCount")):
        what.append(f"resizes the {_nodes(new)} from {old.get('NodeCount')} to {new.get('NodeCount')}")
    return what


def job_disruption(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What an update from properties `old` to `new` does to the stack's RayJob (empty: nothing): creating it, or
    re-applying a changed spec under the same name, touches no running RayJob (KubeRay disregards a RayJob's spec
    changes once it runs); deleting or replacing it stops it."""
    what = []
    if old.get("JobHash") != new.get("JobHash") and old.get("JobHash", "none") != "none":
        if new.get("JobHash") == "none":
            what.append(f"deletes RayJob {old.get('Namespace')}/{old.get('JobName')}")
        elif old.get("JobName") != new.get("JobName"):
            what.append(f"replaces RayJob {old.get('Namespace')}/{old.get('JobName')} with {new.get('JobName')}")
    return what


def _nodes(properties: Mapping[str, Any]) -> str:
    """The guarded node group, in words (the GPU nodes, unless the properties name others: SYSTEM_NODES)."""
    return str(properties.get("Nodes") or "GPU nodes")


def _changed(old: Any, new: Any) -> str:
    """The `key=value` words of two roll keys that differ, as `key old -> new`."""
    before = dict(w.split("=", 1) for w in str(old or "").split() if "=" in w)
    after = dict(w.split("=", 1) for w in str(new or "").split() if "=" in w)
    return (
        ", ".join(
            f"{k} {before.get(k)} -> {after.get(k)}"
            for k in sorted(before.keys() | after.keys())
            if before.get(k) != after.get(k)
        )
        or "its definition"
    )


def decide(
    request_type: str, old: Mapping[str, Any], new: Mapping[str, Any], list_jobs: ListJobs, stack: str = "STACK"
) -> str | None:
    """Why the guard fails this request (None: it succeeds). `list_jobs` is called only when the update disrupts;
    `stack` (the guard's stack's name) goes into the remedies."""
    if request_type != "Update":
        return None
    what = disruption(old, new)
    if not what:
        return None
    if _rolls_a_capacity_block_in_place(old, new):
        return (
            f"the deploy {'; '.join(what)} of a Capacity Block node group with {old.get('NodeCount')} node(s) up; "
            "EKS updates a Capacity Block's node group only at desired size 0. Scale it to zero with the settings "
            f"it has now: `npx cdk deploy {stack} --exclusively -c gpuNodeCount=0 {_settings_of(old)}`, then "
            "deploy this change, then the node count back"
        )
    if str(new.get("AllowJobDisruption")).lower() == "true":
        return None
    active = {name: state for name, state in list_jobs().items() if state not in INACTIVE_STATES}
    if not active:
        return None
    running = ", ".join(f"{name} ({state or 'new'})" for name, state in sorted(active.items()))
    return (
        f"the deploy {'; '.join(what)} while RayJob {running} runs: it would die. Nothing was changed. Wait for it "
        f"(ray-efa follow NAME), or stop it (kubectl -n NAMESPACE delete rayjob NAME), or deploy with {OVERRIDE} "
        "to accept losing it"
    )


def _rolls_a_capacity_block_in_place(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """The deploy updates a Capacity Block's node group with nodes up. Judged on the capacity type it has now: a
    switch to or from a Capacity Block replaces the node group (a new one, the old one deleted), no update."""
    block = old.get("CapacityType") == "CAPACITY_BLOCK" and new.get("CapacityType") == "CAPACITY_BLOCK"
    rolled = old.get("RollKey") != new.get("RollKey") or old.get("RollDigest") not in (None, new.get("RollDigest"))
    return block and rolled and str(old.get("NodeCount")) != "0"


def _settings_of(properties: Mapping[str, Any]) -> str:
    """The `-c key=value` of the settings in a roll key (what the deployed stack has), for a remedy's command."""
    words = dict(w.split("=", 1) for w in str(properties.get("RollKey") or "").split() if "=" in w)
    settings = [
        f"-c {key}={value}"
        for key, value in words.items()
        if key in _SETTINGS_IN_ROLL_KEY and value not in ("none", "unchanged")
    ]
    if properties.get("CapacityType") == "CAPACITY_BLOCK":
        settings.append("-c capacityReservationType=capacity-block")
    return " ".join(settings)


_SETTINGS_IN_ROLL_KEY = (
    "gpuInstanceType",
    "gpuAvailabilityZone",
    "gpuRootVolumeGib",
    "capacityReservationId",
    "kubernetesVersion",
)
"""The words of infra.job_guard.roll_key that are settings (capacityType is derived from capacityReservationType)."""


def active_ray_jobs(items: Sequence[Mapping[str, Any]], now: datetime.datetime | None = None) -> dict[str, str]:
    """namespace/name -> `job_state` of a RayJob list's items (the API server's JSON) at `now` (default: now)."""
    now = now or datetime.datetime.now(datetime.UTC)
    return {f"{j['metadata']['namespace']}/{j['metadata']['name']}": job_state(j, now) for j in items}


def job_state(job: Mapping[str, Any], now: datetime.datetime) -> str:
    """The RayJob's status.jobDeploymentStatus, or, for a Complete or Failed job whose Ray cluster KubeRay has not
    deleted yet, words saying so (not in INACTIVE_STATES: its pods hold the nodes, their PodDisruptionBudget refuses
    a drain, and a node group update fails after EKS's 15 minutes of retries).

    KubeRay (ray-operator v1.5.0, rayjob_controller.go handleShutdownAfterJobFinishes) deletes a terminal job's own
    cluster ttlSecondsAfterFinished after status.endTime when shutdownAfterJobFinishes is set, and never without it
    or with a clusterSelector (the cluster is not the job's). A job with a deletionStrategy is judged by the same
    fields (conservative: its rules may delete the cluster earlier)."""
    status, spec = job.get("status") or {}, job.get("spec") or {}
    state = str(status.get("jobDeploymentStatus", ""))
    if state not in ("Complete", "Failed") or spec.get("clusterSelector"):
        return state
    if not spec.get("shutdownAfterJobFinishes"):
        return f"{state}, its Ray cluster kept (shutdownAfterJobFinishes false: delete the RayJob to free it)"
    try:
        ended = datetime.datetime.fromisoformat(str(status["endTime"]).replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return state  # KubeRay sets endTime on the way to Complete or Failed: none is a job of another kind
    deleted_at = ended + datetime.timedelta(seconds=int(spec.get("ttlSecondsAfterFinished") or 0))
    if deleted_at <= now:
        return state
    return f"{state}, its Ray cluster deleted at {deleted_at:%H:%M:%S} UTC (ttlSecondsAfterFinished)"


def eks_token(cluster_name: str, region: str, session: Any = None) -> str:
    """A bearer token the cluster's API server accepts for this function's role (what `aws eks get-token` prints):
    `k8s-aws-v1.` and the base64url of a presigned STS GetCallerIdentity URL that signs the header
    x-k8s-aws-id: <cluster name>, valid 60 seconds (EKS's aws-iam-authenticator scheme)."""
    from boto3.session import Session
    from botocore.signers import RequestSigner

    session = session or Session()
    sts = session.client("sts", region_name=region)
    signer = RequestSigner(
        sts.meta.service_model.service_id, region, "sts", "v4", session.get_credentials(), session.events
    )
    url = signer.generate_presigned_url(
        {
            "method": "GET",
            "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
            "body": {},
            "headers": {"x-k8s-aws-id": cluster_name},
            "context": {},
        },
        region_name=region,
        expires_in=60,
        operation_name="",
    )
    return "k8s-aws-v1." + base64.urlsafe_b64encode(str(url).encode()).decode().rstrip("=")


def api_ray_jobs(endpoint: str, ca_pem: str, token: Callable[[], str], timeout_s: float = HTTP_TIMEOUT_S) -> ListJobs:
    """The RayJobs of every namespace from the API server at `endpoint` (GET /apis/ray.io/v1/rayjobs over HTTPS,
    verified against the cluster's CA `ca_pem`, with the bearer `token()`), page by page."""
    context = ssl.create_default_context(cadata=ca_pem)

    def list_jobs() -> dict[str, str]:
        items: list[Mapping[str, Any]] = []
        page = ""
        while True:
            query = urllib.parse.urlencode({"limit": 500, **({"continue": page} if page else {})})
            request = urllib.request.Request(
                f"{endpoint.rstrip('/')}/apis/ray.io/v1/rayjobs?{query}",
                headers={"Authorization": f"Bearer {token()}", "Accept": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
                listed = json.load(response)
            items += listed.get("items", [])
            page = (listed.get("metadata") or {}).get("continue") or ""
            if not page:
                return active_ray_jobs(items)

    return list_jobs


def eks_ray_jobs(cluster_name: str) -> ListJobs:
    """The cluster's RayJobs as this function's role sees them: its endpoint and CA from DescribeCluster, a token
    from STS (no kubectl, no kubeconfig); none when DescribeCluster does not find the cluster."""

    def list_jobs() -> Mapping[str, str]:
        from boto3.session import Session

        session = Session()
        eks = session.client("eks", config=_aws_config())
        try:
            cluster = eks.describe_cluster(name=cluster_name)["cluster"]
        except eks.exceptions.ResourceNotFoundException:
            # not created yet, or deleted: no RayJob runs on it (the system nodes' guard is updated before its
            # cluster, which a failed first deploy may not have left)
            print(f"EKS cluster {cluster_name} not found: it runs no RayJob", flush=True)
            return {}
        ca_pem = base64.b64decode(cluster["certificateAuthority"]["data"]).decode()
        token = eks_token(cluster_name, str(session.region_name), session)  # AWS_REGION, set by Lambda
        return api_ray_jobs(cluster["endpoint"], ca_pem, lambda: token)()

    return list_jobs


def _respond(event: Mapping[str, Any], status: str, reason: str, physical_id: str) -> None:
    """Answer CloudFormation at the presigned ResponseURL."""
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason[:3500],
            "PhysicalResourceId": physical_id,
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "Data": {},
        }
    ).encode()
    request = urllib.request.Request(
        event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": "", "Content-Length": str(len(body))}
    )
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:  # noqa: S310 - CloudFormation's URL
        print(f"CloudFormation response: {response.status}", flush=True)


def worst_case_s() -> float:
    """The longest the handler waits on the network: DescribeStacks and DescribeCluster with their retries, one page
    of RayJobs, the answer to CloudFormation (more pages are rare: 500 RayJobs a page)."""
    per_aws_call = _AWS_RETRIES["max_attempts"] * (_AWS_TIMEOUTS["connect_timeout"] + _AWS_TIMEOUTS["read_timeout"])
    return 2 * per_aws_call + 2 * HTTP_TIMEOUT_S


def _aws_config() -> Any:
    """boto3's client config: short timeouts, a few retries (their sum well inside FUNCTION_TIMEOUT_S)."""
    from botocore.config import Config

    return Config(**_AWS_TIMEOUTS, retries=_AWS_RETRIES)


class Unsure(RuntimeError):
    """The guard could not read what it needs (the stack's status, the cluster's RayJobs): it refuses."""


def cloudformation_stack_status(stack_id: str) -> str:
    """The StackStatus of stack `stack_id` (DescribeStacks, boto3 as the Lambda runtime has it; a few retries)."""
    import boto3  # the Lambda runtime's; imported here so that the pure functions above need no AWS SDK

    stacks = boto3.client("cloudformation", config=_aws_config()).describe_stacks(StackName=stack_id)["Stacks"]
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

    stack = str(event["StackId"]).split(":stack/", 1)[-1].split("/", 1)[0]
    return decide(request_type, old, new, listed, stack)


def handler(
    event: Mapping[str, Any],
    context: Any = None,
    list_jobs: ListJobs | None = None,
    stack_status: StackStatus | None = None,
) -> None:
    """The Lambda's entry point: judge the request and answer CloudFormation at its ResponseURL, always.

    `list_jobs` (the cluster's RayJobs) and `stack_status` (a stack's status from its id) default to the API server
    and CloudFormation; tests pass their own."""
    new = event.get("ResourceProperties", {})
    physical_id = event.get("PhysicalResourceId") or f"{new.get('ClusterName')}/job-guard"
    print(json.dumps({key: value for key, value in event.items() if key != "ResponseURL"}), flush=True)
    try:
        refusal = judge(
            event, list_jobs or eks_ray_jobs(str(new.get("ClusterName"))), stack_status or cloudformation_stack_status
        )
        status, reason = (
            ("FAILED", f"ray-efa job guard: {refusal}") if refusal else ("SUCCESS", "no running job disrupted")
        )
    except Exception as error:  # noqa: BLE001 - every failure must reach CloudFormation; unknown means refuse
        why = str(error) if isinstance(error, Unsure) else f"failed ({type(error).__name__}: {error})"
        status, reason = "FAILED", f"ray-efa job guard: {why}; deploy with {OVERRIDE} if no job runs"
    print(reason, flush=True)
    _respond(event, status, reason, physical_id)
