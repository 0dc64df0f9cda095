"""A deploy that would kill a running RayJob fails before anything changes, unless the user says it may.

`ray-efa deploy-check` is advisory: `npx cdk deploy --all` never runs it. This custom resource sits in the deploy
path itself, once per node group that runs a RayJob's pods: in the GPU stack for the GPU nodes (the Ray workers), in
the cluster stack for the system nodes (the Ray heads). Its properties are what rolls the nodes (a roll key of the
settings that do, a digest of the node group and its launch template: `_RollDigest`), in the GPU stack also the
node count, the capacity type and a hash of the RayJob's manifest; what it guards depends on it, so CloudFormation
updates it first whenever one of them is about to change ("Resource B is updated before resource A", CloudFormation
User Guide, aws-attribute-dependson). Its handler (infra/job_guard_handler.py) then asks the API server for the
cluster's RayJobs and fails the update while one is active, naming it and `-c allowJobDisruption=true`:
CloudFormation rolls back with the node group and the job untouched. A Capacity Block's node group rolled with nodes
up is refused too, override or not (EKS updates it only at desired size 0).

The system nodes' guard comes before the cluster itself: a kubernetesVersion change updates the control plane before
the node group (the node group refers to the cluster), and EKS has no UpdateClusterVersion back to a lower version, so
a refusal after the control plane's update would end in a rollback that fails. The cluster and the system node group
depend on that guard, and the guard on nothing the cluster creates: the cluster's name is the literal it is created
under, its ARN is built (Stack.format_arn), the handler reads endpoint and CA at run time (DescribeCluster: a cluster
not there yet, or no more, runs no job), and it runs in the VPC with a security group of its own. Its access entry and
RBAC objects come after the cluster; on Create (the cluster does not exist yet) the guard asks nothing.

It never refuses CloudFormation's rollback of a failed update (its stack UPDATE_ROLLBACK_IN_PROGRESS, which the
handler reads with DescribeStacks on this stack alone): every refusal, and every later failure, can be rolled back.

It runs as its own role, where the cluster's kubectl provider runs (in the VPC when the endpoint is private or both),
with no layer: the handler gets an EKS token from STS with boto3 and lists RayJobs over HTTPS. So nothing it uses
changes value when the cluster stack's kubectl layer does (a Kubernetes version, a new layer package): CloudFormation
refuses to change an export another stack imports.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import Annotations, CfnResource, CustomResource, Duration, IStableStringProducer, Lazy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs_
from constructs import Construct

from ray_efa.infra.cluster import RayEksCluster
from ray_efa.infra.gpu_nodegroup import EfaGpuNodegroup
from ray_efa.infra.job_guard_handler import (
    FUNCTION_TIMEOUT_S,
    JOB_GUARD_RESOURCE_TYPE,
    SERVICE_TIMEOUT_S,
    SYSTEM_NODES,
)
from ray_efa.infra.log_groups import StackLogs
from ray_efa.infra.manifests import apply_objects
from ray_efa.infra.nag import acknowledge, acknowledge_managed_policies, skip_checkov

__all__ = [
    "JobDisruptionGuard",
    "JOB_GUARD_RESOURCE_TYPE",
    "job_guard_rbac",
    "roll_digest",
    "roll_key",
    "system_roll_key",
]

_HANDLER = "job_guard_handler"


@dataclass(frozen=True, kw_only=True)
class _GuardedNodes:
    """What a guard's properties say of the node group it protects."""

    nodegroup: eks.Nodegroup
    launch_template: ec2.CfnLaunchTemplate | None
    roll_key: str
    """`setting=value` words of what rolls the nodes (the handler names those that change)."""
    placement_group: ec2.PlacementGroup | None = None
    node_count: int | None = None
    """None: a resize is no property (a scaling change never reaches the guard)."""
    capacity_type: str | None = None
    words: str | None = None
    """The nodes in the guard's messages (its Nodes property). @default - the handler's "GPU nodes" (no property)"""

    @classmethod
    def of_gpu(cls, nodes: EfaGpuNodegroup) -> _GuardedNodes:
        return cls(
            nodegroup=nodes.nodegroup,
            launch_template=nodes.launch_template,
            roll_key=roll_key(nodes),
            placement_group=nodes.placement_group,
            node_count=nodes.node_count,
            capacity_type=nodes.capacity_type,
        )

    @classmethod
    def of_system(cls, cluster: RayEksCluster) -> _GuardedNodes:
        return cls(
            nodegroup=cluster.system_nodegroup,
            launch_template=cluster.system_launch_template.launch_template,
            roll_key=system_roll_key(cluster),
            words=SYSTEM_NODES,
        )

    def properties(self) -> dict[str, str]:
        """The guard's properties of these nodes."""
        properties = {"RollKey": self.roll_key, "RollDigest": Lazy.string(_RollDigest(self))}
        if self.words is not None:
            properties["Nodes"] = self.words
        if self.node_count is not None:
            properties["NodeCount"] = str(self.node_count)
        if self.capacity_type is not None:
            properties["CapacityType"] = self.capacity_type
        return properties


