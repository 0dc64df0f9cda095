"""The VPC of the cluster: created, or an existing one looked up by id (the platform-repo case)."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from ray_efa.core.settings import Problem, Settings, SettingsError
from ray_efa.infra.log_groups import StackLogs
from ray_efa.infra.nag import skip_checkov

__all__ = ["ClusterVpc", "gpu_subnet"]


class ClusterVpc(Construct):
    """A VPC with public and private subnets in the GPU AZ and one more (EKS needs two), or the VPC `vpcId` names.

    A created VPC has flow logs (rejected traffic) to an encrypted CloudWatch log group of `logs`, and `natGateways`
    NAT gateways; its default security group allows nothing (CDK's restrictDefaultSecurityGroup custom resource).
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, logs: StackLogs | None = None) -> None:
        super().__init__(scope, construct_id)
        cluster = settings.cluster
        if cluster.vpc_id:
            self.vpc: ec2.IVpc = ec2.Vpc.from_lookup(self, "Vpc", vpc_id=cluster.vpc_id)
            return
        vpc = ec2.Vpc(
            self,
            "Vpc",
            availability_zones=list(settings.vpc_availability_zones),
            nat_gateways=cluster.nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                # /18: pods take VPC IPs (aws-node), and p5 nodes take 32 EFA interfaces each.
                ec2.SubnetConfiguration(name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=18),
            ],
        )
        logs = logs or StackLogs(self, "Logs", retention_days=cluster.log_retention_days)
        self.flow_logs = logs.log_group(self, "FlowLogs")
        vpc.add_flow_log("FlowLog", traffic_type=ec2.FlowLogTrafficType.REJECT,
                         destination=ec2.FlowLogDestination.to_cloud_watch_logs(self.flow_logs))
        self._manage_restrict_default_sg_logs(vpc, logs)
        self.vpc = vpc

    @staticmethod
    def _manage_restrict_default_sg_logs(vpc: ec2.Vpc, logs: StackLogs) -> None:
        """The Lambda function behind restrictDefaultSecurityGroup is a stack-wide singleton of aws-cdk-lib with no
        log group of its own: give it one, created before the custom resource invokes it."""
        stack = Stack.of(vpc)
        provider = stack.node.try_find_child("Custom::VpcRestrictDefaultSGCustomResourceProvider")
        custom_resource = vpc.node.try_find_child("RestrictDefaultSecurityGroupCustomResource")
        if provider is None or custom_resource is None:  # the feature flag is off: no function, no logs
            return
        handler = provider.node.find_child("Handler")
        if stack.node.try_find_child("VpcRestrictDefaultSGLogs") is None:
            logs.for_function(stack, "VpcRestrictDefaultSGLogs", function_name=handler.ref, users=(custom_resource,))
        reason = ("aws-cdk-lib's singleton handler of restrictDefaultSecurityGroup: it runs once per deploy to revoke the "
                  "default security group's rules, calls only the EC2 API and keeps no state")
        for check, why in (("CKV_AWS_115", "concurrency is bounded by CloudFormation's one call per resource"),
                           ("CKV_AWS_116", "CloudFormation retries and reports a failed call; a DLQ would hold nothing"),
                           ("CKV_AWS_117", "it needs no VPC access; putting it in the VPC would only add ENIs"),
                           ("CKV_AWS_173", "its environment holds no secrets")):
            skip_checkov(handler, check, f"{reason}; {why}.")


def gpu_subnet(vpc: ec2.IVpc, availability_zone: str) -> ec2.ISubnet:
    """The one private subnet of the GPU nodes: EFA traffic does not cross AZs, nor do we want it to cross subnets."""
    subnets = vpc.select_subnets(
        subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=[availability_zone]
    ).subnets
    if not subnets:
        zones = sorted({s.availability_zone for s in vpc.private_subnets})
        if all(zone.startswith("dummy") for zone in zones):
            # A Vpc.from_lookup still pending: CDK synthesizes once with placeholders, the CLI looks the VPC up
            # and synthesizes again with real subnets, when this check applies.
            return vpc.private_subnets[0]
        zones = sorted({s.availability_zone for s in vpc.private_subnets})
        raise SettingsError([Problem("gpuAvailabilityZone", availability_zone,
                                     f"must be an AZ where the VPC has a private subnet: {', '.join(zones)}")])
    return subnets[0]
