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

It runs where the cluster's kubectl provider runs (its role, layers and VPC placement), as HelmChartCrds does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import CustomResource, Duration, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs_
from constructs import Construct

from ray_efa.infra.gpu_nodegroup import EfaGpuNodegroup
from ray_efa.infra.job_guard_handler import FUNCTION_TIMEOUT_S, SERVICE_TIMEOUT_S
from ray_efa.infra.log_groups import StackLogs
from ray_efa.infra.nag import acknowledge, skip_checkov

__all__ = ["JobDisruptionGuard", "JOB_GUARD_RESOURCE_TYPE", "roll_key"]

JOB_GUARD_RESOURCE_TYPE = "Custom::RayEfa-JobDisruptionGuard"
_HANDLER = "job_guard_handler"


def roll_key(nodes: EfaGpuNodegroup) -> str:
    """What, changed, rolls the GPU nodes (the node count aside: a resize is its own property)."""
    return (f"gpuInstanceType={nodes.instance_type} gpuAvailabilityZone={nodes.availability_zone} "
            f"gpuRootVolumeGib={nodes.root_volume_gib} capacityReservationId={nodes.capacity_reservation_id or 'none'} "
            f"capacityType={nodes.capacity_type} kubernetesVersion={nodes.kubernetes_version or 'unchanged'}")


class JobDisruptionGuard(Construct):
    """Fails a deploy that rolls or resizes `gpu_nodes`, or changes or deletes `job`, while a RayJob of the cluster is
    active (unless `allow`), and any roll of a Capacity Block's node group with nodes up.

    Call `guard(construct)` on what must wait for it (the node group and the job's manifests are guarded already).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, cluster: eks.ICluster, gpu_nodes: EfaGpuNodegroup,
        job: eks.KubernetesManifest | None = None, job_object: Mapping[str, Any] | None = None,
        job_name: str | None = None, namespace: str = "ray",
        allow: bool = False, logs: StackLogs | None = None,
    ) -> None:
        """
        :param cluster: the EKS cluster, with a kubectl provider of this app.
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
        kubectl_handler = provider.node.try_find_child("Handler") if provider is not None else None
        if not isinstance(kubectl_handler, lambda_.Function) or provider is None or provider.role is None:
            raise ValueError(f"{type(self).__name__} needs the cluster's kubectl provider built in this app "
                             "(RayEksCluster, or import_cluster with kubectl_role) to ask the API server for RayJobs")
        kubectl_function = kubectl_handler.node.default_child
        assert isinstance(kubectl_function, lambda_.CfnFunction)
        self.function: lambda_.Function = lambda_.Function(
            self, "Function",
            description="Fails a deploy that would roll the GPU nodes or change the RayJob while a RayJob runs",
            runtime=lambda_.Runtime.determine_latest_python_runtime(self),
            handler=f"{_HANDLER}.handler",
            code=lambda_.Code.from_asset(str(Path(__file__).parent), exclude=["*", f"!{_HANDLER}.py"]),
            timeout=Duration.seconds(FUNCTION_TIMEOUT_S), memory_size=512, role=provider.role,
            layers=[lambda_.LayerVersion.from_layer_version_arn(self, f"Layer{i}", str(arn))
                    for i, arn in enumerate(kubectl_function.layers or [])],
            environment={"AWS_STS_REGIONAL_ENDPOINTS": "regional"},
        )
        cfn_function = self.function.node.default_child
        assert isinstance(cfn_function, lambda_.CfnFunction)
        cfn_function.vpc_config = kubectl_function.vpc_config  # where the cluster's private endpoint is reachable
        job_hash = "none"
        if job_object is not None:
            # The object as CloudFormation gets it (tokens resolved to intrinsics: the same from synth to synth).
            resolved = Stack.of(self).resolve(dict(job_object))
            job_hash = hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:16]
        self.resource: CustomResource = CustomResource(
            self, "Resource", service_token=self.function.function_arn, resource_type=JOB_GUARD_RESOURCE_TYPE,
            service_timeout=Duration.seconds(SERVICE_TIMEOUT_S),
            properties={"ClusterName": cluster.cluster_name, "RollKey": roll_key(gpu_nodes),
                        "NodeCount": str(gpu_nodes.node_count), "CapacityType": gpu_nodes.capacity_type,
                        "JobHash": job_hash, "JobName": job_name or "none", "Namespace": namespace,
                        "AllowJobDisruption": "true" if allow else "false"},
        )
        # The handler tells CloudFormation's rollback from a deploy by its stack's status: DescribeStacks on this
        # stack alone (its id, AWS::StackId), before the guard is first asked.
        self.read_stack_status: iam.Policy = iam.Policy(self, "ReadStackStatus", statements=[iam.PolicyStatement(
            actions=["cloudformation:DescribeStacks"], resources=[Stack.of(self).stack_id])])
        self.read_stack_status.attach_to_role(provider.role)
        self.resource.node.add_dependency(self.read_stack_status)
        group = self.function.node.try_find_child("LogGroup")
        if isinstance(group, logs_.LogGroup):
            if logs is not None:
                logs.adopt(group.node.default_child)  # type: ignore[arg-type]
            self.resource.node.add_dependency(group)
        self.guard(gpu_nodes.nodegroup)
        if job is not None:
            self.guard(job)
        acknowledge(self.function, "AwsSolutions-L1",
                    "The runtime is the latest Python runtime aws-cdk-lib deploys everywhere "
                    "(Runtime.determine_latest_python_runtime), as aws-eks-v2's kubectl handler uses.")
        checks = [("CKV_AWS_115", "CloudFormation calls it once per update of the GPU nodes or the RayJob"),
                  ("CKV_AWS_116", "CloudFormation is the caller and reports a failed call; a DLQ would hold nothing"),
                  ("CKV_AWS_173", "its environment holds one STS endpoint flag, no secrets")]
        if kubectl_function.vpc_config is None:
            checks.append(("CKV_AWS_117", "it runs where the kubectl provider runs, and that one is outside the VPC"))
        for check, why in checks:
            skip_checkov(self.function, check, f"Guards running RayJobs at deploy time: {why}.")

    def guard(self, construct: Construct) -> None:
        """Make `construct` wait for the guard: CloudFormation updates the guard first, and a refusal rolls back."""
        construct.node.add_dependency(self.resource)