@jsii.implements(IStableStringProducer)
class _RollDigest:
    """A digest of everything of `nodes` that, changed, replaces or evicts what runs on them, produced at synthesis
    (after every construct and aspect has set it): the launch template's data as CloudFormation gets it (a new
    version rolls every node: instance type, volumes, network interfaces, placement, reservation, market), the
    placement group's own properties (its replacement is a new group name under the same Ref), the node group's
    AMI type, version, release version, taints (a NoExecute taint evicts pods that do not tolerate it) and instance
    types where the node group names them (the system nodes'; the GPU type is in its launch template). Labels and
    scaling are not in it: EKS changes them in place."""

    def __init__(self, nodes: _GuardedNodes) -> None:
        self._nodes = nodes

    def produce(self) -> str:
        nodegroup = self._nodes.nodegroup.node.default_child
        assert isinstance(nodegroup, eks.CfnNodegroup)
        template = self._nodes.launch_template
        placement = self._nodes.placement_group.node.default_child if self._nodes.placement_group else None
        parts: list[Any] = [
            template.launch_template_data if template is not None else None,
            nodegroup.ami_type,
            nodegroup.version,
            nodegroup.release_version,
            nodegroup.taints,
        ]
        if nodegroup.instance_types is not None:  # (appended: the GPU nodes' digest is what it was before)
            parts.append(nodegroup.instance_types)
        if isinstance(placement, ec2.CfnPlacementGroup):
            parts += [
                placement.strategy,
                placement.spread_level,
                placement.partition_count,
                placement.tags.render_tags(),
            ]
        resolved = Stack.of(self._nodes.nodegroup).resolve(parts)
        return hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:16]


def roll_digest(nodes: EfaGpuNodegroup) -> str:
    """The guard's RollDigest property of `nodes` (a token resolved at synthesis)."""
    return Lazy.string(_RollDigest(_GuardedNodes.of_gpu(nodes)))


def roll_key(nodes: EfaGpuNodegroup) -> str:
    """What, changed, rolls the GPU nodes (the node count aside: a resize is its own property)."""
    return (
        f"gpuInstanceType={nodes.instance_type} gpuAvailabilityZone={nodes.availability_zone} "
        f"gpuRootVolumeGib={nodes.root_volume_gib} capacityReservationId={nodes.capacity_reservation_id or 'none'} "
        f"capacityType={nodes.capacity_type} kubernetesVersion={nodes.kubernetes_version or 'unchanged'}"
    )


def system_roll_key(cluster: RayEksCluster) -> str:
    """What, changed, rolls the system nodes: their instance type (a new node group) and the cluster's version (the
    node group follows it onto the new version's AMI). Their root volume is in the digest (the launch template)."""
    return f"systemInstanceType={cluster.system_instance_type} kubernetesVersion={cluster.kubernetes_version}"


def job_guard_rbac(name: str) -> list[dict[str, Any]]:
    """The RBAC objects of a guard whose access entry has Kubernetes group `name`: list RayJobs, nothing else."""
    meta = {
        "name": name,
        "labels": {"app.kubernetes.io/part-of": "ray-efa-stack", "app.kubernetes.io/component": "job-guard"},
    }
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": meta,
            "rules": [{"apiGroups": ["ray.io"], "resources": ["rayjobs"], "verbs": ["list"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}],
        },
    ]


