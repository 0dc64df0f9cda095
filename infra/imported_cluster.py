"""An existing EKS cluster, imported so that the project's constructs can add the GPU side to it.

aws_eks_v2 runs kubectl and helm for the stack in a Lambda function, the kubectl provider. An imported cluster has none
unless it is given one (`Cluster.from_cluster_attributes` ignores kubectl_provider_options): `import_cluster` either
uses a provider the platform already has (`kubectl_provider`), or creates one whose execution role is
`kubectl_role`, a role the platform granted cluster-admin (an EKS access entry with AmazonEKSClusterAdminPolicy, or
system:masters in aws-auth) and that Lambda may assume (aws-cdk-lib aws_eks_v2.KubectlProviderProps.role). CDK
cannot attach managed policies to an imported role (synth warns IRoleCantBeUsedWithIManagedPolicy), so that role needs
AWSLambdaBasicExecutionRole and AmazonEC2ContainerRegistryReadOnly of its own; CDK adds eks:DescribeCluster inline.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from ray_efa.infra._private import kubectl_layer
from ray_efa.infra._settings import choices, default

__all__ = ["import_cluster"]


def import_cluster(
    scope: Construct,
    construct_id: str,
    *,
    cluster_name: str,
    cluster_security_group_id: str,
    vpc: ec2.IVpc,
    kubernetes_version: str = default("kubernetesVersion"),
    kubectl_role: iam.IRole | None = None,
    kubectl_provider: eks.IKubectlProvider | None = None,
) -> eks.ICluster:
    """The existing cluster `cluster_name`, with a kubectl provider, for EfaGpuNodegroup, GpuDevicePlugins,
    KubeRayOperator, CheckpointStorage, RayWorkload and RayTrainingJob.

    :param cluster_name: the cluster's name.
    :param cluster_security_group_id: the cluster security group EKS created (the GPU nodes' interfaces get it).
    :param vpc: the cluster's VPC (Vpc.from_vpc_attributes or from_lookup).
    :param kubernetes_version: the cluster's version; the kubectl layer must match it. @default "1.36"
    :param kubectl_role: the execution role of a new kubectl provider: one with cluster-admin on the cluster that
        lambda.amazonaws.com may assume. @default - required unless `kubectl_provider` is given
    :param kubectl_provider: an existing provider (KubectlProvider.from_kubectl_provider_attributes). @default - a new
        one with `kubectl_role`
    """
    if kubernetes_version not in choices("kubernetesVersion"):
        raise ValueError(
            f"import_cluster kubernetes_version must be one of {', '.join(choices('kubernetesVersion'))}, "
            f"got {kubernetes_version!r}"
        )
    if (kubectl_role is None) == (kubectl_provider is None):
        raise ValueError(
            "import_cluster needs exactly one of kubectl_role (a role with cluster-admin, for a new "
            "kubectl provider) and kubectl_provider (an existing one)"
        )
    scope = Construct(scope, construct_id)
    if kubectl_provider is None:
        # The provider needs a cluster to be built (its ARN, VPC, security group); the cluster the constructs use
        # needs the provider: import twice.
        bare = eks.Cluster.from_cluster_attributes(
            scope,
            "ForKubectlProvider",
            cluster_name=cluster_name,
            cluster_security_group_id=cluster_security_group_id,
            vpc=vpc,
        )
        kubectl_provider = eks.KubectlProvider(
            scope,
            "KubectlProvider",
            cluster=bare,
            kubectl_layer=kubectl_layer(scope, kubernetes_version),
            role=kubectl_role,
        )
    return eks.Cluster.from_cluster_attributes(
        scope,
        "Cluster",
        cluster_name=cluster_name,
        cluster_security_group_id=cluster_security_group_id,
        vpc=vpc,
        kubectl_provider=kubectl_provider,
    )
