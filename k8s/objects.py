"""The workload's Kubernetes objects as plain dicts, chart by chart, in the order they must be applied (no cdk8s).

    namespace_objects(settings)      the Namespace
    ray_cluster_objects(settings)    the long-lived RayCluster with its NetworkPolicy and ConfigMaps
    ray_job_objects(settings)        the training RayJob with its NetworkPolicy and ConfigMaps (the RayJob last)
    settings_objects(settings)       the training job's settings ConfigMap alone
    workload_objects(settings)   -> {namespace, rayjob-<network>}                           what the CDK stacks apply
    manifest_objects(settings)   -> {namespace, raycluster, rayjob-efa, rayjob-tcp}         what dist/ gets

Each object is what the API server takes, with its keys in the order cdk8s writes them. The charts of k8s.workload
wrap these lists, one chart each, under the same ids (`chart_id`); infra/ and `ray-efa submit` apply them as they are.
"""

from __future__ import annotations

from typing import Any

from ray_efa.core.model_source import pod_path_problems
from ray_efa.core.settings import Settings, SettingsError
from ray_efa.core.strategy import check_fits, resolve
from ray_efa.core.user_code import check_user_code
from ray_efa.k8s.code_bundle import collect_code
from ray_efa.k8s.code_config_map import CodeConfigMap
from ray_efa.k8s.device_claims import worker_claim_templates
from ray_efa.k8s.names import (
    RAY_CLUSTER_NAME,
    USER_CODE_PATH,
    code_config_map_name,
    comparison_network,
    ray_job_of,
    user_code_config_map_name,
)
from ray_efa.k8s.namespace import workload_namespace
from ray_efa.k8s.network_policy import ray_network_policy
from ray_efa.k8s.ray_cluster import ray_cluster
from ray_efa.k8s.ray_job import ray_job
from ray_efa.k8s.user_code import UserCodeConfigMap, UserCodeVolume

__all__ = [
    "Objects",
    "chart_id",
    "shipped_settings",
    "namespace_objects",
    "ray_cluster_objects",
    "ray_job_objects",
    "settings_objects",
    "workload_objects",
    "manifest_objects",
]

Objects = list[dict[str, Any]]
"""Kubernetes objects, in apply order."""


def chart_id(what: str, settings: Settings | None = None) -> str:
    """The id of the chart (and of its dist/ file) of `what`: namespace, raycluster, rayjob or settings; the job's
    and the settings' carry the network of `settings` (rayjob-efa)."""
    return what if settings is None else f"{what}-{settings.workload.network}"


def shipped_settings(settings: Settings) -> Settings:
    """The settings.json the pods get: the same settings, with codeDir where the pods find it (USER_CODE_PATH)."""
    return settings if settings.workload.code_dir is None else settings.replace(codeDir=USER_CODE_PATH)


def _user_code(settings: Settings, owner: str, archive_uri: str | None) -> tuple[UserCodeVolume | None, Objects]:
    """codeDir for the pods of `owner`: the zip at `archive_uri`, else a ConfigMap of it (checked against the limits),
    with that ConfigMap; None without codeDir. SettingsError first when trainFunction is not in it."""
    code_dir = check_user_code(settings).code_dir
    if code_dir is None:
        return None, []
    if archive_uri is not None:
        return UserCodeVolume(archive_uri=archive_uri), []
    config_map = UserCodeConfigMap(
        name=user_code_config_map_name(owner), namespace=settings.workload.namespace, code_dir=code_dir
    )
    return config_map.volume, [config_map.object]


def _device_claims(settings: Settings, owner: str) -> Objects:
    """With deviceAllocation dra, the workers' ResourceClaimTemplates, before the Ray object whose pods claim them."""
    if settings.addons.device_allocation != "dra":
        return []
    return worker_claim_templates(owner, settings.workload.namespace, settings.nodes.gpu_instance)


def namespace_objects(settings: Settings) -> Objects:
    """The Namespace alone (cluster-scoped: apply it first)."""
    return [workload_namespace(settings.workload.namespace)]


def ray_cluster_objects(settings: Settings, *, code_archive_uri: str | None = None) -> Objects:
    """The long-lived RayCluster, its code ConfigMaps and the NetworkPolicy in front of its pods (before the pods);
    codeDir as for ray_job_objects."""
    shipped = shipped_settings(settings)
    namespace = settings.workload.namespace
    policy = ray_network_policy(RAY_CLUSTER_NAME, namespace, submitter=False)
    code = CodeConfigMap(name=code_config_map_name(RAY_CLUSTER_NAME), namespace=namespace, bundle=collect_code(shipped))
    user_code, user_code_objects = _user_code(settings, RAY_CLUSTER_NAME, code_archive_uri)
    claims = _device_claims(settings, RAY_CLUSTER_NAME)
    cluster = ray_cluster(shipped, name=RAY_CLUSTER_NAME, code=code, user_code=user_code)
    return [policy, *code.objects, *user_code_objects, *claims, cluster]


