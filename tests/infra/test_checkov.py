"""checkov (the real CLI, from its own venv that `make install` builds) on the synthesized templates: no failed
check, and every skipped one carries its reason in the resource's metadata."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3

from tests.infra.conftest import synthesize

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CHECKOV = PROJECT_ROOT / ".venv-checkov" / "bin" / "checkov"


def checkov(directory: Path) -> list[dict]:
    """checkov's JSON report (one entry per framework) for the CloudFormation templates in `directory`."""
    assert CHECKOV.exists(), f"{CHECKOV} is missing: run `make install` (it builds checkov's own venv)"
    result = subprocess.run(
        [
            str(CHECKOV),
            "--directory",
            str(directory),
            "--framework",
            "cloudformation",
            "--output",
            "json",
            "--skip-download",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode in (0, 1), result.stderr  # 1: some check failed; anything else: checkov itself failed
    report = json.loads(result.stdout)
    return report if isinstance(report, list) else [report]


@pytest.mark.parametrize(
    "context",
    [
        {},
        {
            "adminPrincipalArns": "arn:aws:iam::111122223333:role/Admin",
            "gpuInstanceType": "p5.48xlarge",
            "researcherPrincipalArns": "arn:aws:iam::111122223333:role/Researcher",
            "capacityReservationId": "cr-0123456789abcdef0",
            "capacityReservationType": "capacity-block",
        },
    ],
    ids=["defaults", "p5-capacity-block"],
)
def test_checkov_finds_no_failure_and_every_skip_has_a_reason(context):
    synth = synthesize(**context)
    (report,) = checkov(Path(synth.assembly.directory))
    results = report["results"]
    failed = [f"{c['check_id']} {c['resource']}" for c in results["failed_checks"]]
    assert failed == []
    assert report["summary"]["passed"] > 100  # it really read both templates
    skipped = results.get("skipped_checks", [])
    for check in skipped:
        assert len(check["check_result"].get("suppress_comment", "")) > 30, check
    # Only these are skipped: access logs of the checkpoint bucket (as with cdk-nag's S1), and DLQ, concurrency,
    # environment encryption (and, for the default-SG function, VPC placement) of CDK's own custom-resource functions
    assert {c["check_id"] for c in skipped} == {
        "CKV_AWS_18",
        "CKV_AWS_115",
        "CKV_AWS_116",
        "CKV_AWS_117",
        "CKV_AWS_173",
    }


def test_checkov_fails_a_noncompliant_template(tmp_path):
    # GIVEN a template with a bucket that is neither versioned nor logged THEN checkov reports both: the check gates
    app = cdk.App(outdir=str(tmp_path))
    s3.Bucket(cdk.Stack(app, "Noncompliant"), "Bucket")
    app.synth()
    (report,) = checkov(tmp_path)
    failed = {c["check_id"] for c in report["results"]["failed_checks"]}
    assert {"CKV_AWS_18", "CKV_AWS_21"} <= failed
