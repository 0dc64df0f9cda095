"""The charts of the workload, composed from the constructs of this package, in the order they must be applied.

    build_workload(scope, settings)   -> [namespace, rayjob-<network>]           what the CDK stacks apply (infra/
                                                                                  applies each chart's objects)
    build_manifests(scope, settings)  -> [namespace, raycluster, rayjob-efa, rayjob-tcp]   what dist/ gets

Each chart depends on the one before it (chart.add_dependency), which numbers dist/ files in apply order. The KubeRay
CRDs come from the kuberay-operator Helm chart, so every chart after the namespace needs the operator installed first.
"""

from __future__ import annotations

import cdk8s
from constructs import Construct

from ray_efa.core.model_source import pod_path_problems
from ray_efa.core.settings import Settings, SettingsError
from ray_efa.core.strategy import check_fits, resolve
from ray_efa.core.user_code import check_user_code
from ray_efa.k8s.code_bundle import collect_code
from ray_efa.k8s.code_config_map import CodeConfigMap
from ray_efa.k8s.device_claims import WorkerDeviceClaims
from ray_efa.k8s.names import (
    RAY_CLUSTER_NAME,
    USER_CODE_PATH,
    code_config_map_name,
    comparison_network,
    ray_job_of,
    user_code_config_map_name,
)
from ray_efa.k8s.namespace import WorkloadNamespace
from ray_efa.k8s.network_policy import RayNetworkPolicy
from ray_efa.k8s.ray_cluster import RayCluster
from ray_efa.k8s.ray_job import RayJob
from ray_efa.k8s.user_code import UserCodeConfigMap, UserCodeVolume

__all__ = [
    "namespace_chart",
    "ray_cluster_chart",
    "ray_job_chart",
    "settings_chart",
    "build_workload",
    "build_manifests",
    "shipped_settings",
]


def shipped_settings(settings: Settings) -> Settings:
    """The settings.json the pods get: the same settings, with codeDir where the pods find it (USER_CODE_PATH)."""
    return settings if settings.workload.code_dir is None else settings.replace(codeDir=USER_CODE_PATH)


def _user_code(chart: Construct, settings: Settings, owner: str, archive_uri: str | None) -> UserCodeVolume | None:
    """codeDir for the pods of `owner`: the zip at `archive_uri`, else a ConfigMap of it (checked against the limits);
    None without codeDir. SettingsError first when trainFunction is not in it."""
    code_dir = check_user_code(settings).code_dir
    if code_dir is None:
        return None
    if archive_uri is not None:
        return UserCodeVolume(archive_uri=archive_uri)
    return UserCodeConfigMap(
        chart,
        "UserCode",
        name=user_code_config_map_name(owner),
        namespace=settings.workload.namespace,
        code_dir=code_dir,
    ).volume


def _chart(scope: Construct, id: str) -> cdk8s.Chart:
    # Names are chosen, not hashed: ops/ and users find the objects with kubectl by the names in k8s.names.
    return cdk8s.Chart(scope, id, disable_resource_name_hashes=True)


def namespace_chart(scope: Construct, settings: Settings) -> cdk8s.Chart:
    """The Namespace alone (cluster-scoped: apply it first)."""
    chart = _chart(scope, "namespace")
    WorkloadNamespace(chart, "Namespace", name=settings.workload.namespace)
    return chart


def ray_cluster_chart(scope: Construct, settings: Settings, *, code_archive_uri: str | None = None) -> cdk8s.Chart:
    """The long-lived RayCluster, its code ConfigMap and the NetworkPolicy in front of its pods (before the pods);
    codeDir as for ray_job_chart."""
    chart = _chart(scope, "raycluster")
    shipped = shipped_settings(settings)
    RayNetworkPolicy(chart, "NetworkPolicy", settings=settings, owner=RAY_CLUSTER_NAME, submitter=False)
    code = CodeConfigMap(
        chart,
        "Code",
        name=code_config_map_name(RAY_CLUSTER_NAME),
        namespace=settings.workload.namespace,
        bundle=collect_code(shipped),
    )
    user_code = _user_code(chart, settings, RAY_CLUSTER_NAME, code_archive_uri)
    _device_claims(chart, settings, RAY_CLUSTER_NAME)
    RayCluster(chart, "RayCluster", settings=shipped, name=RAY_CLUSTER_NAME, code=code, user_code=user_code)
    return chart


