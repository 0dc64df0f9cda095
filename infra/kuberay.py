"""The KubeRay operator, from its Helm chart, on the system nodes. Its chart installs the ray.io CRDs."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Annotations, Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ray_efa.core.addons import KUBERAY_OPERATOR
from ray_efa.core.scheduling import DEFAULT_SYSTEM_NODE_SELECTOR
from ray_efa.core.settings import KUBERAY_VERSIONS, Settings
from ray_efa.infra._private import check_node_selector, helm_chart
from ray_efa.k8s.security import token_auth_of

__all__ = ["KubeRayOperator", "kuberay_values"]


def kuberay_values(node_selector: Mapping[str, str] = DEFAULT_SYSTEM_NODE_SELECTOR) -> dict:
    """The operator on the system nodes (1.4.0's values.yaml does not declare nodeSelector, but its template reads it)."""
    return {"nodeSelector": dict(node_selector)}


class KubeRayOperator(Construct):
    """The kuberay-operator Helm chart; RayCluster and RayJob manifests must depend on `self.chart` (its CRDs)."""

    def __init__(
        self, scope: Construct, construct_id: str, *, cluster: eks.ICluster, version: str = "1.7.0",
        node_selector: Mapping[str, str] = DEFAULT_SYSTEM_NODE_SELECTOR, ray_version: str | None = None,
    ) -> None:
        """
        :param cluster: the EKS cluster, created or imported (its kubectl provider installs the chart).
        :param version: the kuberay-operator chart version, one whose CRDs the manifests are checked against.
            @default "1.7.0"
        :param node_selector: labels of the nodes the operator runs on (yours, on an imported cluster).
            @default {"role": "system"}
        :param ray_version: the Ray of the images it will run; with it, synth warns when this KubeRay and that Ray
            cannot put Ray behind a token. @default - no check
        """
        super().__init__(scope, construct_id)
        if version not in KUBERAY_VERSIONS:
            raise ValueError(f"KubeRayOperator version must be one of {', '.join(KUBERAY_VERSIONS)}, got {version!r}")
        check_node_selector("KubeRayOperator node_selector", node_selector)
        self.node_selector: dict[str, str] = dict(node_selector)
        """The system nodes' labels (RayTrainingJob puts the Ray head and the submitter there too)."""
        self.chart = helm_chart(
            self, "Chart", cluster, KUBERAY_OPERATOR, version, kuberay_values(node_selector),
            create_namespace=True, timeout=Duration.minutes(10),
        )
        if ray_version is not None and not (auth := token_auth_of(version, ray_version)).enabled:
            # Said at synth (cdk synth/deploy print warnings), so the weaker setup is a choice, not a surprise.
            Annotations.of(self).add_warning_v2(
                "ray-efa:noRayTokenAuth",
                f"Ray token authentication is off: {auth.reason}. The workload's NetworkPolicy is the only guard.")

    @classmethod
    def from_settings(cls, scope: Construct, construct_id: str, settings: Settings, *, cluster: eks.ICluster) -> KubeRayOperator:
        """The operator of the project's own app: kuberayVersion on systemNodeSelector, checked against rayVersion."""
        return cls(scope, construct_id, cluster=cluster, version=settings.addons.kuberay_version,
                   node_selector=settings.nodes.system_node_selector, ray_version=settings.workload.ray_version)
