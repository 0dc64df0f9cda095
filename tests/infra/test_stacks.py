"""The synthesized CloudFormation of both stacks, for every instance type of the catalog's test set."""

from __future__ import annotations

import dataclasses
import json

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match

from ray_efa.core import catalog
from ray_efa.core.cost import hourly_cost
from ray_efa.core.scheduling import GPU_NODE_LABELS, GPU_TAINT, SYSTEM_NODE_LABELS
from tests.infra.conftest import synthesize


def only(template, resource_type: str) -> dict:
    resources = template.find_resources(resource_type)
    assert len(resources) == 1, f"expected exactly one {resource_type}, found {len(resources)}"
    return next(iter(resources.values()))


def launch_template_data(synth) -> dict:
    return only(synth.gpu, "AWS::EC2::LaunchTemplate")["Properties"]["LaunchTemplateData"]


def logical_id_of_import(value: dict) -> str:
    """The cluster stack's logical id behind a cross-stack Fn::ImportValue (export names end in Ref<logicalId><hash>)."""
    return value["Fn::ImportValue"]


# -- VPC -------------------------------------------------------------------------------------------------------


def test_vpc_has_private_subnets_in_the_regions_three_real_azs(default_synth):
    # GIVEN the default settings (region us-east-2) WHEN synthesized without credentials
    subnets = default_synth.cluster.find_resources("AWS::EC2::Subnet", {"Properties": {"MapPublicIpOnLaunch": False}})
    # THEN private subnets sit in the region's three real, named AZs (not Fn::GetAZs tokens)
    zones = sorted(s["Properties"]["AvailabilityZone"] for s in subnets.values())
    assert zones == ["us-east-2a", "us-east-2b", "us-east-2c"]


def test_cluster_stack_is_the_same_for_every_gpu_az_type_count_and_training_setting(default_synth):
    # GIVEN settings that change only the GPU nodes and the training run
    other = synthesize(gpuAvailabilityZone="us-east-2c", gpuInstanceType="g6e.24xlarge", gpuNodeCount=4, steps=99)
    # WHEN both cluster stacks are compared THEN they are identical: such changes touch the GPU stack alone (and a
    # moved GPU AZ finds the export of its subnet already there, since every private subnet is exported)
    assert other.cluster.to_json() == default_synth.cluster.to_json()
    assert other.gpu.to_json() != default_synth.gpu.to_json()


def test_vpc_logs_rejected_flows(default_synth):
    default_synth.cluster.has_resource_properties("AWS::EC2::FlowLog", {"TrafficType": "REJECT"})


# -- EKS cluster ------------------------------------------------------------------------------------------------


def test_cluster_logs_every_control_plane_component(default_synth):
    cluster = only(default_synth.cluster, "AWS::EKS::Cluster")["Properties"]
    enabled = {entry["Type"] for entry in cluster["Logging"]["ClusterLogging"]["EnabledTypes"]}
    assert enabled == {"api", "audit", "authenticator", "controllerManager", "scheduler"}


def test_cluster_secrets_are_envelope_encrypted_with_a_rotated_key(default_synth):
    cluster = only(default_synth.cluster, "AWS::EKS::Cluster")["Properties"]
    (encryption,) = cluster["EncryptionConfig"]
    assert encryption["Resources"] == ["secrets"]
    key_id = encryption["Provider"]["KeyArn"]["Fn::GetAtt"][0]
    key = default_synth.cluster.to_json()["Resources"][key_id]
    assert key["Type"] == "AWS::KMS::Key" and key["Properties"]["EnableKeyRotation"] is True


def test_cluster_version_and_endpoint_come_from_settings():
    synth = synthesize(
        kubernetesVersion="1.35", endpointAccess="public_and_private", publicAccessCidrs="203.0.113.0/24"
    )
    cluster = only(synth.cluster, "AWS::EKS::Cluster")["Properties"]
    assert cluster["Version"] == "1.35"
    vpc_config = cluster["ResourcesVpcConfig"]
    assert vpc_config["EndpointPublicAccess"] is True and vpc_config["EndpointPrivateAccess"] is True
    assert vpc_config["PublicAccessCidrs"] == ["203.0.113.0/24"]


