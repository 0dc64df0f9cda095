"""The CRDs of a Helm chart's version, server-side applied at deploy time, so that a chart upgrade brings its schema.

`helm upgrade` never updates a chart's crds/ (Helm installs them on the first install only: helm.sh, "Custom Resource
Definitions" best practices; docs.ray.io "KubeRay upgrade guide" applies the new CRDs by hand before the chart). A
changed kuberayVersion would upgrade the operator onto the old schema, and a RayJob using a newer field (authOptions)
would be refused by kubectl's strict validation. The CRDs cannot travel in a KubernetesManifest either: aws_eks_v2's
kubectl handler applies client-side (`kubectl create --save-config`, then `kubectl apply`), which stores the object in
its last-applied-configuration annotation, and each RayCluster and RayJob CRD is larger than the 262,144 bytes all
annotations of an object may hold (ray-project/kuberay#271). A copy at synth would also pin the files in the template
and take most of the custom-resource request's 1 MB (infra.manifests).

So a small Lambda function (infra/chart_crds_handler.py) runs where aws_eks_v2's kubectl provider runs: its role
(cluster-admin through the access entry aws_eks_v2 creates for it: aws-eks-v2/lib/cluster.js, grantClusterAdmin
"ClusterAdminRoleAccess"), its layers (kubectl, helm, the AWS CLI: aws-eks-v2/lib/kubectl-provider.js adds
AwsCliLayer and the kubectl layer to its Handler), its subnets and security groups. It pulls the chart at the chosen
version (`helm pull --repo --version --untar`, the chart repository the kubectl handler already reaches for `helm
upgrade`), applies every crds/*.yaml with `kubectl apply --server-side --force-conflicts` and waits until each is
Established. A new version is a property change: CloudFormation sends an Update before the chart that depends on it.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import CustomResource, Duration
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs_
from constructs import Construct

from ray_efa.core.addons import KUBERAY_OPERATOR, HelmRelease
from ray_efa.infra.chart_crds_handler import FUNCTION_TIMEOUT_S, SERVICE_TIMEOUT_S
from ray_efa.infra.log_groups import StackLogs
from ray_efa.infra.nag import acknowledge, skip_checkov

__all__ = ["HelmChartCrds", "CRDS_RESOURCE_TYPE"]

CRDS_RESOURCE_TYPE = "Custom::RayEfa-HelmChartCrds"
_HANDLER = "chart_crds_handler"


class HelmChartCrds(Construct):
    """Server-side applies the crds/ of `release`'s chart at `version` into `cluster` on every create and update.

    Make the chart (and everything that creates the chart's custom resources) depend on this construct. Needs the
    cluster's kubectl provider to be built in this app (a cluster RayEksCluster creates, or import_cluster with
    `kubectl_role`): its Lambda's role, layers and VPC placement are reused.
    """

    @staticmethod
    def can_apply(cluster: eks.ICluster) -> bool:
        """Whether the cluster's kubectl provider is one this construct can run as (built in this app, with a role)."""
        provider = cluster.kubectl_provider
        return (
            provider is not None
            and provider.role is not None
            and isinstance(provider.node.try_find_child("Handler"), lambda_.Function)
        )

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        version: str,
        release: HelmRelease = KUBERAY_OPERATOR,
        logs: StackLogs | None = None,
    ) -> None:
        """
        :param cluster: the EKS cluster, with a kubectl provider of this app.
        :param version: the chart version whose crds/ to apply.
        :param release: the chart (name and repository). @default KUBERAY_OPERATOR
        :param logs: the stack's log groups, for the function's. @default - the function's default log group
        """
        super().__init__(scope, construct_id)
        # Also makes this construct wait for the provider's access entry (the kubectl-ready barrier of a Cluster).
        provider = eks.KubectlProvider.get_kubectl_provider(self, cluster)
        kubectl_handler = provider.node.try_find_child("Handler") if provider is not None else None
        if not isinstance(kubectl_handler, lambda_.Function) or provider is None or provider.role is None:
            raise ValueError(
                f"{type(self).__name__} needs the cluster's kubectl provider built in this app (RayEksCluster, or "
                "import_cluster with kubectl_role) to apply the chart's CRDs; with an imported provider pass "
                "crds=False to KubeRayOperator and apply them yourself (kubectl apply --server-side -f crds/)"
            )
        kubectl_function = kubectl_handler.node.default_child
        assert isinstance(kubectl_function, lambda_.CfnFunction)
        layer_arns = kubectl_function.layers or []
        self.function: lambda_.Function = lambda_.Function(
            self,
            "Function",
            description=f"Server-side apply of the crds/ of Helm chart {release.chart} at a version",
            runtime=lambda_.Runtime.determine_latest_python_runtime(self),
            handler=f"{_HANDLER}.handler",
            code=lambda_.Code.from_asset(str(Path(__file__).parent), exclude=["*", f"!{_HANDLER}.py"]),
            timeout=Duration.seconds(FUNCTION_TIMEOUT_S),
            memory_size=1024,
            role=provider.role,
            layers=[
                lambda_.LayerVersion.from_layer_version_arn(self, f"Layer{i}", str(arn))
                for i, arn in enumerate(layer_arns)
            ],
            environment={"AWS_STS_REGIONAL_ENDPOINTS": "regional"},
        )
        cfn_function = self.function.node.default_child
        assert isinstance(cfn_function, lambda_.CfnFunction)
        # The kubectl provider's subnets and security groups, where the cluster's private endpoint is reachable.
        cfn_function.vpc_config = kubectl_function.vpc_config
        self.function.node.add_dependency(kubectl_handler)  # its role's policies (ENIs, EKS) exist first
        self.resource: CustomResource = CustomResource(
            self,
            "Resource",
            service_token=self.function.function_arn,
            resource_type=CRDS_RESOURCE_TYPE,
            service_timeout=Duration.seconds(SERVICE_TIMEOUT_S),
            properties={
                "ClusterName": cluster.cluster_name,
                "Chart": release.chart,
                "Repository": release.repository,
                "Version": version,
            },
        )
        # Its logs: with @aws-cdk/aws-lambda:useCdkManagedLogGroup (cdk.json) aws-lambda creates /aws/lambda/<name> in
        # the stack; under the stack's retention, key and lifecycle when `logs` is given (as RayEksCluster does for the
        # kubectl provider's), else the stack's own log group for it. Created before CloudFormation first invokes the
        # function, deleted after its last call (the Delete of the custom resource).
        group = self.function.node.try_find_child("LogGroup")
        if isinstance(group, logs_.LogGroup):
            if logs is not None:
                logs.adopt(group.node.default_child)  # type: ignore[arg-type]
            self.resource.node.add_dependency(group)
        elif logs is not None:
            logs.for_function(self, "Logs", function_name=self.function.function_name, users=(self.resource,))
        self._acknowledge_findings(in_vpc=kubectl_function.vpc_config is not None)

    def _acknowledge_findings(self, *, in_vpc: bool) -> None:
        acknowledge(
            self.function,
            "AwsSolutions-L1",
            "The runtime is the latest Python runtime aws-cdk-lib deploys everywhere "
            "(Runtime.determine_latest_python_runtime), as aws-eks-v2's kubectl handler uses.",
        )
        checks = [
            ("CKV_AWS_115", "CloudFormation calls it once per create or update of the chart's CRDs"),
            ("CKV_AWS_116", "CloudFormation is the caller and reports a failed call; a DLQ would hold nothing"),
            ("CKV_AWS_173", "its environment holds one STS endpoint flag, no secrets"),
        ]
        if not in_vpc:
            checks.append(("CKV_AWS_117", "it runs where the kubectl provider runs, and that one is outside the VPC"))
        for check, why in checks:
            skip_checkov(self.function, check, f"Applies a Helm chart's CRDs for the stack at deploy time: {why}.")
