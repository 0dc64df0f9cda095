"""A deploy that would kill a running RayJob fails before anything changes, unless the user says it may.

`ray-efa deploy-check` is advisory: `npx cdk deploy --all` never runs it. This custom resource sits in the deploy
path itself. Its properties are what rolls or resizes the GPU nodes (infra.gpu_stack.gpu_nodes_roll_key, the node
count, the capacity type) and a hash of the RayJob's manifest; the GPU node group and the RayJob's manifest depend on
it, so CloudFormation updates it first whenever one of them is about to change. Its handler
(infra/job_guard_handler.py) then asks the API server for the cluster's RayJobs and fails the update while one is
active, naming it and `-c allowJobDisruption=true`: CloudFormation rolls back with the node group and the job
untouched. A Capacity Block's node group rolled with nodes up is refused too, override or not (EKS updates it only
at desired size 0).

It never refuses CloudFormation's rollback of a failed update (its stack UPDATE_ROLLBACK_IN_PROGRESS, which the
handler reads with DescribeStacks on this stack alone): every refusal, and every later failure, can be rolled back.

It runs as its own role, in the VPC placement of the cluster's kubectl provider, with no layer: the handler gets an
EKS token from STS with boto3 and lists RayJobs over HTTPS. So nothing it uses changes value when the cluster stack's
kubectl layer does (a Kubernetes version, a new layer package): CloudFormation refuses to change an export another
stack imports.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import CustomResource, Duration, IStableStringProducer, Lazy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs_
from constructs import Construct

from ray_efa.infra.gpu_nodegroup import EfaGpuNodegroup
from ray_efa.infra.job_guard_handler import FUNCTION_TIMEOUT_S, JOB_GUARD_RESOURCE_TYPE, SERVICE_TIMEOUT_S
from ray_efa.infra.log_groups import StackLogs
from ray_efa.infra.manifests import apply_objects
from ray_efa.infra.nag import acknowledge, acknowledge_managed_policies, skip_checkov

__all__ = ["JobDisruptionGuard", "JOB_GUARD_RESOURCE_TYPE", "job_guard_rbac", "roll_digest", "roll_key"]

_HANDLER = "job_guard_handler"


@jsii.implements(IStableStringProducer)
class _RollDigest:
    """A digest of everything of `nodes` that, changed, replaces or evicts what runs on them, produced at synthesis
    (after every construct and aspect has set it): the launch template's data as CloudFormation gets it (a new
    version rolls every node: instance type, volumes, network interfaces, placement, reservation, market), the
    placement group's own properties (its replacement is a new group name under the same Ref), the node group's
    AMI type, version, release version and taints (a NoExecute taint evicts pods that do not tolerate it)."""

    def __init__(self, nodes: EfaGpuNodegroup) -> None:
        self._nodes = nodes

    def produce(self) -> str:
        nodegroup = self._nodes.nodegroup.node.default_child
        assert isinstance(nodegroup, eks.CfnNodegroup)
        placement = self._nodes.placement_group.node.default_child if self._nodes.placement_group else None
        parts: list[Any] = [
            self._nodes.launch_template.launch_template_data,
            nodegroup.ami_type,
            nodegroup.version,
            nodegroup.release_version,
            nodegroup.taints,
        ]
        if isinstance(placement, ec2.CfnPlacementGroup):
            parts += [
                placement.strategy,
                placement.spread_level,
                placement.partition_count,
                placement.tags.render_tags(),
            ]
        resolved = Stack.of(self._nodes).resolve(parts)
        return hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:16]


def roll_digest(nodes: EfaGpuNodegroup) -> str:
    """The guard's RollDigest property of `nodes` (a token resolved at synthesis)."""
    return Lazy.string(_RollDigest(nodes))


