"""`ops.cdk_context.write_context`: merge into cdk.json's "context", atomically, keeping the user's file as it was."""

from __future__ import annotations

import json

import pytest

from ray_efa.ops.cdk_context import ContextFileError, app_config_file, context_flags, write_context

USER_CDK_JSON = """{
    "app": ".venv/bin/python app.py",
    "watch": {
        "include": ["**/*.py"]
    },
    "context": {
        "clusterName": "research",
        "@aws-cdk/core:newStyleStackSynthesis": true,
        "gpuAvailabilityZone": "us-east-2a"
    },
    "toolkitStackName": "MyToolkit"
}
"""


@pytest.fixture
def app_dir(tmp_path, monkeypatch):
    """An app directory with a user's cdk.json and a lookup cache, as the working directory."""
    (tmp_path / "cdk.json").write_text(USER_CDK_JSON)
    (tmp_path / "cdk.context.json").write_text(
        json.dumps({"vpc-provider:account=1:filter.vpc-id=vpc-1": {"vpcId": "vpc-1"}})
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_write_context_merges_into_cdk_json_and_keeps_every_other_key(app_dir):
    # WHEN a new AZ and a new key are written
    written = write_context({"gpuAvailabilityZone": "us-east-2b", "gpuNodeCount": 4})
    # THEN cdk.json's context has them, every other key of the file and of the context is kept, in order
    assert written == app_dir / "cdk.json"
    config = json.loads(written.read_text())
    assert list(config) == ["app", "watch", "context", "toolkitStackName"]
    assert config["context"] == {
        "clusterName": "research",
        "@aws-cdk/core:newStyleStackSynthesis": True,
        "gpuAvailabilityZone": "us-east-2b",
        "gpuNodeCount": 4,
    }
    assert config["toolkitStackName"] == "MyToolkit" and config["watch"] == {"include": ["**/*.py"]}
    # ...with the file's 4-space indentation, and the lookup cache untouched
    assert '\n    "app": ' in written.read_text() and written.read_text().endswith("}\n")
    assert json.loads((app_dir / "cdk.context.json").read_text()) == {
        "vpc-provider:account=1:filter.vpc-id=vpc-1": {"vpcId": "vpc-1"}
    }
    assert sorted(p.name for p in app_dir.iterdir()) == ["cdk.context.json", "cdk.json"]  # no temporary left


def test_the_app_directory_is_found_from_a_subdirectory(app_dir, monkeypatch):
    (app_dir / "notebooks" / "deep").mkdir(parents=True)
    monkeypatch.chdir(app_dir / "notebooks" / "deep")
    assert app_config_file() == app_dir / "cdk.json"
    assert write_context({"steps": 7}) == app_dir / "cdk.json"


def test_a_cdk_json_without_context_gets_one(tmp_path):
    path = tmp_path / "cdk.json"
    path.write_text('{"app": "python3 app.py"}')
    write_context({"gpuAvailabilityZone": "us-east-2c"}, path)
    assert json.loads(path.read_text()) == {"app": "python3 app.py", "context": {"gpuAvailabilityZone": "us-east-2c"}}


def test_outside_an_app_nothing_is_written_and_the_flags_are_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ContextFileError, match="no cdk.json in .* -c gpuAvailabilityZone=us-east-2b; nothing was written"
    ):
        write_context({"gpuAvailabilityZone": "us-east-2b"})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"context": ', "is not valid JSON"),
        ("[1, 2]", "must hold a JSON object, found list"),
        ('{"context": [1]}', '"context" must be a JSON object, found list'),
    ],
)
def test_a_broken_cdk_json_is_refused_and_left_as_it_was(tmp_path, text, message):
    path = tmp_path / "cdk.json"
    path.write_text(text)
    with pytest.raises(ContextFileError, match=message):
        write_context({"gpuAvailabilityZone": "us-east-2b"}, path)
    assert path.read_text() == text


def test_context_flags_are_what_cdk_takes():
    assert context_flags({"gpuAvailabilityZone": "us-east-2b", "preflight": False, "pipPackages": ["a==1"]}) == (
        '-c gpuAvailabilityZone=us-east-2b -c preflight=false -c pipPackages=["a==1"]'
    )
