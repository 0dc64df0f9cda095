"""The smallest embedding: a cluster and its EFA GPU nodes in a stack of the platform's own, on the platform's VPC.

Typed as a platform's strict type checker wants it (every parameter annotated): tests/examples/test_one_truth.py runs
pyright in strict mode on this file.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from ray_efa.infra import EfaGpuNodegroup, RayEksCluster


class ResearchPlatform(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, vpc: ec2.IVpc, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        ray = RayEksCluster(self, "Ray", vpc=vpc, cluster_name="research")
        EfaGpuNodegroup(self, "Gpu", cluster=ray.cluster, vpc=vpc, instance_type="p5.48xlarge")
