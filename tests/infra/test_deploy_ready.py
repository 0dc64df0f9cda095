"""What a first deploy needs beyond a clean synth: disks that hold the image, people who can reach the cluster,
Capacity Blocks, and a teardown that leaves only what it says."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest

from ray_efa.core.cost import retained_after_destroy
from ray_efa.core.settings import Settings, SettingsError
from ray_efa.infra.access import NO_ADMIN_WARNING
from ray_efa.infra.app import build_stacks, feature_flags
from tests.infra.conftest import synthesize

ADMIN = "arn:aws:iam::111122223333:role/aws-reserved/sso.amazonaws.com/us-east-2/AWSReservedSSO_Admin_0123abcd"
OTHER = "arn:aws:iam::111122223333:user/alice"
BLOCK = {
    "gpuInstanceType": "p5.48xlarge",
    "capacityReservationId": "cr-0123456789abcdef0",
    "capacityReservationType": "capacity-block",
}
DLC = Settings().workload.dlc_image


def resources(template, resource_type: str) -> dict:
    return template.find_resources(resource_type)


def system_launch_template(synth) -> dict:
    (nodegroup,) = resources(synth.cluster, "AWS::EKS::Nodegroup").values()
    template_id = nodegroup["Properties"]["LaunchTemplate"]["Id"]["Ref"]
    return synth.cluster.to_json()["Resources"][template_id]["Properties"]["LaunchTemplateData"]


def gpu_launch_template(synth) -> dict:
    (template,) = resources(synth.gpu, "AWS::EC2::LaunchTemplate").values()
    return template["Properties"]["LaunchTemplateData"]


# -- root volumes ---------------------------------------------------------------------------------------------------


def test_system_nodes_get_an_encrypted_gp3_root_of_system_root_volume_gib(default_synth):
    # GIVEN the defaults WHEN synthesized
    (nodegroup,) = resources(default_synth.cluster, "AWS::EKS::Nodegroup").values()
    # THEN the size lives in a launch template (EKS refuses DiskSize next to one) and is 100 GiB, not EKS's 20
    assert "DiskSize" not in nodegroup["Properties"]
    assert nodegroup["Properties"]["LaunchTemplate"]["Version"]["Fn::GetAtt"][1] == "LatestVersionNumber"
    (root,) = system_launch_template(default_synth)["BlockDeviceMappings"]
    assert root == {
        "DeviceName": "/dev/xvda",
        "Ebs": {"VolumeSize": 100, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True},
    }


def test_system_root_volume_follows_the_setting():
    (root,) = system_launch_template(synthesize(systemRootVolumeGib="250"))["BlockDeviceMappings"]
    assert root["Ebs"]["VolumeSize"] == 250


def test_system_nodes_require_imdsv2_with_hop_limit_one(default_synth):
    # Pods on the system nodes (operator, Ray head, submitter) must not reach the node role through IMDS
    data = system_launch_template(default_synth)
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpTokens": "required",
        "HttpPutResponseHopLimit": 1,
    }
    assert "InstanceType" not in data and "ImageId" not in data and "UserData" not in data


def test_the_dlc_image_size_is_recorded_with_its_source():
    from ray_efa.infra import node_storage

    image = node_storage.CONTAINER_IMAGES[DLC]
    assert image.unpacked_gib >= 20 and "PR #3270" in image.source
    # 30 GiB unpacked + half again while pulling + the OS, with the kubelet's 15% eviction margin
    assert node_storage.min_root_volume_gib(DLC) == 65
    assert node_storage.min_root_volume_gib("registry.example.com/ray:custom") is None


def test_a_system_root_volume_too_small_for_the_image_is_refused_at_synth():
    # GIVEN EKS's old default of 20 GiB for the nodes that run the Ray head and the submitter
    settings = Settings.from_context({"systemRootVolumeGib": "20"})
    app = cdk.App(context=feature_flags())
    # WHEN the stacks are built THEN synth stops, naming the key, the value and the minimum
    with pytest.raises(SettingsError) as error:
        build_stacks(app, settings)
    (problem,) = error.value.problems
    assert problem.key == "systemRootVolumeGib" and problem.value == 20
    assert "at least 65 GiB" in problem.message and DLC in problem.message


def test_a_gpu_root_volume_too_small_for_the_image_is_refused():
    from ray_efa.infra.node_storage import check_root_volume

    # gpuRootVolumeGib's own range starts at 100, above today's minimum: the construct still checks the image
    with pytest.raises(SettingsError, match="gpuRootVolumeGib: must be at least 65 GiB"):
        check_root_volume("gpuRootVolumeGib", 64, DLC)
    check_root_volume("gpuRootVolumeGib", 65, DLC)


def test_an_image_of_unknown_size_is_not_checked():
    synth = synthesize(systemRootVolumeGib="40", dlcImage="registry.example.com/ray:custom")
    (root,) = system_launch_template(synth)["BlockDeviceMappings"]
    assert root["Ebs"]["VolumeSize"] == 40


def test_system_root_volume_setting_has_gp3_bounds():
    with pytest.raises(SettingsError, match="systemRootVolumeGib: must be between 20 and 16384 GiB, got 10"):
        Settings.from_context({"systemRootVolumeGib": "10"})


# -- access entries -------------------------------------------------------------------------------------------------


def test_admin_principals_get_cluster_admin_access_entries():
    synth = synthesize(adminPrincipalArns=f"{ADMIN},{OTHER}")
    entries = sorted(
        resources(synth.cluster, "AWS::EKS::AccessEntry").values(), key=lambda e: str(e["Properties"]["PrincipalArn"])
    )
    ours = [e["Properties"] for e in entries if e["Properties"]["PrincipalArn"] in (ADMIN, OTHER)]
    assert [e["PrincipalArn"] for e in ours] == [ADMIN, OTHER]
    for entry in ours:
        assert entry["Type"] == "STANDARD"
        (policy,) = entry["AccessPolicies"]
        assert policy["AccessScope"] == {"Type": "cluster"}
        assert json.dumps(policy["PolicyArn"]).endswith('cluster-access-policy/AmazonEKSClusterAdminPolicy"]]}')


def test_removing_one_admin_leaves_the_other_entry_in_place():
    # An entry's logical id follows its ARN, not its position: EKS allows one entry per principal, so a replaced
    # entry would collide with its predecessor
    def logical_ids(arns: str) -> dict[str, str]:
        entries = resources(synthesize(adminPrincipalArns=arns).cluster, "AWS::EKS::AccessEntry")
        return {
            e["Properties"]["PrincipalArn"]: lid
            for lid, e in entries.items()
            if isinstance(e["Properties"]["PrincipalArn"], str)
        }

    assert logical_ids(f"{ADMIN},{OTHER}")[OTHER] == logical_ids(OTHER)[OTHER]


def test_without_admins_synth_warns_that_nobody_can_reach_the_cluster(default_synth):
    # GIVEN no adminPrincipalArns THEN the assembly carries a warning the CDK CLI prints at synth
    messages = [
        message.entry.data
        for stack in default_synth.assembly.stacks
        for message in stack.messages
        if message.level == cdk.cx_api.SynthesisMessageLevel.WARNING
    ]
    assert any("(setting adminPrincipalArns) is empty: no human IAM principal" in str(m) for m in messages), messages
    assert "ray-efa whoami" in NO_ADMIN_WARNING
    # ...and it names the prop a CDK app of its own passes, where `-c` does nothing
    assert "pass admin_principal_arns=[your role ARN] to RayEksCluster" in NO_ADMIN_WARNING


def test_with_admins_and_a_narrowed_endpoint_there_is_no_warning():
    # (an endpoint open to 0.0.0.0/0 warns on its own: tests/infra/test_stacks.py)
    synth = synthesize(adminPrincipalArns=ADMIN, publicAccessCidrs="203.0.113.0/24")
    report = json.loads((Path(synth.assembly.directory) / "validation-report.json").read_text())
    assert all(plugin["violations"] == [] for plugin in report["pluginReports"])


@pytest.mark.parametrize(
    "arn, message",
    [
        ("arn:aws:sts::111122223333:assumed-role/Admin/me", "must be IAM role or user ARNs, not an STS session"),
        ("arn:aws:iam::111122223333:group/Admins", "must be IAM role or user ARNs"),
        ("arn:aws:iam::1111:role/Admin", "must be IAM role or user ARNs"),
        (f"{OTHER},{OTHER}", "must not repeat an ARN"),
    ],
)
def test_admin_principal_arns_are_validated(arn, message):
    with pytest.raises(SettingsError, match="adminPrincipalArns: " + message):
        Settings.from_context({"adminPrincipalArns": arn})


def test_kubeconfig_command_uses_the_callers_own_credentials(default_synth):
    # The admin is the identity the AWS CLI already uses, so no --role-arn: assuming one's own role would need a
    # trust policy that allows it
    command = default_synth.cluster.to_json()["Outputs"]["UpdateKubeconfigCommand"]["Value"]
    assert command == "aws eks update-kubeconfig --region us-east-2 --name ray-train" and "--role-arn" not in command


# -- Capacity Blocks ------------------------------------------------------------------------------------------------


def test_capacity_block_nodes_use_the_capacity_block_market():
    synth = synthesize(**BLOCK)
    (nodegroup,) = resources(synth.gpu, "AWS::EKS::Nodegroup").values()
    data = gpu_launch_template(synth)
    # THEN what the EKS User Guide asks of a managed node group with Capacity Blocks
    assert nodegroup["Properties"]["CapacityType"] == "CAPACITY_BLOCK"
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}
    }
    assert data["InstanceType"] == "p5.48xlarge" and "InstanceTypes" not in nodegroup["Properties"]
    # ...and no placement group: the block already places its instances in one UltraCluster
    assert "Placement" not in data
    synth.gpu.resource_count_is("AWS::EC2::PlacementGroup", 0)


def test_an_odcr_stays_on_demand_without_a_market_type():
    synth = synthesize(capacityReservationId="cr-0123456789abcdef0")
    (nodegroup,) = resources(synth.gpu, "AWS::EKS::Nodegroup").values()
    assert nodegroup["Properties"]["CapacityType"] == "ON_DEMAND"
    assert "InstanceMarketOptions" not in gpu_launch_template(synth)


@pytest.mark.parametrize(
    "context, key, message",
    [
        (
            {"capacityReservationType": "capacity-block", "gpuInstanceType": "p5.48xlarge"},
            "capacityReservationType",
            "needs capacityReservationId",
        ),
        ({**BLOCK, "gpuInstanceType": "g6e.48xlarge"}, "gpuInstanceType", "must be a type Capacity Blocks offer"),
        ({**BLOCK, "placementGroup": "on"}, "placementGroup", "must be auto or off"),
        ({"capacityReservationType": "spot"}, "capacityReservationType", "must be one of odcr, capacity-block"),
    ],
)
def test_capacity_block_settings_are_validated(context, key, message):
    with pytest.raises(SettingsError, match=f"{key}: {message}"):
        Settings.from_context(context)


def test_p5_secondary_cards_are_efa_only():
    interfaces = gpu_launch_template(synthesize(**BLOCK))["NetworkInterfaces"]
    assert interfaces[0]["InterfaceType"] == "efa" and interfaces[0]["DeviceIndex"] == 0
    assert {i["InterfaceType"] for i in interfaces[1:]} == {"efa-only"} and len(interfaces) == 32


# -- logs and teardown ----------------------------------------------------------------------------------------------


def test_every_log_group_is_encrypted_expires_and_goes_with_the_stack(default_synth):
    groups = resources(default_synth.cluster, "AWS::Logs::LogGroup")
    # control plane, VPC flow logs, the kubectl provider's two functions, the default-SG function, the KubeRay CRDs' one,
    # the system nodes' job guard's
    assert len(groups) == 7
    for group in groups.values():
        assert group["Properties"]["RetentionInDays"] == 365
        assert "KmsKeyId" in group["Properties"]
        assert group["DeletionPolicy"] == "Delete"


def test_log_retention_follows_the_setting():
    groups = resources(synthesize(logRetentionDays="30").cluster, "AWS::Logs::LogGroup")
    assert {g["Properties"]["RetentionInDays"] for g in groups.values()} == {30}
    with pytest.raises(SettingsError, match="logRetentionDays: must be one of 1, 3, 5"):
        Settings.from_context({"logRetentionDays": "42"})


def test_control_plane_logs_go_to_a_log_group_the_stack_created_first(default_synth):
    template = default_synth.cluster.to_json()["Resources"]
    (group_id,) = [
        lid
        for lid, r in template.items()
        if r["Type"] == "AWS::Logs::LogGroup" and r["Properties"].get("LogGroupName") == "/aws/eks/ray-train/cluster"
    ]
    (cluster,) = [r for r in template.values() if r["Type"] == "AWS::EKS::Cluster"]
    assert group_id in cluster["DependsOn"]


def test_every_lambda_function_writes_to_a_log_group_of_the_stack(default_synth):
    # Otherwise Lambda creates /aws/lambda/<name> on first write: never expiring, left after cdk destroy
    template = default_synth.cluster.to_json()["Resources"]
    named = {
        json.dumps(r["Properties"].get("LogGroupName")) for r in template.values() if r["Type"] == "AWS::Logs::LogGroup"
    }
    functions = [lid for lid, r in template.items() if r["Type"] == "AWS::Lambda::Function"]
    # the kubectl provider's two, the default-SG one, the KubeRay CRDs' one, the system nodes' job guard
    assert len(functions) == 5
    for function in functions:
        assert json.dumps({"Fn::Join": ["", ["/aws/lambda/", {"Ref": function}]]}) in named, function


def test_log_groups_outlive_the_custom_resources_whose_functions_write_to_them(default_synth):
    # cdk destroy deletes the Helm releases and manifests through the kubectl provider: its log groups must still exist
    template = default_synth.cluster.to_json()["Resources"]
    provider_groups = {
        lid for lid, r in template.items() if r["Type"] == "AWS::Logs::LogGroup" and "KubectlProvider" in lid
    }
    assert len(provider_groups) == 2
    for lid, resource in template.items():
        if resource["Type"].startswith("Custom::AWSCDK-EKS-"):
            assert provider_groups <= set(resource.get("DependsOn", [])), lid


def test_the_logs_key_lets_cloudwatch_logs_use_it_for_this_accounts_log_groups_only(default_synth):
    keys = resources(default_synth.cluster, "AWS::KMS::Key")
    assert len(keys) == 2  # Kubernetes secrets, log groups
    statements = [
        s
        for k in keys.values()
        for s in k["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Principal", {}).get("Service") == "logs.us-east-2.amazonaws.com"
    ]
    (statement,) = statements
    assert "kms:EncryptionContext:aws:logs:arn" in statement["Condition"]["ArnLike"]
    for key in keys.values():
        assert key["DeletionPolicy"] == "Delete" and key["Properties"]["PendingWindowInDays"] == 7
        assert key["Properties"]["EnableKeyRotation"] is True


def test_destroy_leaves_only_the_checkpoint_bucket(default_synth):
    # GIVEN both stacks THEN the only resource CloudFormation keeps on delete is the checkpoint bucket
    retained = [
        (stack, r["Type"])
        for stack, template in (("cluster", default_synth.cluster), ("gpu", default_synth.gpu))
        for r in template.to_json()["Resources"].values()
        if r.get("DeletionPolicy") in ("Retain", "RetainExceptOnCreate")
    ]
    assert retained == [("cluster", "AWS::S3::Bucket")]
    # ...and the stack says so, with the monthly cost
    output = default_synth.cluster.to_json()["Outputs"]["RetainedAfterDestroy"]["Value"]
    assert output.startswith("the checkpoint S3 bucket") and "USD 0.023 per GB-month" in output


def test_with_storage_of_your_own_destroy_leaves_nothing():
    settings = Settings.from_context({"storagePath": "s3://my-bucket/ray"})
    assert retained_after_destroy(settings) == ()
    synth = synthesize(storagePath="s3://my-bucket/ray")
    assert synth.cluster.to_json()["Outputs"]["RetainedAfterDestroy"]["Value"] == "nothing"


def test_checkpoint_bucket_keeps_overwritten_checkpoints_for_thirty_days(default_synth):
    (bucket,) = resources(default_synth.cluster, "AWS::S3::Bucket").values()
    assert bucket["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    (rule,) = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    assert rule["Status"] == "Enabled" and rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30}
    assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 7}
