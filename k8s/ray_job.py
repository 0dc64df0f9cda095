"""A RayJob that runs the training driver on a Ray cluster of its own, and ends Failed when the driver fails."""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from ray_efa.core.pod_env import job_env
from ray_efa.core.settings import Settings
from ray_efa.k8s._private import api_object, labels
from ray_efa.k8s.cluster_spec import ray_cluster_spec, submitter_template
from ray_efa.k8s.code_config_map import CodeConfigMap
from ray_efa.k8s.names import DRIVER_MODULE, SETTINGS_PATH, check_object_name
from ray_efa.k8s.ray_types import API_VERSION, RayJobSpec
from ray_efa.k8s.user_code import UserCodeVolume

__all__ = [
    "ray_job",
    "driver_entrypoint",
    "runtime_env_yaml",
    "pre_running_deadline",
    "PRE_RUNNING_DEADLINE_MIN_KUBERAY",
]

PRE_RUNNING_DEADLINE_MIN_KUBERAY = (1, 7, 0)
"""The first KubeRay the stack supports whose RayJob CRD has spec.preRunningDeadlineSeconds (1.4.0's has not)."""


def pre_running_deadline(settings: Settings) -> int | None:
    """spec.preRunningDeadlineSeconds of the RayJob: jobPreRunningDeadlineSeconds where the pinned KubeRay's CRD has
    the field, else None (left out: an older CRD would prune it, and its operator ignores it). None too when it is not
    below jobActiveDeadlineSeconds, which counts from the same moment and so ends the job first."""
    version = tuple(int(part) for part in settings.addons.kuberay_version.split("."))
    workload = settings.workload
    if (
        version < PRE_RUNNING_DEADLINE_MIN_KUBERAY
        or workload.job_pre_running_deadline_seconds >= workload.job_active_deadline_seconds
    ):
        return None
    return workload.job_pre_running_deadline_seconds


def driver_entrypoint() -> str:
    """`python -m ray_efa.training.driver --settings .../settings.json`: one plain command, so the Ray job's status is the
    driver's exit status (non-zero, e.g. a failed transport gate, makes the job FAILED and the RayJob Failed).

    No shell operators: KubeRay pastes the entrypoint into the submitter's own shell line, where `&&` or `;` would run
    on the submitter instead of the head.
    """
    return shlex.join(["python", "-m", DRIVER_MODULE, "--settings", SETTINGS_PATH])


def runtime_env_yaml(settings: Settings) -> str:
    """The job's Ray runtime_env: the job's environment only (core.pod_env.job_env: the Ray Train controller's poll
    interval, which training.reporting spaces its reports by). Packages never go through runtime_env pip, which
    clones the image's whole virtualenv on every node (k8s.pip_packages): the pods' init container installs them."""
    return yaml.safe_dump({"env_vars": job_env()}, sort_keys=True)


def ray_job(
    settings: Settings, *, name: str, code: CodeConfigMap, user_code: UserCodeVolume | None = None
) -> dict[str, Any]:
    """A ray.io/v1 RayJob in K8sJobMode that owns its RayCluster (same builder as the long-lived RayCluster).

    Why not clusterSelector (attach to the long-lived RayCluster): KubeRay ignores shutdownAfterJobFinishes for a
    selected cluster and (since kuberay PR #3653) rejects ttlSecondsAfterFinished > 0 without it, and a retry
    (backoffLimit > 0) deletes the selected cluster (ray-project/kuberay#4516). An owned cluster honours all four
    settings, carries its own network's env, and frees the GPU nodes after the TTL. See k8s/README.md.

    :param settings: the run; its `network` picks the NCCL env, its job* fields the RayJob's lifecycle.
    :param name: the RayJob's name (a DNS-1035 label of at most 47 characters).
    :param code: the ConfigMaps with the code (or its zip's URI) and this run's settings.json (same namespace).
    :param user_code: codeDir on every Ray pod (k8s.user_code). @default - none
    """
    check_object_name(name)
    code.bundle.require_module(DRIVER_MODULE)
    workload = settings.workload
    spec = RayJobSpec(
        entrypoint=driver_entrypoint(),
        runtime_env_yaml=runtime_env_yaml(settings),
        ray_cluster_spec=ray_cluster_spec(
            settings,
            owner=name,
            config_map=code.name,
            bundle=code.mounted,
            user_code=user_code,
            app_archive_uri=code.archive_uri,
        ),
        submitter_pod_template=submitter_template(settings, owner=name),
        shutdown_after_job_finishes=True,
        ttl_seconds_after_finished=workload.job_ttl_seconds_after_finished,
        active_deadline_seconds=workload.job_active_deadline_seconds,
        pre_running_deadline_seconds=pre_running_deadline(settings),
        backoff_limit=workload.job_backoff_limit,
    )
    return api_object(
        api_version=API_VERSION,
        kind="RayJob",
        name=name,
        namespace=workload.namespace,
        object_labels=labels(name, "rayjob"),
        body={"spec": spec.to_dict()},
    )
