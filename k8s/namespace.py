"""The namespace of the RayCluster, the RayJobs and their code."""

from __future__ import annotations

from constructs import Construct

from ray_efa.k8s._private import api_object, labels

__all__ = ["WorkloadNamespace"]


class WorkloadNamespace(Construct):
    """A Namespace. Apply it before anything that lives in it."""

    def __init__(self, scope: Construct, id: str, *, name: str):
        """
        :param name: the namespace (settings workload.namespace).
        """
        super().__init__(scope, id)
        self.name = name
        api_object(
            self,
            "Resource",
            api_version="v1",
            kind="Namespace",
            name=name,
            namespace=None,
            object_labels=labels(name, "namespace"),
            body={},
        )
