"""A held-out platform app, written as a platform team would: each fact stated once, on the construct that builds it.

`Research` (ap-southeast-2): the company's node labels stated only on the node groups (RayEksCluster's system nodes,
EfaGpuNodegroup's GPU nodes), m7i.2xlarge system nodes, GPU nodes in a capacity reservation, checkpoints under a prefix
of an existing bucket, the namespace stated once (RayWorkload), its own train function in its own folder.
`EuSouth` (eu-south-1, a region the settings hold no AZ table for): the same through every construct's
`from_settings`, with settings that name neither the region nor a zone.

One real synth of both (a module-scoped fixture): the device plugins and the operator land on the node groups' labels,
the Ray head fits the system node, the pods may use the existing bucket, the job's recorded settings are what was
built, and the template stays far from CloudFormation's 1 MB limit (the project's own source ships as an S3 asset).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ray_efa.core import catalog
from tests.infra.test_app import offline_env

ROOT = Path(__file__).resolve().parents[2]

TEMPLATE_LIMIT_BYTES = 400 * 1024
"""Where this project stops a stack template: well under CloudFormation's 1 MB (1,048,576 bytes) for an uploaded one."""

APP = '''
"""The research platform: its own VPC, company node labels, an existing checkpoint bucket, its own training code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from ray_efa.core.settings import Settings
from ray_efa.infra import (
    CheckpointStorage,
    EfaGpuNodegroup,
    GpuDevicePlugins,
    KubeRayOperator,
    RayEksCluster,
    RayTrainingJob,
    RayWorkload,
)

SYSTEM_LABELS = {"company.example/pool": "controllers"}
GPU_LABELS = {"company.example/pool": "accelerators", "company.example/team": "research"}
ADMIN = "arn:aws:iam::111122223333:role/research-admin"


class Research(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        vpc = ec2.Vpc(self, "Vpc", availability_zones=["ap-southeast-2a", "ap-southeast-2b"], nat_gateways=1)
        ray = RayEksCluster(self, "Ray", vpc=vpc, cluster_name="research", system_instance_type="m7i.2xlarge",
                            system_node_selector=SYSTEM_LABELS, admin_principal_arns=[ADMIN],
                            public_access_cidrs=["203.0.113.0/24"])
        gpu = EfaGpuNodegroup(self, "Gpu", cluster=ray.cluster, vpc=vpc, instance_type="p5.48xlarge", node_count=3,
                              availability_zone="ap-southeast-2b", node_selector=GPU_LABELS,
                              capacity_reservation_id="cr-0123456789abcdef0")
        plugins = GpuDevicePlugins(self, "Plugins", cluster=ray.cluster)  # no labels: they are the node group's
        kuberay = KubeRayOperator(self, "KubeRay", cluster=ray.cluster, logs=ray.logs)  # nor here
        workload = RayWorkload(self, "Workload", cluster=ray.cluster, namespace="research",
                               after=[kuberay.chart, plugins.nvidia, plugins.efa])
        storage = CheckpointStorage(self, "Checkpoints", cluster=ray.cluster, workload=workload,
                                    storage_path="s3://company-ml-checkpoints/research/runs")
        RayTrainingJob(self, "Job", cluster=ray.cluster, train_function="lab.train:train_func",
                       code=Path(__file__).parent / "src", gpu_nodes=gpu, workload=workload, storage=storage,
                       operator=kuberay, settings=Settings.from_context({"steps": 20}))


class EuSouth(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        settings = Settings.from_context({"clusterName": "research-eu", "gpuInstanceType": "p5.48xlarge",
                                          "gpuNodeCount": 2, "namespace": "ml"})  # no region, no zone
        vpc = ec2.Vpc(self, "Vpc", availability_zones=["eu-south-1a", "eu-south-1b"], nat_gateways=1)
        ray = RayEksCluster.from_settings(self, "Ray", settings, vpc=vpc)
        gpu = EfaGpuNodegroup.from_settings(self, "Gpu", settings, cluster=ray.cluster, vpc=vpc)
        plugins = GpuDevicePlugins.from_settings(self, "Plugins", settings, cluster=ray.cluster, gpu_nodes=gpu)
        kuberay = KubeRayOperator.from_settings(self, "KubeRay", settings, cluster=ray.cluster, logs=ray.logs)
        workload = RayWorkload.from_settings(self, "Workload", settings, cluster=ray.cluster,
                                             after=[kuberay.chart, plugins.nvidia, plugins.efa])
        storage = CheckpointStorage.from_settings(self, "Checkpoints", settings, cluster=ray.cluster, workload=workload)
        RayTrainingJob.from_settings(self, "Job", settings, cluster=ray.cluster, gpu_nodes=gpu, workload=workload,
                                     storage=storage)


app = cdk.App(outdir=sys.argv[1])
Research(app, "Research", env=cdk.Environment(region="ap-southeast-2"))
EuSouth(app, "EuSouth", env=cdk.Environment(region="eu-south-1"))
app.synth()
'''

