"""The VPC of the cluster: created, or an existing one looked up by id (the platform-repo case)."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from ray_efa.core.settings import Problem, Settings, SettingsError

__all__ = ["ClusterVpc", "gpu_subnet"]


class ClusterVpc(Construct):
    """A VPC with public and private subnets in the GPU AZ and one more (EKS needs two), or the VPC `vpcId` names.

    A created VPC has flow logs to CloudWatch (rejected traffic) and `natGateways` NAT gateways.
    """

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings) -> None:
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
        vpc.add_flow_log("FlowLog", traffic_type=ec2.FlowLogTrafficType.REJECT)
        self.vpc = vpc


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
