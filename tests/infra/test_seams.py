"""Where constructs meet: a value one construct states is derived by the others, and a contradiction fails synth
naming the prop to pass (never a deploy whose pods wait until the deadline). The whole platform app, synthesized for
real, is tests/examples/test_one_truth.py; these are the failure modes, one stack each."""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template

from ray_efa.core import catalog
from ray_efa.core.settings import Settings
from ray_efa.infra import (
    CheckpointStorage,
    EfaGpuNodegroup,
    GpuDevicePlugins,
    GpuDraDrivers,
    KubeRayOperator,
    RayEksCluster,
    RayTrainingJob,
    RayWorkload,
)
from ray_efa.infra._settings import default
from tests.infra.test_workload import find

GPU = {"company.example/pool": "gpu"}
SYSTEM = {"company.example/pool": "system"}


def _imported(region: str = "us-west-2") -> tuple[cdk.App, cdk.Stack, ec2.IVpc, eks.ICluster]:
    app = cdk.App()
    stack = cdk.Stack(app, "Platform", env=cdk.Environment(region=region))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0123456789abcdef0",
        availability_zones=[f"{region}a", f"{region}b"],
        private_subnet_ids=["subnet-00aaaaaaaaaaaaaaa", "subnet-01aaaaaaaaaaaaaaa"],
    )
    provider = eks.KubectlProvider.from_kubectl_provider_attributes(
        stack, "Kubectl", service_token=f"arn:aws:lambda:{region}:111122223333:function:kubectl"
    )
    cluster = eks.Cluster.from_cluster_attributes(
        stack,
        "Cluster",
        cluster_name="platform",
        cluster_security_group_id="sg-0123456789abcdef0",
        vpc=vpc,
        kubectl_provider=provider,
    )
    return app, stack, vpc, cluster


def _synth_errors(app: cdk.App) -> str:
    with pytest.raises(RuntimeError, match="Validation failed") as raised:  # jsii's form of CDK's ValidationError
        app.synth()
    return str(raised.value)


# -- node labels: stated on the node groups -------------------------------------------------------------------------


def test_device_plugins_take_the_labels_of_the_gpu_nodes_they_are_given():
    _, stack, vpc, cluster = _imported()
    gpu = EfaGpuNodegroup(stack, "Gpu", cluster=cluster, vpc=vpc, node_selector=GPU)
    plugins = GpuDevicePlugins(stack, "Plugins", cluster=cluster, gpu_nodes=gpu)
    drivers = GpuDraDrivers(stack, "Dra", cluster=cluster, gpu_nodes=[gpu])
    assert plugins.node_selector == drivers.node_selector == GPU
    values = [
        json.loads(c["Properties"]["Values"])
        for c in Template.from_stack(stack).find_resources("Custom::AWSCDK-EKS-HelmChart").values()
        if c["Properties"]["Chart"] == "nvidia-device-plugin"
    ]
    assert [v["nodeSelector"] for v in values] == [GPU]


def test_device_plugins_left_at_their_default_on_other_labels_fail_synth_naming_gpu_nodes():
    # GIVEN the plugins added before the node group, labels left at their default
    app, stack, vpc, cluster = _imported()
    GpuDevicePlugins(stack, "Plugins", cluster=cluster)
    EfaGpuNodegroup(stack, "Gpu", cluster=cluster, vpc=vpc, node_selector=GPU)
    # THEN synth fails, naming the node group and the prop that fixes it
    message = _synth_errors(app)
    assert "GpuDevicePlugins selects the nodes labelled {'role': 'gpu-worker'}" in message
    assert "Platform/Gpu" in message and "Pass gpu_nodes=<that EfaGpuNodegroup>" in message


def test_device_plugins_left_at_their_default_after_the_node_group_take_its_labels():
    _, stack, vpc, cluster = _imported()
    EfaGpuNodegroup(stack, "Gpu", cluster=cluster, vpc=vpc, node_selector=GPU)
    assert GpuDevicePlugins(stack, "Plugins", cluster=cluster).node_selector == GPU


def test_device_plugins_with_nothing_to_go_by_use_the_settings_default():
    _, stack, _, cluster = _imported()
    assert GpuDevicePlugins(stack, "Plugins", cluster=cluster).node_selector == default("gpuNodeSelector")
    assert KubeRayOperator(stack, "KubeRay", cluster=cluster, crds=False).node_selector == default("systemNodeSelector")