def public_endpoint_warnings(synth) -> list[str]:
    stack = synth.assembly.get_stack_by_name(synth.settings.cluster_stack_name)
    return [
        m.entry.data
        for m in stack.messages
        if m.level == cdk.cx_api.SynthesisMessageLevel.WARNING and "ray-efa:publicEndpointOpen" in str(m.entry.data)
    ]


def test_an_endpoint_open_to_the_internet_is_a_synth_warning(default_synth):
    # GIVEN the default publicAccessCidrs 0.0.0.0/0: THEN synth warns, naming the setting
    (warning,) = public_endpoint_warnings(default_synth)
    assert "publicAccessCidrs" in warning and "0.0.0.0/0" in warning
    # ... and not once the endpoint is narrowed
    assert not public_endpoint_warnings(synthesize(publicAccessCidrs="203.0.113.0/24"))


def test_the_cluster_stack_names_its_vpc_arn_and_security_group_outputs(default_synth):
    outputs = default_synth.cluster.to_json()["Outputs"]
    assert outputs["VpcId"]["Value"] == {"Ref": only_id(default_synth.cluster, "AWS::EC2::VPC")}
    (cluster_id,) = default_synth.cluster.find_resources("AWS::EKS::Cluster")
    assert outputs["ClusterArn"]["Value"] == {"Fn::GetAtt": [cluster_id, "Arn"]}
    assert outputs["ClusterSecurityGroupId"]["Value"] == {"Fn::GetAtt": [cluster_id, "ClusterSecurityGroupId"]}


def only_id(template, kind: str) -> str:
    (logical_id,) = template.find_resources(kind)
    return logical_id


def test_private_endpoint_turns_public_access_off():
    synth = synthesize(endpointAccess="private")
    vpc_config = only(synth.cluster, "AWS::EKS::Cluster")["Properties"]["ResourcesVpcConfig"]
    assert vpc_config["EndpointPublicAccess"] is False and vpc_config["EndpointPrivateAccess"] is True


def test_a_public_only_endpoint_synthesizes_open():
    # CDK raised CannotRestricPublicAccessEndpoint here while the construct narrowed every public endpoint
    synth = synthesize(endpointAccess="public")
    vpc_config = only(synth.cluster, "AWS::EKS::Cluster")["Properties"]["ResourcesVpcConfig"]
    assert vpc_config["EndpointPublicAccess"] is True and vpc_config["EndpointPrivateAccess"] is False
    assert vpc_config.get("PublicAccessCidrs", ["0.0.0.0/0"]) == ["0.0.0.0/0"]


def test_kubectl_layer_matches_cluster_version(default_synth):
    # The kubectl provider's layer is the v1.36 package: its asset is a Lambda layer in the cluster stack.
    default_synth.cluster.resource_count_is("AWS::Lambda::LayerVersion", 2)  # kubectl + awscli
    layers = default_synth.cluster.find_resources("AWS::Lambda::LayerVersion")
    assert any("kubectl" in str(layer["Properties"].get("Description", "")).lower() for layer in layers.values())


# -- system node group ------------------------------------------------------------------------------------------


def test_system_nodegroup_runs_operator_and_head(default_synth):
    default_synth.cluster.has_resource_properties(
        "AWS::EKS::Nodegroup",
        {
            "InstanceTypes": ["m7i.xlarge"],
            "AmiType": "AL2023_x86_64_STANDARD",
            "Labels": SYSTEM_NODE_LABELS,
            "ScalingConfig": {"MinSize": 1, "DesiredSize": 1, "MaxSize": 1},
        },
    )


def test_cluster_stack_holds_no_gpu_capacity(synthesized):
    # GIVEN any GPU type THEN the GPU node group lives only in the GPU stack (it can be destroyed first and alone)
    nodegroups = synthesized.cluster.find_resources("AWS::EKS::Nodegroup")
    assert [ng["Properties"]["Labels"] for ng in nodegroups.values()] == [SYSTEM_NODE_LABELS]
    synthesized.gpu.resource_count_is("AWS::EKS::Nodegroup", 1)


