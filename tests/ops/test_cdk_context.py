"""`ops.cdk_context.write_context`: merge into cdk.context.json, atomically, never over a broken file."""

from __future__ import annotations

import json

import pytest

from ray_efa.ops.cdk_context import ContextFileError, write_context


def test_write_context_merges_and_keeps_the_other_keys(tmp_path):
    # GIVEN a context file with a CDK lookup and an older AZ
    path = tmp_path / "cdk.context.json"
    path.write_text(json.dumps({"vpc-provider:account=1:filter.vpc-id=vpc-1": {"vpcId": "vpc-1"}, "gpuAvailabilityZone": "us-east-2a"}))
    # WHEN a new AZ is written
    write_context({"gpuAvailabilityZone": "us-east-2b"}, path)
    # THEN the AZ changed and the lookup is untouched
    assert json.loads(path.read_text()) == {
        "vpc-provider:account=1:filter.vpc-id=vpc-1": {"vpcId": "vpc-1"}, "gpuAvailabilityZone": "us-east-2b"}


def test_write_context_creates_the_file_and_leaves_no_temporary_behind(tmp_path):
    path = tmp_path / "cdk.context.json"
    # WHEN there is no context file yet
    write_context({"gpuAvailabilityZone": "us-east-2c"}, path)
    # THEN it exists with the one key, and the directory holds nothing else
    assert json.loads(path.read_text()) == {"gpuAvailabilityZone": "us-east-2c"}
    assert [p.name for p in tmp_path.iterdir()] == ["cdk.context.json"]


def test_write_context_refuses_a_broken_file_and_leaves_it_as_it_was(tmp_path):
    path = tmp_path / "cdk.context.json"
    path.write_text('{"gpuAvailabilityZone": ')
    # WHEN the file is not valid JSON THEN nothing is written and the error names the file
    with pytest.raises(ContextFileError, match="cdk.context.json is not valid JSON"):
        write_context({"gpuAvailabilityZone": "us-east-2b"}, path)
    assert path.read_text() == '{"gpuAvailabilityZone": '