class JobDisruptionGuard(Construct):
    """Fails a deploy that rolls or resizes `gpu_nodes` (or rolls the system nodes of `system_nodes`), or changes or
    deletes `job`, while a RayJob of the cluster is active (unless `allow`), and any roll of a Capacity Block's node
    group with nodes up; never CloudFormation's rollback.

    Everything it needs is its own, in its own stack: a function role whose EKS access entry (Kubernetes group
    `<stack>-job-guard`) may list RayJobs and nothing else (a ClusterRole of that name), DescribeCluster on the
    cluster and DescribeStacks on its stack. It imports no layer: what the other stack exports for it (the cluster's
    name and ARN, its subnets and security group) keeps its value across a Kubernetes version or layer upgrade.

    The system nodes' guard is updated before the cluster (see the module): the cluster and the system node group
    depend on it, and it on nothing the cluster creates. A cluster imported with import_cluster has no system node
    group of this app: it has no such guard.

    Call `guard(construct)` on what must wait for it (the node group, the job's manifests and, for the system nodes,
    the cluster are guarded already).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster | None = None,
        gpu_nodes: EfaGpuNodegroup | None = None,
        system_nodes: RayEksCluster | None = None,
        job: eks.KubernetesManifest | None = None,
        job_object: Mapping[str, Any] | None = None,
        job_name: str | None = None,
        namespace: str = "ray",
        allow: bool = False,
        logs: StackLogs | None = None,
    ) -> None:
        """
        :param cluster: the EKS cluster, with a kubectl provider (it applies the guard's RBAC objects; the guard runs
            in the VPC placement of that provider's function when this app built it). @default - `system_nodes`'
            cluster; required with `gpu_nodes`
        :param gpu_nodes: the GPU node group whose rolls and resizes are guarded (it is made to wait for the guard).
            @default - none: give this or `system_nodes`
        :param system_nodes: the cluster (of this app) whose system node group's rolls are guarded: the cluster and
            the node group are made to wait for the guard. @default - none: give this or `gpu_nodes`
        :param job: the RayJob's manifest the stack applies (made to wait for the guard). @default - no job
        :param job_object: the RayJob object `job` applies, whose hash is a property. @default - none
        :param job_name: the RayJob's name, for the messages. @default - none
        :param namespace: the RayJob's namespace, for the messages. @default "ray"
        :param allow: let the deploy disrupt a running job (setting allowJobDisruption). @default False
        :param logs: the stack's log groups, for the function's. @default - the function's default log group
        """
        super().__init__(scope, construct_id)
        cluster, nodes = self._check_props(cluster, gpu_nodes, system_nodes)
        self._ahead_of: RayEksCluster | None = system_nodes
        # (get_kubectl_provider makes its scope wait for the cluster's kubectl to be ready: not the system nodes' guard)
        provider = (
            system_nodes.eks_cluster.kubectl_provider
            if system_nodes is not None
            else eks.KubectlProvider.get_kubectl_provider(self, cluster)
        )
        if provider is None:
            raise ValueError(
                f"{type(self).__name__} needs a kubectl provider of the cluster (RayEksCluster, or "
                "import_cluster) to apply its RBAC objects"
            )
        self.function: lambda_.Function = lambda_.Function(
            self,
            "Function",
            description=(
                "Fails a deploy that would roll the GPU nodes or change the RayJob while a RayJob runs"
                if system_nodes is None
                else "Fails a deploy that would roll the system nodes (the Ray heads) while a RayJob runs"
            ),
            runtime=lambda_.Runtime.determine_latest_python_runtime(self),
            handler=f"{_HANDLER}.handler",
            code=lambda_.Code.from_asset(str(Path(__file__).parent), exclude=["*", f"!{_HANDLER}.py"]),
            timeout=Duration.seconds(FUNCTION_TIMEOUT_S),
            memory_size=256,
        )
        cfn_function = self.function.node.default_child
        assert isinstance(cfn_function, lambda_.CfnFunction)
        cfn_function.vpc_config = self._placement(provider)
        role = self.function.role
        assert isinstance(role, iam.Role)
        self._grant(role, cluster, provider_in_vpc=cfn_function.vpc_config is not None)
        self.rbac: list[eks.KubernetesManifest] = apply_objects(self, cluster, job_guard_rbac(self.group))
        properties = {"ClusterName": self.cluster_name(cluster), **nodes.properties()}
        if gpu_nodes is not None or job is not None:
            properties |= self._job_properties(job_object, job_name, namespace)
        self.resource: CustomResource = CustomResource(
            self,
            "Resource",
            service_token=self.function.function_arn,
            resource_type=JOB_GUARD_RESOURCE_TYPE,
            service_timeout=Duration.seconds(SERVICE_TIMEOUT_S),
            properties={**properties, "AllowJobDisruption": "true" if allow else "false"},
        )
        self._order(nodes, system_nodes)
        if allow:
            self._force_update(nodes)
        group = self.function.node.try_find_child("LogGroup")
        if isinstance(group, logs_.LogGroup):
            if logs is not None:
                logs.adopt(group.node.default_child)  # type: ignore[arg-type]
            self.resource.node.add_dependency(group)
        if job is not None:
            self.guard(job)
        self._acknowledge_findings(in_vpc=cfn_function.vpc_config is not None)

    def _check_props(
        self, cluster: eks.ICluster | None, gpu_nodes: EfaGpuNodegroup | None, system_nodes: RayEksCluster | None
    ) -> tuple[eks.ICluster, _GuardedNodes]:
        """The cluster and the guarded nodes of the props; ValueError naming the prop that is wrong."""
        name = type(self).__name__
        if (gpu_nodes is None) == (system_nodes is None):
            raise ValueError(f"{name} guards one node group: give gpu_nodes or system_nodes, not both or neither")
        if system_nodes is not None:
            if cluster is not None and cluster is not system_nodes.cluster:
                raise ValueError(f"{name} cluster must be system_nodes' own cluster (or left out)")
            return system_nodes.cluster, _GuardedNodes.of_system(system_nodes)
        assert gpu_nodes is not None
        if cluster is None:
            raise ValueError(f"{name} cluster is required with gpu_nodes")
        return cluster, _GuardedNodes.of_gpu(gpu_nodes)

    def _job_properties(
        self, job_object: Mapping[str, Any] | None, job_name: str | None, namespace: str
    ) -> dict[str, str]:
        """The properties of the stack's RayJob: its object's hash ("none": no job), name and namespace."""
        job_hash = "none"
        if job_object is not None:
            # The object as CloudFormation gets it (tokens resolved to intrinsics: the same from synth to synth).
            resolved = Stack.of(self).resolve(dict(job_object))
            job_hash = hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:16]
        return {"JobHash": job_hash, "JobName": job_name or "none", "Namespace": namespace}

    def _order(self, nodes: _GuardedNodes, system_nodes: RayEksCluster | None) -> None:
        """What waits for what. The GPU nodes' guard: its access exists before CloudFormation first asks it. The
        system nodes' guard: the cluster and the node group wait for it, and its access for the cluster (a Create,
        before the cluster exists, asks the cluster nothing; an Update finds the access there)."""
        if system_nodes is None:
            for what in (self.access_entry, *self.rbac):
                self.resource.node.add_dependency(what)
        else:
            cfn_cluster = system_nodes.eks_cluster.node.default_child
            assert isinstance(cfn_cluster, CfnResource)
            self.access_entry.add_dependency(cfn_cluster)
            self.guard(cfn_cluster)
        self.guard(nodes.nodegroup)

    def _force_update(self, nodes: _GuardedNodes) -> None:
        """allowJobDisruption: the node group's update may evict what the job's PodDisruptionBudget protects.

        With ForceUpdateEnabled false EKS fails an update whose drain a PodDisruptionBudget blocks (after its 15
        minutes of retries), and the budget of a running job (maxUnavailable 0) blocks every eviction: the override
        would pass the guard only to fail in EKS (and, for the system nodes, after the control plane's upgrade, whose
        rollback fails). So for the deploy that says so the node group's update is forced ("Force the update if any
        Pod on the existing node group can't be drained due to a Pod disruption budget issue", UpdateNodegroupVersion,
        EKS API reference); the next deploy without the override turns it off again (a property of the node group: no
        roll)."""
        nodegroup = nodes.nodegroup.node.default_child
        assert isinstance(nodegroup, eks.CfnNodegroup)
        nodegroup.force_update_enabled = True
        Annotations.of(self).add_info(self.force_message(nodes.words or "GPU nodes"))

    @staticmethod
    def force_message(words: str) -> str:
        """What a deploy with allowJobDisruption does to the node group of the nodes `words`."""
        return (
            f"allowJobDisruption: this deploy forces the update of the {words}' node group (ForceUpdateEnabled true): "
            "EKS evicts the Ray pods past the job's PodDisruptionBudget, and a running RayJob dies. Deploy "
            "without it afterwards: a RayJob of a later deploy is protected again"
        )

    @property
    def group(self) -> str:
        """The Kubernetes group (and ClusterRole) of the guard's access entry: one per stack."""
        return f"{Stack.of(self).stack_name}-job-guard"

    def cluster_name(self, cluster: eks.ICluster) -> str:
        """The cluster's name as the guard's properties and policies have it: the literal the system nodes' cluster is
        created under (no Ref: the guard comes before the cluster), else the cluster's own."""
        return self._ahead_of.cluster_name if self._ahead_of is not None else cluster.cluster_name

    def _placement(self, provider: eks.IKubectlProvider) -> lambda_.CfnFunction.VpcConfigProperty | None:
        """Where the function runs: where the kubectl provider's function does (in the VPC, where the cluster's
        private endpoint is reachable, or outside). The system nodes' guard cannot use that placement's security
        group (the cluster's: created with the cluster, after the guard): it has one of its own, HTTPS out only, and
        the cluster's security group lets it reach the endpoint."""
        kubectl_handler = provider.node.try_find_child("Handler")
        if not isinstance(kubectl_handler, lambda_.Function):
            return None
        kubectl_function = kubectl_handler.node.default_child
        assert isinstance(kubectl_function, lambda_.CfnFunction)
        if kubectl_function.vpc_config is None or self._ahead_of is None:
            return kubectl_function.vpc_config  # type: ignore[return-value]
        eks_cluster = self._ahead_of.eks_cluster
        security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=eks_cluster.vpc,
            description="ray-efa job guard function: HTTPS to the EKS endpoint and the AWS APIs",
            allow_all_outbound=False,
        )
        security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS: the EKS endpoint, AWS APIs, CloudFormation's response URL"
        )
        ec2.CfnSecurityGroupIngress(
            self,
            "EndpointIngress",
            group_id=eks_cluster.cluster_security_group_id,
            source_security_group_id=security_group.security_group_id,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            description="The job guard's function to the EKS API endpoint",
        )
        subnets = eks_cluster.vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnet_ids
        return lambda_.CfnFunction.VpcConfigProperty(
            security_group_ids=[security_group.security_group_id], subnet_ids=subnets
        )

    def _grant(self, role: iam.Role, cluster: eks.ICluster, *, provider_in_vpc: bool) -> None:
        """The role's rights: its stack's status, the cluster's endpoint and CA, RayJobs (an access entry whose group
        the RBAC objects bind), the network interfaces of a function in a VPC."""
        stack = Stack.of(self)
        # The handler tells CloudFormation's rollback from a deploy by its stack's status: this stack alone.
        role.add_to_policy(iam.PolicyStatement(actions=["cloudformation:DescribeStacks"], resources=[stack.stack_id]))
        cluster_arn = (
            stack.format_arn(service="eks", resource="cluster", resource_name=self.cluster_name(cluster))
            if self._ahead_of is not None
            else cluster.cluster_arn
        )
        role.add_to_policy(iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[cluster_arn]))
        if provider_in_vpc:
            role.add_managed_policy(
                iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaVPCAccessExecutionRole")
            )
        self.access_entry: eks_l1.CfnAccessEntry = eks_l1.CfnAccessEntry(
            self,
            "Access",
            cluster_name=self.cluster_name(cluster),
            principal_arn=role.role_arn,
            kubernetes_groups=[self.group],
            type="STANDARD",
        )
        acknowledge_managed_policies(
            role,
            ("service-role/AWSLambdaBasicExecutionRole", "service-role/AWSLambdaVPCAccessExecutionRole"),
            "AWS's execution policies of a Lambda function (its logs; its network interfaces in the VPC), as "
            "aws-cdk-lib attaches them to every function it creates.",
        )

    def _acknowledge_findings(self, *, in_vpc: bool) -> None:
        acknowledge(
            self.function,
            "AwsSolutions-L1",
            "The runtime is the latest Python runtime aws-cdk-lib deploys everywhere "
            "(Runtime.determine_latest_python_runtime), as aws-eks-v2's kubectl handler uses.",
        )
        checks = [
            ("CKV_AWS_115", "CloudFormation calls it once per update of the nodes it guards or the RayJob"),
            ("CKV_AWS_116", "CloudFormation is the caller and reports a failed call; a DLQ would hold nothing"),
        ]
        if not in_vpc:
            checks.append(("CKV_AWS_117", "it runs where the kubectl provider runs, and that one is outside the VPC"))
        for check, why in checks:
            skip_checkov(self.function, check, f"Guards running RayJobs at deploy time: {why}.")

    def guard(self, construct: Construct) -> None:
        """Make `construct` wait for the guard: CloudFormation updates the guard first, and a refusal rolls back."""
        construct.node.add_dependency(self.resource)
