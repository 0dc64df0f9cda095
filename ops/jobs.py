"""`ray-efa jobs`, `logs` and `cancel`: the RayJobs of the workload namespace, read and deleted through the Kubernetes API.

    rows = list_jobs(api_client, namespace)            # every RayJob: state, age, GPUs, function, step, tokens/s, gate
    text = job_log(api_client, namespace, name)        # the driver's log (the submitter pod's), or --worker N's
    cancel_job(api_client, namespace, name)            # delete the RayJob: its RayCluster and pods go with it

Everything goes through a kubernetes ApiClient passed in (the CLI's, from the kubeconfig), with the verbs the stack's
researcher Role grants (k8s.researcher_rbac: get/list/watch on rayjobs, pods, pods/log and configmaps, delete on
rayjobs, which its admission policy admits for a researcher's own RayJobs alone): `cancel_job` raises
JobDeleteRefused on a 403 or the policy's 422, which the CLI explains.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from ray_efa.ops.submit import (
    RAY_GROUP,
    RAY_JOBS,
    RAY_VERSION,
    SETTINGS_SELECTOR,
    SUBMITTED_BY,
    SUBMITTER_CONTAINER,
    JobNotFound,
    SubmitError,
    api_error,
    gate_lines,
    job_state,
    submitter_log,
)

__all__ = [
    "JobRow",
    "list_jobs",
    "last_progress",
    "job_log",
    "worker_pods",
    "cancel_job",
    "JobDeleteRefused",
    "WORKER_CONTAINER",
    "LOG_TAIL_LINES",
]

WORKER_CONTAINER = "ray-worker"
"""The Ray container of a worker pod (k8s.cluster_spec)."""
LOG_TAIL_LINES = 400
"""How much of each submitter's log `list_jobs` reads for the last progress line and the gate's verdict."""
WORKER_SELECTOR = "ray.io/node-type=worker"
"""The label KubeRay puts on every worker pod of a Ray cluster."""

_STEP = re.compile(r"\bstep\s+(\d+)/(\d+)")
_TOKENS = re.compile(r"([\d,]+(?:\.\d+)?) tok/s")


@dataclass(frozen=True, kw_only=True, slots=True)
class JobRow:
    """One RayJob as `ray-efa jobs` shows it."""

    name: str
    namespace: str
    state: str
    """status.jobDeploymentStatus (New before KubeRay set it)."""
    ray_status: str
    """status.jobStatus, Ray's own ("" before the Ray job exists)."""
    age_s: float | None
    gpus: int | None
    """GPUs of its Ray cluster's workers (replicas x num-gpus), None when the spec does not say."""
    function: str
    """The train function its settings ConfigMap names ("" when unreadable or absent)."""
    made_by: str
    """Who created it: `user@host (ray-efa submit)` (the annotation submit writes), else what the labels say (the
    stack's, by a deployment or `ray-efa manifests`), or its owner."""
    step: int | None
    total_steps: int | None
    tokens_per_s: float | None
    gate: str
    """The transport gate's verdict line ("" when the log has none yet)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _age(created: str | None, now: datetime) -> float | None:
    if not created:
        return None
    try:
        return (now - datetime.fromisoformat(created.replace("Z", "+00:00"))).total_seconds()
    except ValueError:
        return None


def job_gpus(job: dict[str, Any]) -> int | None:
    """GPUs of the RayJob's workers: each worker group's replicas times its `num-gpus` (ray start), or its container's
    nvidia.com/gpu limit; None when no group says."""
    groups = ((job.get("spec") or {}).get("rayClusterSpec") or {}).get("workerGroupSpecs") or []
    total, known = 0, False
    for group in groups:
        per_pod = (group.get("rayStartParams") or {}).get("num-gpus")
        if per_pod is None:
            containers = ((group.get("template") or {}).get("spec") or {}).get("containers") or []
            per_pod = next(
                (
                    c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
                    for c in containers
                    if c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
                ),
                None,
            )
        if per_pod is None:
            continue
        known = True
        total += int(group.get("replicas") or 0) * int(float(per_pod))
    return total if known else None


def last_progress(log: str) -> tuple[int | None, int | None, float | None]:
    """The last step (of how many) and tokens/s the driver's log reports: its last progress line ("step 40/100 | ...
    | 1,234 tok/s ..."), else its run summary (RAY_EFA_RUN_SUMMARY's steps and throughput/tokens_per_s)."""
    for line in reversed(log.splitlines()):
        step = _STEP.search(line)
        if step:
            tokens = _TOKENS.search(line)
            return int(step.group(1)), int(step.group(2)), float(tokens.group(1).replace(",", "")) if tokens else None
    from ray_efa.training.run_summary import find_summaries

    summaries = find_summaries(log.splitlines())
    if summaries:
        last = summaries[-1]
        steps, tokens = last.get("steps"), last.get("throughput/tokens_per_s")
        return (
            int(steps) if isinstance(steps, (int, float)) else None,
            None,
            float(tokens) if isinstance(tokens, (int, float)) else None,
        )
    return None, None, None