def roll_key(nodes: EfaGpuNodegroup) -> str:
    """What, changed, rolls the GPU nodes (the node count aside: a resize is its own property)."""
    return (
        f"gpuInstanceType={nodes.instance_type} gpuAvailabilityZone={nodes.availability_zone} "
        f"gpuRootVolumeGib={nodes.root_volume_gib} capacityReservationId={nodes.capacity_reservation_id or 'none'} "
        f"capacityType={nodes.capacity_type} kubernetesVersion={nodes.kubernetes_version or 'unchanged'}"
    )


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
    """Fails a deploy that rolls or resizes `gpu_nodes`, or changes or deletes `job`, while a RayJob of the cluster is
    active (unless `allow`), and any roll of a Capacity Block's node group with nodes up; never CloudFormation's
    rollback.

    Everything it needs is its own, in its own stack: a function role whose EKS access entry (Kubernetes group
    `<stack>-job-guard`) may list RayJobs and nothing else (a ClusterRole of that name), DescribeCluster on the
    cluster and DescribeStacks on its stack. It imports no layer: what the other stack exports for it (the cluster's
    name and ARN, its subnets and security group) keeps its value across a Kubernetes version or layer upgrade.

    Call `guard(construct)` on what must wait for it (the node group and the job's manifests are guarded already).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        gpu_nodes: EfaGpuNodegroup,
        job: eks.KubernetesManifest | None = None,
        job_object: Mapping[str, Any] | None = None,
        job_name: str | None = None,
        namespace: str = "ray",
        allow: bool = False,
        logs: StackLogs | None = None,
    ) -> None:
        """
        :param cluster: the EKS cluster, with a kubectl provider (it applies the guard's RBAC objects; the guard runs
            in the VPC placement of that provider's function when this app built it).
        :param gpu_nodes: the GPU node group whose rolls and resizes are guarded (it is made to wait for the guard).
        :param job: the RayJob's manifest the stack applies (made to wait for the guard). @default - no job
        :param job_object: the RayJob object `job` applies, whose hash is a property. @default - none
        :param job_name: the RayJob's name, for the messages. @default - none
        :param namespace: the RayJob's namespace, for the messages. @default "ray"
        :param allow: let the deploy disrupt a running job (setting allowJobDisruption). @default False
        :param logs: the stack's log groups, for the function's. @default - the function's default log group
        """
        super().__init__(scope, construct_id)
        provider = eks.KubectlProvider.get_kubectl_provider(self, cluster)
        if provider is None:
            raise ValueError(
                f"{type(self).__name__} needs a kubectl provider of the cluster (RayEksCluster, or "
                "import_cluster) to apply its RBAC objects"
            )
        kubectl_handler = provider.node.try_find_child("Handler")
        vpc_config = None
        if isinstance(kubectl_handler, lambda_.Function):
            kubectl_function = kubectl_handler.node.default_child
            assert isinstance(kubectl_function, lambda_.CfnFunction)
            vpc_config = kubectl_function.vpc_config  # where the cluster's private endpoint is reachable
        self.function: lambda_.Function = lambda_.Function(
            self,
            "Function",
            description="Fails a deploy that would roll the GPU nodes or change the RayJob while a RayJob runs",
            runtime=lambda_.Runtime.determine_latest_python_runtime(self),
            handler=f"{_HANDLER}.handler",
            code=lambda_.Code.from_asset(str(Path(__file__).parent), exclude=["*", f"!{_HANDLER}.py"]),
            timeout=Duration.seconds(FUNCTION_TIMEOUT_S),
            memory_size=256,
        )
        cfn_function = self.function.node.default_child
        assert isinstance(cfn_function, lambda_.CfnFunction)
        cfn_function.vpc_config = vpc_config
        role = self.function.role
        assert isinstance(role, iam.Role)
        self._grant(role, cluster, provider_in_vpc=vpc_config is not None)
        self.rbac: list[eks.KubernetesManifest] = apply_objects(self, cluster, job_guard_rbac(self.group))
        job_hash = "none"
        if job_object is not None:
            # The object as CloudFormation gets it (tokens resolved to intrinsics: the same from synth to synth).
            resolved = Stack.of(self).resolve(dict(job_object))
            job_hash = hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:16]
        self.resource: CustomResource = CustomResource(
            self,
            "Resource",
            service_token=self.function.function_arn,
            resource_type=JOB_GUARD_RESOURCE_TYPE,
            service_timeout=Duration.seconds(SERVICE_TIMEOUT_S),
            properties={
                "ClusterName": cluster.cluster_name,
                "RollKey": roll_key(gpu_nodes),
                "RollDigest": roll_digest(gpu_nodes),
                "NodeCount": str(gpu_nodes.node_count),
                "CapacityType": gpu_nodes.capacity_type,
                "JobHash": job_hash,
                "JobName": job_name or "none",
                "Namespace": namespace,
                "AllowJobDisruption": "true" if allow else "false",
            },
        )
        # Its access to the cluster exists before CloudFormation first asks it.
        for what in (self.access_entry, *self.rbac):
            self.resource.node.add_dependency(what)
        group = self.function.node.try_find_child("LogGroup")
        if isinstance(group, logs_.LogGroup):
            if logs is not None:
                logs.adopt(group.node.default_child)  # type: ignore[arg-type]
            self.resource.node.add_dependency(group)
        self.guard(gpu_nodes.nodegroup)
        if job is not None:
            self.guard(job)
        self._acknowledge_findings(in_vpc=vpc_config is not None)

    @property
    def group(self) -> str:
        """The Kubernetes group (and ClusterRole) of the guard's access entry: one per stack."""
        return f"{Stack.of(self).stack_name}-job-guard"

    def _grant(self, role: iam.Role, cluster: eks.ICluster, *, provider_in_vpc: bool) -> None:
        """The role's rights: its stack's status, the cluster's endpoint and CA, RayJobs (an access entry whose group
        the RBAC objects bind), the network interfaces of a function in a VPC."""
        # The handler tells CloudFormation's rollback from a deploy by its stack's status: this stack alone.
        role.add_to_policy(
            iam.PolicyStatement(actions=["cloudformation:DescribeStacks"], resources=[Stack.of(self).stack_id])
        )
        role.add_to_policy(iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[cluster.cluster_arn]))
        if provider_in_vpc:
            role.add_managed_policy(
                iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaVPCAccessExecutionRole")
            )
        self.access_entry: eks_l1.CfnAccessEntry = eks_l1.CfnAccessEntry(
            self,
            "Access",
            cluster_name=cluster.cluster_name,
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
            ("CKV_AWS_115", "CloudFormation calls it once per update of the GPU nodes or the RayJob"),
            ("CKV_AWS_116", "CloudFormation is the caller and reports a failed call; a DLQ would hold nothing"),
        ]
        if not in_vpc:
            checks.append(("CKV_AWS_117", "it runs where the kubectl provider runs, and that one is outside the VPC"))
        for check, why in checks:
            skip_checkov(self.function, check, f"Guards running RayJobs at deploy time: {why}.")

    def guard(self, construct: Construct) -> None:
        """Make `construct` wait for the guard: CloudFormation updates the guard first, and a refusal rolls back."""
        construct.node.add_dependency(self.resource)
