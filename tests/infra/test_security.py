"""Least privilege in the synthesized stacks: network policies enforced by the VPC CNI add-on, IMDS out of pods' reach
on the GPU nodes, and a warning at synth when the KubeRay version cannot put Ray behind a token."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Annotations, Match, Template

from ray_efa.infra.vpc_cni import VpcCniAddon
from tests.infra.conftest import synthesize
from tests.infra.test_stacks import launch_template_data
from tests.infra.test_workload import find

# The same settings as test_stacks' chart-version test, so the session synthesizes them once.
KUBERAY_1_4 = {"kuberayVersion": "1.4.0", "nvidiaDevicePluginVersion": "0.19.2"}


def test_vpc_cni_addon_enforces_network_policies(default_synth):
    addons = default_synth.cluster.find_resources("AWS::EKS::Addon", {"Properties": {"AddonName": "vpc-cni"}})
    (addon,) = addons.values()
    props = addon["Properties"]
    assert json.loads(props["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}
    # it takes over the VPC CNI EKS installed with the cluster, and keeps pod networking if the stack goes
    assert props["ResolveConflicts"] == "OVERWRITE" and props["PreserveOnDelete"] is True
    # EKS picks the latest version for the cluster's Kubernetes version: compatible by construction
    assert "AddonVersion" not in props
    # of the stack's own cluster
    assert default_synth.cluster.to_json()["Resources"][props["ClusterName"]["Ref"]]["Type"] == "AWS::EKS::Cluster"


def test_gpu_stack_has_no_addon_of_its_own(default_synth):
    default_synth.gpu.resource_count_is("AWS::EKS::Addon", 0)


def test_gpu_nodes_keep_imds_from_pods(synthesized):
    # GIVEN any GPU type THEN IMDSv2 is required and answers one hop: the node and host-network pods, no other pod
    options = launch_template_data(synthesized)["MetadataOptions"]
    assert options == {"HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1, "HttpTokens": "required"}


def test_kuberay_1_7_synthesizes_without_the_token_warning(default_synth):
    annotations = Annotations.from_stack(default_synth.stacks.cluster)
    annotations.has_no_warning("*", Match.string_like_regexp("Ray token authentication is off"))


def test_kuberay_1_4_warns_at_synth_that_ray_has_no_token():
    synth = synthesize(**KUBERAY_1_4)
    annotations = Annotations.from_stack(synth.stacks.cluster)
    annotations.has_warning(
        "*",
        Match.string_like_regexp(
            r"Ray token authentication is off: kuberayVersion 1\.4\.0 has no authOptions.*NetworkPolicy is the only guard"
        ),
    )


@pytest.mark.parametrize(
    "version, message",
    [
        ("1.21.1", "must look like v1.21.1-eksbuild.3"),
        ("v1.13.4-eksbuild.1", "must be v1.14.0 or later"),
    ],
)
def test_a_pinned_vpc_cni_version_is_checked(version, message):
    stack = cdk.Stack(cdk.App(), "Test")
    cluster = eks.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="c")
    with pytest.raises(ValueError, match=message):
        VpcCniAddon(stack, "VpcCni", cluster=cluster, addon_version=version)


def test_a_pinned_vpc_cni_version_is_used():
    stack = cdk.Stack(cdk.App(), "Test")
    cluster = eks.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="c")
    VpcCniAddon(stack, "VpcCni", cluster=cluster, addon_version="v1.21.1-eksbuild.3")
    Template.from_stack(stack).has_resource_properties(
        "AWS::EKS::Addon", {"AddonName": "vpc-cni", "AddonVersion": "v1.21.1-eksbuild.3", "ClusterName": "c"}
    )


def test_the_stack_applies_the_jobs_network_policy_with_the_job_and_token_auth_on(default_synth):
    # GIVEN the training RayJob the GPU stack applies, each object its own manifest
    job_id, job_resource, job = find(default_synth.gpu, "RayJob")
    policy_id, policy_resource, policy = find(default_synth.gpu, "NetworkPolicy", "train-efa-ray-ingress")
    # THEN the NetworkPolicy in front of its pods is applied before the job (the job waits on the chain after it),
    # in the job's namespace
    resources = default_synth.gpu.to_json()["Resources"]

    def waits_for(logical_id: str, target: str) -> bool:
        depends = resources[logical_id].get("DependsOn", [])
        return target in depends or any(waits_for(d, target) for d in depends if d in resources)

    assert waits_for(job_id, policy_id)
    assert policy["metadata"]["namespace"] == job["metadata"]["namespace"] == "ray"
    # AND the job's cluster requires a token
    assert job["spec"]["rayClusterSpec"]["authOptions"] == {"mode": "token"}
