"""The VPC of the cluster: created, or an existing one looked up by id (the platform-repo case)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from aws_cdk import CfnResource, Stack, Token
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from ray_efa.core.settings import Problem, Settings, SettingsError
from ray_efa.infra._settings import check_bounds, default
from ray_efa.infra.log_groups import StackLogs
from ray_efa.infra.nag import skip_checkov

if TYPE_CHECKING:
    from aws_cdk import aws_logs

__all__ = ["ClusterVpc", "gpu_subnet", "default_gpu_zone"]


class ClusterVpc(Construct):
    """A VPC with public and private subnets in the GPU AZ and one more (EKS needs two), or the VPC `vpc_id` names.

    A created VPC has flow logs (rejected traffic) to an encrypted CloudWatch log group of `logs`, `nat_gateways`
    NAT gateways and an S3 gateway endpoint (`s3_endpoint`: checkpoint traffic stays off the NAT); its default security group allows nothing (CDK's restrictDefaultSecurityGroup custom resource).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        availability_zones: Sequence[str] | None = None,
        nat_gateways: int = default("natGateways"),
        vpc_id: str | None = None,
        logs: StackLogs | None = None,
        log_retention_days: int = default("logRetentionDays"),
    ) -> None:
        """
        :param availability_zones: AZs of the subnets, the GPU AZ first (EKS needs two).
            @default - the first two AZs of the enclosing stack
        :param nat_gateways: NAT gateways (1 is cheapest, one per AZ survives AZ loss). @default 1
        :param vpc_id: an existing VPC to look up instead (needs the stack's account and region). @default - create one
        :param logs: the stack's log groups (key, retention). @default - a StackLogs of this construct
        :param log_retention_days: retention of the flow logs when `logs` is not given. @default 365
        """
        super().__init__(scope, construct_id)
        if vpc_id:
            self.vpc: ec2.IVpc = ec2.Vpc.from_lookup(self, "Vpc", vpc_id=vpc_id)
            return
        if availability_zones is not None and len(availability_zones) < 2:
            raise ValueError(
                f"ClusterVpc availability_zones must name at least two AZs (EKS needs subnets in two), "
                f"got {list(availability_zones)!r}"
            )
        check_bounds("ClusterVpc nat_gateways", nat_gateways, "natGateways")
        zones = list(availability_zones) if availability_zones is not None else Stack.of(self).availability_zones[:2]
        vpc = ec2.Vpc(
            self,
            "Vpc",
            availability_zones=zones,
            nat_gateways=nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                # /18: pods take VPC IPs (aws-node), and p5 nodes take 32 EFA interfaces each.
                ec2.SubnetConfiguration(name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=18),
            ],
        )
        # S3 through a gateway endpoint, not the NAT gateway: the checkpoints (a final DCP checkpoint of the default
        # model is ~18.5 GB), the code asset and the gate's logs stay on the VPC's route tables, with no NAT
        # processing charge per GB ("There is no additional charge for using gateway endpoints", AWS PrivateLink
        # guide, "Gateway endpoints for Amazon S3"); S3 in the VPC's own region, which is the checkpoint bucket's.
        # Routes of every subnet (the default: all of the VPC's route tables).
        self.s3_endpoint: ec2.GatewayVpcEndpoint = vpc.add_gateway_endpoint(
            "S3", service=ec2.GatewayVpcEndpointAwsService.S3
        )
        logs = logs or StackLogs(self, "Logs", retention_days=log_retention_days)
        self.flow_logs: aws_logs.LogGroup = logs.log_group(self, "FlowLogs")
        vpc.add_flow_log(
            "FlowLog",
            traffic_type=ec2.FlowLogTrafficType.REJECT,
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(self.flow_logs),
        )
        self._manage_restrict_default_sg_logs(vpc, logs)
        self.vpc = vpc

    @classmethod
    def from_settings(
        cls, scope: Construct, construct_id: str, settings: Settings, *, logs: StackLogs | None = None
    ) -> ClusterVpc:
        """The VPC of the project's own app: vpcId, or a VPC in the GPU AZ and the next with natGateways."""
        cluster = settings.cluster
        return cls(
            scope,
            construct_id,
            availability_zones=settings.vpc_availability_zones,
            nat_gateways=cluster.nat_gateways,
            vpc_id=cluster.vpc_id,
            logs=logs,
            log_retention_days=cluster.log_retention_days,
        )

    @staticmethod
    def _manage_restrict_default_sg_logs(vpc: ec2.Vpc, logs: StackLogs) -> None:
        """The Lambda function behind restrictDefaultSecurityGroup is a stack-wide singleton of aws-cdk-lib with no
        log group of its own: give it one, created before the custom resource invokes it."""
        stack = Stack.of(vpc)
        provider = stack.node.try_find_child("Custom::VpcRestrictDefaultSGCustomResourceProvider")
        custom_resource = vpc.node.try_find_child("RestrictDefaultSecurityGroupCustomResource")
        if provider is None or custom_resource is None:  # the feature flag is off: no function, no logs
            return
        handler = cast(CfnResource, provider.node.find_child("Handler"))
        if stack.node.try_find_child("VpcRestrictDefaultSGLogs") is None:
            logs.for_function(stack, "VpcRestrictDefaultSGLogs", function_name=handler.ref, users=(custom_resource,))
        reason = (
            "aws-cdk-lib's singleton handler of restrictDefaultSecurityGroup: it runs once per deploy to revoke the "
            "default security group's rules, calls only the EC2 API and keeps no state"
        )
        for check, why in (
            ("CKV_AWS_115", "concurrency is bounded by CloudFormation's one call per resource"),
            ("CKV_AWS_116", "CloudFormation retries and reports a failed call; a DLQ would hold nothing"),
            ("CKV_AWS_117", "it needs no VPC access; putting it in the VPC would only add ENIs"),
            ("CKV_AWS_173", "its environment holds no secrets"),
        ):
            skip_checkov(handler, check, f"{reason}; {why}.")


