"""The KubeRay operator, from its Helm chart, on the system nodes. Its chart installs the ray.io CRDs."""

from __future__ import annotations

from aws_cdk import Annotations, Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ray_efa.core.addons import KUBERAY_OPERATOR
from ray_efa.core.scheduling import SYSTEM_NODE_LABELS, node_selector
from ray_efa.core.settings import Settings
from ray_efa.infra._private import helm_chart
from ray_efa.k8s.security import token_auth

__all__ = ["KubeRayOperator", "kuberay_values"]

def kuberay_values() -> dict:
    """The operator on role=system nodes (1.4.0's values.yaml does not declare nodeSelector, but its template reads it)."""
    return {"nodeSelector": node_selector(SYSTEM_NODE_LABELS)}


class KubeRayOperator(Construct):
    """The kuberay-operator chart at `kuberayVersion`; RayCluster and RayJob manifests must depend on `self.chart`."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, cluster: eks.ICluster) -> None:
        super().__init__(scope, construct_id)
        self.chart = helm_chart(
            self, "Chart", cluster, KUBERAY_OPERATOR, settings.addons.kuberay_version, kuberay_values(),
            create_namespace=True, timeout=Duration.minutes(10),
        )
        auth = token_auth(settings)
        if not auth.enabled:
            # Said at synth (cdk synth/deploy print warnings), so the weaker setup is a choice, not a surprise.
            Annotations.of(self).add_warning_v2(
                "ray-efa:noRayTokenAuth",
                f"Ray token authentication is off: {auth.reason}. The workload's NetworkPolicy is the only guard.")