def _functions(api_client: Any, namespace: str) -> dict[str, str]:
    """RayJob name -> trainFunction, from the settings ConfigMaps (`<job>-settings`); {} when they cannot be read."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from ray_efa.k8s.names import SETTINGS_FILE

    try:
        maps: Any = client.CoreV1Api(api_client).list_namespaced_config_map(namespace, label_selector=SETTINGS_SELECTOR)
    except ApiException:
        return {}
    found = {}
    for config_map in maps.items:
        name = config_map.metadata.name.removesuffix("-settings")
        try:
            settings = json.loads((config_map.data or {}).get(SETTINGS_FILE) or "{}")
        except ValueError:
            continue
        function = settings.get("trainFunction") if isinstance(settings, dict) else None
        found[name] = str(function or "")
    return found


def _made_by(job: dict[str, Any], has_settings: bool) -> str:
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    if annotations.get(SUBMITTED_BY):
        return str(annotations[SUBMITTED_BY])
    labels = (job.get("metadata") or {}).get("labels") or {}
    owners = (job.get("metadata") or {}).get("ownerReferences") or []
    if owners:
        return f"{owners[0].get('kind', '')} {owners[0].get('name', '')}".strip()
    if labels.get("app.kubernetes.io/part-of") == "ray-efa-stack":
        return "ray-efa (submit or deploy)" if has_settings else "ray-efa manifests"
    return "other (kubectl?)"


def list_jobs(
    api_client: Any,
    namespace: str,
    *,
    now: datetime | None = None,
    read_log: Callable[[Any, str, str], str] | None = None,
) -> list[JobRow]:
    """Every RayJob of `namespace`, oldest first, with what its status, spec, settings ConfigMap and the last
    LOG_TAIL_LINES of its submitter's log say. SubmitError when the RayJobs cannot be listed (a 401/403 propagates:
    the CLI says which credentials)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    now = now or datetime.now(UTC)
    try:
        listing: Any = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
            RAY_GROUP, RAY_VERSION, namespace, RAY_JOBS
        )
    except ApiException as error:
        if error.status in (401, 403):
            raise
        raise SubmitError(f"cannot list the RayJobs of namespace {namespace}: {api_error(error)}") from None
    functions = _functions(api_client, namespace)
    read_log = read_log or _log_tail
    rows = []
    for job in sorted(listing.get("items") or [], key=lambda j: str(j["metadata"].get("creationTimestamp") or "")):
        meta, status = job.get("metadata") or {}, job.get("status") or {}
        name = meta["name"]
        state = status.get("jobDeploymentStatus") or "New"
        log = read_log(api_client, namespace, name) if state in ("Running", "Complete", "Failed") else ""
        step, total, tokens = last_progress(log)
        gates = gate_lines(log)
        rows.append(
            JobRow(
                name=name,
                namespace=namespace,
                state=state,
                ray_status=status.get("jobStatus") or "",
                age_s=_age(meta.get("creationTimestamp"), now),
                gpus=job_gpus(job),
                function=functions.get(name, ""),
                made_by=_made_by(job, name in functions),
                step=step,
                total_steps=total,
                tokens_per_s=tokens,
                gate=gates[-1] if gates else "",
            )
        )
    return rows


