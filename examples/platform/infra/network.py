"""The platform's VPCs: an existing one imported by attributes (no lookup, works offline), or a new one."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

# The existing production VPC in us-west-2 (ids as the platform's network team publishes them).
PROD_VPC = {
    "vpc_id": "vpc-0a1b2c3d4e5f60718",
    "availability_zones": ["us-west-2a", "us-west-2b"],
    "private_subnet_ids": ["subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002"],
}


def imported_prod_vpc(scope: Construct) -> ec2.IVpc:
    return ec2.Vpc.from_vpc_attributes(scope, "ProdVpc", **PROD_VPC)


def platform_vpc(scope: Construct, zones: list[str]) -> ec2.Vpc:
    """A new VPC with public and private subnets in `zones` (the first one gets the GPU nodes)."""
    return ec2.Vpc(
        scope,
        "PlatformVpc",
        availability_zones=zones,
        nat_gateways=1,
        subnet_configuration=[
            ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
            ec2.SubnetConfiguration(name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=18),
        ],
    )
