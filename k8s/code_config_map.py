"""The ConfigMap that ships the training code and settings.json to the Ray pods of one RayCluster or RayJob."""

from __future__ import annotations

from constructs import Construct

from ray_efa.k8s._private import api_object, labels
from ray_efa.k8s.code_bundle import CodeBundle

__all__ = ["CodeConfigMap"]


class CodeConfigMap(Construct):
    """A ConfigMap holding a CodeBundle; the pods mount it with the bundle's items (see k8s.cluster_spec).

    Raises ManifestError before creating anything when the bundle would not fit a ConfigMap or a kubectl apply.
    """

    def __init__(self, scope: Construct, id: str, *, name: str, namespace: str, bundle: CodeBundle):
        """
        :param name: the ConfigMap's name (k8s.names.code_config_map_name of its owner).
        :param namespace: where the pods that mount it run.
        :param bundle: the files, settings.json included.
        """
        super().__init__(scope, id)
        bundle.check_fits(name)
        self.name = name
        self.bundle = bundle
        api_object(self, "Resource", api_version="v1", kind="ConfigMap", name=name, namespace=namespace,
                   object_labels=labels(name, "code"), body={"data": bundle.data})
