"""`ray-efa capacity`: arguments, --json, exit codes and --write-context, end to end on moto + recorded responses.

moto serves the AZs, offerings, instances and instance types; get-spot-placement-scores, the capacity reservation
calls and the EC2 service quotas are recorded responses (moto cannot emulate them), attached with a PartialStubber
to every client the command creates.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from boto3.session import Session
from moto import mock_aws

from tests.ops.aws_stubs import PartialStubber
from tests.ops.cli_helpers import run_cli

FIXTURES = Path(__file__).parent / "fixtures" / "capacity"


def recorded(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


@pytest.fixture
def aws(monkeypatch):
    """moto for what it emulates; `aws[service]` lists (method, response) stubs for what it cannot."""
    stubs: dict[str, list[tuple[str, dict]]] = {"ec2": [], "service-quotas": []}
    real_client = Session.client

    def client(self, service_name, *args, **kwargs):
        made = real_client(self, service_name, *args, **kwargs)
        stubber = PartialStubber(made)
        for method, response in stubs.get(service_name, []):
            stubber.add_response(method, response)
        stubber.activate()
        return made

    with mock_aws():
        monkeypatch.setattr(Session, "client", client)
        yield stubs


LOOKUP_CACHE = {"availability-zones:account=123456789012:region=us-east-1": ["us-east-1a"]}


@pytest.fixture
def context_file(monkeypatch, tmp_path):
    """The cdk.json of an app directory (the working directory), beside a lookup cache that must stay untouched."""
    path = tmp_path / "cdk.json"
    path.write_text(
        json.dumps({"app": "python3 app.py", "context": {"region": "us-east-1", "@aws-cdk/x:y": True}}, indent=2)
    )
    (tmp_path / "cdk.context.json").write_text(json.dumps(LOOKUP_CACHE))
    monkeypatch.chdir(tmp_path)
    return path


def healthy_account(aws) -> None:
    aws["service-quotas"].append(("get_service_quota", recorded("service_quota_p.json")))
    aws["ec2"].append(("get_spot_placement_scores", recorded("spot_placement_scores_us_east_1.json")))


P5EN_US_EAST_1 = ("--region", "us-east-1", "--instance-type", "p5en.48xlarge", "--count", "2")


def test_json_names_the_recommended_zone_and_exits_0(aws, capsys):
    healthy_account(aws)
    # WHEN checking 2 x p5en.48xlarge in us-east-1 as JSON
    code = run_cli("capacity", *P5EN_US_EAST_1, "--json")
    report = json.loads(capsys.readouterr().out)
    # THEN the best-scored offering AZ is recommended, and the exit code says ok
    assert (code, report["recommended_zone"], report["ok"]) == (0, "us-east-1c", True)
    assert report["quota"]["code"] == "L-417A185B" and report["context_written"] is None


def test_write_context_stores_the_zone_and_keeps_other_keys(aws, context_file, capsys):
    healthy_account(aws)
    # WHEN the region setting is us-east-1 and --write-context is given
    code = run_cli("capacity", *P5EN_US_EAST_1, "-c", "region=us-east-1", "--write-context", "--json")
    # THEN cdk.json's context gains gpuAvailabilityZone and keeps its keys; the CDK's lookup cache is not touched
    stored = json.loads(context_file.read_text())
    assert code == 0
    assert stored == {
        "app": "python3 app.py",
        "context": {"region": "us-east-1", "@aws-cdk/x:y": True, "gpuAvailabilityZone": "us-east-1c"},
    }
    assert json.loads((context_file.parent / "cdk.context.json").read_text()) == LOOKUP_CACHE
    report = json.loads(capsys.readouterr().out)
    assert report["context_written"] == str(context_file)
    assert report["context_flags"] == "-c gpuAvailabilityZone=us-east-1c"


def test_write_context_outside_an_app_prints_the_flag_and_writes_nothing(aws, tmp_path, monkeypatch, capsys):
    healthy_account(aws)
    monkeypatch.chdir(tmp_path)
    # WHEN there is no cdk.json in the working directory or above
    code = run_cli("capacity", *P5EN_US_EAST_1, "-c", "region=us-east-1", "--write-context", "--json")
    # THEN nothing is written, and the -c flag to use instead is given
    out = capsys.readouterr()
    assert code == 0 and list(tmp_path.iterdir()) == []
    assert json.loads(out.out)["context_flags"] == "-c gpuAvailabilityZone=us-east-1c"
    assert "pass -c gpuAvailabilityZone=us-east-1c" in out.err


def test_short_quota_exits_1_and_prints_the_request_command(aws, capsys):
    quota = recorded("service_quota_p.json")
    quota["Quota"]["Value"] = 192.0
    aws["service-quotas"].append(("get_service_quota", quota))
    aws["ec2"].append(("get_spot_placement_scores", recorded("spot_placement_scores_us_east_1.json")))
    # WHEN 2 x 192 vCPUs are needed under a 192 vCPU quota
    code = run_cli("capacity", *P5EN_US_EAST_1)
    out = capsys.readouterr().out
    # THEN the command fails, names the quota and prints the exact increase request
    assert code == 1
    assert "Running On-Demand P instances" in out
    assert (
        "aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-417A185B "
        "--desired-value 384 --region us-east-1"
    ) in out


def test_short_quota_writes_no_context(aws, context_file):
    quota = recorded("service_quota_p.json")
    quota["Quota"]["Value"] = 0.0
    aws["service-quotas"].append(("get_service_quota", quota))
    aws["ec2"].append(("get_spot_placement_scores", recorded("spot_placement_scores_us_east_1.json")))
    before = context_file.read_text()
    # WHEN the quota is short THEN --write-context leaves the file as it was
    assert run_cli("capacity", *P5EN_US_EAST_1, "-c", "region=us-east-1", "--write-context", "--json") == 1
    assert context_file.read_text() == before


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (("--instance-type", "g6.xlarge"), "--instance-type"),
        (("--instance-type", "m7i.xlarge"), "--instance-type"),
        (("--count", "0"), "--count"),
        (("--region", "mars-1"), "--region"),
        (("--region", "us-east-1", "--write-context"), "--region"),
    ],
)
def test_bad_arguments_exit_2_naming_the_argument(argv, named, capsys):
    # GIVEN no AWS at all (no moto): a bad argument must be caught before any call
    code = run_cli("capacity", *argv, "--json")
    error = json.loads(capsys.readouterr().out)
    # THEN exit 2, and the problem names the argument
    assert code == 2
    assert [p["key"] for p in error["problems"]] == [named]
