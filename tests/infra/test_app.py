"""The app as users run it (`npx cdk synth`, `-c` overrides, bad settings), an existing VPC, and embedding the
constructs in a platform repository's own stack."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template

from ray_efa.core.settings import KUBERNETES_VERSIONS, Settings
from ray_efa.infra._private import kubectl_layer, kubernetes_version
from ray_efa.infra.app import build_stacks
from ray_efa.infra.cluster import RayEksCluster
from ray_efa.infra.gpu_nodegroup import EfaGpuNodegroup
from ray_efa.infra.kuberay import KubeRayOperator
from tests.cdk_cli import needs_cdk_cli

ROOT = Path(__file__).resolve().parents[2]


def offline_env(**extra: str) -> dict[str, str]:
    """The environment of a fresh machine: no AWS credentials or profile anywhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    env.update(
        AWS_CONFIG_FILE="/nonexistent",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
        AWS_EC2_METADATA_DISABLED="true",
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
        **extra,
    )
    return env


# -- the app as users run it ------------------------------------------------------------------------------------


@needs_cdk_cli
def test_cdk_cli_synthesizes_offline_and_switches_instance_family_with_context(tmp_path):
    # GIVEN no AWS credentials WHEN `npx cdk synth -c gpuInstanceType=p5.48xlarge` runs with the pinned CLI
    result = subprocess.run(
        ["npx", "cdk", "synth", "--quiet", "--output", str(tmp_path), "-c", "gpuInstanceType=p5.48xlarge"],
        cwd=ROOT,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # THEN both templates exist, with real AZ names and the p5's 32 EFA interfaces
    cluster = json.loads((tmp_path / "ray-train-cluster.template.json").read_text())
    gpu = json.loads((tmp_path / "ray-train-gpu.template.json").read_text())
    zones = {
        r["Properties"]["AvailabilityZone"] for r in cluster["Resources"].values() if r["Type"] == "AWS::EC2::Subnet"
    }
    assert zones == {"us-east-2a", "us-east-2b", "us-east-2c"}
    (launch_template,) = [r for r in gpu["Resources"].values() if r["Type"] == "AWS::EC2::LaunchTemplate"]
    assert len(launch_template["Properties"]["LaunchTemplateData"]["NetworkInterfaces"]) == 32


@needs_cdk_cli
def test_cdk_synth_refuses_a_training_plan_that_cannot_fit(tmp_path):
    # GIVEN `npx cdk synth -c microBatch=64`: 32 times the default micro batch, far beyond an L4's 22.5 GiB
    result = subprocess.run(
        ["npx", "cdk", "synth", "--quiet", "--output", str(tmp_path), "-c", "microBatch=64"],
        cwd=ROOT,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    # THEN the synth fails naming the setting and the fix, and no template is written (nothing to deploy)
    assert result.returncode != 0
    assert "microBatch: the training plan needs" in result.stderr and "microBatch=auto, its default" in result.stderr
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.glob("*.template.json"))


@needs_cdk_cli
def test_cdk_synth_refuses_a_gpu_type_the_region_does_not_sell(tmp_path):
    # GIVEN `npx cdk synth -c region=eu-west-1 -c gpuInstanceType=p5.48xlarge`: core/data/on_demand_prices.csv records
    # p5.48xlarge as not offered in eu-west-1 (SkyPilot's AWS catalog lists no offering there)
    result = subprocess.run(
        [
            "npx",
            "cdk",
            "synth",
            "--quiet",
            "--output",
            str(tmp_path),
            "-c",
            "region=eu-west-1",
            "-c",
            "gpuInstanceType=p5.48xlarge",
        ],
        cwd=ROOT,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    # THEN the synth fails naming the setting, the regions that offer the type and the override; nothing is written
    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert "gpuInstanceType: is not offered in eu-west-1" in message, result.stderr[-3000:]
    assert "regions that offer it: ap-northeast-1, ap-southeast-2, us-east-1, us-east-2, us-west-2" in message
    assert "offeringCheck=off" in message and "Traceback" not in result.stderr
    assert not list(tmp_path.glob("*.template.json"))


def test_the_offering_check_can_be_turned_off_for_a_stale_table():
    context = {"region": "eu-west-1", "gpuInstanceType": "p5.48xlarge"}
    with pytest.raises(ValueError, match="is not offered in eu-west-1"):
        Settings.from_context(context)
    assert Settings.from_context({**context, "offeringCheck": "off"}).nodes.gpu_instance_type == "p5.48xlarge"
    # a region the table does not record is not refused (nothing is known there), nor a type it offers
    assert Settings.from_context({"region": "sa-east-1", "gpuInstanceType": "p5.48xlarge"})
    assert Settings.from_context({"region": "eu-west-1", "gpuInstanceType": "p4d.24xlarge"})


BAD_CONTEXT = {
    "non-GPU type": ({"gpuInstanceType": "m7i.xlarge"}, "gpuInstanceType: m7i.xlarge has no GPU"),
    "GPU type without EFA": ({"gpuInstanceType": "g6.xlarge"}, "no EFA support"),
    "unknown type": ({"gpuInstanceType": "p9.96xlarge"}, "unknown GPU instance type 'p9.96xlarge'"),
    "too many GPU nodes": ({"gpuNodeCount": "65"}, "gpuNodeCount: must be between 0 and 64, got '?65'?"),
    "AZ of another region": (
        {"gpuAvailabilityZone": "us-west-2a"},
        "gpuAvailabilityZone: must be an AZ of region us-east-2",
    ),
    "malformed reservation": (
        {"capacityReservationId": "cr-123"},
        "capacityReservationId: must be 'cr-' and 17 hex digits",
    ),
    "typo in a key": (
        {"gpuInstanceTyp": "p5.48xlarge"},
        "gpuInstanceTyp: unknown setting \\(did you mean gpuInstanceType\\?\\)",
    ),
    "malformed image": ({"dlcImage": "Not An Image"}, "dlcImage: must be an image reference with a tag or digest"),
    "untagged image": (
        {"dlcImage": "public.ecr.aws/deep-learning-containers/ray"},
        "dlcImage: must be an image reference",
    ),
}


@pytest.mark.parametrize("context, message", BAD_CONTEXT.values(), ids=BAD_CONTEXT.keys())
def test_bad_settings_fail_before_synthesis(context, message):
    with pytest.raises(ValueError, match=message):
        Settings.from_context(context)


def test_bad_settings_stop_the_app_and_write_nothing(tmp_path):
    # GIVEN `-c gpuNodeCount=65 -c gpuInstanceTyp=x` as the CDK CLI passes them (CDK_CONTEXT_JSON)
    outdir = tmp_path / "cdk.out"
    context = json.dumps({"gpuNodeCount": "65", "gpuInstanceTyp": "x"})
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=offline_env(CDK_CONTEXT_JSON=context, CDK_OUTDIR=str(outdir)),
    )
    # THEN it exits non-zero naming both problems, and no template was written
    assert result.returncode == 1
    assert "gpuNodeCount: must be between 0 and 64" in result.stderr
    assert "gpuInstanceTyp: unknown setting (did you mean gpuInstanceType?)" in result.stderr
    assert not outdir.exists() or not list(outdir.glob("*.template.json"))


def test_every_allowed_kubernetes_version_has_a_matching_kubectl_layer():
    for version in KUBERNETES_VERSIONS:
        stack = cdk.Stack(cdk.App())
        layer = kubectl_layer(stack, version)
        assert type(layer).__name__ == f"KubectlV{version.split('.')[1]}Layer"  # 1.36 -> KubectlV36Layer
        assert kubernetes_version(version).version == version


# -- an existing VPC --------------------------------------------------------------------------------------------


def existing_vpc_context(vpc_id: str, account: str) -> dict:
    """The cached result of CDK's own VPC lookup, as cdk.context.json stores it after `cdk synth` with credentials."""
    key = f"vpc-provider:account={account}:filter.vpc-id={vpc_id}:region=us-east-2:returnAsymmetricSubnets=true"

    def subnet(i: int, az: str, cidr: str) -> dict:
        return {
            "subnetId": f"subnet-0000000000000000{i}",
            "cidr": cidr,
            "availabilityZone": az,
            "routeTableId": f"rtb-{i}",
        }

    return {
        key: {
            "vpcId": vpc_id,
            "vpcCidrBlock": "10.20.0.0/16",
            "ownerAccountId": account,
            "availabilityZones": [],
            "subnetGroups": [
                {
                    "name": "Private",
                    "type": "Private",
                    "subnets": [
                        subnet(1, "us-east-2a", "10.20.0.0/19"),
                        subnet(2, "us-east-2b", "10.20.32.0/19"),
                        subnet(3, "us-east-2c", "10.20.64.0/19"),
                    ],
                },
                {
                    "name": "Public",
                    "type": "Public",
                    "subnets": [subnet(4, "us-east-2a", "10.20.96.0/24"), subnet(5, "us-east-2b", "10.20.97.0/24")],
                },
            ],
        }
    }


def test_existing_vpc_is_looked_up_and_gpu_nodes_use_its_subnet_in_the_gpu_az():
    # GIVEN vpcId and the lookup CDK cached in cdk.context.json (no AWS call here: that is the context's purpose)
    account, vpc_id = "123456789012", "vpc-0123456789abcdef0"
    app = cdk.App(context=existing_vpc_context(vpc_id, account))
    settings = Settings.from_context({"vpcId": vpc_id, "gpuAvailabilityZone": "us-east-2c"})
    stacks = build_stacks(app, settings, env=cdk.Environment(account=account, region="us-east-2"))
    app.synth()
    cluster, gpu = Template.from_stack(stacks.cluster), Template.from_stack(stacks.gpu)
    # THEN no VPC is created, and the GPU nodes land in the existing private subnet of us-east-2c
    cluster.resource_count_is("AWS::EC2::VPC", 0)
    (nodegroup,) = gpu.find_resources("AWS::EKS::Nodegroup").values()
    assert nodegroup["Properties"]["Subnets"] == ["subnet-00000000000000003"]
    # ...and the NAT gateways of someone else's VPC are not in our cost estimate
    outputs = gpu.to_json()["Outputs"]
    assert float(outputs["EstimatedUsdPerHour"]["Value"]) == pytest.approx(9.505, abs=0.01)


def test_existing_vpc_without_a_private_subnet_in_the_gpu_az_fails_clearly():
    account, vpc_id = "123456789012", "vpc-0123456789abcdef0"
    context = existing_vpc_context(vpc_id, account)
    next(iter(context.values()))["subnetGroups"][0]["subnets"].pop()  # drop us-east-2c
    app = cdk.App(context=context)
    settings = Settings.from_context({"vpcId": vpc_id, "gpuAvailabilityZone": "us-east-2c"})
    with pytest.raises(
        ValueError,
        match="gpuAvailabilityZone: must be an AZ where the VPC has a private subnet: us-east-2a, us-east-2b",
    ):
        build_stacks(app, settings, env=cdk.Environment(account=account, region="us-east-2"))


def test_existing_vpc_needs_an_account():
    from ray_efa.infra.app import stack_environment

    with pytest.raises(ValueError, match="vpcId: needs AWS credentials"):
        env = dict(os.environ)
        os.environ.pop("CDK_DEFAULT_ACCOUNT", None)
        try:
            stack_environment(Settings.from_context({"vpcId": "vpc-0123456789abcdef0"}))
        finally:
            os.environ.clear()
            os.environ.update(env)


# -- a platform repository embeds the constructs in its own stack and VPC ---------------------------------------


def test_constructs_embed_in_a_platform_stack_with_its_own_vpc():
    # GIVEN a platform repo's app, one stack of its own and its own VPC
    app = cdk.App()
    platform = cdk.Stack(app, "PlatformStack", env=cdk.Environment(region="us-east-2"))
    vpc = ec2.Vpc(platform, "PlatformVpc", availability_zones=["us-east-2a", "us-east-2b"], nat_gateways=1)
    # WHEN it adds our constructs to that stack, with props of its own
    ray = RayEksCluster(platform, "Ray", vpc=vpc, cluster_name="research")
    gpu = EfaGpuNodegroup(
        platform, "Gpu", cluster=ray.cluster, vpc=vpc, instance_type="p4d.24xlarge", cluster_name="research"
    )
    template = Template.from_stack(platform)
    # THEN one stack holds the cluster and both node groups, on the platform's VPC
    template.resource_count_is("AWS::EC2::VPC", 1)
    template.resource_count_is("AWS::EKS::Nodegroup", 2)
    template.has_resource_properties("AWS::EKS::Cluster", {"Name": "research"})
    private_a = platform.resolve(
        vpc.select_subnets(
            subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=["us-east-2a"]
        ).subnet_ids[0]
    )
    cfn_nodegroup = gpu.nodegroup.node.default_child
    assert isinstance(cfn_nodegroup, eks.CfnNodegroup)
    gpu_nodegroup = platform.resolve(cfn_nodegroup.subnets)
    assert gpu_nodegroup == [private_a]
    (launch_data,) = [
        t["Properties"]["LaunchTemplateData"]
        for t in template.find_resources("AWS::EC2::LaunchTemplate").values()
        if "NetworkInterfaces" in t["Properties"]["LaunchTemplateData"]
    ]  # the GPU one (not the system nodes')
    assert len(launch_data["NetworkInterfaces"]) == 4


@pytest.mark.parametrize("page", ["README.md", "docs/embedding.md"])
def test_embedding_snippet_synthesizes(page):
    # GIVEN the smallest embedding snippet, as written in the README and on the embedding page
    text = (ROOT / page).read_text()
    (snippet,) = [
        block for block in re.findall(r"```python\n(.*?)```", text, re.S) if "class ResearchPlatform" in block
    ]
    namespace: dict = {}
    exec(compile(snippet, page, "exec"), namespace)  # noqa: S102 - our own docs
    # WHEN a platform app in us-west-2 puts it in a stack of its own, on its own VPC
    app = cdk.App()
    network = cdk.Stack(app, "Network", env=cdk.Environment(region="us-west-2"))
    vpc = ec2.Vpc(network, "Vpc", availability_zones=["us-west-2b", "us-west-2c"], nat_gateways=1)
    stack = namespace["ResearchPlatform"](app, "Research", vpc=vpc, env=cdk.Environment(region="us-west-2"))
    template = Template.from_stack(stack)
    # THEN it synthesizes there, with the GPU nodes in the VPC's first private subnet's AZ (nothing of us-east-2)
    template.has_resource_properties("AWS::EKS::Nodegroup", {"NodegroupName": "research-gpu-2b"})
    assert "us-east-2" not in json.dumps(template.to_json())
    # ...and the cluster enforces NetworkPolicies: the vpc-cni managed add-on with its network policy agent on
    (addon,) = template.find_resources("AWS::EKS::Addon", {"Properties": {"AddonName": "vpc-cni"}}).values()
    assert json.loads(addon["Properties"]["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}


def test_a_cluster_without_network_policy_enforcement_is_an_explicit_choice():
    stack = cdk.Stack(cdk.App(), "Platform", env=cdk.Environment(region="us-east-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-east-2a", "us-east-2b"])
    ray = RayEksCluster(stack, "Ray", vpc=vpc, network_policy=False)  # the platform runs its own CNI setup
    assert ray.vpc_cni is None
    addons = Template.from_stack(stack).find_resources("AWS::EKS::Addon")
    assert [a["Properties"]["AddonName"] for a in addons.values() if a["Properties"]["AddonName"] == "vpc-cni"] == []


def test_kuberay_operator_embedded_orders_itself_after_the_system_nodes():
    stack = cdk.Stack(cdk.App(), "Platform", env=cdk.Environment(region="us-east-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-east-2a", "us-east-2b"])
    ray = RayEksCluster(stack, "Ray", vpc=vpc)
    # WHEN a platform adds the operator with no ordering of its own
    kuberay = KubeRayOperator(stack, "KubeRay", cluster=ray.cluster)
    # THEN its release waits for the node group its pod runs on (found by the node selector's labels)
    assert [n.node.path for n in kuberay.nodes] == [ray.system_nodegroup.node.path]
    charts = Template.from_stack(stack).find_resources("Custom::AWSCDK-EKS-HelmChart")
    (chart,) = charts.values()
    system_nodegroup = ray.system_nodegroup.node.default_child
    assert isinstance(system_nodegroup, cdk.CfnElement)
    assert stack.get_logical_id(system_nodegroup) in chart["DependsOn"]
    # ...and on labels that no node group of the cluster carries, it waits for none (an imported cluster's case)
    other = KubeRayOperator(stack, "Other", cluster=ray.cluster, node_selector={"pool": "elsewhere"})
    assert other.nodes == []


def test_an_account_bound_stack_synthesizes_before_cdk_has_looked_its_azs_up():
    # GIVEN a platform stack bound to an account, with a VPC over its first two AZs: before the CDK CLI's lookup,
    # CDK answers the stack's AZs with placeholders (dummy1a, dummy1b)
    app = cdk.App()
    stack = cdk.Stack(app, "Platform", env=cdk.Environment(account="111122223333", region="us-east-1"))
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    ray = RayEksCluster(stack, "Ray", vpc=vpc, cluster_name="research")
    # WHEN the GPU node group takes its default AZ THEN nothing fails: the CLI looks the AZs up and synthesizes again
    gpu = EfaGpuNodegroup(stack, "Gpu", cluster=ray.cluster, vpc=vpc, cluster_name="research")
    assert gpu.availability_zone == "dummy1a"
    manifest = json.loads((Path(app.synth().directory) / "manifest.json").read_text())
    assert any(m["key"].startswith("availability-zones:") for m in manifest.get("missing", []))


def test_an_az_outside_the_stacks_region_names_the_prop_and_the_zones_to_pass():
    stack = cdk.Stack(cdk.App(), "Platform", env=cdk.Environment(region="us-east-1"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-east-1a", "us-east-1b"])
    ray = RayEksCluster(stack, "Ray", vpc=vpc)
    with pytest.raises(
        ValueError,
        match=r"EfaGpuNodegroup availability_zone: must be an AZ of the stack's region "
        r"us-east-1: one of us-east-1a, us-east-1b, got 'us-west-2a'",
    ):
        EfaGpuNodegroup(stack, "Gpu", cluster=ray.cluster, vpc=vpc, availability_zone="us-west-2a")
