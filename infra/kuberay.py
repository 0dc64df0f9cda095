"""The KubeRay operator, from its Helm chart, on the system nodes, after the ray.io CRDs of the same chart version."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import Annotations, Duration, Token
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from ray_efa.core.addons import KUBERAY_OPERATOR
from ray_efa.core.scheduling import DEFAULT_SYSTEM_NODE_SELECTOR
from ray_efa.core.settings import Settings
from ray_efa.infra._private import add_synth_check, check_node_selector, common_labels, helm_chart, selects
from ray_efa.infra._settings import choices, default
from ray_efa.infra.chart_crds import HelmChartCrds
from ray_efa.infra.log_groups import StackLogs
from ray_efa.k8s.security import token_auth_of

__all__ = ["KubeRayOperator", "kuberay_values", "nodegroups_selected_by", "cluster_nodegroups"]


def kuberay_values(node_selector: Mapping[str, str] = DEFAULT_SYSTEM_NODE_SELECTOR) -> dict[str, Any]:
    """The operator on the system nodes (1.4.0's values.yaml does not declare nodeSelector, but its template reads it)."""
    return {"nodeSelector": dict(node_selector)}


def nodegroup_labels(nodegroup: IConstruct) -> dict[str, str] | None:
    """The labels of an eks.Nodegroup, when they are literals; None for anything else."""
    resource = nodegroup.node.default_child if isinstance(nodegroup, eks.Nodegroup) else None
    labels = getattr(resource, "labels", None)
    if isinstance(labels, Mapping) and not Token.is_unresolved(labels):
        return {str(key): str(value) for key, value in labels.items()}
    return None


def cluster_nodegroups(cluster: eks.ICluster) -> list[eks.Nodegroup]:
    """The managed node groups added to `cluster` with add_nodegroup_capacity (RayEksCluster's system nodes), with
    literal labels; none on an imported cluster."""
    return [child for child in cluster.node.children if nodegroup_labels(child) is not None]  # type: ignore[misc]


def nodegroups_selected_by(cluster: eks.ICluster, node_selector: Mapping[str, str]) -> list[eks.Nodegroup]:
    """The managed node groups added to `cluster` with add_nodegroup_capacity (RayEksCluster's system nodes) whose
    labels hold every label of `node_selector`: the nodes a pod with that selector can run on."""
    return [child for child in cluster_nodegroups(cluster) if selects(node_selector, nodegroup_labels(child) or {})]


class KubeRayOperator(Construct):
    """The kuberay-operator Helm chart, after its version's ray.io CRDs (`self.crds`, server-side applied at deploy
    time, so that a version change brings the new schema) and after the nodes it runs on.

    Its node selector is the labels of the node groups it runs on, stated once on them: `nodes`, else the node groups
    of `cluster` built in this app (RayEksCluster's system nodes). Synth fails, naming `node_selector`, when the
    cluster has node groups of this app and none of them carries the selector's labels: the operator would never
    schedule.

    Wiring: `self.chart` is the Helm release; make every RayCluster and RayJob manifest depend on it (RayWorkload's
    and RayTrainingJob's `after`). `self.crds` is the HelmChartCrds construct (None with `crds=False`).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        version: str = default("kuberayVersion"),
        node_selector: Mapping[str, str] | None = None,
        ray_version: str | None = None,
        crds: bool | None = None,
        nodes: Sequence[IConstruct] | None = None,
        logs: StackLogs | None = None,
    ) -> None:
        """
        :param cluster: the EKS cluster, created or imported (its kubectl provider installs the chart).
        :param version: the kuberay-operator chart version, one whose CRDs the manifests are checked against.
            @default "1.7.0"
        :param node_selector: labels of the nodes the operator runs on: yours, on an imported cluster.
            @default - the labels the node groups of `nodes` share, else those of `cluster`'s node groups built in
            this app (RayEksCluster's system nodes), else {"role": "system"}
        :param ray_version: the Ray of the images it will run; with it, synth warns when this KubeRay and that Ray
            cannot put Ray behind a token. @default - no check
        :param crds: apply the chart version's CRDs before the chart, on every version change (needs the cluster's
            kubectl provider built in this app); False leaves them to Helm, which installs them once and never
            upgrades them. @default - True where the kubectl provider is built in this app (RayEksCluster,
            import_cluster with kubectl_role); with a provider imported by attributes, left to Helm with a synth
            warning that says what a version change then needs
        :param nodes: what the operator's pod needs to run (its node group): the release waits up to 10 minutes for
            the pod, so it must come after them. @default - the node groups of `cluster` whose labels hold
            `node_selector` (RayEksCluster's system node group); none on an imported cluster
        :param logs: the stack's log groups, for the CRD function's logs. @default - its own default log group
        """
        super().__init__(scope, construct_id)
        if version not in choices("kuberayVersion"):
            raise ValueError(
                f"KubeRayOperator version must be one of {', '.join(choices('kuberayVersion'))}, got {version!r}"
            )
        selector: Mapping[str, str]
        if node_selector is not None:
            selector = node_selector
        else:
            labelled = [
                labels
                for n in (nodes if nodes is not None else cluster_nodegroups(cluster))
                if (labels := nodegroup_labels(n)) is not None
            ]
            selector = common_labels("KubeRayOperator nodes", labelled) if labelled else default("systemNodeSelector")
        check_node_selector("KubeRayOperator node_selector", selector)
        self.node_selector: dict[str, str] = dict(selector)
        """The system nodes' labels (RayTrainingJob puts the Ray head and the submitter there too)."""
        self.cluster: eks.ICluster = cluster
        if crds is None:
            crds = HelmChartCrds.can_apply(cluster)
            if not crds:
                Annotations.of(self).add_warning_v2(
                    "ray-efa:kuberay-crds-left-to-helm",
                    (
                        "the cluster's kubectl provider is imported by attributes, so the stack cannot apply the KubeRay "
                        "CRDs itself: Helm installs them once and never upgrades them. Before changing the chart version, "
                        "run `kubectl apply --server-side --force-conflicts -f crds/` of the new chart "
                        "(`helm pull kuberay-operator --repo https://ray-project.github.io/kuberay-helm/ --version V "
                        "--untar`), or pass crds=False to silence this."
                    ),
                )
        self.crds: HelmChartCrds | None = (
            HelmChartCrds(self, "Crds", cluster=cluster, version=version, logs=logs) if crds else None
        )
        self.chart: eks.HelmChart = helm_chart(
            self,
            "Chart",
            cluster,
            KUBERAY_OPERATOR,
            version,
            kuberay_values(selector),
            create_namespace=True,
            timeout=Duration.minutes(10),
        )
        if self.crds is not None:
            self.chart.node.add_dependency(self.crds)
        self.nodes: Sequence[IConstruct] = (
            list(nodes) if nodes is not None else nodegroups_selected_by(cluster, selector)
        )
        for nodegroup in self.nodes:
            self.chart.node.add_dependency(nodegroup)
        add_synth_check(self, self._check_schedules)
        if ray_version is not None and not (auth := token_auth_of(version, ray_version)).enabled:
            # Said at synth (cdk synth/deploy print warnings), so the weaker setup is a choice, not a surprise.
            Annotations.of(self).add_warning_v2(
                "ray-efa:noRayTokenAuth",
                f"Ray token authentication is off: {auth.reason}. The workload's NetworkPolicy is the only guard.",
            )

    def _check_schedules(self) -> list[str]:
        groups = cluster_nodegroups(self.cluster)
        if not groups or any(selects(self.node_selector, nodegroup_labels(g) or {}) for g in groups):
            return []
        labels = ", ".join(f"{g.node.path} {nodegroup_labels(g)!r}" for g in groups)
        return [
            f"KubeRayOperator node_selector {self.node_selector!r} selects none of the node groups of its cluster "
            f"({labels}): the operator would never schedule. Leave node_selector out (it comes from the cluster's "
            "node groups) or pass nodes=[the node group it runs on]"
        ]

    @classmethod
    def from_settings(
        cls,
        scope: Construct,
        construct_id: str,
        settings: Settings,
        *,
        cluster: eks.ICluster,
        nodes: Sequence[IConstruct] | None = None,
        logs: StackLogs | None = None,
    ) -> KubeRayOperator:
        """The operator of the project's own app: kuberayVersion on systemNodeSelector, checked against rayVersion."""
        return cls(
            scope,
            construct_id,
            cluster=cluster,
            version=settings.addons.kuberay_version,
            node_selector=settings.nodes.system_node_selector,
            ray_version=settings.workload.ray_version,
            nodes=nodes,
            logs=logs,
        )
