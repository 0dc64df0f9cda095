"""The Ray pods' role reads exactly the buckets modelPath, dataset and evalDataset name, under their prefixes, and no
other; without s3:// inputs it gets no read grant at all (the synthesized IAM policy, cdk-nag included)."""

from __future__ import annotations

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_eks_v2 as eks

from ray_efa.infra.checkpoints import CheckpointStorage
from tests.infra.conftest import synthesize

S3_INPUTS = {
    "modelPath": "s3://models-bucket/qwen2.5-1.5b",
    "modelConfig": "qwen2.5-1.5b",
    "dataset": "s3://data-bucket/text/train",
    "evalDataset": "s3://data-bucket/text/eval",
}


def _arn(resource) -> str:
    """A resource of the policy, as text: Fn::Join of the partition and the rest."""
    if isinstance(resource, str):
        return resource.replace("arn:aws:", "arn:<partition>:")  # the stack's region fixes the partition
    parts = resource["Fn::Join"][1]
    return "".join("<partition>" if isinstance(p, dict) and p == {"Ref": "AWS::Partition"} else str(p) for p in parts)


def _statements(template) -> list[dict]:
    policies = template.find_resources("AWS::IAM::Policy")
    (policy,) = [p for name, p in policies.items() if "RayServiceAccount" in name]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def _by_sid(statements: list[dict], sid: str) -> dict | None:
    return next((s for s in statements if s.get("Sid") == sid), None)


def test_synth_grants_read_on_exactly_the_input_buckets():
    # GIVEN s3:// weights and data sets in two buckets
    synth = synthesize(**S3_INPUTS)
    statements = _statements(synth.cluster)
    # THEN objects are readable under the three prefixes, and only there
    objects = _by_sid(statements, "ReadModelAndDataObjects")
    assert objects is not None
    assert objects["Action"] == "s3:GetObject" and objects["Effect"] == "Allow"
    assert sorted(map(_arn, objects["Resource"])) == [
        "arn:<partition>:s3:::data-bucket/text/eval/*",
        "arn:<partition>:s3:::data-bucket/text/train/*",
        "arn:<partition>:s3:::models-bucket/qwen2.5-1.5b/*",
    ]
    # and the two buckets can be listed, no other
    listing = _by_sid(statements, "ListModelAndDataBuckets")
    assert listing is not None
    assert listing["Action"] == "s3:ListBucket"
    assert sorted(map(_arn, listing["Resource"])) == [
        "arn:<partition>:s3:::data-bucket",
        "arn:<partition>:s3:::models-bucket",
    ]
    # and no other statement of the role names either bucket (the rest is the checkpoint bucket's read-write)
    others = [s for s in statements if s.get("Sid") not in ("ReadModelAndDataObjects", "ListModelAndDataBuckets")]
    assert not [s for s in others if "models-bucket" in str(s) or "data-bucket" in str(s)]
    assert synth.stacks.cluster.checkpoints.read_buckets == ("data-bucket", "models-bucket")


def test_no_s3_inputs_no_read_grant(default_synth):
    statements = _statements(default_synth.cluster)
    assert (
        _by_sid(statements, "ReadModelAndDataObjects") is None
        and _by_sid(statements, "ListModelAndDataBuckets") is None
    )


def _imported_cluster(stack: Stack) -> eks.ICluster:
    from aws_cdk import aws_ec2 as ec2

    from ray_efa.infra.imported_cluster import import_cluster

    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0123456789abcdef0",
        availability_zones=["us-west-2a", "us-west-2b"],
        private_subnet_ids=["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"],
    )
    provider = eks.KubectlProvider.from_kubectl_provider_attributes(
        stack, "Provider", service_token="arn:aws:lambda:us-west-2:111122223333:function:kubectl"
    )
    return import_cluster(
        stack,
        "Cluster",
        cluster_name="platform",
        cluster_security_group_id="sg-0123456789abcdef0",
        vpc=vpc,
        kubectl_provider=provider,
    )


def test_whole_bucket_and_repeated_locations_grant_once():
    # GIVEN the construct alone, on an imported cluster, reading one whole bucket named three ways
    stack = Stack(App(), "S")
    cluster = _imported_cluster(stack)
    storage = CheckpointStorage(
        stack,
        "X",
        cluster=cluster,
        storage_path="s3://own/ckpt",
        read_locations=["s3://whole-bucket", "s3://whole-bucket/", "s3://whole-bucket"],
    )
    from aws_cdk.assertions import Template

    (policy,) = Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
    (objects,) = [
        s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s.get("Sid") == "ReadModelAndDataObjects"
    ]
    assert _arn(objects["Resource"]) == "arn:<partition>:s3:::whole-bucket/*"
    assert storage.read_buckets == ("whole-bucket",)


def test_read_locations_must_be_s3_urls():
    stack = Stack(App(), "S")
    cluster = _imported_cluster(stack)
    with pytest.raises(ValueError, match="read_locations must be s3://bucket/prefix URLs, got '/mnt/fsx/data'"):
        CheckpointStorage(stack, "X", cluster=cluster, read_locations=["/mnt/fsx/data"])