def test_gpu_stack_depends_on_cluster_stack_and_not_the_reverse(default_synth):
    stacks = default_synth.stacks
    assert stacks.cluster in stacks.gpu.dependencies
    assert stacks.gpu not in stacks.cluster.dependencies
    assert "Fn::ImportValue" not in str(default_synth.cluster.to_json())


# -- GPU node group ---------------------------------------------------------------------------------------------


def test_gpu_nodegroup_labels_taint_ami_and_size(synthesized):
    nodegroup = only(synthesized.gpu, "AWS::EKS::Nodegroup")["Properties"]
    assert nodegroup["AmiType"] == "AL2023_x86_64_NVIDIA"
    assert nodegroup["Labels"] == GPU_NODE_LABELS
    assert nodegroup["Labels"]["role"] == "gpu-worker" and nodegroup["Labels"]["nvidia.com/gpu.present"] == "true"
    assert nodegroup["Taints"] == [{"Key": GPU_TAINT.key, "Value": "true", "Effect": "NO_SCHEDULE"}]
    assert nodegroup["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 2, "MaxSize": 2}
    assert nodegroup["CapacityType"] == "ON_DEMAND"


def test_gpu_nodegroup_uses_exactly_one_private_subnet_in_the_gpu_az(synthesized):
    (subnet_ref,) = only(synthesized.gpu, "AWS::EKS::Nodegroup")["Properties"]["Subnets"]
    export = subnet_ref["Fn::ImportValue"]
    # Resolve the export back to the subnet in the cluster stack and read its AZ.
    cluster = synthesized.cluster.to_json()
    (output,) = [o for o in cluster["Outputs"].values() if o.get("Export", {}).get("Name") == export]
    subnet = cluster["Resources"][output["Value"]["Ref"]]
    assert subnet["Type"] == "AWS::EC2::Subnet"
    assert subnet["Properties"]["AvailabilityZone"] == synthesized.settings.gpu_availability_zone == "us-east-2a"
    assert subnet["Properties"]["MapPublicIpOnLaunch"] is False


def test_gpu_az_setting_moves_the_nodegroup_subnet():
    synth = synthesize(gpuAvailabilityZone="us-east-2c")
    (subnet_ref,) = only(synth.gpu, "AWS::EKS::Nodegroup")["Properties"]["Subnets"]
    cluster = synth.cluster.to_json()
    (output,) = [
        o for o in cluster["Outputs"].values() if o.get("Export", {}).get("Name") == subnet_ref["Fn::ImportValue"]
    ]
    assert cluster["Resources"][output["Value"]["Ref"]]["Properties"]["AvailabilityZone"] == "us-east-2c"


def test_launch_template_has_one_efa_interface_per_network_card(synthesized):
    instance = catalog.gpu_instance(synthesized.settings.nodes.gpu_instance_type)
    interfaces = launch_template_data(synthesized)["NetworkInterfaces"]
    # THEN one EFA interface per card: p5.48xlarge 32, p5en.48xlarge 16, p4d/g6e.48xlarge 4, g6.12xlarge 1
    assert len(interfaces) == instance.efa_interfaces
    assert [i["NetworkCardIndex"] for i in interfaces] == list(range(instance.efa_interfaces))
    assert interfaces[0]["DeviceIndex"] == 0
    assert all(i["DeviceIndex"] == 1 for i in interfaces[1:])
    # card 0 is EFA with ENA (the node's IP); the other cards are efa-only (no IP) where the row says so, else efa
    secondary = "efa-only" if instance.efa_only_secondary else "efa"
    assert [i["InterfaceType"] for i in interfaces] == ["efa"] + [secondary] * (instance.efa_interfaces - 1)


def test_p5_launch_template_has_32_efa_interfaces():
    assert len(launch_template_data(synthesize(gpuInstanceType="p5.48xlarge"))["NetworkInterfaces"]) == 32


def test_every_interface_carries_the_efa_and_cluster_security_groups(synthesized):
    efa_group = next(iter(synthesized.gpu.find_resources("AWS::EC2::SecurityGroup")))
    for interface in launch_template_data(synthesized)["NetworkInterfaces"]:
        groups = interface["Groups"]
        assert {"Fn::GetAtt": [efa_group, "GroupId"]} in groups
        assert any("ClusterSecurityGroupId" in str(g) for g in groups), groups
        assert len(groups) == 2


def test_efa_security_group_allows_all_traffic_to_and_from_itself_only(default_synth):
    gpu = default_synth.gpu
    (group_id,) = gpu.find_resources("AWS::EC2::SecurityGroup")
    own = {"Fn::GetAtt": [group_id, "GroupId"]}
    ingress = only(gpu, "AWS::EC2::SecurityGroupIngress")["Properties"]
    egress = only(gpu, "AWS::EC2::SecurityGroupEgress")["Properties"]
    assert ingress["IpProtocol"] == "-1" and ingress["SourceSecurityGroupId"] == own and ingress["GroupId"] == own
    assert egress["IpProtocol"] == "-1" and egress["DestinationSecurityGroupId"] == own and egress["GroupId"] == own
    # No other egress: the group must not open the nodes to the world (the cluster group handles that).
    assert (
        "SecurityGroupEgress" not in gpu.to_json()["Resources"][group_id]["Properties"]
        or gpu.to_json()["Resources"][group_id]["Properties"]["SecurityGroupEgress"][0]["CidrIp"]
        == "255.255.255.255/32"
    )


def test_launch_template_requires_imdsv2_and_encrypted_gp3_root(synthesized):
    data = launch_template_data(synthesized)
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    (root,) = data["BlockDeviceMappings"]
    assert root["Ebs"]["VolumeType"] == "gp3" and root["Ebs"]["Encrypted"] is True
    assert root["Ebs"]["VolumeSize"] == synthesized.settings.nodes.gpu_root_volume_gib
    assert data["InstanceType"] == synthesized.settings.nodes.gpu_instance_type
    assert "ImageId" not in data and "UserData" not in data  # EKS picks and bootstraps the AL2023 NVIDIA AMI


def test_cluster_placement_group_by_default(synthesized):
    synthesized.gpu.has_resource_properties("AWS::EC2::PlacementGroup", {"Strategy": "cluster"})
    (group_id,) = synthesized.gpu.find_resources("AWS::EC2::PlacementGroup")
    data = launch_template_data(synthesized)
    assert data["Placement"] == {"GroupName": {"Fn::GetAtt": [group_id, "GroupName"]}}
    assert "CapacityReservationSpecification" not in data


def test_capacity_reservation_is_targeted_and_placement_group_skipped():
    # GIVEN a capacity reservation WHEN placementGroup stays auto
    synth = synthesize(capacityReservationId="cr-0123456789abcdef0")
    data = launch_template_data(synth)
    # THEN the launch template targets the reservation and no placement group exists
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}
    }
    assert "Placement" not in data
    synth.gpu.resource_count_is("AWS::EC2::PlacementGroup", 0)