def ray_job_objects(
    settings: Settings, *, code_archive_uri: str | None = None, app_archive_uri: str | None = None
) -> Objects:
    """The training RayJob on `settings.workload.network` named after jobName (k8s.names.ray_job_of), with the
    NetworkPolicy in front of its pods, its code and settings ConfigMaps and codeDir's (a ConfigMap, or the zip at
    `code_archive_uri`, s3://...), all before the job. With `app_archive_uri` (s3://... of the zip of
    CodeBundle.write_tree: the CDK route, which keeps the project's code out of the stack template) the project's code
    comes from there and its ConfigMaps hold settings.json alone.

    Raises SettingsError when the run's memory plan cannot fit the GPUs (core.strategy.check_fits), trainFunction is
    not in codeDir, or it names a local path no pod can read (core.model_source.pod_path_problems: not under the
    sharedVolumeClaim's mount), and ManifestError when codeDir is too large for a ConfigMap and no archive is given:
    every way a job is produced (`cdk synth`, `ray-efa manifests`, `ray-efa submit`) refuses it here, before the
    25-minute deploy it would fail after.
    """
    if problems := pod_path_problems(settings):
        raise SettingsError(problems)
    check_fits(settings)
    name = ray_job_of(settings)
    shipped = shipped_settings(settings)
    namespace = settings.workload.namespace
    policy = ray_network_policy(name, namespace, submitter=True)
    code = CodeConfigMap(
        name=code_config_map_name(name),
        namespace=namespace,
        bundle=collect_code(shipped),
        archive_uri=app_archive_uri,
    )
    user_code, user_code_objects = _user_code(settings, name, code_archive_uri)
    claims = _device_claims(settings, name)
    job = ray_job(shipped, name=name, code=code, user_code=user_code)
    return [policy, *code.objects, *user_code_objects, *claims, job]


def settings_objects(settings: Settings) -> Objects:
    """The training job's settings ConfigMap alone, the object ray_job_objects makes (`<jobName>-settings`: what
    `ray-efa submit` reads as the deployment's settings), for a deployment that applies no job (trainingJob false, or
    its GPU nodes at zero). No plan is checked: no job runs from it."""
    code = CodeConfigMap(
        name=code_config_map_name(ray_job_of(settings)),
        namespace=settings.workload.namespace,
        bundle=collect_code(shipped_settings(settings)).settings_only(),
    )
    return code.objects


def workload_objects(settings: Settings) -> dict[str, Objects]:
    """Chart id -> objects of what runs training, in apply order: the namespace, then the RayJob of
    `settings.workload.network`.

    The RayJob brings its own RayCluster and deletes it jobTtlSecondsAfterFinished after the end, so the long-lived
    RayCluster is deliberately not here: both at once would wait on each other for the same GPU nodes.
    """
    return {
        chart_id("namespace"): namespace_objects(settings),
        chart_id("rayjob", settings): ray_job_objects(settings),
    }


def manifest_objects(settings: Settings, *, code_archive_uri: str | None = None) -> dict[str, Objects]:
    """Chart id -> objects of everything dist/ gets, in apply order: the namespace, the long-lived RayCluster, the
    training RayJob and its comparison run on the other network (the job's resolved levers with network flipped, and
    preflightMinBusbwGbps unset: each network's own floor). Apply the namespace and then ONE of the others at a time:
    each of them takes every GPU node. `code_archive_uri`: codeDir's zip in S3 (k8s.code_archive), which every Ray pod
    fetches, in place of its ConfigMap."""
    # The comparison run gets its own network's preflight floor (core.preflight_floor.network_floor): a
    # preflightMinBusbwGbps set for the job's network would hold TCP to EFA's floor, or EFA to TCP's.
    unset_floor = {} if settings.workload.preflight_min_busbw_gbps is None else {"preflightMinBusbwGbps": None}
    # The same job on the other network: the job's levers as its driver decides them for ITS network (core.strategy.
    # resolve), then the network flipped and nothing else. Re-resolving `auto` for the other network trained fp8 with
    # HSDP and a bf16 wire over TCP against bf16 FSDP over EFA on p5: a ratio of two jobs, not of two transports.
    other = resolve(settings).replace(network=comparison_network(settings.workload.network), **unset_floor)
    jobs = sorted([settings, other], key=lambda s: s.workload.network)  # rayjob-efa before rayjob-tcp, always
    charts = {
        chart_id("namespace"): namespace_objects(settings),
        chart_id("raycluster"): ray_cluster_objects(settings, code_archive_uri=code_archive_uri),
    }
    for job in jobs:
        charts[chart_id("rayjob", job)] = ray_job_objects(job, code_archive_uri=code_archive_uri)
    return charts