# -- KMS keys of a platform: storagePath's bucket key and the CDK bootstrap key -------------------------------------

_STORAGE_KEY = "arn:aws:kms:us-east-2:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
_BOOTSTRAP_KEY = "arn:aws:kms:us-east-2:123456789012:key/9999abcd-12ab-34cd-56ef-1234567890ab"


def _kms_statements(synth) -> dict[str, dict]:
    """KMS key ARN -> the statement of the Ray pods' role that grants it."""
    import json as _json

    found = {}
    for logical_id, resource in synth.cluster.to_json()["Resources"].items():
        if resource["Type"] == "AWS::IAM::Policy" and "RayServiceAccount" in logical_id:
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                if "kms:" in _json.dumps(statement["Action"]):
                    found[statement["Resource"]] = statement
    return found


def test_the_pods_role_may_use_the_storage_and_bootstrap_keys_through_s3_alone():
    from tests.infra.conftest import synthesize

    synth = synthesize(storagePath="s3://team-bucket/ckpt", storageKmsKey=_STORAGE_KEY, bootstrapKmsKey=_BOOTSTRAP_KEY)
    grants = _kms_statements(synth)
    # THEN the bucket's key for checkpoints read and written, the asset bucket's key for the code fetched ...
    assert sorted(grants[_STORAGE_KEY]["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert grants[_BOOTSTRAP_KEY]["Action"] == "kms:Decrypt"
    # ... each only through S3 in the stack's region
    for statement in grants.values():
        assert statement["Condition"] == {"StringEquals": {"kms:ViaService": "s3.us-east-2.amazonaws.com"}}
    assert _kms_statements(synthesize(storagePath="s3://team-bucket/ckpt")) == {}


def test_a_storage_key_without_a_bucket_of_your_own_is_a_settings_error():
    import aws_cdk as cdk

    from ray_efa.core.settings import Settings, SettingsError
    from ray_efa.infra.app import build_stacks, feature_flags

    settings = Settings.from_context({"storageKmsKey": _STORAGE_KEY})
    with pytest.raises(SettingsError, match="storageKmsKey: needs storagePath=s3://"):
        build_stacks(cdk.App(context=feature_flags()), settings)
    with pytest.raises(SettingsError, match="storageKmsKey: must be a KMS key ARN"):
        Settings.from_context({"storageKmsKey": "alias/team"})


# -- CheckpointStorage(bucket=...): a bucket the app creates or references -------------------------------------------


def test_a_bucket_the_app_creates_or_references_is_the_storage():
    import aws_cdk as cdk
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_s3 as s3
    from aws_cdk.assertions import Template
    from cdk_nag import AwsSolutionsChecks

    app = App()
    stack, other = (Stack(app, name, env=cdk.Environment(region="us-west-2")) for name in ("S", "T"))
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    # jsii's stubs: Key.add_alias names its parameter alias_name, IKey's alias, so pyright takes a Key for no IKey
    own = s3.Bucket(
        stack,
        "Own",
        encryption_key=key,  # pyright: ignore[reportArgumentType]
        enforce_ssl=True,
        server_access_logs_prefix="logs/",
    )
    made = CheckpointStorage(stack, "Made", cluster=_imported_cluster(stack), bucket=own, prefix="team/ckpt")
    referenced = CheckpointStorage(
        other,
        "Ref",
        cluster=_imported_cluster(other),
        bucket=s3.Bucket.from_bucket_name(other, "Shared", "shared-bucket"),
    )
    # THEN the storage path is the bucket's (a token for the created one) under the prefix ...
    assert made.storage_path.startswith("s3://${Token[") and made.storage_path.endswith("/team/ckpt")
    assert referenced.storage_path == "s3://shared-bucket/ray-efa" and referenced.storage_bucket is not None
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()  # cdk-nag: every finding acknowledged
    (made_policy,), (ref_policy,) = (
        [
            p["Properties"]["PolicyDocument"]["Statement"]
            for p in Template.from_stack(s).find_resources("AWS::IAM::Policy").values()
        ]
        for s in (stack, other)
    )
    # ... read and write under the prefix, and the created bucket's key with it
    assert any("/team/ckpt/*" in str(s["Resource"]) and "s3:PutObject" in s["Action"] for s in made_policy)
    assert any("kms:Decrypt" in s["Action"] for s in made_policy)
    assert any("shared-bucket/ray-efa/*" in str(s["Resource"]) for s in ref_policy)
    assert not any("kms:" in str(s["Action"]) for s in ref_policy)


def test_bucket_and_storage_path_are_one_or_the_other():
    from aws_cdk import aws_s3 as s3

    stack = Stack(App(), "S")
    cluster = _imported_cluster(stack)
    with pytest.raises(ValueError, match="takes bucket or storage_path, not both"):
        CheckpointStorage(
            stack, "X", cluster=cluster, bucket=s3.Bucket.from_bucket_name(stack, "B", "bbb"), storage_path="s3://bbb/p"
        )
    with pytest.raises(ValueError, match="prefix must be a key prefix"):
        CheckpointStorage(
            stack, "Y", cluster=cluster, bucket=s3.Bucket.from_bucket_name(stack, "C", "ccc"), prefix="/x/"
        )