def test_placement_group_can_be_turned_off():
    synth = synthesize(placementGroup="off")
    synth.gpu.resource_count_is("AWS::EC2::PlacementGroup", 0)
    assert "Placement" not in launch_template_data(synth)


def test_node_count_and_instance_type_follow_settings():
    synth = synthesize(gpuInstanceType="p5en.48xlarge", gpuNodeCount="4", systemNodeCount="2")
    assert only(synth.gpu, "AWS::EKS::Nodegroup")["Properties"]["ScalingConfig"]["DesiredSize"] == 4
    assert launch_template_data(synth)["InstanceType"] == "p5en.48xlarge"
    synth.cluster.has_resource_properties(
        "AWS::EKS::Nodegroup", {"ScalingConfig": {"DesiredSize": 2, "MinSize": 2, "MaxSize": 2}}
    )


# -- Helm charts ------------------------------------------------------------------------------------------------


def helm_charts(synth) -> dict[str, dict]:
    charts = synth.cluster.find_resources("Custom::AWSCDK-EKS-HelmChart")
    return {c["Properties"]["Chart"]: c["Properties"] for c in charts.values()}


def test_helm_charts_are_pinned_to_settings(default_synth):
    charts = helm_charts(default_synth)
    addons = default_synth.settings.addons
    assert charts["kuberay-operator"]["Version"] == addons.kuberay_version == "1.7.0"
    assert charts["nvidia-device-plugin"]["Version"] == addons.nvidia_device_plugin_version == "0.20.0"
    assert charts["aws-efa-k8s-device-plugin"]["Version"] == addons.efa_device_plugin_version
    assert charts["kuberay-operator"]["Repository"] == "https://ray-project.github.io/kuberay-helm/"
    assert charts["nvidia-device-plugin"]["Repository"] == "https://nvidia.github.io/k8s-device-plugin"
    assert charts["aws-efa-k8s-device-plugin"]["Repository"] == "https://aws.github.io/eks-charts"


