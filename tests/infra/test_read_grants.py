"""The Ray pods' role reads exactly the buckets modelPath, dataset and evalDataset name, under their prefixes, and no
other; without s3:// inputs it gets no read grant at all (the synthesized IAM policy, cdk-nag included)."""

from __future__ import annotations

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_eks_v2 as eks

from ray_efa.infra.checkpoints import CheckpointStorage
from tests.infra.conftest import synthesize

S3_INPUTS = {"modelPath": "s3://models-bucket/qwen2.5-1.5b", "modelConfig": "qwen2.5-1.5b",
             "dataset": "s3://data-bucket/text/train", "evalDataset": "s3://data-bucket/text/eval"}


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
    assert objects["Action"] == "s3:GetObject" and objects["Effect"] == "Allow"
    assert sorted(map(_arn, objects["Resource"])) == [
        "arn:<partition>:s3:::data-bucket/text/eval/*", "arn:<partition>:s3:::data-bucket/text/train/*",
        "arn:<partition>:s3:::models-bucket/qwen2.5-1.5b/*"]
    # and the two buckets can be listed, no other
    listing = _by_sid(statements, "ListModelAndDataBuckets")
    assert listing["Action"] == "s3:ListBucket"
    assert sorted(map(_arn, listing["Resource"])) == ["arn:<partition>:s3:::data-bucket", "arn:<partition>:s3:::models-bucket"]
    # and no other statement of the role names either bucket (the rest is the checkpoint bucket's read-write)
    others = [s for s in statements if s.get("Sid") not in ("ReadModelAndDataObjects", "ListModelAndDataBuckets")]
    assert not [s for s in others if "models-bucket" in str(s) or "data-bucket" in str(s)]
    assert synth.stacks.cluster.checkpoints.read_buckets == ("data-bucket", "models-bucket")


def test_no_s3_inputs_no_read_grant(default_synth):
    statements = _statements(default_synth.cluster)
    assert _by_sid(statements, "ReadModelAndDataObjects") is None and _by_sid(statements, "ListModelAndDataBuckets") is None


def _imported_cluster(stack: Stack) -> eks.ICluster:
    from aws_cdk import aws_ec2 as ec2

    from ray_efa.infra.imported_cluster import import_cluster

    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-0123456789abcdef0",
                                      availability_zones=["us-west-2a", "us-west-2b"],
                                      private_subnet_ids=["subnet-0aaaaaaaaaaaaaaaa", "subnet-0bbbbbbbbbbbbbbbb"])
    provider = eks.KubectlProvider.from_kubectl_provider_attributes(
        stack, "Provider", service_token="arn:aws:lambda:us-west-2:111122223333:function:kubectl")
    return import_cluster(stack, "Cluster", cluster_name="platform", cluster_security_group_id="sg-0123456789abcdef0",
                          vpc=vpc, kubectl_provider=provider)


def test_whole_bucket_and_repeated_locations_grant_once():
    # GIVEN the construct alone, on an imported cluster, reading one whole bucket named three ways
    stack = Stack(App(), "S")
    cluster = _imported_cluster(stack)
    storage = CheckpointStorage(stack, "X", cluster=cluster, storage_path="s3://own/ckpt",
                                read_locations=["s3://whole-bucket", "s3://whole-bucket/", "s3://whole-bucket"])
    from aws_cdk.assertions import Template

    (policy,) = Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
    (objects,) = [s for s in policy["Properties"]["PolicyDocument"]["Statement"]
                  if s.get("Sid") == "ReadModelAndDataObjects"]
    assert _arn(objects["Resource"]) == "arn:<partition>:s3:::whole-bucket/*"
    assert storage.read_buckets == ("whole-bucket",)


def test_read_locations_must_be_s3_urls():
    stack = Stack(App(), "S")
    cluster = _imported_cluster(stack)
    with pytest.raises(ValueError, match="read_locations must be s3://bucket/prefix URLs, got '/mnt/fsx/data'"):
        CheckpointStorage(stack, "X", cluster=cluster, read_locations=["/mnt/fsx/data"])