def test_gpu_nodes_and_a_node_selector_that_disagree_are_refused():
    _, stack, vpc, cluster = _imported()
    gpu = EfaGpuNodegroup(stack, "Gpu", cluster=cluster, vpc=vpc, node_selector=GPU)
    with pytest.raises(
        ValueError,
        match=r"GpuDevicePlugins node_selector \{'role': 'gpu-worker'\} disagrees with "
        r"gpu_nodes' labels .*leave node_selector out",
    ):
        GpuDevicePlugins(stack, "Plugins", cluster=cluster, gpu_nodes=gpu, node_selector={"role": "gpu-worker"})


@pytest.fixture(scope="module")
def created() -> tuple[cdk.App, cdk.Stack, ec2.Vpc, RayEksCluster]:
    """A stack with a RayEksCluster on m7i.2xlarge system nodes labelled SYSTEM (built once: it is the slow part)."""
    app = cdk.App()
    stack = cdk.Stack(app, "Created", env=cdk.Environment(region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"], nat_gateways=1)
    ray = RayEksCluster(
        stack,
        "Ray",
        vpc=vpc,
        system_node_selector=SYSTEM,
        system_instance_type="m7i.2xlarge",
        public_access_cidrs=["203.0.113.0/24"],
    )
    return app, stack, vpc, ray


def test_the_operator_takes_the_system_nodes_labels(created):
    _, stack, _, ray = created
    operator = KubeRayOperator(stack, "KubeRayDerived", cluster=ray.cluster)
    assert operator.node_selector == SYSTEM
    assert [n.node.path for n in operator.nodes] == [ray.system_nodegroup.node.path]


def test_an_operator_on_labels_no_node_group_carries_fails_synth_naming_node_selector():
    app = cdk.App()
    stack = cdk.Stack(app, "S", env=cdk.Environment(region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"], nat_gateways=1)
    ray = RayEksCluster(stack, "Ray", vpc=vpc, system_node_selector=SYSTEM, public_access_cidrs=["203.0.113.0/24"])
    KubeRayOperator(stack, "KubeRay", cluster=ray.cluster, node_selector={"role": "system"})
    message = _synth_errors(app)
    assert "KubeRayOperator node_selector {'role': 'system'} selects none of the node groups of its cluster" in message
    assert "S/Ray/Cluster/NodegroupSystemNodes" in message and "the operator would never schedule" in message


# -- the namespace: stated on RayWorkload ----------------------------------------------------------------------------


def test_checkpoint_storage_takes_the_workloads_namespace():
    _, stack, _, cluster = _imported()
    workload = RayWorkload(stack, "Workload", cluster=cluster, namespace="research")
    storage = CheckpointStorage(stack, "Checkpoints", cluster=cluster, workload=workload)
    assert storage.namespace_name == "research"
    namespace = workload.namespace.node.default_child
    assert isinstance(namespace, cdk.CfnElement)
    assert stack.get_logical_id(namespace) in json.dumps(Template.from_stack(stack).to_json()["Resources"])
    with pytest.raises(ValueError, match=r"CheckpointStorage namespace 'ray' is not workload's, 'research'"):
        CheckpointStorage(stack, "Other", cluster=cluster, workload=workload, namespace="ray")


def test_checkpoint_storage_in_another_namespace_than_the_workload_fails_synth_naming_workload():
    app, stack, _, cluster = _imported()
    workload = RayWorkload(stack, "Workload", cluster=cluster, namespace="research")
    CheckpointStorage(stack, "Checkpoints", cluster=cluster, after=workload.namespace)  # namespace left at "ray"
    message = _synth_errors(app)
    assert "CheckpointStorage puts the Ray pods' service account in namespace 'ray'" in message
    assert "makes 'research': pass workload=<that RayWorkload>" in message


# -- an existing bucket ----------------------------------------------------------------------------------------------


def test_a_storage_path_in_an_existing_bucket_is_granted_on_its_prefix_alone():
    _, stack, _, cluster = _imported()
    storage = CheckpointStorage(stack, "Checkpoints", cluster=cluster, storage_path="s3://existing/team/ckpt")
    assert storage.bucket is None and storage.storage_bucket is not None
    statements = json.dumps(
        [
            p["Properties"]["PolicyDocument"]
            for p in Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
        ]
    )
    assert ":s3:::existing/team/ckpt/*" in statements and ':s3:::existing"' in statements
    # the current version of objects under the prefix: never s3:DeleteObjectVersion (only in the code folder's Deny)
    assert "s3:PutObject" in statements and '"s3:DeleteObject"' in statements and "s3:DeleteObject*" not in statements
    assert ":s3:::existing/*" not in statements
    # a shared filesystem path needs no grant
    _, stack, _, cluster = _imported()
    shared = CheckpointStorage(stack, "Shared", cluster=cluster, storage_path="/fsx/checkpoints")
    assert shared.storage_bucket is None and not Template.from_stack(stack).find_resources("AWS::IAM::Policy")


# -- the Ray head: sized for the system nodes ------------------------------------------------------------------------


def test_the_head_fits_every_system_type_of_the_catalog_and_a_too_small_one_is_named():
    for name, row in catalog.SYSTEM_INSTANCES.items():
        if name == "m7i.large":
            continue
        cpu, memory = catalog.head_pod_resources(row)
        room_cpu, room_mib = catalog.system_node_room(row)
        assert cpu * 1000 <= room_cpu and memory * 1024 <= room_mib, name
    # m7i.large: 1930m allocatable less 950m of DaemonSets (aws-node's two 25m containers), CoreDNS, the operator and
    # the submitter leaves 980m: a 1-CPU head would stay Pending, so it is refused, naming what fits
    with pytest.raises(
        catalog.CatalogError,
        match=r"m7i\.large \(2 vCPU, 8 GiB\) leaves 980m CPU and 4541 MiB .*"
        r"aws-node 50m/0Mi.* less than the head's 1000m CPU and 2048 MiB.*"
        r"choose a larger system instance type \(m7i\.xlarge, ",
    ):
        catalog.head_pod_resources(catalog.system_instance("m7i.large"))
    assert catalog.head_pod_resources(catalog.system_instance("m7i.xlarge")) == (2, 10)  # as before: no job change
    tiny = catalog.InstanceType(name="t3.small", vcpus=2, memory_gib=2, usd_per_hour=0.02)
    with pytest.raises(
        catalog.CatalogError,
        match=r"t3\.small .* less than the head's 1000m CPU and 2048 MiB: its pod "
        r"would stay Pending; choose a larger system instance type",
    ):
        catalog.head_pod_resources(tiny)


def test_a_cluster_whose_system_nodes_cannot_hold_the_head_is_refused_naming_the_prop():
    # GIVEN m7i.large system nodes: 980m CPU left beside their DaemonSets, CoreDNS, the operator and the submitter
    app = cdk.App()
    stack = cdk.Stack(app, "Small", env=cdk.Environment(region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"], nat_gateways=1)
    # THEN the cluster is refused before anything is synthesized, not a head Pending until the job's deadline
    with pytest.raises(
        ValueError,
        match=r"RayEksCluster system_instance_type m7i\.large \(2 vCPU, 8 GiB\) leaves "
        r"980m CPU .* less than the head's 1000m CPU .*\(m7i\.xlarge, ",
    ):
        RayEksCluster(stack, "Ray", vpc=vpc, system_instance_type="m7i.large", public_access_cidrs=["203.0.113.0/24"])


def test_the_job_sizes_its_head_for_the_clusters_system_nodes(created):
    _, stack, vpc, ray = created
    gpu = EfaGpuNodegroup(
        stack,
        "GpuForHead",
        cluster=ray.cluster,
        vpc=vpc,
        node_selector=GPU,
        capacity_reservation_id="cr-0123456789abcdef0",
    )
    storage = CheckpointStorage(stack, "CheckpointsForHead", cluster=ray.cluster, service_account="head-test")
    # GIVEN settings that say nothing of the system nodes or the reservation (Settings(): m7i.xlarge, none)
    job = RayTrainingJob(
        stack,
        "JobForHead",
        cluster=ray.cluster,
        settings=Settings(),
        gpu_nodes=gpu,
        storage=storage,
        operator=KubeRayOperator(stack, "KubeRayForHead", cluster=ray.cluster),
    )
    # THEN the job runs with what was built: m7i.2xlarge's head, the node group's reservation and no placement group
    assert job.settings.nodes.system_instance_type == "m7i.2xlarge"
    assert job.settings.nodes.capacity_reservation_id == "cr-0123456789abcdef0"
    assert job.settings.nodes.use_placement_group is False and gpu.placement_group is None
    _, _, ray_job = find(Template.from_stack(stack), "RayJob", "train-efa")
    limits = ray_job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    assert (limits["limits"]["cpu"], limits["limits"]["memory"]) == ("6", "26Gi")


def test_settings_that_contradict_the_node_groups_placement_are_refused():
    _, stack, vpc, cluster = _imported()
    gpu = EfaGpuNodegroup(stack, "Gpu", cluster=cluster, vpc=vpc, placement_group=False)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "RayTrainingJob placementGroup: the settings say 'on' but EfaGpuNodegroup Platform/Gpu has it off"
        ),
    ):
        RayTrainingJob(
            stack, "Job", cluster=cluster, settings=Settings.from_context({"placementGroup": "on"}), gpu_nodes=gpu
        )
