"""The charts of the workload: the objects of k8s.objects, wrapped in cdk8s charts in the order they must be applied.

    build_workload(scope, settings)   -> [namespace, rayjob-<network>]           what the CDK stacks apply (infra/
                                                                                  applies each chart's objects)
    build_manifests(scope, settings)  -> [namespace, raycluster, rayjob-efa, rayjob-tcp]   what dist/ gets

This is the package's one cdk8s edge: every object is built as plain data (k8s.objects and the builders below it),
and only here becomes a cdk8s ApiObject, so the builders and their tests run without jsii's node process. Each chart
depends on the one before it (chart.add_dependency), which numbers dist/ files in apply order. The KubeRay CRDs come
from the kuberay-operator Helm chart, so every chart after the namespace needs the operator installed first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cdk8s
from constructs import Construct

from ray_efa.core.settings import Settings
from ray_efa.k8s.objects import (
    Objects,
    chart_id,
    manifest_objects,
    namespace_objects,
    ray_cluster_objects,
    ray_job_objects,
    settings_objects,
    shipped_settings,
    workload_objects,
)

__all__ = [
    "chart",
    "namespace_chart",
    "ray_cluster_chart",
    "ray_job_chart",
    "settings_chart",
    "build_workload",
    "build_manifests",
    "shipped_settings",
]

_METADATA = {"name": "name", "namespace": "namespace", "labels": "labels", "annotations": "annotations"}
"""The metadata fields an object of this package may have -> cdk8s.ApiObjectMetadata's keyword for it."""


def _api_object(scope: Construct, obj: Mapping[str, Any]) -> cdk8s.ApiObject:
    """`obj` as a cdk8s ApiObject: apiVersion, kind and metadata as its props, the other top-level fields (spec,
    data...) as JSON patches, in order (cdk8s's ApiObject props carry metadata only). Its construct id is
    `<kind>-<name>`: never integer-like, so the chart keeps the objects in the given order (construct children keep
    JavaScript object order, which puts integer-like keys first)."""
    metadata = obj["metadata"]
    unknown = sorted(set(metadata) - set(_METADATA))
    if unknown:
        raise ValueError(f"{obj['kind']} {metadata['name']}: metadata {unknown} is not carried into a chart")
    api_object = cdk8s.ApiObject(
        scope,
        f"{obj['kind']}-{metadata['name']}",
        api_version=obj["apiVersion"],
        kind=obj["kind"],
        metadata=cdk8s.ApiObjectMetadata(**{_METADATA[key]: value for key, value in metadata.items()}),
    )
    for field, value in obj.items():
        if field not in ("apiVersion", "kind", "metadata"):
            api_object.add_json_patch(cdk8s.JsonPatch.add(f"/{field}", value))
    return api_object


def chart(scope: Construct, id: str, objects: Objects) -> cdk8s.Chart:
    """A chart `id` holding `objects`, in order."""
    # Names are chosen, not hashed: ops/ and users find the objects with kubectl by the names in k8s.names.
    wrapped = cdk8s.Chart(scope, id, disable_resource_name_hashes=True)
    for obj in objects:
        _api_object(wrapped, obj)
    return wrapped


def namespace_chart(scope: Construct, settings: Settings) -> cdk8s.Chart:
    """The Namespace alone (k8s.objects.namespace_objects)."""
    return chart(scope, chart_id("namespace"), namespace_objects(settings))


def ray_cluster_chart(scope: Construct, settings: Settings, *, code_archive_uri: str | None = None) -> cdk8s.Chart:
    """The long-lived RayCluster and what comes before it (k8s.objects.ray_cluster_objects)."""
    return chart(scope, chart_id("raycluster"), ray_cluster_objects(settings, code_archive_uri=code_archive_uri))


def ray_job_chart(
    scope: Construct, settings: Settings, *, code_archive_uri: str | None = None, app_archive_uri: str | None = None
) -> cdk8s.Chart:
    """The training RayJob and what comes before it (k8s.objects.ray_job_objects, which says what it refuses)."""
    objects = ray_job_objects(settings, code_archive_uri=code_archive_uri, app_archive_uri=app_archive_uri)
    return chart(scope, chart_id("rayjob", settings), objects)


def settings_chart(scope: Construct, settings: Settings) -> cdk8s.Chart:
    """The training job's settings ConfigMap alone (k8s.objects.settings_objects)."""
    return chart(scope, chart_id("settings", settings), settings_objects(settings))


def _in_order(scope: Construct, charts: Mapping[str, Objects]) -> list[cdk8s.Chart]:
    wrapped = [chart(scope, id, objects) for id, objects in charts.items()]
    for before, after in zip(wrapped, wrapped[1:]):
        after.add_dependency(before)
    return wrapped


def build_workload(scope: Construct, settings: Settings) -> list[cdk8s.Chart]:
    """The charts that run training, in apply order: the namespace, then the RayJob of `settings.workload.network`
    (k8s.objects.workload_objects says why not the RayCluster)."""
    return _in_order(scope, workload_objects(settings))


def build_manifests(scope: Construct, settings: Settings, *, code_archive_uri: str | None = None) -> list[cdk8s.Chart]:
    """Everything dist/ gets, in apply order: the namespace, the long-lived RayCluster, the training RayJob and its
    comparison run on the other network (k8s.objects.manifest_objects). `code_archive_uri`: codeDir's zip in S3
    (k8s.code_archive), which every Ray pod fetches, in place of its ConfigMap."""
    return _in_order(scope, manifest_objects(settings, code_archive_uri=code_archive_uri))