def ray_job_chart(
    scope: Construct, settings: Settings, *, code_archive_uri: str | None = None, app_archive_uri: str | None = None
) -> cdk8s.Chart:
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
    chart = _chart(scope, f"rayjob-{settings.workload.network}")
    RayNetworkPolicy(chart, "NetworkPolicy", settings=settings, owner=name, submitter=True)
    code = CodeConfigMap(
        chart,
        "Code",
        name=code_config_map_name(name),
        namespace=settings.workload.namespace,
        bundle=collect_code(shipped),
        archive_uri=app_archive_uri,
    )
    user_code = _user_code(chart, settings, name, code_archive_uri)
    _device_claims(chart, settings, name)
    RayJob(chart, "RayJob", settings=shipped, name=name, code=code, user_code=user_code)
    return chart


def settings_chart(scope: Construct, settings: Settings) -> cdk8s.Chart:
    """The training job's settings ConfigMap alone, the object ray_job_chart makes (`<jobName>-settings`: what
    `ray-efa submit` reads as the deployment's settings), for a deployment that applies no job (trainingJob false, or
    its GPU nodes at zero). No plan is checked: no job runs from it."""
    name = ray_job_of(settings)
    chart = _chart(scope, f"settings-{settings.workload.network}")
    CodeConfigMap(
        chart,
        "Code",
        name=code_config_map_name(name),
        namespace=settings.workload.namespace,
        bundle=collect_code(shipped_settings(settings)).settings_only(),
    )
    return chart


def _device_claims(chart: cdk8s.Chart, settings: Settings, owner: str) -> None:
    """With deviceAllocation dra, the workers' ResourceClaimTemplate, before the Ray object whose pods claim from it."""
    if settings.addons.device_allocation == "dra":
        WorkerDeviceClaims(
            chart,
            "DeviceClaims",
            owner=owner,
            namespace=settings.workload.namespace,
            instance=settings.nodes.gpu_instance,
        )


def _in_order(charts: list[cdk8s.Chart]) -> list[cdk8s.Chart]:
    for before, after in zip(charts, charts[1:]):
        after.add_dependency(before)
    return charts


def build_workload(scope: Construct, settings: Settings) -> list[cdk8s.Chart]:
    """The charts that run training, in apply order: the namespace, then the RayJob of `settings.workload.network`.

    The RayJob brings its own RayCluster and deletes it jobTtlSecondsAfterFinished after the end, so the long-lived
    RayCluster is deliberately not here: both at once would wait on each other for the same GPU nodes.
    """
    return _in_order([namespace_chart(scope, settings), ray_job_chart(scope, settings)])


def build_manifests(scope: Construct, settings: Settings, *, code_archive_uri: str | None = None) -> list[cdk8s.Chart]:
    """Everything dist/ gets, in apply order: the namespace, the long-lived RayCluster, the training RayJob and its
    comparison run on the other network (the job's resolved levers with network flipped, and preflightMinBusbwGbps
    unset: each network's own floor). Apply the namespace and then ONE of the
    others at a time: each of them takes every GPU node. `code_archive_uri`: codeDir's zip in S3 (k8s.code_archive),
    which every Ray pod fetches, in place of its ConfigMap."""
    # The comparison run gets its own network's preflight floor (core.preflight_floor.network_floor): a
    # preflightMinBusbwGbps set for the job's network would hold TCP to EFA's floor, or EFA to TCP's.
    unset_floor = {} if settings.workload.preflight_min_busbw_gbps is None else {"preflightMinBusbwGbps": None}
    # The same job on the other network: the job's levers as its driver decides them for ITS network (core.strategy.
    # resolve), then the network flipped and nothing else. Re-resolving `auto` for the other network trained fp8 with
    # HSDP and a bf16 wire over TCP against bf16 FSDP over EFA on p5: a ratio of two jobs, not of two transports.
    other = resolve(settings).replace(network=comparison_network(settings.workload.network), **unset_floor)
    jobs = sorted([settings, other], key=lambda s: s.workload.network)  # rayjob-efa before rayjob-tcp, always
    return _in_order(
        [
            namespace_chart(scope, settings),
            ray_cluster_chart(scope, settings, code_archive_uri=code_archive_uri),
            *(ray_job_chart(scope, job, code_archive_uri=code_archive_uri) for job in jobs),
        ]
    )
