"""The settings object: defaults, parsing of context values, and every kind of bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ray_efa.core.settings import (
    ClusterSettings,
    NodeSettings,
    Settings,
    SettingsError,
    TrainingSettings,
    setting_keys,
)


def test_defaults_match_the_reference_deployment():
    s = Settings()
    assert (s.cluster.cluster_name, s.cluster.region, s.cluster.kubernetes_version) == (
        "ray-train",
        "us-east-2",
        "1.36",
    )
    assert (s.nodes.system_instance_type, s.nodes.system_node_count) == ("m7i.xlarge", 1)
    assert (s.nodes.gpu_instance_type, s.nodes.gpu_node_count) == ("g6.12xlarge", 2)
    assert s.nodes.gpu_availability_zone is None and s.gpu_availability_zone == "us-east-2a"
    assert s.nodes.capacity_reservation_id is None and s.nodes.placement_group == "auto" and s.nodes.use_placement_group
    assert s.cluster.vpc_id is None
    assert s.workload.dlc_image == "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
    assert s.workload.ray_version == "2.58.0"
    assert s.addons.nvidia_device_plugin_version == "0.20.0"
    assert s.world_size == 8


def test_context_strings_are_parsed_to_field_types():
    # GIVEN values as `cdk -c` passes them: strings
    s = Settings.from_context(
        {
            "gpuNodeCount": "4",
            "preflight": "false",
            "learningRate": "1e-4",
            "pipPackages": "einops==0.8.1, datasets==4.0.0",
            "gpuAvailabilityZone": "us-east-2c",
            "storagePath": "none",
        }
    )
    assert s.nodes.gpu_node_count == 4 and s.workload.preflight is False and s.training.learning_rate == 1e-4
    assert s.workload.pip_packages == ("einops==0.8.1", "datasets==4.0.0")
    assert s.nodes.gpu_availability_zone == "us-east-2c" and s.workload.storage_path is None


def test_json_values_from_cdk_json_are_accepted():
    s = Settings.from_context({"gpuNodeCount": 3, "preflight": True, "pipPackages": ["a==1"]})
    assert (s.nodes.gpu_node_count, s.workload.preflight, s.workload.pip_packages) == (3, True, ("a==1",))


def test_cdk_own_context_keys_are_not_settings_and_not_errors():
    Settings.from_context(
        {
            "@aws-cdk/core:enablePartitionLiterals": True,
            "availability-zones:account=1:region=us-east-2": ["us-east-2a"],
            "aws:cdk:enable-path-metadata": True,
        }
    )


def test_every_problem_is_reported_at_once_with_key_value_and_allowed():
    with pytest.raises(SettingsError) as caught:
        Settings.from_context({"gpuNodeCount": "zero", "steps": "0", "placementGroup": "sometimes", "model": "gpt-5"})
    problems = {p.key: p for p in caught.value.problems}
    assert set(problems) == {"gpuNodeCount", "steps", "placementGroup", "model"}
    assert problems["gpuNodeCount"].message == "must be an integer"
    assert problems["placementGroup"].message == "must be one of auto, on, off"
    assert "qwen2.5-1.5b" in problems["model"].message
    assert "steps: must be >= 1, got 0" in str(caught.value)


@pytest.mark.parametrize(
    "context, key, fragment",
    [
        ({"seqLen": "40000"}, "seqLen", "must be <= 32768, the max positions of qwen2.5-1.5b"),
        ({"microBatch": "0"}, "microBatch", "must be auto or an integer >= 1"),
        ({"learningRate": "-0.1"}, "learningRate", "must be > 0"),
        ({"model": "llama"}, "model", "must be one of"),
        ({"region": "Ohio"}, "region", "must be a region name"),
        ({"region": "mx-central-1"}, "region", "has no recorded AZ names; set gpuAvailabilityZone"),
        ({"clusterName": "-bad"}, "clusterName", "must be 1-100 letters"),
        ({"vpcId": "vpc-1"}, "vpcId", "must look like vpc-"),
        ({"kubernetesVersion": "1.29"}, "kubernetesVersion", "must be one of 1.35, 1.36"),
        ({"kuberayVersion": "0.6.0"}, "kuberayVersion", "must be one of 1.4.0, 1.7.0"),
        ({"efaDevicePluginVersion": "v0.5.32"}, "efaDevicePluginVersion", "must be one of v0.5.30"),
        (
            {"rayVersion": "2.49.0"},
            "rayVersion",
            "must equal the Ray inside public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1",
        ),
        (
            {"capacityReservationId": "cr-0123456789abcdef0", "placementGroup": "on"},
            "placementGroup",
            "must be auto or off",
        ),
        ({"namespace": "Ray_Jobs"}, "namespace", "must be a DNS label"),
        ({"publicAccessCidrs": "10.0.0.0"}, "publicAccessCidrs", "must be IPv4 CIDRs"),
        ({"gpuRootVolumeGib": "20"}, "gpuRootVolumeGib", "must be between 100 and 16384"),
    ],
)
def test_bad_values_name_the_setting(context, key, fragment):
    with pytest.raises(SettingsError) as caught:
        Settings.from_context(context)
    assert any(p.key == key and fragment in p.message for p in caught.value.problems), caught.value


def test_az_in_a_region_without_a_table_is_checked_by_name():
    zones = {"vpcAvailabilityZones": "mx-central-1a,mx-central-1b"}
    assert (
        Settings.from_context(
            {"region": "mx-central-1", "gpuAvailabilityZone": "mx-central-1b", **zones}
        ).gpu_availability_zone
        == "mx-central-1b"
    )
    assert Settings.from_context({"region": "mx-central-1", **zones}).gpu_availability_zone == "mx-central-1a"
    with pytest.raises(SettingsError, match="vpcAvailabilityZones: must name two AZs or more of mx-central-1"):
        Settings.from_context({"region": "mx-central-1", "gpuAvailabilityZone": "mx-central-1a"})
    with pytest.raises(SettingsError, match="must be an AZ of region mx-central-1"):
        Settings.from_context({"region": "mx-central-1", "gpuAvailabilityZone": "us-east-2a"})


def test_image_by_digest_is_accepted():
    digest = "sha256:" + "a" * 64
    assert Settings.from_context({"dlcImage": f"123456789012.dkr.ecr.us-east-2.amazonaws.com/ray@{digest}"})


@pytest.mark.parametrize(
    "placement, reservation, expected",
    [
        ("auto", None, True),
        ("auto", "cr-0123456789abcdef0", False),
        ("off", None, False),
        ("on", None, True),
    ],
)
def test_placement_group_resolution(placement, reservation, expected):
    s = Settings.from_context({"placementGroup": placement, "capacityReservationId": reservation or ""})
    assert s.nodes.use_placement_group is expected


def test_settings_round_trip_through_json():
    s = Settings.from_context(
        {"gpuInstanceType": "p5.48xlarge", "pipPackages": "x==1", "storagePath": "s3://bucket/runs"}
    )
    assert Settings.from_json(s.to_json()) == s
    assert json.loads(s.to_json())["gpuInstanceType"] == "p5.48xlarge"


def test_replace_changes_by_context_key():
    assert Settings().replace(steps=7, model="tiny").training.steps == 7


def test_every_field_has_a_unique_camel_case_key_and_a_docstring():
    keys = setting_keys()
    for key, (_, info) in keys.items():
        assert key[0].islower() and "_" not in key, key
        assert len(info.doc) > 10, key


@pytest.mark.parametrize("gpu_zone", [None, "us-east-2a", "us-east-2b", "us-east-2c"])
def test_vpc_azs_do_not_move_with_the_gpu_az(gpu_zone):
    # GIVEN any GPU AZ of us-east-2 WHEN the VPC's AZs are derived THEN they are the region's three, in name order
    context = {"gpuAvailabilityZone": gpu_zone} if gpu_zone else {}
    assert Settings.from_context(context).vpc_availability_zones == ("us-east-2a", "us-east-2b", "us-east-2c")


def test_vpc_azs_are_at_most_the_first_three_in_name_order():
    assert Settings.from_context({"region": "us-east-1"}).vpc_availability_zones == (
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
    )
    assert Settings.from_context({"region": "us-west-1"}).vpc_availability_zones == ("us-west-1a", "us-west-1c")


def test_a_gpu_az_outside_the_vpc_azs_is_refused_naming_both_keys():
    # GIVEN us-east-1, whose VPC takes its first three AZs, and GPUs in the fourth
    with pytest.raises(SettingsError) as caught:
        Settings.from_context({"region": "us-east-1", "gpuAvailabilityZone": "us-east-1d"})
    # THEN gpuAvailabilityZone is refused, and the message says how to include it
    (problem,) = caught.value.problems
    assert problem.key == "gpuAvailabilityZone" and problem.value == "us-east-1d"
    assert "must be one of the VPC's AZs (us-east-1a, us-east-1b, us-east-1c)" in problem.message
    assert "vpcAvailabilityZones" in problem.message
    # WHEN vpcAvailabilityZones includes it THEN it is accepted; an existing VPC (vpcId) is checked at synth instead
    chosen = Settings.from_context(
        {"region": "us-east-1", "gpuAvailabilityZone": "us-east-1d", "vpcAvailabilityZones": "us-east-1a,us-east-1d"}
    )
    assert chosen.vpc_availability_zones == ("us-east-1a", "us-east-1d")
    assert Settings.from_context(
        {"region": "us-east-1", "gpuAvailabilityZone": "us-east-1d", "vpcId": "vpc-0123456789abcdef0"}
    )


@pytest.mark.parametrize(
    "zones, fragment",
    [
        ("us-east-2a", "must be 2 to 6 different AZs"),
        ("us-east-2a,us-east-2a", "must be 2 to 6 different AZs"),
        ("us-east-2a,us-west-2b", "must be AZs of region us-east-2"),
    ],
)
def test_bad_vpc_azs_name_the_setting(zones, fragment):
    with pytest.raises(SettingsError) as caught:
        Settings.from_context({"vpcAvailabilityZones": zones})
    assert any(p.key == "vpcAvailabilityZones" and fragment in p.message for p in caught.value.problems), caught.value


_RESEARCHER = "arn:aws:iam::111122223333:role/Researcher"


@pytest.mark.parametrize(
    "context, fragment",
    [
        ({"researcherPrincipalArns": f"{_RESEARCHER},{_RESEARCHER}"}, "must not repeat an ARN"),
        (
            {"researcherPrincipalArns": _RESEARCHER, "adminPrincipalArns": _RESEARCHER},
            "must not name an ARN of adminPrincipalArns",
        ),
        ({"researcherPrincipalArns": "Researcher"}, "must be IAM role or user ARNs"),
        ({"researcherPrincipalArns": "arn:aws:sts::111122223333:assumed-role/Researcher/me"}, "not an STS session"),
    ],
)
def test_bad_researcher_principals_name_the_setting(context, fragment):
    with pytest.raises(SettingsError) as caught:
        Settings.from_context(context)
    assert any(p.key == "researcherPrincipalArns" and fragment in p.message for p in caught.value.problems), (
        caught.value
    )


def test_researcher_principals_are_a_list_of_arns():
    other = "arn:aws:iam::111122223333:user/alice"
    assert Settings.from_context(
        {"researcherPrincipalArns": f"{_RESEARCHER},{other}"}
    ).cluster.researcher_principal_arns == (_RESEARCHER, other)
    assert Settings().cluster.researcher_principal_arns == ()


# -- the typed Python API: strict types, every problem as a SettingsError naming the setting -------------------------


@pytest.mark.parametrize("value", [2.5, True, "4", None])
def test_python_api_takes_the_field_type_only(value):
    # GIVEN a value of the wrong type in the typed API (only context strings are parsed)
    with pytest.raises(SettingsError) as caught:
        NodeSettings(gpu_node_count=value)
    # THEN a SettingsError names the setting, the value and the type; no TypeError
    assert [(p.key, p.value, p.message) for p in caught.value.problems] == [
        ("gpuNodeCount", value, "must be an integer")
    ]


def test_python_api_accepts_names_or_keys_and_a_list_for_a_tuple():
    by_key: dict[str, Any] = {"gpuNodeCount": 4}  # the context key, which pyright does not take for a field name
    cidrs: Any = ["10.0.0.0/8"]  # a list where the field is a tuple: the run-time coercion under test
    assert NodeSettings(gpu_node_count=4) == NodeSettings(**by_key)
    assert ClusterSettings(public_access_cidrs=cidrs).public_access_cidrs == ("10.0.0.0/8",)
    assert TrainingSettings(learning_rate=1).learning_rate == 1.0  # an int is a number


def test_python_api_unknown_field_suggests_the_name():
    with pytest.raises(SettingsError, match=r"gpu_node_cont: unknown setting \(did you mean gpu_node_count\?\)"):
        misspelt: dict[str, Any] = {"gpu_node_cont": 4}  # a caller's typo, which only the run-time check meets
        NodeSettings(**misspelt)


def test_settings_are_frozen():
    with pytest.raises(Exception, match="frozen"):
        Settings().nodes.gpu_node_count = 3  # type: ignore[misc]


def test_python_api_reports_field_and_cross_field_problems_together():
    with pytest.raises(SettingsError) as caught:
        NodeSettings(gpu_node_count=-1, capacity_reservation_id="cr-0123456789abcdef0", placement_group="on")
    assert {p.key for p in caught.value.problems} == {"gpuNodeCount", "placementGroup"}


# -- values the hand-rolled checks let through --------------------------------------------------------------------


@pytest.mark.parametrize(
    "cidrs, message",
    [
        ("999.1.1.1/33", "must be IPv4 CIDRs like 203.0.113.0/24"),
        ("10.0.0.0/33", "must be IPv4 CIDRs like 203.0.113.0/24"),
        ("10.0.0.1/8", "must be a network address with its host bits zero: 10.0.0.0/8"),
        ("2001:db8::/32", "must be IPv4 CIDRs like 203.0.113.0/24"),
    ],
)
def test_cidrs_are_parsed_as_networks(cidrs, message):
    with pytest.raises(SettingsError) as caught:
        Settings.from_context({"publicAccessCidrs": f"10.0.0.0/8,{cidrs}"})
    assert [(p.key, p.value, p.message) for p in caught.value.problems] == [("publicAccessCidrs", cidrs, message)]


def test_a_public_only_endpoint_cannot_be_narrowed():
    # EKS: the nodes reach a public-only endpoint from the internet; CDK refuses to restrict it at synth
    with pytest.raises(SettingsError) as caught:
        Settings.from_context({"endpointAccess": "public", "publicAccessCidrs": "203.0.113.0/24"})
    ((key, value, message),) = [(p.key, p.value, p.message) for p in caught.value.problems]
    assert (key, value) == ("publicAccessCidrs", ["203.0.113.0/24"])
    assert "endpointAccess public" in message and "public_and_private" in message
    assert Settings.from_context({"endpointAccess": "public"}).cluster.endpoint_access == "public"


def test_good_cidrs_pass():
    assert Settings.from_context(
        {"publicAccessCidrs": '["203.0.113.0/24", "198.51.100.7/32"]'}
    ).cluster.public_access_cidrs == ("203.0.113.0/24", "198.51.100.7/32")


@pytest.mark.parametrize(
    "context",
    [
        {"learningRate": "inf"},
        {"learningRate": "nan"},
        {"weightDecay": float("inf")},
        {"preflightMinBusbwGbps": "-inf"},
    ],
)
def test_numbers_must_be_finite(context):
    ((key, _),) = context.items()
    with pytest.raises(SettingsError, match=rf"{key}: must be a finite number"):
        Settings.from_context(context)
    with pytest.raises(SettingsError, match="learningRate: must be a finite number"):
        TrainingSettings(learning_rate=float("inf"))


@pytest.mark.parametrize(
    "path, ok",
    [
        ("s3://bucket/prefix", True),
        ("s3://bucket", True),
        ("/mnt/fsx/runs", True),
        ("bucket/prefix", False),
        ("runs", False),
        ("s3:///prefix", False),
        ("~/ray_results", False),
    ],
)
def test_storage_path_is_s3_or_absolute(path, ok):
    if ok:
        assert Settings.from_context({"storagePath": path}).workload.storage_path == path
    else:
        with pytest.raises(SettingsError, match="storagePath: must"):
            Settings.from_context({"storagePath": path})


def test_a_bad_zone_is_reported_with_field_errors():
    # GIVEN a field error AND a zone of another region WHEN parsed THEN both are in the one error
    with pytest.raises(SettingsError) as caught:
        Settings.from_context(
            {
                "gpuNodeCount": "zero",
                "region": "us-west-2",
                "gpuAvailabilityZone": "us-east-2a",
                "seqLen": "99999",
                "stpes": "3",
            }
        )
    assert [p.key for p in caught.value.problems] == ["gpuNodeCount", "stpes", "seqLen", "gpuAvailabilityZone"]
    assert "stpes: unknown setting (did you mean steps?)" in str(caught.value)


def test_a_rule_over_a_bad_setting_is_skipped_not_misreported():
    # GIVEN a bad region WHEN its zone cannot be judged THEN only the region is reported
    with pytest.raises(SettingsError) as caught:
        Settings.from_context({"region": "Ohio", "gpuAvailabilityZone": "us-east-2a"})
    assert [p.key for p in caught.value.problems] == ["region"]


def test_setting_info_describes_each_key():
    section, info = setting_keys()["placementGroup"]
    assert (section, info.name, info.default, info.choices) == (
        "nodes",
        "placement_group",
        "auto",
        ("auto", "on", "off"),
    )
    assert info.metadata["choices"] == info.choices  # the dataclass-era form still reads


def test_sections_given_as_mappings_are_judged_by_their_own_values():
    # GIVEN a section as a mapping with one bad field and a good region, and a zone of that region
    with pytest.raises(SettingsError) as caught:
        cluster: Any = {"cluster_name": "-bad", "region": "us-west-2"}  # a mapping for a section, judged at run time
        Settings(cluster=cluster, nodes=NodeSettings(gpu_availability_zone="us-west-2a"))
    # THEN the bad field is reported and the zone is judged against us-west-2 (not the default region)
    assert [p.key for p in caught.value.problems] == ["clusterName"]


# -- GPU types of your own (extraGpuInstanceTypes) -------------------------------------------------------------------

_B300 = {
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
    "gpudirectRdma": True,
    "gpuLinkGbS": 900,
}


def test_a_described_gpu_type_is_chosen_by_name_and_travels_with_the_settings():
    import json

    settings = Settings.from_context(
        {"gpuInstanceType": "p6-b300.48xlarge", "extraGpuInstanceTypes": json.dumps(_B300)}
    )
    assert settings.nodes.gpu_instance.gpus == 8 and settings.world_size == 16
    # ...the job's settings.json carries the description, so the container resolves the same row
    assert Settings.from_json(settings.to_json()) == settings


def test_a_described_type_without_efa_names_the_setting():
    import json

    with pytest.raises(SettingsError) as raised:
        Settings.from_context(
            {
                "gpuInstanceType": "p6-b300.48xlarge",
                "extraGpuInstanceTypes": json.dumps([{**_B300, "efaInterfaces": 0}]),
            }
        )
    (problem,) = raised.value.problems
    assert problem.key == "extraGpuInstanceTypes" and "efaInterfaces must be >= 1" in problem.message


def test_a_described_type_the_efa_device_plugin_does_not_list_is_refused_like_a_built_in_one():
    import json

    with pytest.raises(SettingsError) as raised:
        Settings.from_context(
            {
                "gpuInstanceType": "zz9.48xlarge",
                "extraGpuInstanceTypes": json.dumps([{**_B300, "name": "zz9.48xlarge"}]),
            }
        )
    (problem,) = raised.value.problems
    assert problem.key == "efaDevicePluginVersion" and "does not hold zz9.48xlarge" in problem.message


def test_a_described_type_goes_into_a_capacity_block_when_its_row_says_capacity_blocks_offer_it():
    block = {
        "gpuInstanceType": "p6-b300.48xlarge",
        "capacityReservationType": "capacity-block",
        "capacityReservationId": "cr-0123456789abcdef0",
    }
    settings = Settings.from_context(
        {**block, "extraGpuInstanceTypes": json.dumps([{**_B300, "capacityBlocks": True}])}
    )
    assert settings.nodes.capacity_block and settings.nodes.gpu_instance.capacity_blocks
    # ...and is refused, as g6e.48xlarge is, when it does not say so (the default of every row)
    with pytest.raises(SettingsError) as raised:
        Settings.from_context({**block, "extraGpuInstanceTypes": json.dumps([_B300])})
    (problem,) = raised.value.problems
    assert problem.key == "gpuInstanceType" and "must be a type Capacity Blocks offer" in problem.message


def test_the_extra_gpu_instance_types_doc_names_every_description_key():
    from ray_efa.core import catalog
    from ray_efa.core.settings import setting_keys

    _, info = setting_keys()["extraGpuInstanceTypes"]
    assert [key for key in catalog.DESCRIPTION_KEYS if key not in info.doc] == []


def test_an_unknown_type_says_it_can_be_described():
    with pytest.raises(
        SettingsError, match="unknown GPU instance type 'p9.96xlarge'.*describe it in extraGpuInstanceTypes"
    ):
        Settings.from_context({"gpuInstanceType": "p9.96xlarge"})