def _log_tail(api_client: Any, namespace: str, name: str) -> str:
    """The last LOG_TAIL_LINES of RayJob `name`'s submitter log, "" when there is none or it cannot be read."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core: Any = client.CoreV1Api(api_client)
    try:
        pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items
        if not pods:
            return ""
        pod = max(pods, key=lambda p: str(p.metadata.creation_timestamp or ""))
        response = core.read_namespaced_pod_log(
            pod.metadata.name,
            namespace,
            container=SUBMITTER_CONTAINER,
            tail_lines=LOG_TAIL_LINES,
            _preload_content=False,
        )
    except ApiException:
        return ""
    return response.data.decode("utf-8", "replace")


class JobDeleteRefused(SubmitError):
    """The API server refused to delete the RayJob: these credentials may read it but not delete it (403), or an
    admission policy refused (422: a researcher deletes only the RayJobs they submitted)."""


def worker_pods(api_client: Any, namespace: str, name: str) -> list[Any]:
    """The worker pods of RayJob `name`'s Ray cluster, by name (the order `--worker N` counts in)."""
    from kubernetes import client

    from ray_efa.ops.init_failures import job_pods_selector

    listing: Any = client.CoreV1Api(api_client).list_namespaced_pod(
        namespace, label_selector=f"{job_pods_selector(name)},{WORKER_SELECTOR}"
    )
    return sorted(listing.items, key=lambda p: p.metadata.name)


def job_log(
    api_client: Any,
    namespace: str,
    name: str,
    *,
    worker: int | None = None,
    follow: bool = False,
    on_line: Callable[[str], None] | None = None,
) -> str:
    """RayJob `name`'s log: its driver's (the submitter pod's), or with `worker` that of its worker pod number
    `worker` (0-based, by pod name); `follow` streams it through `on_line` until the pod ends. JobNotFound when there
    is no such RayJob; SubmitError for a worker number it does not have."""
    job_state(api_client, namespace, name)  # JobNotFound, naming it, before any pod is looked for
    if worker is None:
        return submitter_log(api_client, namespace, name, follow_log=follow, on_line=on_line)
    pods = worker_pods(api_client, namespace, name)
    if not 0 <= worker < len(pods):
        have = f"workers 0..{len(pods) - 1}" if pods else "no worker pods now (its Ray cluster is not up, or gone)"
        raise SubmitError(f"RayJob {namespace}/{name} has no worker {worker}: it has {have}")
    return _pod_log(api_client, namespace, pods[worker].metadata.name, follow=follow, on_line=on_line)


def _pod_log(api_client: Any, namespace: str, pod: str, *, follow: bool, on_line: Callable[[str], None] | None) -> str:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core: Any = client.CoreV1Api(api_client)
    try:
        response = core.read_namespaced_pod_log(
            pod,
            namespace,
            container=WORKER_CONTAINER,
            follow=follow,
            _preload_content=False,
            **({"_request_timeout": (None, None)} if follow else {}),
        )
    except ApiException as error:
        if error.status in (401, 403):
            raise
        raise SubmitError(f"cannot read the log of pod {namespace}/{pod}: {api_error(error)}") from None
    lines: list[str] = []
    pending = b""
    for chunk in response.stream(4096):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            lines.append(raw.decode("utf-8", "replace"))
            if on_line:
                on_line(lines[-1])
    if pending:
        lines.append(pending.decode("utf-8", "replace"))
        if on_line:
            on_line(lines[-1])
    response.release_conn()
    return "\n".join(lines)


def cancel_job(api_client: Any, namespace: str, name: str) -> str:
    """Delete RayJob `name` (after reading it: JobNotFound, naming it, when it is not there); Kubernetes' garbage
    collector then deletes what it owns: its RayCluster (and so the pods) and the ConfigMaps and NetworkPolicy submit
    made it the owner of. Returns the state it was in. JobDeleteRefused when the API server refuses the delete: 403
    (RBAC grants no delete) or 422 (an admission policy's refusal: a researcher deletes only their own RayJobs)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    state = job_state(api_client, namespace, name)
    try:
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            RAY_GROUP, RAY_VERSION, namespace, RAY_JOBS, name, propagation_policy="Background"
        )
    except ApiException as error:
        if error.status == 404:
            raise JobNotFound(f"no RayJob {namespace}/{name} (it went while being cancelled)") from None
        if error.status in (403, 422):
            raise JobDeleteRefused(
                f"the API server refused to delete RayJob {namespace}/{name}: {api_error(error)}"
            ) from None
        raise SubmitError(f"cannot delete RayJob {namespace}/{name}: {api_error(error)}") from None
    return state.describe()
