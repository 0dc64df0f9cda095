"""Typed builders for the parts of KubeRay's ray.io/v1 API this project uses: RayCluster and RayJob specs.

Small frozen dataclasses with snake_case fields and a `to_dict()` that writes the CRD's camelCase JSON. Pod templates
are the Kubernetes client's own typed models (V1PodTemplateSpec), serialized by its ApiClient, so every core field
name is checked by a real type rather than typed into a dict. Field names follow KubeRay's Go types
(ray-operator/apis/ray/v1); the tests validate the output against the CRD schemas with unknown fields rejected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes.client import V1PodTemplateSpec
from kubernetes.client.api_client import ApiClient

__all__ = ["API_VERSION", "to_json", "HeadGroupSpec", "WorkerGroupSpec", "RayClusterSpec", "RayJobSpec"]

API_VERSION = "ray.io/v1"

_API_CLIENT = ApiClient()


def to_json(model: Any) -> Any:
    """A Kubernetes client model (or a list/dict of them) as the API's JSON: camelCase keys, None dropped."""
    return _API_CLIENT.sanitize_for_serialization(model)


def _params(params: Mapping[str, str], what: str) -> dict[str, str]:
    # `ray start` flags are strings in the CRD; a stray int would fail schema validation far from its cause.
    bad = {k: v for k, v in params.items() if not isinstance(v, str)}
    if bad:
        raise TypeError(f"{what} rayStartParams values must be strings, got {bad}")
    return dict(sorted(params.items()))


@dataclass(frozen=True, kw_only=True, slots=True)
class HeadGroupSpec:
    """The Ray head: one pod, `ray start --head` with `ray_start_params`."""

    ray_start_params: Mapping[str, str]
    """Flags of `ray start` without the leading dashes (num-gpus: "0")."""
    template: V1PodTemplateSpec

    def to_dict(self) -> dict[str, Any]:
        return {"rayStartParams": _params(self.ray_start_params, "head"), "template": to_json(self.template)}


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerGroupSpec:
    """A group of identical Ray worker pods."""

    group_name: str
    replicas: int
    min_replicas: int
    max_replicas: int
    ray_start_params: Mapping[str, str]
    template: V1PodTemplateSpec

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.replicas <= self.max_replicas:
            raise ValueError(
                f"worker group {self.group_name}: replicas must satisfy 0 <= minReplicas <= replicas <= maxReplicas, "
                f"got min {self.min_replicas}, replicas {self.replicas}, max {self.max_replicas}"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "groupName": self.group_name,
            "replicas": self.replicas,
            "minReplicas": self.min_replicas,
            "maxReplicas": self.max_replicas,
            "rayStartParams": _params(self.ray_start_params, self.group_name),
            "template": to_json(self.template),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class RayClusterSpec:
    """spec of a RayCluster, and spec.rayClusterSpec of a RayJob that owns its cluster."""

    ray_version: str
    """The Ray inside the image; KubeRay uses it to pick version-specific behaviour."""
    head_group_spec: HeadGroupSpec
    worker_group_specs: tuple[WorkerGroupSpec, ...]
    enable_in_tree_autoscaling: bool = False
    """Off: the worker group is a fixed size, one pod per GPU node (an autoscaler would add a non-Guaranteed sidecar)."""
    token_auth: bool = False
    """authOptions.mode token (KubeRay 1.5.1+): KubeRay generates the cluster's token in a Secret and injects it into
    every Ray container and the submitter; False leaves authOptions out (older CRDs do not have the field)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rayVersion": self.ray_version,
            "enableInTreeAutoscaling": self.enable_in_tree_autoscaling,
        }
        if self.token_auth:
            out["authOptions"] = {"mode": "token"}
        out["headGroupSpec"] = self.head_group_spec.to_dict()
        out["workerGroupSpecs"] = [group.to_dict() for group in self.worker_group_specs]
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class RayJobSpec:
    """spec of a RayJob that creates its own RayCluster from `ray_cluster_spec` (see k8s/README.md for why)."""

    entrypoint: str
    """Shell command the Ray job runs on the head; its exit status decides SUCCEEDED or FAILED."""
    ray_cluster_spec: RayClusterSpec
    active_deadline_seconds: int
    backoff_limit: int
    """Retries of the whole job, each on a fresh RayCluster."""
    ttl_seconds_after_finished: int
    shutdown_after_job_finishes: bool = True
    """Delete the job's RayCluster ttl_seconds_after_finished after the job ends, which frees the GPU nodes."""
    runtime_env_yaml: str | None = None
    """Ray runtime_env as YAML text; None leaves the field out."""
    submission_mode: Literal["K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"] = "K8sJobMode"
    submitter_pod_template: V1PodTemplateSpec | None = None
    """Pod of the submitter Job (K8sJobMode); KubeRay fills in the `ray job submit` command and its env."""
    pre_running_deadline_seconds: int | None = None
    """How long the job may take to reach Running before KubeRay fails it (KubeRay 1.7.0's CRD has the field, 1.4.0's
    does not); None leaves it out."""

    def __post_init__(self) -> None:
        if not self.shutdown_after_job_finishes and self.ttl_seconds_after_finished > 0:
            # KubeRay rejects this pair: the TTL would have nothing to shut down.
            raise ValueError("ttl_seconds_after_finished > 0 needs shutdown_after_job_finishes")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "entrypoint": self.entrypoint,
            "submissionMode": self.submission_mode,
            "shutdownAfterJobFinishes": self.shutdown_after_job_finishes,
            "ttlSecondsAfterFinished": self.ttl_seconds_after_finished,
            "activeDeadlineSeconds": self.active_deadline_seconds,
            **(
                {"preRunningDeadlineSeconds": self.pre_running_deadline_seconds}
                if self.pre_running_deadline_seconds is not None
                else {}
            ),
            "backoffLimit": self.backoff_limit,
            "rayClusterSpec": self.ray_cluster_spec.to_dict(),
        }
        if self.runtime_env_yaml is not None:
            out["runtimeEnvYAML"] = self.runtime_env_yaml
        if self.submitter_pod_template is not None:
            out["submitterPodTemplate"] = to_json(self.submitter_pod_template)
        return out
