"""Before `cdk deploy`: would this deploy kill a running RayJob, bring back a deleted one, or run two device stacks?

What the deploy does comes from `cdk diff` (its text, read offline). Whether it rolls the nodes under a running job is
what the stacks' job guards (infra.job_guard) will decide at deploy time, judged here by the same function
(infra.job_guard_handler.node_disruption) on the guard properties the diff shows changed: a roll key, the digest of
everything that rolls the nodes, the node count. A node group or launch template that no guard covers, or whose
guard this deploy creates, counts as drained whenever the diff touches it. Then a RayJob manifest created or updated
(aws_eks_v2's kubectl handler runs `kubectl apply` of it on every update: a RayJob deleted since is created again and
runs), device plugins swapped for DRA drivers or back, the EKS cluster's BootstrapClusterCreatorAdminPermissions
changed (EKS sets it at creation only: CloudFormation would replace the cluster, which it refuses under a custom name).
What runs comes from the Kubernetes API: the RayJobs of every
namespace and their state as the guard reads it (infra.job_guard_handler.active_ray_jobs), and the GPU nodes (by the
GPU node group's labels).

Without a diff nothing is known of the deploy, so any active RayJob refuses it: a deploy may roll the nodes.
Reads only; nothing is written to the cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ray_efa.core.scheduling import gpu_node_labels, label_selector
from ray_efa.core.settings import Settings
from ray_efa.infra.job_guard_handler import (
    INACTIVE_STATES,
    JOB_GUARD_RESOURCE_TYPE,
    SYSTEM_NODES,
    active_ray_jobs,
    node_disruption,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "DeployDiff",
    "GuardChange",
    "ClusterState",
    "Finding",
    "read_diff",
    "read_cluster",
    "check_deploy",
    "INACTIVE_STATES",
]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STACK = re.compile(r"^Stack (?P<stack>\S+)")
# `[~] AWS::EKS::Nodegroup GpuNodes/Nodegroup GpuNodesNodegroup23F56272 replace`: the construct path, then the logical
# id, then the impact (optional). The CLI prints the path where a template's `aws:cdk:path` metadata gives it (the new
# assembly's for a resource kept or added, the deployed template's for a removed one: `cdk deploy` writes it unless
# --no-path-metadata) and the logical id alone where none does: `[-] TYPE LOGICAL_ID destroy`.
_RESOURCE = re.compile(r"^\[(?P<op>[-+~])\] (?P<type>\S+::\S+) (?P<rest>.+)$")
_IMPACTS = ("destroy", "orphan", "replace", "may")
"""First words of the impacts @aws-cdk/cloudformation-diff prints after the logical id (destroy, orphan, replace,
may be replaced)."""
_ROLL_OUTPUT = re.compile(r"^\[~\] Output GpuNodesRollWhen ")
_NODE_TYPES = ("AWS::EKS::Nodegroup", "AWS::EC2::LaunchTemplate")
_MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"
_HELM_CHART = "Custom::AWSCDK-EKS-HelmChart"
_EKS_CLUSTER = "AWS::EKS::Cluster"
_CREATOR_ADMIN = "BootstrapClusterCreatorAdminPermissions"
"""AWS::EKS::Cluster AccessConfig's property that EKS sets at creation only ("Update requires: Replacement"): `cdk
diff` prints it as an update (`├─ [~] AccessConfig` then `│   └─ [+] Added: .BootstrapClusterCreatorAdminPermissions`)."""
_DEVICE_STACKS = ("DevicePlugins", "DraDrivers")
"""Construct ids of the cluster stack's device plugins and DRA drivers (infra.cluster_stack)."""
_GUARDED = {
    "GpuNodes/": "JobGuard/",
    "Eks/Cluster/NodegroupSystemNodes": "SystemJobGuard/",
    "Eks/SystemLaunchTemplate": "SystemJobGuard/",
}
"""Construct path prefixes of node groups and launch templates -> that of the guard whose properties cover them
(infra.gpu_stack: the GPU nodes and their JobDisruptionGuard; infra.cluster_stack: the system nodes and theirs)."""
_NODES_OF_GUARD = {"SystemJobGuard": SYSTEM_NODES}
"""A guard's Nodes property (unchanged, so not in the diff) by its construct id: its words for the nodes."""
_GPU_GUARD = "JobGuard"
"""The construct id of the GPU nodes' guard (infra.gpu_stack)."""
# `├─ [~] RollKey`, then `│   ├─ [-] old` and `│   └─ [+] new`: a changed property of a resource and its two values
_PROPERTY = re.compile(r"^[\s│├└─]*\[(?P<op>[-+~])\] (?P<text>.*)$")


@dataclass(frozen=True, kw_only=True, slots=True)
class GuardChange:
    """A job guard's resource in a `cdk diff`: what the deploy does to it and the properties it changes."""

    stack: str
    path: str
    """Its construct path (the logical id where the diff prints no path)."""
    op: str
    """"~" updated (CloudFormation asks it), "+" created with this deploy (it judges nothing), "-" removed."""
    old: dict[str, str] = field(default_factory=dict)
    """The changed properties' deployed values (a property the diff does not print does not change)."""
    new: dict[str, str] = field(default_factory=dict)
    """The changed properties' values after the deploy."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DeployDiff:
    """What a `cdk diff` says the deploy does, as far as running jobs are concerned."""

    rolled_node_groups: tuple[str, ...] = ()
    """`stack: construct path` of each node group or launch template the deploy changes (their nodes are drained)."""
    gpu_roll: bool = False
    """The GPU stack's GpuNodesRollWhen output changes: the GPU nodes roll or are resized."""
    reapplied_jobs: tuple[str, ...] = ()
    """Names of the RayJobs whose manifests the deploy creates or updates (`kubectl apply`: one deleted since comes
    back; a new jobName, or the job back after scaling to zero, starts a run)."""
    removed_manifests: tuple[str, ...] = ()
    """Logical ids of the Kubernetes manifests the deploy removes (`kubectl delete`: a RayJob among them stops)."""
    removed_jobs: tuple[str, ...] = ()
    """Names of the RayJobs whose manifests the deploy removes, where the diff prints their construct path
    (`TrainingJob/RayJob-<name>/Resource`: a deployed template has it); else only removed_manifests knows them."""
    device_stack_switch: tuple[str, ...] = ()
    """Device plugin or DRA driver Helm releases the deploy adds or removes."""
    guards: tuple[GuardChange, ...] = ()
    """The job guards the deploy updates, creates or removes (one the deploy leaves alone sees no roll)."""
    creator_admin_changes: tuple[str, ...] = ()
    """`stack: construct path` of each EKS cluster whose AccessConfig.BootstrapClusterCreatorAdminPermissions the
    deploy adds, removes or changes (a replacement CloudFormation refuses for a named cluster)."""


def _path_and_logical_id(rest: str) -> tuple[str | None, str]:
    """(construct path or None, logical id) of what follows a resource's type on a `cdk diff` line."""
    words = rest.split()
    if len(words) >= 2 and words[1] not in _IMPACTS:
        return words[0], words[1]
    return None, words[0]


def read_diff(text: str) -> DeployDiff:
    """The DeployDiff of `cdk diff`'s output (one stack or several, colours or not)."""
    stack = ""
    rolled: list[str] = []
    jobs: list[str] = []
    removed: list[str] = []
    removed_jobs: list[str] = []
    switch: list[str] = []
    guards: list[GuardChange] = []
    guard: GuardChange | None = None  # the guard whose changed properties the lines below print
    cluster: str | None = None  # `stack: path` of the EKS cluster whose changed properties the lines below print
    creator_admin: list[str] = []
    gpu_roll = False
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        if guard is not None and line.startswith((" ", "\t")):
            _read_property(guard, line)
            continue
        if cluster is not None and line.startswith((" ", "\t")):
            if _CREATOR_ADMIN in line and cluster not in creator_admin:
                creator_admin.append(cluster)
            continue
        guard = cluster = None
        if match := _STACK.match(line):
            stack = match["stack"]
            continue
        if _ROLL_OUTPUT.match(line):
            gpu_roll = True
            continue
        match = _RESOURCE.match(line)
        if match is None:
            continue
        path, logical_id = _path_and_logical_id(match["rest"])
        path = path.rsplit("/Resource", 1)[0] if path else logical_id
        job = path.rsplit("/RayJob-", 1)[1].split("/", 1)[0] if "/RayJob-" in path else None
        if match["type"] == JOB_GUARD_RESOURCE_TYPE:
            guard = GuardChange(stack=stack, path=path, op=match["op"])
            guards.append(guard)
        elif match["type"] == _EKS_CLUSTER and match["op"] == "~":
            cluster = f"{stack}: {path}"
        elif match["type"] in _NODE_TYPES:
            rolled.append(f"{stack}: {path}")
        elif match["type"] == _MANIFEST and match["op"] == "-":
            removed.append(logical_id)
            if job:
                removed_jobs.append(job)
        elif match["type"] == _MANIFEST and job:
            jobs.append(job)
        elif (
            match["type"] == _HELM_CHART
            and match["op"] in "+-"
            and any(path.replace("/", "").startswith(s) for s in _DEVICE_STACKS)
        ):
            switch.append(f"{stack}: {path} {'added' if match['op'] == '+' else 'removed'}")
    return DeployDiff(
        rolled_node_groups=tuple(rolled),
        gpu_roll=gpu_roll,
        reapplied_jobs=tuple(dict.fromkeys(jobs)),
        removed_manifests=tuple(dict.fromkeys(removed)),
        removed_jobs=tuple(dict.fromkeys(removed_jobs)),
        device_stack_switch=tuple(switch),
        guards=tuple(guards),
        creator_admin_changes=tuple(creator_admin),
    )


def _read_property(guard: GuardChange, line: str) -> None:
    """One line under a guard's resource: ` ├─ [~] NAME` starts a changed property, whose `[-] OLD` and `[+] NEW`
    lines follow (its values are one-line strings: infra.job_guard)."""
    match = _PROPERTY.match(line)
    if match is None:
        return
    if match["op"] == "~":
        name = match["text"].split(" (", 1)[0]  # `NAME (requires replacement)`: its ServiceToken
        guard.old[name] = guard.new[name] = ""
        return
    name = next(reversed(guard.old), None)
    if name is not None:
        (guard.old if match["op"] == "-" else guard.new)[name] = match["text"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterState:
    """What runs: the RayJobs (namespace/name -> jobDeploymentStatus) and the GPU nodes' names."""

    ray_jobs: dict[str, str] = field(default_factory=dict)
    gpu_nodes: tuple[str, ...] = ()

    @property
    def active_jobs(self) -> dict[str, str]:
        return {name: state for name, state in self.ray_jobs.items() if state not in INACTIVE_STATES}


def read_cluster(api_client: Any, settings: Settings) -> ClusterState:
    """The RayJobs of every namespace and the nodes labelled like the GPU node group, from the Kubernetes API."""
    from kubernetes import client

    # The kubernetes client ships no type annotations: a custom object list is the API server's JSON (a dict), a
    # node list its V1NodeList model.
    jobs = cast(
        dict[str, Any], client.CustomObjectsApi(api_client).list_cluster_custom_object("ray.io", "v1", "rayjobs")
    )
    ray_jobs = active_ray_jobs(jobs.get("items", []))  # as the job guard reads them
    selector = label_selector(gpu_node_labels(settings.nodes.gpu_node_selector))
    nodes = cast(Any, client.CoreV1Api(api_client).list_node(label_selector=selector)).items or []
    return ClusterState(ray_jobs=ray_jobs, gpu_nodes=tuple(n.metadata.name for n in nodes))


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One reason not to deploy now; `overridable` ones the user may accept (--yes), the others never."""

    id: str
    message: str
    overridable: bool = True


def _logical_id_of_job(name: str) -> str:
    """What the logical id of the RayJob `name`'s manifest holds (infra.manifests: construct id RayJob-<name>; a
    logical id keeps a path's letters and digits)."""
    return re.sub(r"[^A-Za-z0-9]", "", f"RayJob-{name}")


def _deletes_job(diff: DeployDiff, name: str) -> bool:
    """The deploy removes the manifest of RayJob `name`: by its construct path, or, where the diff prints none, by
    its logical id (which may match a longer name too: a refusal too many rather than one too few)."""
    return name in diff.removed_jobs or any(_logical_id_of_job(name) in i for i in diff.removed_manifests)


def _names(items: Iterable[str]) -> str:
    return ", ".join(items)


def _guard_of(node_group: str) -> str | None:
    """`stack: path` of the guard whose properties cover node group or launch template `stack: path` (None: none)."""
    stack, path = node_group.split(": ", 1)
    return next((f"{stack}: {guard}" for prefix, guard in _GUARDED.items() if path.startswith(prefix)), None)


def node_rolls(diff: DeployDiff, state: ClusterState) -> list[str]:
    """What the deploy does to the nodes, in the job guards' words (empty: it rolls none that holds a pod).

    A guard the deploy updates judges its changed properties (infra.job_guard_handler.node_disruption; a node count
    the diff does not print is that of the GPU nodes up now): the GPU nodes' guard and the system nodes' alike. A
    node group or launch template that the diff touches is drained when no guard covers it, or when the deploy
    creates or removes its guard (a Create judges nothing); one whose guard the deploy leaves alone rolls nothing (a
    label, a node count of the system nodes, a ForceUpdateEnabled, an update config: what rolls is in the guard's
    properties, so the guard would change too)."""
    what: list[str] = []
    guards = {f"{g.stack}: {g.path.split('/', 1)[0]}/": g for g in diff.guards}
    unguarded = [
        n
        for n in diff.rolled_node_groups
        if (guard := _guard_of(n)) is None or guard in guards and guards[guard].op != "~"
    ]
    if unguarded:
        what.append(f"drains the nodes of {_names(unguarded)}")
    for guard in (g for g in guards.values() if g.op == "~"):
        old, new = dict(guard.old), dict(guard.new)
        construct_id = guard.path.split("/", 1)[0]
        if "NodeCount" not in old and construct_id == _GPU_GUARD:
            old["NodeCount"] = new["NodeCount"] = str(len(state.gpu_nodes))
        if construct_id in _NODES_OF_GUARD:
            old.setdefault("Nodes", _NODES_OF_GUARD[construct_id])
            new.setdefault("Nodes", _NODES_OF_GUARD[construct_id])
        what += node_disruption(old, new)
    return what


def check_deploy(diff: DeployDiff | None, state: ClusterState, settings: Settings) -> list[Finding]:
    """Why this deploy (None: any deploy) should not run against the cluster as it is now; empty: go ahead."""
    findings: list[Finding] = []
    active = state.active_jobs
    running = _names(f"{name} ({status or 'new'})" for name, status in active.items())
    if active and diff is None:
        findings.append(
            Finding(
                id="active-jobs",
                message=(
                    f"RayJob {running} holds the nodes, and without a diff (--diff) any deploy may roll them: give the "
                    "`cdk diff` output to see whether this one does"
                ),
            )
        )
    elif active and diff is not None and (what := node_rolls(diff, state)):
        findings.append(
            Finding(
                id="nodes-roll",
                message=(
                    f"the deploy {'; '.join(what)}, and RayJob {running} runs on them: it dies (KubeRay does not move a "
                    "running job; recreated workers keep the old shape). The job guard refuses the deploy too. Wait for it "
                    "(`ray-efa follow NAME`), or stop it (`kubectl -n NAMESPACE delete rayjob NAME`), then deploy"
                ),
            )
        )
    namespace = settings.workload.namespace
    stopped = [
        job
        for job in active
        if job.startswith(f"{namespace}/") and diff is not None and _deletes_job(diff, job.split("/", 1)[1])
    ]
    if stopped:
        findings.append(
            Finding(
                id="job-deleted",
                message=(
                    f"the deploy deletes RayJob {_names(stopped)}, which is {_names(active[n] for n in stopped)}: it stops. "
                    "Wait for it to end, then deploy"
                ),
            )
        )
    if diff is not None and diff.reapplied_jobs:
        gone = [name for name in diff.reapplied_jobs if f"{namespace}/{name}" not in state.ray_jobs]
        if gone:
            findings.append(
                Finding(
                    id="job-recreated",
                    message=(
                        f"the deploy re-applies RayJob {_names(f'{namespace}/{n}' for n in gone)}, which is not in the "
                        "cluster (deleted since the last deploy): it is created again and starts a new run on every GPU node. "
                        f"To keep it gone, deploy with -c trainingJob=false (runs then come from `ray-efa submit`)"
                    ),
                )
            )
    if diff is not None and diff.device_stack_switch and state.gpu_nodes:
        findings.append(
            Finding(
                id="device-allocation-switch",
                overridable=False,
                message=(
                    f"the deploy swaps the device stack ({_names(diff.device_stack_switch)}) with {len(state.gpu_nodes)} "
                    "GPU node(s) up: the DRA drivers and the device plugins would run side by side on them, which the EKS "
                    "User Guide forbids. Scale the GPU nodes to zero first (`npx cdk deploy "
                    f"{settings.gpu_stack_name} -c gpuNodeCount=0`), switch deviceAllocation, then come back"
                ),
            )
        )
    if diff is not None and diff.creator_admin_changes:
        findings.append(_creator_admin_finding(diff.creator_admin_changes, settings))
    return findings


def _creator_admin_finding(clusters: tuple[str, ...], settings: Settings) -> Finding:
    """The deploy changes BootstrapClusterCreatorAdminPermissions: EKS sets it at creation only, so CloudFormation
    would replace the cluster, and it refuses to replace a custom-named one: the update fails (docs/security.md)."""
    if settings.cluster.cluster_creator_admin:
        remedy = "a cluster created with clusterCreatorAdmin=false keeps it: deploy with -c clusterCreatorAdmin=false"
    else:
        remedy = (
            "a cluster deployed before clusterCreatorAdmin existed keeps its creator's admin: deploy with "
            "-c clusterCreatorAdmin=true (the property left out, as deployed), then remove the creator's access "
            'entry by hand (`aws eks delete-access-entry`, docs/security.md "The cluster creator")'
        )
    return Finding(
        id="cluster-creator-admin",
        overridable=False,
        message=(
            f"the deploy changes AccessConfig.{_CREATOR_ADMIN} of {_names(clusters)}, which EKS sets at creation only: "
            f"CloudFormation would replace the cluster and refuses to (it has a custom name), so the update fails. {remedy}"
        ),
    )
