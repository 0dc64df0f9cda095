"""The long-lived RayCluster, for interactive use (`ray job submit`, `kubectl exec`)."""

from __future__ import annotations

from typing import Any

from ray_efa.core.settings import Settings
from ray_efa.k8s._private import api_object, labels
from ray_efa.k8s.cluster_spec import ray_cluster_spec
from ray_efa.k8s.code_config_map import CodeConfigMap
from ray_efa.k8s.names import check_object_name
from ray_efa.k8s.ray_types import API_VERSION
from ray_efa.k8s.user_code import UserCodeVolume

__all__ = ["ray_cluster"]


def ray_cluster(
    settings: Settings, *, name: str, code: CodeConfigMap, user_code: UserCodeVolume | None = None
) -> dict[str, Any]:
    """A ray.io/v1 RayCluster: the head on a system node and one GPU worker per GPU node, mounting `code`.

    It holds every GPU node while it exists, so a RayJob (which brings its own cluster) waits for it to be deleted.

    :param settings: image, Ray version, node types and counts, network.
    :param name: the RayCluster's name (a DNS-1035 label of at most 47 characters).
    :param code: the ConfigMaps the pods mount (in the same namespace).
    :param user_code: codeDir on every Ray pod (k8s.user_code). @default - none
    """
    check_object_name(name)
    spec = ray_cluster_spec(
        settings,
        owner=name,
        config_map=code.name,
        bundle=code.mounted,
        user_code=user_code,
        app_archive_uri=code.archive_uri,
    )
    return api_object(
        api_version=API_VERSION,
        kind="RayCluster",
        name=name,
        namespace=settings.workload.namespace,
        object_labels=labels(name, "raycluster"),
        body={"spec": spec.to_dict()},
    )
