"""The ConfigMaps that ship the training code and settings.json to the Ray pods of one RayCluster or RayJob."""

from __future__ import annotations

from constructs import Construct

from ray_efa.k8s._private import api_object, labels
from ray_efa.k8s.code_bundle import CodeBundle
from ray_efa.k8s.names import settings_config_map_name

__all__ = ["CodeConfigMap"]


class CodeConfigMap(Construct):
    """Two ConfigMaps holding a CodeBundle: `name` with the code, `settings_name` with settings.json alone. The pods
    mount both as one projected volume with the bundle's items (see k8s.cluster_spec).

    Two, so that a change of one training setting changes the small settings ConfigMap only: a readable `cdk diff`,
    and an update well under the custom-resource payload limit. Raises ManifestError before creating anything when
    the code would not fit a ConfigMap or a kubectl apply.
    """

    def __init__(self, scope: Construct, id: str, *, name: str, namespace: str, bundle: CodeBundle):
        """
        :param name: the code ConfigMap's name (k8s.names.code_config_map_name of its owner); the settings one is
            k8s.names.settings_config_map_name of it.
        :param namespace: where the pods that mount it run.
        :param bundle: the files, settings.json included.
        """
        super().__init__(scope, id)
        bundle.check_fits(name)
        self.name = name
        self.settings_name = settings_config_map_name(name)
        self.bundle = bundle
        code, settings = bundle.split_settings()
        api_object(self, "Resource", api_version="v1", kind="ConfigMap", name=name, namespace=namespace,
                   object_labels=labels(name, "code"), body={"data": code.data})
        api_object(self, "Settings", api_version="v1", kind="ConfigMap", name=self.settings_name, namespace=namespace,
                   object_labels=labels(self.settings_name, "settings"), body={"data": settings.data})