def test_chart_versions_follow_settings():
    charts = helm_charts(synthesize(kuberayVersion="1.4.0", nvidiaDevicePluginVersion="0.19.2"))
    assert charts["kuberay-operator"]["Version"] == "1.4.0"
    assert charts["nvidia-device-plugin"]["Version"] == "0.19.2"


def chart_values(synth, chart: str) -> dict:
    import json

    return json.loads(helm_charts(synth)[chart]["Values"])


@pytest.mark.parametrize("chart", ["nvidia-device-plugin", "aws-efa-k8s-device-plugin"])
def test_device_plugins_schedule_on_gpu_nodes_only(default_synth, chart):
    values = chart_values(default_synth, chart)
    # nodeSelector picks the GPU node group's role label, which only GPU nodes carry...
    assert values["nodeSelector"].items() <= GPU_NODE_LABELS.items()
    assert not values["nodeSelector"].items() <= SYSTEM_NODE_LABELS.items()
    # ...and the toleration lets the DaemonSet onto the tainted GPU nodes.
    assert {"key": GPU_TAINT.key, "operator": "Exists", "effect": GPU_TAINT.effect} in values["tolerations"]


def test_kuberay_operator_runs_on_system_nodes(default_synth):
    assert chart_values(default_synth, "kuberay-operator")["nodeSelector"] == {"role": SYSTEM_NODE_LABELS["role"]}
    assert helm_charts(default_synth)["kuberay-operator"]["Namespace"] == "kuberay-system"


# -- outputs ----------------------------------------------------------------------------------------------------


def test_outputs_name_cluster_kubeconfig_az_and_cost(synthesized):
    outputs = synthesized.cluster.to_json()["Outputs"]
    settings = synthesized.settings
    assert (
        outputs["UpdateKubeconfigCommand"]["Value"] == "aws eks update-kubeconfig --region us-east-2 --name ray-train"
    )
    assert outputs["ClusterName"]["Value"] == {
        "Ref": next(iter(synthesized.cluster.find_resources("AWS::EKS::Cluster")))
    }
    assert float(outputs["EstimatedUsdPerHourWithoutGpuStack"]["Value"]) == pytest.approx(
        hourly_cost(settings).without_gpu_stack, abs=0.01
    )
    # the GPU settings' outputs are the GPU stack's: changing them leaves the cluster stack alone
    gpu_outputs = synthesized.gpu.to_json()["Outputs"]
    assert gpu_outputs["GpuAvailabilityZone"]["Value"] == "us-east-2a"
    assert float(gpu_outputs["EstimatedUsdPerHour"]["Value"]) == pytest.approx(hourly_cost(settings).total, abs=0.01)
    assert float(gpu_outputs["EstimatedGpuUsdPerHour"]["Value"]) == pytest.approx(
        2 * settings.nodes.gpu_instance.usd_per_hour, abs=0.01
    )
    assert gpu_outputs["TrainingJobWatchCommand"]["Value"] == "kubectl -n ray get rayjob train-efa -w"


