"""A Ray pod whose init container fails: the code fetch from S3 (k8s.code_archive), the pip install of pipPackages
(k8s.pip_packages). KubeRay leaves the RayJob Initializing until a deadline (KubeRay issue 4637), so `follow`,
`submit` and `verify` look at the pods themselves and say which container failed, with what exit code, and its last
log lines.

    failures = failing_init_containers(pods)          # pure: V1Pod objects or dicts as the API returns them
    failures = init_container_failures(api_client, namespace, job_pods_selector(job))  # list, then each one's log

The detection reads what a kubelet writes into status.initContainerStatuses: state.terminated with a non-zero
exitCode (restartPolicy Never, or between two tries), state.waiting with reason CrashLoopBackOff (the kubelet waits
before the next try; lastState.terminated holds the failed one), or a try running again after a failed one
(restartCount > 0, lastState.terminated non-zero).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "InitContainerFailure",
    "failing_init_containers",
    "job_pods_selector",
    "init_container_failures",
    "with_log_tails",
    "describe_failures",
    "LOG_TAIL_LINES",
]

LOG_TAIL_LINES = 20
"""How many of the failed container's last log lines are shown."""


@dataclass(frozen=True, kw_only=True, slots=True)
class InitContainerFailure:
    """One init container of one pod that failed."""

    namespace: str
    pod: str
    container: str
    exit_code: int | None
    """The failed run's exit code (None where the kubelet recorded none)."""
    reason: str
    """CrashLoopBackOff (waiting to try again), or the terminated run's reason (Error, OOMKilled, ...)."""
    restarts: int
    previous: bool
    """The failed run is the container's previous instance (its log is read with previous=True)."""
    log_tail: str = ""

    def describe(self) -> str:
        """Pod, container, exit code and reason, then the last log lines indented."""
        code = "no exit code recorded" if self.exit_code is None else f"exit code {self.exit_code}"
        tries = f", {self.restarts} restarts" if self.restarts else ""
        head = f"pod {self.namespace}/{self.pod}: init container {self.container} failed ({code}, {self.reason}{tries})"
        if not self.log_tail.strip():
            return head
        lines = self.log_tail.rstrip("\n").splitlines()
        return head + f"; its last {len(lines)} log lines:\n" + "\n".join(f"    {line}" for line in lines)


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def _get(obj: Any, key: str) -> Any:
    """A field of an API object: camelCase in a dict (the JSON), snake_case on a kubernetes client model."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, _snake(key), None)


def _failure_of(status: Any) -> tuple[int | None, str, bool] | None:
    """(exit code, reason, previous) of one initContainerStatuses entry when it failed, else None."""
    state, last = _get(status, "state"), _get(_get(status, "lastState"), "terminated")
    terminated, waiting = _get(state, "terminated"), _get(state, "waiting")
    if terminated is not None and _get(terminated, "exitCode") not in (None, 0):
        return _get(terminated, "exitCode"), _get(terminated, "reason") or "Error", False
    last_code = _get(last, "exitCode") if last is not None else None
    if waiting is not None and _get(waiting, "reason") == "CrashLoopBackOff":
        return last_code, "CrashLoopBackOff", True
    if _get(state, "running") is not None and last_code not in (None, 0):
        return last_code, f"{_get(last, 'reason') or 'Error'}, running again", True
    return None


def failing_init_containers(pods: Iterable[Any]) -> list[InitContainerFailure]:
    """Every failed init container of `pods` (V1Pod objects or their JSON dicts), by pod name then container order."""
    failures = []
    for pod in pods:
        meta, status = _get(pod, "metadata"), _get(pod, "status")
        for entry in _get(status, "initContainerStatuses") or []:
            failed = _failure_of(entry)
            if failed is None:
                continue
            code, reason, previous = failed
            failures.append(
                InitContainerFailure(
                    namespace=_get(meta, "namespace") or "",
                    pod=_get(meta, "name") or "",
                    container=_get(entry, "name"),
                    exit_code=code,
                    reason=reason,
                    restarts=_get(entry, "restartCount") or 0,
                    previous=previous,
                )
            )
    return sorted(failures, key=lambda f: f.pod)


def job_pods_selector(owner: str) -> str:
    """The label selector of every Ray pod of a RayJob or RayCluster `owner` (head, workers, submitter): the instance
    label its pod templates carry (k8s.security.pod_labels), which KubeRay copies onto the pods."""
    from ray_efa.k8s.security import INSTANCE_LABEL

    return f"{INSTANCE_LABEL}={owner}"


def with_log_tails(
    api_client: Any, failures: list[InitContainerFailure], *, tail_lines: int = LOG_TAIL_LINES
) -> list[InitContainerFailure]:
    """`failures` with the last `tail_lines` lines of each failed run's log (read_namespaced_pod_log with container=,
    tail_lines= and previous= where the failed run is the previous instance); a log that cannot be read says why."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    out = []
    for failure in failures:
        text = ""
        for previous in dict.fromkeys((failure.previous, False)):  # the failed run's, else whatever is there
            try:
                # The raw body: the client's own deserialization of a plain-text log gives "b'...'" (kubernetes 36).
                # The client takes _preload_content on every call (its **kwargs); the kubernetes stubs leave it out.
                response: Any = core.read_namespaced_pod_log(
                    failure.pod,
                    failure.namespace,
                    container=failure.container,
                    tail_lines=tail_lines,
                    previous=previous,
                    _preload_content=False,  # pyright: ignore[reportCallIssue]
                )
                text = response.data.decode("utf-8", "replace")
                break
            except ApiException as error:
                text = f"(its log cannot be read: {error.status} {error.reason})"
        out.append(replace(failure, log_tail=text))
    return out


def init_container_failures(
    api_client: Any, namespace: str, selector: str, *, tail_lines: int = LOG_TAIL_LINES
) -> list[InitContainerFailure]:
    """The failed init containers of the pods in `namespace` that `selector` selects, each with its last log lines.
    ApiException from the listing propagates (the caller decides whether it matters)."""
    from kubernetes import client

    listing: Any = client.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=selector)
    failures = failing_init_containers(listing.items or [])
    return with_log_tails(api_client, failures, tail_lines=tail_lines) if failures else []


def describe_failures(failures: list[InitContainerFailure]) -> str:
    """Each failure's description, one after another."""
    return "\n".join(f.describe() for f in failures)