TRAIN = '''
"""The lab's own loop."""


def train_func(config: dict) -> None:
    import ray.train

    for step in range(int(config.get("steps", 3))):
        ray.train.report({"loss": 1.0 / (step + 1)})
'''


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> dict[str, dict]:
    """Both stacks' templates from one synth of the app, in a folder outside the repository."""
    work = tmp_path_factory.mktemp("one-truth")
    (work / "site").mkdir()
    (work / "site" / "ray_efa").symlink_to(ROOT / "ray_efa", target_is_directory=True)
    app = work / "app"
    (app / "src" / "lab").mkdir(parents=True)
    (app / "src" / "lab" / "__init__.py").write_text("")
    (app / "src" / "lab" / "train.py").write_text(textwrap.dedent(TRAIN))
    (app / "app.py").write_text(textwrap.dedent(APP))
    out = work / "cdk.out"
    result = subprocess.run(
        [sys.executable, "app.py", str(out)],
        cwd=app,
        capture_output=True,
        text=True,
        timeout=600,
        env=offline_env(PYTHONPATH=str(work / "site")),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {
        name: {
            "path": out / f"{name}.template.json",
            "template": json.loads((out / f"{name}.template.json").read_text()),
        }
        for name in ("Research", "EuSouth")
    }


def _resources(template: dict, kind: str) -> dict[str, dict]:
    return {key: r for key, r in template["Resources"].items() if r["Type"] == kind}


def _helm_values(template: dict, chart: str) -> dict:
    (values,) = [
        json.loads(r["Properties"]["Values"])
        for r in _resources(template, "Custom::AWSCDK-EKS-HelmChart").values()
        if r["Properties"]["Chart"] == chart
    ]
    return values


def _manifest_text(resource: dict) -> str:
    """A manifest's JSON text with its tokens (Fn::Join parts) left in place as JSON."""
    manifest = resource["Properties"]["Manifest"]
    if isinstance(manifest, dict):
        manifest = "".join(p if isinstance(p, str) else json.dumps(p) for p in manifest["Fn::Join"][1])
    return manifest


def _object(template: dict, kind: str, name_part: str) -> dict:
    """The one Kubernetes object of `kind` whose name holds `name_part`, parsed (tokens as placeholders)."""
    found = []
    for resource in _resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values():
        text = re.sub(r'\{"(Fn::\w+|Ref)":.*?\}(?=[\\"/])', "TOKEN", _manifest_text(resource))
        for obj in json.loads(text):
            if obj["kind"] == kind and name_part in obj["metadata"]["name"]:
                found.append(obj)
    assert len(found) == 1, (kind, name_part, [o["metadata"]["name"] for o in found])
    return found[0]


def _job_settings(template: dict) -> dict:
    return json.loads(_object(template, "ConfigMap", "-settings")["data"]["settings.json"])


def test_device_plugins_and_operator_run_on_the_node_groups_labels(synthesized):
    template = synthesized["Research"]["template"]
    gpu_labels = {"company.example/pool": "accelerators", "company.example/team": "research"}
    # GIVEN labels stated only on the node groups THEN both device plugins select the GPU nodes' labels...
    for chart in ("nvidia-device-plugin", "aws-efa-k8s-device-plugin"):
        assert _helm_values(template, chart)["nodeSelector"] == gpu_labels, chart
    # ...the operator the system nodes'...
    assert _helm_values(template, "kuberay-operator")["nodeSelector"] == {"company.example/pool": "controllers"}
    # ...and each of those labels is on the node group it serves
    labels = [r["Properties"]["Labels"] for r in _resources(template, "AWS::EKS::Nodegroup").values()]
    assert {"company.example/pool": "controllers"} in labels
    assert {**gpu_labels, "nvidia.com/gpu.present": "true"} in labels


def test_the_ray_head_fits_the_system_nodes(synthesized):
    template = synthesized["Research"]["template"]
    job = _object(template, "RayJob", "train-efa")
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    limits = head["containers"][0]["resources"]["limits"]
    assert head["nodeSelector"] == {"company.example/pool": "controllers"}
    # THEN it asks what an m7i.2xlarge (8 vCPU, 32 GiB) has room for beside the system pods, not m7i.xlarge's 2 / 10 GiB
    room_cpu, room_mib = catalog.system_node_room(catalog.system_instance("m7i.2xlarge"))
    cpu, memory = int(limits["cpu"]), int(limits["memory"].removesuffix("Gi"))
    assert cpu * 1000 <= room_cpu and memory * 1024 <= room_mib, (limits, room_cpu, room_mib)
    # every init container too (a pod's request is the larger of its init containers' and its containers' sum)
    for init in head.get("initContainers", []):
        assert float(init["resources"]["requests"]["cpu"]) * 1000 <= room_cpu, init["name"]
    assert (cpu, memory) == (6, 26)
    assert _job_settings(template)["systemInstanceType"] == "m7i.2xlarge"


def test_the_pods_may_use_the_existing_bucket(synthesized):
    template = synthesized["Research"]["template"]
    statements = [
        s
        for policy in _resources(template, "AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    text = json.dumps(statements)

    def granted(action: str, resource: str) -> bool:
        for statement in statements:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            if any(re.fullmatch(a.replace("*", ".*"), action) for a in actions) and any(
                resource in json.dumps(r) for r in resources
            ):
                return True
        return False

    # THEN the Ray pods' role writes, reads and deletes checkpoints under the prefix, and lists the bucket
    for action in ("s3:PutObject", "s3:GetObject", "s3:DeleteObject"):
        assert granted(action, ":s3:::company-ml-checkpoints/research/runs/*"), (action, text)
    assert granted("s3:ListBucket", ':s3:::company-ml-checkpoints"'), text
    # ...and nothing else of that bucket
    assert ":s3:::company-ml-checkpoints/*" not in text
    assert _job_settings(template)["storagePath"] == "s3://company-ml-checkpoints/research/runs"


def test_the_recorded_settings_are_what_was_built(synthesized):
    settings = _job_settings(synthesized["Research"]["template"])
    # the node group's reservation, hence no placement group (the node group made none)
    assert settings["capacityReservationId"] == "cr-0123456789abcdef0"
    assert settings["placementGroup"] in ("auto", "off")
    assert not _resources(synthesized["Research"]["template"], "AWS::EC2::PlacementGroup")
    assert (settings["gpuInstanceType"], settings["gpuNodeCount"], settings["gpuAvailabilityZone"]) == (
        "p5.48xlarge",
        3,
        "ap-southeast-2b",
    )
    assert (settings["namespace"], settings["region"], settings["trainFunction"]) == (
        "research",
        "ap-southeast-2",
        "lab.train:train_func",
    )


def test_the_template_holds_no_source_code(synthesized):
    research = synthesized["Research"]
    size = research["path"].stat().st_size
    assert size < TEMPLATE_LIMIT_BYTES, f"{size:,} bytes"
    # THEN the project's code is an S3 asset the pods fetch, and only settings.json is a ConfigMap
    text = research["path"].read_text()
    assert "ray_efa.training.driver.py" not in text and "ray_efa.core.settings.py" not in text
    # (the lab's own folder, a few lines, fits a ConfigMap and still ships as one)
    job = _object(research["template"], "RayJob", "train-efa")
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert [c["name"] for c in head["initContainers"]][0] == "fetch-app"
    env = {e["name"]: e["value"] for e in head["containers"][0]["env"]}
    assert env["PYTHONPATH"].startswith("/opt/ray-efa/lib")


def test_from_settings_in_a_region_without_an_az_table_derives_what_was_not_set(synthesized):
    template = synthesized["EuSouth"]["template"]
    (gpu,) = [
        r["Properties"]
        for r in _resources(template, "AWS::EKS::Nodegroup").values()
        if "NVIDIA" in r["Properties"]["AmiType"]
    ]
    # THEN the GPU nodes are in the VPC's first zone, named after it, and the job records the stack's region and zone
    assert gpu["NodegroupName"].endswith("-1a"), gpu["NodegroupName"]
    settings = _job_settings(template)
    assert (settings["region"], settings["gpuAvailabilityZone"], settings["namespace"]) == (
        "eu-south-1",
        "eu-south-1a",
        "ml",
    )
    assert _helm_values(template, "nvidia-device-plugin")["nodeSelector"] == {"role": "gpu-worker"}


def test_the_smallest_embedding_type_checks_in_strict_mode(tmp_path):
    """examples/platform/infra/smallest.py, the README's smallest snippet with its parameters typed (the README's
    own, untyped, gives strict pyright 20 errors), checked as a platform with `typeCheckingMode strict` sees it."""
    pyright = ROOT / "node_modules" / ".bin" / "pyright"
    if not pyright.exists():
        pytest.fail(f"needs the pinned pyright at {pyright.relative_to(ROOT)}: `make install` (npm ci)", pytrace=False)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "ray_efa").symlink_to(ROOT / "ray_efa", target_is_directory=True)
    (tmp_path / "app.py").write_text((ROOT / "examples" / "platform" / "infra" / "smallest.py").read_text())
    (tmp_path / "pyrightconfig.json").write_text(
        json.dumps(
            {
                "venvPath": str(ROOT),
                "venv": ".venv",
                "extraPaths": [str(tmp_path / "site")],
                "typeCheckingMode": "strict",
                "pythonVersion": "3.11",
                "include": ["app.py"],
            }
        )
    )
    result = subprocess.run([str(pyright), "--outputjson"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    report = json.loads(result.stdout)
    errors = [
        f"{d['range']['start']['line'] + 1}: {d['message']}"
        for d in report["generalDiagnostics"]
        if d["severity"] == "error"
    ]
    assert errors == [] and report["summary"]["filesAnalyzed"] == 1, errors
