"""The EKS cluster with its system node group: the part of the stack that stays up between training runs."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms
from constructs import Construct

from ray_efa.core.scheduling import SYSTEM_NODE_LABELS
from ray_efa.core.settings import Settings
from ray_efa.infra._private import kubectl_layer, kubernetes_version
from ray_efa.infra.nag import NODE_ROLE_POLICIES, acknowledge, acknowledge_managed_policies

__all__ = ["RayEksCluster", "CONTROL_PLANE_LOG_TYPES"]

CONTROL_PLANE_LOG_TYPES = (
    eks.ClusterLoggingTypes.API,
    eks.ClusterLoggingTypes.AUDIT,
    eks.ClusterLoggingTypes.AUTHENTICATOR,
    eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    eks.ClusterLoggingTypes.SCHEDULER,
)


def endpoint_access(access: str, public_cidrs: tuple[str, ...]) -> eks.EndpointAccess:
    """The API endpoint setting; the public side is limited to `publicAccessCidrs`."""
    if access == "private":
        return eks.EndpointAccess.PRIVATE
    base = eks.EndpointAccess.PUBLIC if access == "public" else eks.EndpointAccess.PUBLIC_AND_PRIVATE
    return base.only_from(*public_cidrs)


class RayEksCluster(Construct):
    """An EKS cluster (aws_eks_v2) for Ray: control-plane logs on, secrets envelope-encrypted with a rotated KMS key,
    a kubectl provider matching the Kubernetes version, and a managed system node group labelled role=system.

    Bring your own `vpc` to embed it in a platform repository; GPU capacity is added by `EfaGpuNodegroup`.
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, vpc: ec2.IVpc) -> None:
        super().__init__(scope, construct_id)
        cluster_settings, nodes = settings.cluster, settings.nodes

        self.secrets_key = kms.Key(
            self, "SecretsKey", enable_key_rotation=True,
            description=f"Envelope encryption of Kubernetes secrets of EKS cluster {cluster_settings.cluster_name}",
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=cluster_settings.cluster_name,
            version=kubernetes_version(cluster_settings.kubernetes_version),
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)],
            endpoint_access=endpoint_access(cluster_settings.endpoint_access, cluster_settings.public_access_cidrs),
            cluster_logging=list(CONTROL_PLANE_LOG_TYPES),
            secrets_encryption_key=self.secrets_key,
            # Node groups are ours (system + GPU), not EKS Auto Mode's.
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=kubectl_layer(self, cluster_settings.kubernetes_version)
            ),
        )
        self.system_nodegroup = self.cluster.add_nodegroup_capacity(
            "SystemNodes",
            nodegroup_name=f"{cluster_settings.cluster_name}-system",
            instance_types=[ec2.InstanceType(nodes.system_instance_type)],
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            min_size=nodes.system_node_count,
            desired_size=nodes.system_node_count,
            max_size=nodes.system_node_count,
            labels=dict(SYSTEM_NODE_LABELS),
            subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
        )
        self._acknowledge_findings()

    def _acknowledge_findings(self) -> None:
        cluster = self.cluster
        acknowledge_managed_policies(
            cluster.role, ("AmazonEKSClusterPolicy",),
            "EKS requires AmazonEKSClusterPolicy on the cluster role; AWS keeps it in step with the EKS API.",
        )
        acknowledge_managed_policies(
            self.system_nodegroup.role, NODE_ROLE_POLICIES,
            "EKS requires these AWS managed policies on managed node group roles (worker node, VPC CNI, ECR pulls).",
        )
        # The kubectl provider (Lambda functions that run kubectl/helm for the stack) is built by aws-eks-v2 itself.
        provider = cluster.kubectl_provider.node
        handler_role = provider.find_child("Handler").node.find_child("ServiceRole")
        on_event_role = provider.find_child("Provider").node.find_child("framework-onEvent").node.find_child("ServiceRole")
        lambda_reason = ("aws-eks-v2's kubectl provider Lambda runs in the VPC; AWS managed execution policies for "
                         "logs, ENIs and pulling its kubectl image are what the construct library attaches.")
        for role in (handler_role, on_event_role):
            acknowledge_managed_policies(role, ("service-role/AWSLambdaBasicExecutionRole",
                                                "service-role/AWSLambdaVPCAccessExecutionRole"), lambda_reason)
        acknowledge_managed_policies(handler_role, ("AmazonEC2ContainerRegistryReadOnly",), lambda_reason)
        # Logical ids depend on where this construct sits, so read them instead of hard-coding them.
        handler = provider.find_child("Handler")
        stack = Stack.of(self)
        has_ecr_public = stack.get_logical_id(handler.node.find_child("HasEcrPublic"))
        handler_function = stack.get_logical_id(handler.node.find_child("Resource"))
        acknowledge(handler_role, "AwsSolutions-IAM4", lambda_reason, (
            f'Policy::{{"Fn::If":["{has_ecr_public}",{{"Fn::Join":["",["arn:",{{"Ref":"AWS::Partition"}},'
            '":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}'
        ))
        acknowledge(handler, "AwsSolutions-L1",
                    "The kubectl handler's runtime is pinned by aws-eks-v2 to what its bundled kubectl/helm support.")
        acknowledge(on_event_role.node.find_child("DefaultPolicy"), "AwsSolutions-IAM5",
                    "The custom-resource framework may invoke any version of its own handler function (Arn:*), nothing else.",
                    f"Resource::<{handler_function}.Arn>:*")
