"""A platform app that is not in this repository, written from the embedding page (docs/embedding.md): in eu-south-1 (a
region the settings hold no AZ table for) with its own VPC, every construct imported from `ray_efa.infra`,
`cluster=ray.cluster`, and `RayTrainingJob` given `gpu_nodes` but no `after`. It synthesizes, its RayJob waits for
the GPU node group, and the pinned pyright with the project's .venv reports 0 errors on it.

The app sees `ray_efa` through a path entry holding only `ray_efa` (a link to this checkout's), as `make install`'s
editable install gives the venv `ray_efa` alone (setuptools' finder maps that one name to the checkout's ray_efa/): a
path entry rather than the finder, so that pyright reads it too, and made here, so that the test checks this checkout
whatever the venv's own install points at, and no top-level `infra` or `core` of the repository is importable from
the app.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.infra.test_app import offline_env

ROOT = Path(__file__).resolve().parents[2]
PYRIGHT = ROOT / "node_modules" / ".bin" / "pyright"

PLATFORM_APP = '''
"""The research platform's CDK app: its own VPC in eu-south-1, the Ray cluster and a training job on it."""

from __future__ import annotations

import sys

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from ray_efa.infra import (
    CheckpointStorage,
    EfaGpuNodegroup,
    GpuDevicePlugins,
    KubeRayOperator,
    RayEksCluster,
    RayTrainingJob,
    RayWorkload,
)


class Research(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        vpc = ec2.Vpc(self, "Vpc", availability_zones=["eu-south-1a", "eu-south-1b"], nat_gateways=1)
        ray = RayEksCluster(self, "Ray", vpc=vpc, cluster_name="research", public_access_cidrs=["203.0.113.0/24"])
        gpu = EfaGpuNodegroup(self, "Gpu", cluster=ray.cluster, vpc=vpc, instance_type="p5.48xlarge", node_count=4,
                              availability_zone="eu-south-1b")
        plugins = GpuDevicePlugins(self, "Plugins", cluster=ray.cluster)
        kuberay = KubeRayOperator(self, "KubeRay", cluster=ray.cluster, logs=ray.logs)
        workload = RayWorkload(self, "Workload", cluster=ray.cluster, namespace="ml",
                               after=[kuberay.chart, plugins.nvidia, plugins.efa])
        storage = CheckpointStorage(self, "Checkpoints", cluster=ray.cluster, namespace="ml", after=workload.namespace)
        RayTrainingJob(self, "Job", cluster=ray.cluster, gpu_nodes=gpu, workload=workload, storage=storage,
                       operator=kuberay)


app = cdk.App(outdir=sys.argv[1])
Research(app, "Research", env=cdk.Environment(region="eu-south-1"))
app.synth()
'''


@pytest.fixture(scope="module")
def platform(tmp_path_factory) -> Path:
    """The app's folder, outside the repository, and the path entry that holds ray_efa."""
    work = tmp_path_factory.mktemp("platform-eu")
    (work / "site").mkdir()
    (work / "site" / "ray_efa").symlink_to(ROOT / "ray_efa", target_is_directory=True)
    app = work / "app"
    app.mkdir()
    (app / "app.py").write_text(textwrap.dedent(PLATFORM_APP))
    return app


@pytest.fixture(scope="module")
def template(platform) -> dict:
    out = platform.parent / "cdk.out"
    result = subprocess.run(
        [sys.executable, "app.py", str(out)],
        cwd=platform,
        capture_output=True,
        text=True,
        timeout=600,
        env=offline_env(PYTHONPATH=str(platform.parent / "site")),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((out / "Research.template.json").read_text())


def _manifests(template: dict) -> dict[str, dict]:
    return {
        key: resource
        for key, resource in template["Resources"].items()
        if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
    }


def test_the_platform_app_synthesizes_in_a_region_without_an_az_table(template):
    (gpu,) = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::EKS::Nodegroup" and "NVIDIA" in r["Properties"]["AmiType"]
    ]
    # THEN the node group takes the cluster's name from the cluster (no cluster_name given) and the AZ given
    assert gpu["NodegroupName"] == "research-gpu-1b"


def test_its_rayjob_waits_for_the_gpu_node_group_without_after(template):
    (nodegroup_id,) = [
        key
        for key, r in template["Resources"].items()
        if r["Type"] == "AWS::EKS::Nodegroup" and "NVIDIA" in r["Properties"]["AmiType"]
    ]
    (job,) = [
        r
        for r in _manifests(template).values()
        if '"kind":"RayJob"' in json.dumps(r["Properties"]["Manifest"]).replace(" ", "").replace("\\", "")
    ]
    assert nodegroup_id in job["DependsOn"]


def test_the_job_runs_with_what_the_constructs_say(template):
    (settings,) = [r for key, r in _manifests(template).items() if "settings" in key.lower()]
    text = json.dumps(settings["Properties"]["Manifest"]).replace("\\", "")
    # the cluster's name, the stack's region, the GPU nodes' AZ, type and count, the namespace
    for key, value in (
        ("clusterName", '"research"'),
        ("region", '"eu-south-1"'),
        ("gpuAvailabilityZone", '"eu-south-1b"'),
        ("gpuInstanceType", '"p5.48xlarge"'),
        ("gpuNodeCount", "4"),
        ("namespace", '"ml"'),
    ):
        assert f'"{key}": {value}' in text, key


def test_pyright_reports_no_error_on_the_platform_app(platform):
    if not PYRIGHT.exists():
        pytest.fail(f"needs the pinned pyright at {PYRIGHT.relative_to(ROOT)}: `make install` (npm ci)", pytrace=False)
    # GIVEN the platform's own pyright configuration: the project's .venv, and the path entry that holds ray_efa
    (platform / "pyrightconfig.json").write_text(
        json.dumps(
            {
                "venvPath": str(ROOT),
                "venv": ".venv",
                "extraPaths": [str(platform.parent / "site")],
                "typeCheckingMode": "standard",
                "pythonVersion": "3.11",
                "include": ["app.py"],
            }
        )
    )
    result = subprocess.run([str(PYRIGHT), "--outputjson"], cwd=platform, capture_output=True, text=True, timeout=600)
    report = json.loads(result.stdout)
    errors = [
        f"{d['range']['start']['line'] + 1}: {d['message']}"
        for d in report["generalDiagnostics"]
        if d["severity"] == "error"
    ]
    # THEN `cluster=ray.cluster` and every prop type-check, and ray_efa resolves (no import error)
    assert errors == [] and report["summary"]["filesAnalyzed"] == 1, errors
