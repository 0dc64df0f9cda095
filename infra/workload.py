"""The KubeRay workload's namespace in the cluster stack, after the operator's CRDs and the device plugins."""

from __future__ import annotations

import re
from collections.abc import Sequence

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from ray_efa.core.settings import Settings
from ray_efa.core.settings.checks import DNS_LABEL, DNS_LABEL_MESSAGE
from ray_efa.infra._settings import default
from ray_efa.infra.manifests import apply_objects
from ray_efa.infra.researcher_access import ResearcherAccess
from ray_efa.k8s.admission_policy import workload_admission
from ray_efa.k8s.namespace import workload_namespace
from ray_efa.k8s.network_policy import default_deny_ingress

__all__ = ["RayWorkload"]


class RayWorkload(Construct):
    """The workload namespace, applied after `after`: the KubeRay operator chart (CRDs first) and the device
    plugins. The training job itself is `RayTrainingJob`, in the GPU stack.

    The namespace's workload admission policy (k8s.admission_policy) comes with it: RayJobs, RayClusters, pods and
    services only as the stack's own manifests have them, from anyone (a researcher's RayJob, the KubeRay operator's
    pods); ResearcherAccess adds the researchers' own.

    Wiring attributes: `namespace`, the Namespace's manifest (what CheckpointStorage's service account waits for);
    `admission_policy`, the workload policy's and its binding's manifests; `default_deny`, the namespace's default-deny
    ingress NetworkPolicy (k8s.network_policy.default_deny_ingress);
    `researcher_access`, the ResearcherAccess of `researcher_principal_arns` (None without them).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        namespace: str = default("namespace"),
        after: Sequence[IConstruct] = (),
        researcher_principal_arns: Sequence[str] = (),
        service_account: str = default("serviceAccount"),
    ) -> None:
        """
        :param cluster: the EKS cluster, created or imported.
        :param namespace: the namespace of the RayCluster and the RayJob. @default "ray"
        :param after: what the namespace waits for (the KubeRay operator chart, the device plugins). @default - nothing
        :param researcher_principal_arns: IAM role/user ARNs that may submit and follow jobs in the namespace, not
            delete or change the cluster (ResearcherAccess). @default - none
        :param service_account: the Ray pods' service account, the one the admission policy admits.
            @default "ray-train"
        """
        super().__init__(scope, construct_id)
        if not re.match(DNS_LABEL, namespace):
            raise ValueError(f"RayWorkload namespace {DNS_LABEL_MESSAGE}, got {namespace!r}")
        self.namespace_name = namespace
        self.cluster: eks.ICluster = cluster
        self.namespace: eks.KubernetesManifest
        (self.namespace,) = apply_objects(self, cluster, [workload_namespace(namespace)], after=after)
        self.admission_policy: list[eks.KubernetesManifest] = apply_objects(
            self, cluster, workload_admission(namespace, service_account=service_account), after=[self.namespace]
        )
        # Ingress to a pod of the namespace that no Ray cluster's own policy admits to: none.
        self.default_deny: list[eks.KubernetesManifest] = apply_objects(
            self, cluster, [default_deny_ingress(namespace)], after=[self.namespace]
        )
        self.researcher_access: ResearcherAccess | None = (
            ResearcherAccess(
                self,
                "ResearcherAccess",
                cluster=cluster,
                namespace=namespace,
                principal_arns=researcher_principal_arns,
                after=[self.namespace],
            )
            if researcher_principal_arns
            else None
        )

    @classmethod
    def from_settings(
        cls,
        scope: Construct,
        construct_id: str,
        settings: Settings,
        *,
        cluster: eks.ICluster,
        after: Sequence[IConstruct] = (),
    ) -> RayWorkload:
        """The namespace of the project's own app (`namespace`), and its researchers (`researcherPrincipalArns`)."""
        return cls(
            scope,
            construct_id,
            cluster=cluster,
            namespace=settings.workload.namespace,
            after=after,
            researcher_principal_arns=settings.cluster.researcher_principal_arns,
            service_account=settings.workload.service_account,
        )
