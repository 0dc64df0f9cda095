"""The KubeRay workload's namespace in the cluster stack, after the operator's CRDs and the device plugins."""

from __future__ import annotations

from typing import Sequence

import cdk8s
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from ray_efa.core.settings import Settings
from ray_efa.infra.manifests import apply_objects
from ray_efa.k8s.workload import namespace_chart

__all__ = ["RayWorkload"]


class RayWorkload(Construct):
    """The workload namespace (k8s.workload.namespace_chart), applied after `after`: the KubeRay operator chart
    (CRDs first) and the device plugins. The training job itself is `RayTrainingJob`, in the GPU stack."""

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, cluster: eks.ICluster,
        after: Sequence[IConstruct],
    ) -> None:
        super().__init__(scope, construct_id)
        (self.namespace,) = apply_objects(self, cluster, namespace_chart(cdk8s.App(), settings).to_json(), after=after)
