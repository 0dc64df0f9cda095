"""The EKS cluster with its system node group: the part of the stack that stays up between training runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

import jsii
from aws_cdk import Annotations, Aspects, CfnElement, CfnResource, Duration, IAspect, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

from ray_efa.core import catalog
from ray_efa.core.settings import Settings, admin_arn_problem, cidr_problem
from ray_efa.infra._private import (
    check_node_selector,
    follow_kubernetes_version,
    kubectl_layer,
    node_role_policies,
    nodegroup_name,
)
from ray_efa.infra._private import kubernetes_version as _kubernetes_version
from ray_efa.infra._settings import check_bounds, check_strings, check_type, choices, default
from ray_efa.infra.access import ClusterAdminAccess
from ray_efa.infra.log_groups import StackLogs
from ray_efa.infra.nag import CNI_POLICY, NODE_ROLE_POLICIES, acknowledge, acknowledge_managed_policies, skip_checkov
from ray_efa.infra.node_health import NodeMonitoringAgent, enable_node_repair
from ray_efa.infra.node_storage import SystemNodeLaunchTemplate, check_root_volume
from ray_efa.infra.vpc_cni import VpcCniAddon

if TYPE_CHECKING:
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_logs

__all__ = ["RayEksCluster", "CONTROL_PLANE_LOG_TYPES"]

CONTROL_PLANE_LOG_TYPES = (
    eks.ClusterLoggingTypes.API,
    eks.ClusterLoggingTypes.AUDIT,
    eks.ClusterLoggingTypes.AUTHENTICATOR,
    eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    eks.ClusterLoggingTypes.SCHEDULER,
)


def _endpoint_access(access: str, public_cidrs: tuple[str, ...]) -> eks.EndpointAccess:
    """The API endpoint setting; the public side of public_and_private is limited to `publicAccessCidrs`. A public-only
    endpoint stays open (the settings refuse other CIDRs with it): the nodes reach it from the internet, and CDK
    refuses to restrict it."""
    if access == "private":
        return eks.EndpointAccess.PRIVATE
    if access == "public":
        return eks.EndpointAccess.PUBLIC
    return eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*public_cidrs)


def _check_props(
    kubernetes_version: str,
    endpoint_access: str,
    system_instance_type: str,
    system_node_count: int,
    system_root_volume_gib: int,
    system_node_selector: Mapping[str, str],
) -> None:
    """ValueError naming the first bad prop of RayEksCluster (the image's root volume aside)."""
    for prop, value, key in (
        ("kubernetes_version", kubernetes_version, "kubernetesVersion"),
        ("endpoint_access", endpoint_access, "endpointAccess"),
    ):
        if value not in choices(key):
            raise ValueError(f"RayEksCluster {prop} must be one of {', '.join(choices(key))}, got {value!r}")
    check_type("RayEksCluster system_node_count", system_node_count, int, "a whole number")
    check_type("RayEksCluster system_root_volume_gib", system_root_volume_gib, int, "a whole number")
    check_bounds("RayEksCluster system_node_count", system_node_count, "systemNodeCount")
    check_bounds("RayEksCluster system_root_volume_gib", system_root_volume_gib, "systemRootVolumeGib")
    check_node_selector("RayEksCluster system_node_selector", system_node_selector)
    if system_instance_type in catalog.SYSTEM_INSTANCES:
        # The Ray head and the job's submitter run on the system nodes: a type they do not fit fails here.
        try:
            catalog.head_pod_resources(catalog.system_instance(system_instance_type))
        except catalog.CatalogError as error:
            raise ValueError(f"RayEksCluster system_instance_type {error}") from None


class RayEksCluster(Construct):
    """An EKS cluster (aws_eks_v2) for Ray: control-plane logs on (into an encrypted log group with a retention),
    secrets envelope-encrypted with a rotated KMS key, a kubectl provider matching the Kubernetes version, cluster-admin
    access entries for `admin_principal_arns`, a managed system node group labelled `system_node_selector` with
    an encrypted gp3 root volume and IMDSv2 at hop limit 1, and the VPC CNI managed add-on with network policies
    enforced (the workload's NetworkPolicies are its security model; EKS's own VPC CNI stores them and ignores them).

    Bring your own `vpc` to embed it in a platform repository; GPU capacity is added by `EfaGpuNodegroup`. `logs`
    holds the stack's log groups; without one the construct makes its own.

    Wiring attributes:
      `cluster_name` and `kubernetes_version` as given (literals: the system nodes' job guard, which comes before
      the cluster, names it so); `cluster` the cluster as eks.ICluster (every other construct's `cluster=`, and aws-cdk-lib's); `eks_cluster`
      the same cluster as its eks.Cluster class (its `role`, `add_nodegroup_capacity`...); `system_nodegroup` the system eks.Nodegroup
      (KubeRayOperator finds it by its labels); `vpc_cni` the VpcCniAddon, None with `network_policy=False`;
      `kubectl_layer` the kubectl/helm Lambda layer; `logs` the StackLogs (pass it on as `logs=`); `secrets_key`
      the KMS key of Kubernetes secrets; `admin_access` the ClusterAdminAccess of `admin_principal_arns`;
      `node_monitoring_agent` the NodeMonitoringAgent add-on, None with `node_monitoring_agent=False`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        cluster_name: str = default("clusterName"),
        kubernetes_version: str = default("kubernetesVersion"),
        endpoint_access: str = default("endpointAccess"),
        public_access_cidrs: Sequence[str] = default("publicAccessCidrs"),
        admin_principal_arns: Sequence[str] = (),
        system_instance_type: str = default("systemInstanceType"),
        system_node_count: int = default("systemNodeCount"),
        system_root_volume_gib: int = default("systemRootVolumeGib"),
        system_node_selector: Mapping[str, str] = default("systemNodeSelector"),
        image: str | None = None,
        logs: StackLogs | None = None,
        log_retention_days: int = default("logRetentionDays"),
        network_policy: bool = True,
        node_repair: bool = default("nodeRepair"),
        node_monitoring_agent: bool = default("nodeMonitoringAgent"),
        cluster_creator_admin: bool = default("clusterCreatorAdmin"),
    ) -> None:
        """
        :param vpc: the VPC; the cluster and its system nodes use its private subnets (PRIVATE_WITH_EGRESS).
        :param cluster_name: the EKS cluster's name. @default "ray-train"
        :param kubernetes_version: one of KUBERNETES_VERSIONS (the kubectl layer matches it). @default "1.36"
        :param endpoint_access: public_and_private, private or public. @default "public_and_private"
        :param public_access_cidrs: who reaches the public endpoint. @default ("0.0.0.0/0",)
        :param admin_principal_arns: IAM principals that get cluster-admin access entries. @default - none
        :param system_instance_type: instance type of the system nodes. @default "m7i.xlarge"
        :param system_node_count: system nodes. @default 1
        :param system_root_volume_gib: their encrypted gp3 root volume, GiB. @default 100
        :param system_node_selector: the system nodes' labels (what the operator and the Ray head select).
            @default {"role": "system"}
        :param image: the image the Ray head runs, to check that the root volume holds it. @default - not checked
        :param logs: the stack's log groups. @default - a StackLogs of this construct
        :param log_retention_days: retention of the control-plane logs when `logs` is not given. @default 365
        :param network_policy: install the `vpc-cni` managed add-on with network policy enforcement (it takes over
            the VPC CNI EKS installed). False when your platform manages the VPC CNI (or another CNI that enforces
            NetworkPolicies) itself; without enforcement the workload's NetworkPolicies are stored and ignored.
            @default True
        :param node_repair: EKS node auto repair (NodeRepairConfig) on the system node group (EfaGpuNodegroup has
            its own). @default True
        :param node_monitoring_agent: install the `eks-node-monitoring-agent` add-on (NodeMonitoringAgent), whose
            node conditions node auto repair acts on. @default True
        :param cluster_creator_admin: its creator keeps cluster-admin (True for a cluster made before the prop). @default False
        """
        super().__init__(scope, construct_id)
        _check_props(
            kubernetes_version,
            endpoint_access,
            system_instance_type,
            system_node_count,
            system_root_volume_gib,
            system_node_selector,
        )
        # each value checked as its setting is (one function for both): a lone string is an error, not its letters
        public_access_cidrs = check_strings("RayEksCluster public_access_cidrs", public_access_cidrs, cidr_problem)
        if endpoint_access == "public" and tuple(public_access_cidrs) != ("0.0.0.0/0",):
            raise ValueError(
                f"RayEksCluster public_access_cidrs must be ('0.0.0.0/0',) with endpoint_access 'public', got "
                f"{tuple(public_access_cidrs)!r}: the nodes reach a public-only endpoint from the internet; restrict it "
                "with endpoint_access 'public_and_private'"
            )
        admin_principal_arns = check_strings(
            "RayEksCluster admin_principal_arns", admin_principal_arns, admin_arn_problem
        )
        self.cluster_name: str = cluster_name
        """The cluster's name as given (a literal, where `cluster.cluster_name` is a reference to the cluster)."""
        self.kubernetes_version: str = kubernetes_version
        """The control plane's and the system nodes' Kubernetes version."""
        self.system_instance_type: str = system_instance_type
        """The system nodes' instance type (RayTrainingJob sizes the Ray head to fit it)."""
        self.system_node_selector: dict[str, str] = dict(system_node_selector)
        """The system nodes' labels (KubeRayOperator and the Ray head select them)."""
        if image is not None:
            # The system nodes run the Ray head and the job submitter: both pull the training image.
            check_root_volume("system_root_volume_gib", system_root_volume_gib, image)
        if endpoint_access != "private" and "0.0.0.0/0" in public_access_cidrs:
            self._warn_open_endpoint(cluster_name)
        self.logs: StackLogs = logs or StackLogs(self, "Logs", retention_days=log_retention_days)

        self.secrets_key: kms.Key = kms.Key(
            self,
            "SecretsKey",
            enable_key_rotation=True,
            description=f"Envelope encryption of Kubernetes secrets of EKS cluster {cluster_name}",
            # The key encrypts only this cluster's secrets: it goes with the cluster (deleted after a 7-day wait).
            removal_policy=RemovalPolicy.DESTROY,
            pending_window=Duration.days(7),
        )
        # EKS writes control-plane logs to /aws/eks/<name>/cluster and creates that group, never expiring and outside
        # the stack, unless it exists: the stack creates it first.
        self.control_plane_logs: aws_logs.LogGroup = self.logs.log_group(
            self, "ControlPlaneLogs", name=f"/aws/eks/{cluster_name}/cluster"
        )
        self.kubectl_layer: lambda_.LayerVersion = kubectl_layer(self, kubernetes_version)
        self.eks_cluster: eks.Cluster = self._eks_cluster(
            vpc, cluster_name, kubernetes_version, endpoint_access, public_access_cidrs, cluster_creator_admin
        )
        # The same cluster, typed as the eks.ICluster that every construct (this project's and aws-cdk-lib's) takes.
        # It is one: in TypeScript Cluster implements ICluster, but ICluster's optional kubectlProviderOptions is not
        # a member of Cluster (TypeScript lets a class omit an optional interface member, a Python Protocol does
        # not), so to pyright the jsii stub of Cluster (aws-cdk-lib 2.275) does not match the protocol. Typed here
        # once, so that `cluster=ray.cluster` type-checks wherever a platform passes it.
        self.cluster: eks.ICluster = cast(eks.ICluster, self.eks_cluster)
        self.admin_access: ClusterAdminAccess = ClusterAdminAccess(
            self, "AdminAccess", cluster=self.cluster, principal_arns=tuple(admin_principal_arns)
        )

        self.system_nodegroup: eks.Nodegroup = self._system_nodes(
            f"{cluster_name}-system",
            system_instance_type,
            system_node_count,
            system_node_selector,
            system_root_volume_gib,
            kubernetes_version,
            node_repair,
        )
        self.node_monitoring_agent: NodeMonitoringAgent | None = (
            NodeMonitoringAgent(self, "NodeMonitoringAgent", cluster=self.cluster) if node_monitoring_agent else None
        )
        self.vpc_cni: VpcCniAddon | None = VpcCniAddon(self, "VpcCni", cluster=self.cluster) if network_policy else None
        self._system_role_policies: tuple[str, ...] = self._system_node_role()
        self._adopt_provider_logs()
        self._acknowledge_findings()

    def _system_node_role(self) -> tuple[str, ...]:
        """The system node role's AWS managed policies, set on it: without AmazonEKS_CNI_Policy where the vpc-cni
        add-on has a role of its own (infra.vpc_cni), and only after it does; a CNI the platform manages
        (network_policy False) may still rely on the node role's."""
        if self.vpc_cni is None:
            policies = (*NODE_ROLE_POLICIES, CNI_POLICY)
        else:
            policies = NODE_ROLE_POLICIES
            self.system_nodegroup.role.node.add_dependency(self.vpc_cni)
        node_role_policies(self.system_nodegroup, policies)
        return policies

    def _warn_open_endpoint(self, cluster_name: str) -> None:
        """EKS best practices (cluster endpoint access): a public endpoint open to the internet is reachable by anyone
        (authentication still applies); say so at synth, where the platform can still narrow it."""
        Annotations.of(self).add_warning_v2(
            "ray-efa:publicEndpointOpen",
            f"The EKS API endpoint of {cluster_name} is public to 0.0.0.0/0: set publicAccessCidrs (cluster "
            "settings) / public_access_cidrs to your networks, or endpointAccess private",
        )

    def _eks_cluster(
        self,
        vpc: ec2.IVpc,
        cluster_name: str,
        kubernetes_version: str,
        endpoint_access: str,
        public_access_cidrs: Sequence[str],
        cluster_creator_admin: bool,
    ) -> eks.Cluster:
        """The EKS cluster itself, created after its control-plane log group, with no capacity of its own.

        `cluster_creator_admin` False: the principal that creates the cluster (CloudFormation's execution role) gets
        no cluster-admin access entry; the stack's own Kubernetes objects are applied by the kubectl provider's role,
        which has an access entry of its own (aws_eks_v2 ClusterAdminRoleAccess). EKS sets this once, at creation
        (AWS::EKS::Cluster AccessConfig.BootstrapClusterCreatorAdminPermissions, "Update requires: Replacement":
        https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-eks-cluster-accessconfig.html),
        so True leaves the property out of the template, as it was before the prop existed: a cluster deployed then
        keeps its template and is not replaced."""
        cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            version=_kubernetes_version(kubernetes_version),
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)],
            endpoint_access=_endpoint_access(endpoint_access, tuple(public_access_cidrs)),
            cluster_logging=list(CONTROL_PLANE_LOG_TYPES),
            secrets_encryption_key=self.secrets_key,
            # Node groups are ours (system + GPU), not EKS Auto Mode's.
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=self.kubectl_layer),
            # None: the property left out (EKS's default, true), as a cluster created before the prop has it.
            bootstrap_cluster_creator_admin_permissions=None if cluster_creator_admin else False,
        )
        cluster.node.add_dependency(self.control_plane_logs)
        return cluster

    def _system_nodes(
        self,
        system_name: str,
        system_instance_type: str,
        system_node_count: int,
        system_node_selector: Mapping[str, str],
        root_volume_gib: int,
        kubernetes_version: str,
        node_repair: bool,
    ) -> eks.Nodegroup:
        """The system node group on its launch template (`system_launch_template`), following the cluster's version,
        with node auto repair as `node_repair` says."""
        self.system_launch_template: SystemNodeLaunchTemplate = SystemNodeLaunchTemplate(
            self, "SystemLaunchTemplate", root_volume_gib=root_volume_gib, name=system_name
        )
        nodegroup = self._system_nodegroup(system_name, system_instance_type, system_node_count, system_node_selector)
        # Upgraded with the control plane: the node group's Version is the cluster's (CloudFormation updates the
        # cluster first: the node group refers to it).
        follow_kubernetes_version(nodegroup, kubernetes_version)
        enable_node_repair(nodegroup, node_repair)
        return nodegroup

    def _system_nodegroup(
        self,
        system_name: str,
        system_instance_type: str,
        system_node_count: int,
        system_node_selector: Mapping[str, str],
    ) -> eks.Nodegroup:
        """The managed system node group (the operator, the Ray head, the submitter) on its launch template."""
        return self.eks_cluster.add_nodegroup_capacity(
            "SystemNodes",
            # The instance type in the name: EKS cannot change a node group's instance types, so a new type replaces
            # the node group, and CloudFormation replaces a custom-named resource only under a new name (the new
            # group is created, the operator and the Ray head move to it, then the old one is deleted).
            nodegroup_name=nodegroup_name("RayEksCluster cluster_name", system_name, system_instance_type),
            # The disk size lives in the launch template: EKS refuses a node group with both (so does aws-cdk-lib).
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.system_launch_template.launch_template_id,
                version=self.system_launch_template.latest_version,
            ),
            instance_types=[ec2.InstanceType(system_instance_type)],
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            min_size=system_node_count,
            desired_size=system_node_count,
            max_size=system_node_count,
            labels=dict(system_node_selector),
            subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            # The Ray head runs here under a PodDisruptionBudget (k8s.workload): a drain it blocks fails the update
            # rather than killing the job (ForceUpdateEnabled, AWS::EKS::Nodegroup).
            force_update=False,
        )

    @classmethod
    def from_settings(
        cls, scope: Construct, construct_id: str, settings: Settings, *, vpc: ec2.IVpc, logs: StackLogs | None = None
    ) -> RayEksCluster:
        """The cluster of the project's own app, from the cluster and node settings."""
        cluster, nodes = settings.cluster, settings.nodes
        # Checked here too, so that the error names the setting rather than the prop.
        check_root_volume("systemRootVolumeGib", nodes.system_root_volume_gib, settings.workload.dlc_image)
        return cls(
            scope,
            construct_id,
            vpc=vpc,
            cluster_name=cluster.cluster_name,
            kubernetes_version=cluster.kubernetes_version,
            endpoint_access=cluster.endpoint_access,
            public_access_cidrs=cluster.public_access_cidrs,
            cluster_creator_admin=cluster.cluster_creator_admin,
            admin_principal_arns=cluster.admin_principal_arns,
            system_instance_type=nodes.system_instance_type,
            system_node_count=nodes.system_node_count,
            system_root_volume_gib=nodes.system_root_volume_gib,
            system_node_selector=nodes.system_node_selector,
            image=settings.workload.dlc_image,
            logs=logs,
            log_retention_days=cluster.log_retention_days,
            node_repair=nodes.node_repair,
            node_monitoring_agent=nodes.node_monitoring_agent,
        )

    def _adopt_provider_logs(self) -> None:
        """With the feature flag @aws-cdk/aws-lambda:useCdkManagedLogGroup (cdk.json sets it), aws-lambda gives the
        kubectl provider's functions log groups that it retains (RETAIN, two years): put them under the stack's
        retention, key and lifecycle. Without the flag Lambda creates them on first write, outside the stack."""
        assert self.eks_cluster.kubectl_provider is not None  # a Cluster given kubectl_provider_options has one
        provider = self.eks_cluster.kubectl_provider.node
        groups = []
        for function in (
            provider.find_child("Handler"),
            provider.find_child("Provider").node.find_child("framework-onEvent"),
        ):
            group = function.node.try_find_child("LogGroup")
            if isinstance(group, logs.LogGroup):
                self.logs.adopt(cast(logs.CfnLogGroup, group.node.default_child))
                groups.append(group)
        # The functions also run when `cdk destroy` deletes the charts and manifests: their log groups must go after
        # those, or Lambda would recreate them, unmanaged, while the stack is being deleted.
        Aspects.of(Stack.of(self)).add(_AfterLogGroups(tuple(groups)))

    def _acknowledge_findings(self) -> None:
        cluster = self.eks_cluster
        acknowledge_managed_policies(
            cluster.role,
            ("AmazonEKSClusterPolicy",),
            "EKS requires AmazonEKSClusterPolicy on the cluster role; AWS keeps it in step with the EKS API.",
        )
        acknowledge_managed_policies(
            self.system_nodegroup.role,
            self._system_role_policies,
            "EKS requires these AWS managed policies on managed node group roles (worker node, ECR pulls).",
        )
        # The kubectl provider (Lambda functions that run kubectl/helm for the stack) is built by aws-eks-v2 itself.
        assert cluster.kubectl_provider is not None  # a Cluster given kubectl_provider_options has one
        provider = cluster.kubectl_provider.node
        handler_role = provider.find_child("Handler").node.find_child("ServiceRole")
        on_event_role = (
            provider.find_child("Provider").node.find_child("framework-onEvent").node.find_child("ServiceRole")
        )
        lambda_reason = (
            "aws-eks-v2's kubectl provider Lambda runs in the VPC; AWS managed execution policies for "
            "logs, ENIs and pulling its kubectl image are what the construct library attaches."
        )
        for role in (handler_role, on_event_role):
            acknowledge_managed_policies(
                role,
                ("service-role/AWSLambdaBasicExecutionRole", "service-role/AWSLambdaVPCAccessExecutionRole"),
                lambda_reason,
            )
        acknowledge_managed_policies(handler_role, ("AmazonEC2ContainerRegistryReadOnly",), lambda_reason)
        # Logical ids depend on where this construct sits, so read them instead of hard-coding them.
        handler = provider.find_child("Handler")
        stack = Stack.of(self)
        has_ecr_public = stack.get_logical_id(cast(CfnElement, handler.node.find_child("HasEcrPublic")))
        handler_function = stack.get_logical_id(cast(CfnElement, handler.node.find_child("Resource")))
        acknowledge(
            handler_role,
            "AwsSolutions-IAM4",
            lambda_reason,
            (
                f'Policy::{{"Fn::If":["{has_ecr_public}",{{"Fn::Join":["",["arn:",{{"Ref":"AWS::Partition"}},'
                '":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}'
            ),
        )
        acknowledge(
            handler,
            "AwsSolutions-L1",
            "The kubectl handler's runtime is pinned by aws-eks-v2 to what its bundled kubectl/helm support.",
        )
        acknowledge(
            on_event_role.node.find_child("DefaultPolicy"),
            "AwsSolutions-IAM5",
            "The custom-resource framework may invoke any version of its own handler function (Arn:*), nothing else.",
            f"Resource::<{handler_function}.Arn>:*",
        )
        functions = (
            handler.node.find_child("Resource"),
            provider.find_child("Provider").node.find_child("framework-onEvent").node.find_child("Resource"),
        )
        for function in functions:
            for check, why in (
                ("CKV_AWS_115", "CloudFormation calls it once per custom resource change, so concurrency is bounded"),
                ("CKV_AWS_116", "CloudFormation is the caller and reports a failed call; a DLQ would hold nothing"),
                ("CKV_AWS_173", "its environment holds the cluster name and endpoint flags, no secrets"),
            ):
                skip_checkov(
                    function, check, f"aws-eks-v2's kubectl provider function, built by the construct library: {why}."
                )


@jsii.implements(IAspect)
class _AfterLogGroups:
    """Makes every Kubernetes custom resource of aws-eks-v2 in the stack depend on the kubectl provider's log groups."""

    def __init__(self, groups: tuple[logs.LogGroup, ...]) -> None:
        self._groups = groups

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, CfnResource) and node.cfn_resource_type.startswith("Custom::AWSCDK-EKS-"):
            for group in self._groups:
                node.node.add_dependency(group)
