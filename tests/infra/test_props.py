"""The constructs' props: validated before any child exists, errors naming the prop, the value and what is allowed;
region and zones from the enclosing stack, never an unresolved token in a message."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks

from ray_efa.core.settings import SettingsError
from ray_efa.infra.checkpoints import CheckpointStorage
from ray_efa.infra.device_plugins import GpuDevicePlugins
from ray_efa.infra.gpu_nodegroup import EfaGpuNodegroup
from ray_efa.infra.kuberay import KubeRayOperator
from ray_efa.infra.network import ClusterVpc, default_gpu_zone
from ray_efa.infra.workload import RayWorkload


def _stack(region: str | None = "us-west-2") -> cdk.Stack:
    env = cdk.Environment(region=region) if region else None
    return cdk.Stack(cdk.App(), "Platform", env=env)


def _imported(stack: cdk.Stack, zones=("us-west-2a", "us-west-2b")) -> tuple[ec2.IVpc, eks.ICluster]:
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "Vpc", vpc_id="vpc-0123456789abcdef0", availability_zones=list(zones),
        private_subnet_ids=[f"subnet-0{i}aaaaaaaaaaaaaaaa" for i in range(len(zones))])
    cluster = eks.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name="platform", cluster_security_group_id="sg-0123456789abcdef0", vpc=vpc)
    return vpc, cluster


def _children(stack: cdk.Stack, construct_id: str) -> list:
    return list(stack.node.find_child(construct_id).node.children)


def test_gpu_zone_defaults_to_the_first_private_subnets_az():
    vpc, _ = _imported(_stack(), zones=("us-west-2c", "us-west-2a"))
    assert default_gpu_zone(vpc) == "us-west-2c"


def test_a_zone_the_vpc_lacks_is_named_with_the_vpcs_zones_and_nothing_is_created():
    stack = _stack()
    vpc, cluster = _imported(stack)
    with pytest.raises(SettingsError, match=r"EfaGpuNodegroup availability_zone: must be an AZ where the VPC has a "
                                            r"private subnet: us-west-2a, us-west-2b, got 'us-west-2d'"):
        EfaGpuNodegroup(stack, "Gpu", cluster=cluster, vpc=vpc, availability_zone="us-west-2d")
    assert _children(stack, "Gpu") == []


def test_a_zone_of_another_region_names_the_stacks_region():
    stack = _stack("us-west-2")
    vpc, cluster = _imported(stack)
    with pytest.raises(SettingsError, match=r"availability_zone: must be an AZ of the stack's region us-west-2: one of "
                                            r"us-west-2a, us-west-2b, got 'us-east-2a'"):
        EfaGpuNodegroup(stack, "Gpu", cluster=cluster, vpc=vpc, availability_zone="us-east-2a")


def test_an_unknown_region_is_said_in_words_not_tokens():
    # GIVEN an environment-agnostic stack: its region and its created VPC's AZs are tokens at synth
    stack = _stack(region=None)
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    cluster = eks.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="c", cluster_security_group_id="sg-1")
    with pytest.raises(SettingsError) as error:
        EfaGpuNodegroup(stack, "Gpu", cluster=cluster, vpc=vpc, availability_zone="us-west-2a")
    assert "'us-west-2a'" in str(error.value) and "the stack's region is not known at synth" in str(error.value)
    assert "${Token" not in str(error.value)


@pytest.mark.parametrize("build, message", [
    (lambda s, v, c: EfaGpuNodegroup(s, "X", cluster=c, vpc=v, instance_type="m7i.xlarge"),
     r"EfaGpuNodegroup instance_type .*m7i\.xlarge"),
    (lambda s, v, c: EfaGpuNodegroup(s, "X", cluster=c, vpc=v, node_count=65),
     r"EfaGpuNodegroup node_count must be between 0 \(scaled to zero\) and 64, got 65"),
    (lambda s, v, c: EfaGpuNodegroup(s, "X", cluster=c, vpc=v, node_selector={"bad key": "x"}),
     r"EfaGpuNodegroup node_selector label key 'bad key' must be"),
    (lambda s, v, c: EfaGpuNodegroup(s, "X", cluster=c, vpc=v, capacity_reservation_type="capacity-block"),
     r"capacity_reservation_type 'capacity-block' needs capacity_reservation_id"),
    (lambda s, v, c: KubeRayOperator(s, "X", cluster=c, version="1.3.0"),
     r"KubeRayOperator version must be one of 1\.4\.0, 1\.7\.0, got '1\.3\.0'"),
    (lambda s, v, c: KubeRayOperator(s, "X", cluster=c, node_selector={}),
     r"KubeRayOperator node_selector must name at least one node label"),
    (lambda s, v, c: GpuDevicePlugins(s, "X", cluster=c, efa_version="v0.0.1"),
     r"GpuDevicePlugins efa_version must be one of .*got 'v0\.0\.1'"),
    (lambda s, v, c: CheckpointStorage(s, "X", cluster=c, storage_path="bucket/prefix"),
     r"CheckpointStorage storage_path must be s3://bucket/prefix or an absolute path.*got 'bucket/prefix'"),
    (lambda s, v, c: RayWorkload(s, "X", cluster=c, namespace="Ray"),
     r"RayWorkload namespace must be a DNS label.*got 'Ray'"),
    (lambda s, v, c: ClusterVpc(s, "X", availability_zones=["us-west-2a"]),
     r"ClusterVpc availability_zones must name at least two AZs.*\['us-west-2a'\]"),
])
def test_bad_props_are_refused_by_name_before_any_child_exists(build, message):
    stack = _stack()
    vpc, cluster = _imported(stack)
    with pytest.raises(ValueError, match=message):
        build(stack, vpc, cluster)
    assert _children(stack, "X") == []
