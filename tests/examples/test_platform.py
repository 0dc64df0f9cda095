"""examples/platform: a platform's CDK app with its own `infra` and `core` packages, synthesized by the real CDK CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.cdk_cli import needs_cdk_cli
from tests.infra.test_app import offline_env

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "platform"

pytestmark = needs_cdk_cli


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> dict[str, dict]:
    """`npx cdk synth` in examples/platform, offline (npx finds the repository's node_modules above it)."""
    out = tmp_path_factory.mktemp("platform-cdk-out")
    result = subprocess.run(
        ["npx", "cdk", "synth", "--quiet", "--output", str(out)],
        cwd=EXAMPLE,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {
        name: json.loads((out / f"{name}.template.json").read_text())
        for name in ("ImportedClusterGpu", "PlatformWithRay")
    }


def _types(template: dict) -> Counter:
    return Counter(resource["Type"] for resource in template["Resources"].values())


def _helm_values(template: dict, chart: str) -> dict:
    (values,) = [
        json.loads(r["Properties"]["Values"])
        if isinstance(r["Properties"]["Values"], str)
        else r["Properties"]["Values"]
        for r in template["Resources"].values()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Chart"] == chart
    ]
    return values


def test_imported_cluster_gets_the_gpu_side_with_the_platforms_labels(synthesized):
    template = synthesized["ImportedClusterGpu"]
    types = _types(template)
    # GIVEN an imported cluster THEN no cluster and no VPC are created, only the GPU side
    assert types["AWS::EKS::Cluster"] == 0 and types["AWS::EC2::VPC"] == 0
    assert types["AWS::EKS::Nodegroup"] == 1 and types["AWS::EC2::LaunchTemplate"] == 1
    assert types["Custom::AWSCDK-EKS-HelmChart"] == 3  # NVIDIA and EFA plugins, KubeRay
    assert types["AWS::EKS::PodIdentityAssociation"] == 1
    (nodegroup,) = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::EKS::Nodegroup"]
    assert nodegroup["ClusterName"] == "research-prod"
    assert nodegroup["Subnets"] == ["subnet-0a1b2c3d4e5f60002"]  # us-west-2b, the AZ the platform chose
    assert nodegroup["Labels"] == {
        "platform.example.com/pool": "gpu",
        "platform.example.com/team": "research",
        "nvidia.com/gpu.present": "true",
    }
    # the operator on the platform's own system nodes
    assert _helm_values(template, "kuberay-operator")["nodeSelector"] == {"platform.example.com/pool": "system"}
    addons = [r["Properties"]["AddonName"] for r in template["Resources"].values() if r["Type"] == "AWS::EKS::Addon"]
    assert addons == ["eks-pod-identity-agent"]
    # nothing of the settings' default region: the job's settings say us-west-2 (the code ConfigMap's source text,
    # with its tables of every region, aside)
    not_code = {k: r for k, r in template["Resources"].items() if "code" not in k.lower()}
    assert "us-east-2" not in json.dumps(not_code)
    assert re.search(r"AWS_REGION\W+value\W+us-west-2", json.dumps(not_code))


def test_platform_stack_holds_a_whole_new_cluster(synthesized):
    types = _types(synthesized["PlatformWithRay"])
    assert types["AWS::EKS::Cluster"] == 1 and types["AWS::EC2::VPC"] == 1
    assert types["AWS::EKS::Nodegroup"] == 2  # system and GPU
    assert types["AWS::S3::Bucket"] == 1
    labels = sorted(
        json.dumps(r["Properties"]["Labels"], sort_keys=True)
        for r in synthesized["PlatformWithRay"]["Resources"].values()
        if r["Type"] == "AWS::EKS::Nodegroup"
    )
    assert labels == sorted(
        [
            json.dumps({"platform.example.com/pool": "system"}, sort_keys=True),
            json.dumps(
                {
                    "nvidia.com/gpu.present": "true",
                    "platform.example.com/pool": "gpu",
                    "platform.example.com/team": "research",
                },
                sort_keys=True,
            ),
        ]
    )


def test_the_platforms_own_infra_and_core_import_next_to_ray_efa():
    # GIVEN the example folder as the app's working directory (what `cdk synth` runs in)
    probe = (
        "import json, core, core.naming, infra, infra.network, ray_efa, ray_efa.infra.network;"
        "print(json.dumps({m: sys.modules[m].__file__ for m in ('core', 'infra', 'ray_efa', 'ray_efa.infra.network')}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", "import sys;" + probe],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    files = json.loads(result.stdout)
    # THEN `core` and `infra` are the platform's, and ray_efa's own modules are the project's
    assert Path(files["core"]).parent == EXAMPLE / "core"
    assert Path(files["infra"]).parent == EXAMPLE / "infra"
    assert Path(files["ray_efa.infra.network"]).resolve() == ROOT / "infra" / "network.py"  # ray_efa/infra -> ../infra