def test_default_stack_costs_about_nine_and_a_half_dollars_an_hour(default_synth):
    # the AWS reference deployment (2 x g6.12xlarge + control plane + NAT + system node) ~ USD 9.50/h at the On-Demand
    # prices of core/data/on_demand_prices.csv
    assert float(default_synth.gpu.to_json()["Outputs"]["EstimatedUsdPerHour"]["Value"]) == pytest.approx(9.5, abs=0.2)


def test_stacks_are_tagged(default_synth):
    default_synth.gpu.has_resource_properties(
        "AWS::EKS::Nodegroup", {"Tags": Match.object_like({"project": "ray-efa"})}
    )


# -- scaled to zero ---------------------------------------------------------------------------------------------


def test_scaled_to_zero_keeps_both_stacks_and_the_node_group_at_zero_nodes_with_no_job():
    # GIVEN gpuNodeCount 0 WHEN synthesized (cdk-nag and the planner included)
    synth = synthesize(gpuNodeCount=0)
    # THEN the GPU node group stays, at zero (EKS needs maxSize >= 1), with its launch template and placement group
    scaling = only(synth.gpu, "AWS::EKS::Nodegroup")["Properties"]["ScalingConfig"]
    assert scaling == {"MinSize": 0, "DesiredSize": 0, "MaxSize": 1}
    only(synth.gpu, "AWS::EC2::LaunchTemplate")
    only(synth.gpu, "AWS::EC2::PlacementGroup")
    # ...no job is applied (no worker could run), but its settings (what `submit` reads), and the cluster stack is
    # the one of a running deployment
    from tests.infra.test_workload import find, job_manifests, manifest_objects, manifests

    assert [o["kind"] for r in job_manifests(synth.gpu).values() for o in manifest_objects(r)] == ["ConfigMap"]
    find(synth.gpu, "ConfigMap", "train-efa-settings")
    # ...but the job guard stays: scaling to zero under a job that `submit` started is a roll it refuses
    assert manifests(synth.gpu) != {} and only(synth.gpu, "Custom::RayEfa-JobDisruptionGuard")
    assert synth.cluster.to_json() == synthesize().cluster.to_json()
    outputs = synth.gpu.to_json()["Outputs"]
    assert float(outputs["EstimatedGpuUsdPerHour"]["Value"]) == 0
    assert outputs["ComeBackCommand"]["Value"] == "npx cdk deploy ray-train-gpu -c gpuNodeCount=2"


# -- the open catalog -------------------------------------------------------------------------------------------