PLACEHOLDER_ZONES = ("dummy1a", "dummy1b", "dummy1c")
"""What aws-cdk-lib answers for an account-bound stack's AZs (Stack.availability_zones) and a pending
Vpc.from_lookup's subnets before the CDK CLI has looked them up (aws-cdk-lib core/lib/stack.js and
aws-ec2/lib/vpc.js, dummyValue): the CLI then fills cdk.context.json and synthesizes again with real names."""


def is_placeholder_zone(zone: str) -> bool:
    """Whether `zone` is one of CDK's placeholders for AZs not looked up yet (never an error: the lookup comes next)."""
    return not Token.is_unresolved(zone) and zone in PLACEHOLDER_ZONES


def default_gpu_zone(vpc: ec2.IVpc) -> str:
    """The GPU AZ when none is given: the AZ of the VPC's first private subnet."""
    if not vpc.private_subnets:
        raise ValueError(
            "the VPC has no private subnets: the GPU nodes need one (PRIVATE_WITH_EGRESS); give it a "
            "SubnetType.PRIVATE_WITH_EGRESS subnet group, or pass a VPC that has one"
        )
    return vpc.private_subnets[0].availability_zone


def _private_zones(vpc: ec2.IVpc) -> list[str]:
    return sorted({s.availability_zone for s in vpc.private_subnets if not Token.is_unresolved(s.availability_zone)})


def _zone_problem_in_region(zone: str, region: str, known: list[str]) -> str | None:
    if Token.is_unresolved(region):
        return None  # the stack's region is not known at synth: nothing to compare with
    if not zone.startswith(region):
        choices = [z for z in known if z.startswith(region)]
        return f"must be an AZ of the stack's region {region}" + (f": one of {', '.join(choices)}" if choices else "")
    return None


def gpu_subnet(vpc: ec2.IVpc, availability_zone: str, *, key: str = "gpuAvailabilityZone") -> ec2.ISubnet:
    """The one private subnet of the GPU nodes: EFA traffic does not cross AZs, nor do we want it to cross subnets.

    Raises SettingsError naming `key` (the setting, or the construct's prop) and the zone given, with the zones the
    VPC has; never an unresolved token.
    """
    region = Stack.of(vpc).region
    known = _private_zones(vpc)
    if not vpc.private_subnets:
        default_gpu_zone(vpc)  # raises, saying what the VPC lacks
    if is_placeholder_zone(availability_zone) or (known and all(is_placeholder_zone(z) for z in known)):
        # CDK's AZ (or VPC) lookup is still pending: CDK synthesizes once with placeholders, the CLI looks the zones
        # up and synthesizes again with real names, when the checks below apply. An error here would stop the CLI
        # before its lookup, for good.
        subnets = vpc.select_subnets(
            subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=[availability_zone]
        ).subnets
        return subnets[0] if subnets else vpc.private_subnets[0]
    if not Token.is_unresolved(availability_zone) and (
        problem := _zone_problem_in_region(availability_zone, region, known)
    ):
        raise SettingsError([Problem(key, availability_zone, problem)])
    subnets = vpc.select_subnets(
        subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=[availability_zone]
    ).subnets
    if not subnets:
        where = (
            f"must be an AZ where the VPC has a private subnet: {', '.join(known)}"
            if known
            else "must be an AZ where the VPC has a private subnet; the stack's region is not known at synth, so "
            "neither are the VPC's AZs: give the stack an env with a region"
        )
        raise SettingsError([Problem(key, availability_zone, where)])
    return subnets[0]