def test_p6_b200_synthesizes_with_eight_efa_interfaces_and_gpudirect_rdma():
    synth = synthesize(gpuInstanceType="p6-b200.48xlarge")
    data = launch_template_data(synth)
    assert data["InstanceType"] == "p6-b200.48xlarge"
    assert [i["InterfaceType"] for i in data["NetworkInterfaces"]] == ["efa"] + ["efa-only"] * 7
    from tests.infra.test_workload import find

    _, _, job = find(synth.gpu, "RayJob")
    (worker,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"]
    assert worker["resources"]["limits"]["vpc.amazonaws.com/efa"] == "8"
    assert {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"} in worker["env"]


def test_a_gpu_type_of_your_own_goes_into_the_construct_checked():
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2

    from ray_efa.infra.cluster import RayEksCluster
    from ray_efa.infra.gpu_nodegroup import EfaGpuNodegroup

    row = catalog.describe_gpu_instance(
        {
            "name": "p6-b300.48xlarge",
            "gpus": 8,
            "gpuName": "B300",
            "gpuMemoryGib": 268,
            "peakBf16Tflops": 2250,
            "memoryBandwidthGbS": 8000,
            "vcpus": 192,
            "memoryGib": 4096,
            "efaInterfaces": 16,
            "networkGbps": 6400,
            "usdPerHour": 150.0,
        }
    )
    stack = cdk.Stack(cdk.App(), "Platform", env=cdk.Environment(region="us-east-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-east-2a", "us-east-2b"])
    ray = RayEksCluster(stack, "Ray", vpc=vpc)
    gpu = EfaGpuNodegroup(stack, "Gpu", cluster=ray.cluster, vpc=vpc, instance_type=row)
    data = stack.resolve(gpu.launch_template.launch_template_data)
    assert data["instanceType"] == "p6-b300.48xlarge" and len(data["networkInterfaces"]) == 16
    no_efa = dataclasses.replace(row, name="p6-b300x.48xlarge", efa_interfaces=0)
    with pytest.raises(ValueError, match="EfaGpuNodegroup instance_type efaInterfaces must be >= 1"):
        EfaGpuNodegroup(stack, "NoEfa", cluster=ray.cluster, vpc=vpc, instance_type=no_efa)


def test_a_described_type_with_g6e_48xlarge_facts_gets_the_built_in_rows_launch_template_interfaces():
    from ray_efa.infra.gpu_nodegroup import launch_template_network_interfaces

    # GIVEN g6e.48xlarge's facts described under a name of their own, efaOnlySecondary unsaid
    described = catalog.describe_gpu_instance(
        {
            "name": "x6e.48xlarge",
            "gpus": 8,
            "gpuName": "L40S",
            "vcpus": 192,
            "memoryGib": 1536,
            "efaInterfaces": 4,
            "networkGbps": 400,
            "usdPerHour": 30.1312,
        }
    )
    built_in = catalog.gpu_instance("g6e.48xlarge")
    # THEN the launch template's interfaces are the built-in row's: efa on all 4 cards, the same groups
    interfaces = launch_template_network_interfaces(described, ["sg-efa", "sg-cluster"])
    assert interfaces == launch_template_network_interfaces(built_in, ["sg-efa", "sg-cluster"])
    assert [i.interface_type for i in interfaces] == ["efa"] * 4


# -- deviceAllocation dra -----------------------------------------------------------------------------------------


def test_dra_installs_both_dra_drivers_on_the_gpu_nodes_and_no_device_plugin():
    synth = synthesize(deviceAllocation="dra", gpuInstanceType="p5.48xlarge")
    charts = {
        c["Properties"]["Chart"]: c for c in synth.cluster.find_resources("Custom::AWSCDK-EKS-HelmChart").values()
    }
    assert set(charts) == {"kuberay-operator", "dra-driver-nvidia-gpu", "aws-dranet"}
    nvidia, efa = charts["dra-driver-nvidia-gpu"]["Properties"], charts["aws-dranet"]["Properties"]
    assert nvidia["Repository"] == "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu"
    assert (nvidia["Version"], nvidia["Namespace"], efa["Version"], efa["Namespace"]) == (
        "0.4.1",
        "nvidia",
        "1.0.0",
        "kube-system",
    )
    values = json.loads(nvidia["Values"])
    assert values["resources"]["computeDomains"] == {"enabled": False} and values["gpuResourcesEnabledOverride"] is True
    assert values["kubeletPlugin"]["nodeSelector"] == {"role": GPU_NODE_LABELS["role"]}
    assert json.loads(efa["Values"])["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    # the training job claims from its ResourceClaimTemplate, applied before the RayJob
    from tests.infra.test_workload import find

    # (p5's two claims: the first template before the second, the second before the RayJob)
    first_id, _, _ = find(synth.gpu, "ResourceClaimTemplate", "train-efa-gpus-efa-0")
    second_id, second, _ = find(synth.gpu, "ResourceClaimTemplate", "train-efa-gpus-efa-1")
    job_id, job_resource, _ = find(synth.gpu, "RayJob")
    assert second_id in job_resource["DependsOn"] and first_id in second["DependsOn"]


def test_dra_drivers_refuse_a_kubernetes_without_dra():
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2
    from aws_cdk import aws_eks_v2 as eks

    from ray_efa.infra.dra_drivers import GpuDraDrivers

    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(region="us-east-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-east-2a", "us-east-2b"])
    cluster = eks.Cluster.from_cluster_attributes(stack, "C", cluster_name="c", vpc=vpc)
    with pytest.raises(ValueError, match=r"GpuDraDrivers kubernetes_version '1.33'.*needs Kubernetes 1.34 or later"):
        GpuDraDrivers(stack, "Dra", cluster=cluster, kubernetes_version="1.33")
