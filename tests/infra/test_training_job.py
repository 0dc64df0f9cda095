"""RayTrainingJob embedded in a platform stack: where it runs comes from the constructs it runs on (or synth fails
naming both values), and your function and code ship with it (a ConfigMap, or an S3 asset the pods' role reads)."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template

from ray_efa.core.settings import Settings, SettingsError
from ray_efa.infra.checkpoints import CheckpointStorage
from ray_efa.infra.gpu_nodegroup import EfaGpuNodegroup
from ray_efa.infra.kuberay import KubeRayOperator
from ray_efa.infra.training_job import RayTrainingJob
from ray_efa.infra.workload import RayWorkload
from ray_efa.k8s.code_bundle import LAST_APPLIED_MAX_BYTES
from ray_efa.k8s.names import USER_CODE_PATH
from ray_efa.k8s.security import network_policy_name
from tests.cdk_cli import needs_cdk_cli
from tests.infra.test_workload import find, manifest_objects, manifests

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_SRC = ROOT / "examples" / "own-training" / "src"
SYSTEM = {"platform/pool": "system"}
GPU = {"platform/pool": "gpu"}

CKPT = "s3://ckpt-bucket/runs"  # a job on 2 GPU nodes needs shared storage (shared_storage_problem)


class Platform(cdk.Stack):
    """The issue's case: a platform stack with 4 x p5.48xlarge in namespace ml, on an imported cluster."""

    def __init__(self, scope, construct_id: str, *, nodes: int = 4, second_nodegroup: bool = False, **kwargs):
        super().__init__(scope, construct_id, env=cdk.Environment(region="us-west-2"), **kwargs)
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id="vpc-0123456789abcdef0",
            availability_zones=["us-west-2a", "us-west-2b"],
            private_subnet_ids=["subnet-00aaaaaaaaaaaaaaa", "subnet-01aaaaaaaaaaaaaaa"],
        )
        provider = eks.KubectlProvider.from_kubectl_provider_attributes(
            self, "Kubectl", service_token="arn:aws:lambda:us-west-2:111122223333:function:kubectl"
        )
        self.cluster = eks.Cluster.from_cluster_attributes(
            self,
            "Cluster",
            cluster_name="platform",
            cluster_security_group_id="sg-0123456789abcdef0",
            vpc=self.vpc,
            kubectl_provider=provider,
        )
        self.gpu = EfaGpuNodegroup(
            self,
            "GpuNodes",
            cluster=self.cluster,
            vpc=self.vpc,
            instance_type="p5.48xlarge",
            node_count=nodes,
            node_selector=GPU,
        )
        if second_nodegroup:
            EfaGpuNodegroup(self, "MoreGpuNodes", cluster=self.cluster, vpc=self.vpc, node_selector=GPU)
        self.operator = KubeRayOperator(self, "KubeRay", cluster=self.cluster, node_selector=SYSTEM)
        self.workload = RayWorkload(self, "Workload", cluster=self.cluster, namespace="ml", after=[self.operator.chart])
        self.storage = CheckpointStorage(
            self, "Checkpoints", cluster=self.cluster, namespace="ml", after=self.workload.namespace
        )


def _job_settings(template: Template, job: str = "train-efa") -> dict:
    _, _, config_map = find(template, "ConfigMap", f"{job}-settings")
    return json.loads(config_map["data"]["settings.json"])


def test_a_default_settings_object_takes_the_platforms_cluster():
    # GIVEN the platform stack and RayTrainingJob(settings=Settings()), as the issue tried
    stack = Platform(cdk.App(), "Platform")
    RayTrainingJob(stack, "Job", cluster=stack.cluster, settings=Settings(), after=[stack.gpu.nodegroup])
    template = Template.from_stack(stack)
    # THEN the job runs where the platform's constructs say: 4 x p5.48xlarge (8 GPUs, 32 EFA each), namespace ml
    settings = _job_settings(template)
    assert (settings["gpuInstanceType"], settings["gpuNodeCount"], settings["namespace"]) == ("p5.48xlarge", 4, "ml")
    assert settings["gpuNodeSelector"] == GPU and settings["systemNodeSelector"] == SYSTEM
    assert settings["serviceAccount"] == "ray-train" and settings["region"] == "us-west-2"
    _, _, job = find(template, "RayJob")
    assert job["metadata"]["namespace"] == "ml"
    (group,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert group["replicas"] == 4 and group["rayStartParams"]["num-gpus"] == "8"
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == ("8", "32")
    # the preflight floor follows: the settings the driver reads are p5's, so preflight_floor.floor_gbps is p5's
    from ray_efa.core import preflight_floor

    assert preflight_floor.floor_gbps(Settings.from_context(settings)) == preflight_floor.floor_gbps(
        Settings.from_context({"gpuInstanceType": "p5.48xlarge", "gpuNodeCount": 4})
    )
    assert settings["storagePath"].startswith("s3://")  # the platform's bucket (a token until deploy)


def test_settings_that_describe_another_cluster_fail_synth_naming_both_values():
    stack = Platform(cdk.App(), "Platform")
    with pytest.raises(
        ValueError,
        match=r"gpuNodeCount: the settings say 2 but EfaGpuNodegroup Platform/GpuNodes "
        r"says 4",
    ):
        RayTrainingJob(stack, "Job", cluster=stack.cluster, settings=Settings.from_context({"gpuNodeCount": 2}))
    stack = Platform(cdk.App(), "Platform")
    with pytest.raises(
        ValueError,
        match=r"namespace: the settings say 'ray-ml' but RayWorkload Platform/Workload "
        r"says 'ml'",
    ):
        RayTrainingJob(stack, "Job", cluster=stack.cluster, settings=Settings.from_context({"namespace": "ray-ml"}))


def test_props_that_disagree_with_the_constructs_fail_naming_both():
    stack = Platform(cdk.App(), "Platform")
    with pytest.raises(
        ValueError,
        match=r"gpuNodeSelector: EfaGpuNodegroup Platform/GpuNodes says .* but "
        r"RayTrainingJob gpu_node_selector says",
    ):
        RayTrainingJob(stack, "Job", cluster=stack.cluster, gpu_node_selector={"role": "other"})


def test_two_node_groups_need_the_one_to_be_named():
    stack = Platform(cdk.App(), "Platform", second_nodegroup=True)
    with pytest.raises(ValueError, match="2 EfaGpuNodegroup constructs .* pass gpu_nodes="):
        RayTrainingJob(stack, "Job", cluster=stack.cluster)
    # WHEN it is named THEN that one is used
    job = RayTrainingJob(stack, "Job2", cluster=stack.cluster, gpu_nodes=stack.gpu)
    assert job.settings.nodes.gpu_node_count == 4


def test_own_function_and_small_code_ship_in_a_config_map_under_the_job_name():
    stack = Platform(cdk.App(), "Platform")
    job = RayTrainingJob(
        stack,
        "Job",
        cluster=stack.cluster,
        train_function="own_training.train:train_func",
        code=EXAMPLE_SRC,
        job_name="mlp-exp",
        train_config={"epochs": 3},
    )
    template = Template.from_stack(stack)
    assert job.name == "mlp-exp" and job.code_asset is None
    settings = _job_settings(template, "mlp-exp")
    assert (settings["trainFunction"], settings["codeDir"], settings["trainConfig"]) == (
        "own_training.train:train_func",
        USER_CODE_PATH,
        {"epochs": 3},
    )
    _, _, code = find(template, "ConfigMap", "mlp-exp-user-code")
    assert "own_training.train.py" in code["data"]
    _, _, ray_job = find(template, "RayJob", "mlp-exp")
    assert ray_job["metadata"]["namespace"] == "ml"


def test_a_missing_function_fails_synth_naming_the_prop():
    stack = Platform(cdk.App(), "Platform")
    with pytest.raises(SettingsError) as raised:
        RayTrainingJob(stack, "Job", cluster=stack.cluster, train_function="own_training.train:nope", code=EXAMPLE_SRC)
    assert raised.value.problems[0].key == "RayTrainingJob train_function"


def _large_code(root: Path) -> Path:
    code = root / "big"
    (code / "big_train").mkdir(parents=True)
    (code / "big_train" / "__init__.py").write_text("def train_func(config):\n    return None\n")
    (code / "big_train" / "vocab.txt").write_text("token\n" * (LAST_APPLIED_MAX_BYTES // 6 + 1))
    (code / "big_train" / "__pycache__").mkdir()
    (code / "big_train" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    return code


def test_large_code_ships_as_an_s3_asset_the_pods_role_reads(tmp_path):
    # GIVEN code over kubectl's annotation limit
    app = cdk.App(outdir=str(tmp_path / "cdk.out"))
    stack = Platform(app, "Platform")
    job = RayTrainingJob(
        stack,
        "Job",
        cluster=stack.cluster,
        train_function="big_train:train_func",
        code=_large_code(tmp_path),
        after=[stack.gpu.nodegroup],
    )
    template = Template.from_stack(stack)
    # THEN no user-code ConfigMap: every Ray pod fetches the asset's zip into USER_CODE_PATH
    assert job.code_asset is not None
    assert not [
        o
        for r in manifests(template).values()
        for o in manifest_objects(r)
        if o["metadata"]["name"].endswith("user-code")
    ]
    _, _, ray_job = find(template, "RayJob")
    spec = ray_job["spec"]["rayClusterSpec"]
    for pod in (spec["headGroupSpec"]["template"], spec["workerGroupSpecs"][0]["template"]):
        # (the project's own code comes first, from its own asset: fetch-app; the extra packages' after them)
        names = [c["name"] for c in pod["spec"]["initContainers"]]
        assert names[:2] == ["fetch-app", "fetch-code"], names
        (init,) = [c for c in pod["spec"]["initContainers"] if c["name"] == "fetch-code"]
        uri, dest = init["command"][-2:]
        assert uri.startswith("s3://cdk-") and uri.endswith(".zip") and dest == USER_CODE_PATH
    # and the pods' role (the CheckpointStorage service account's) may read those two objects, and only them
    policies = [
        p["Properties"]
        for p in template.find_resources("AWS::IAM::Policy").values()
        if "s3:GetObject" == p["Properties"]["PolicyDocument"]["Statement"][0]["Action"]
    ]
    (policy,) = policies
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert len(statement["Resource"]) == 2
    assert job.code_asset.s3_object_key in json.dumps(policy["PolicyDocument"])
    assert job.app_asset is not None and job.app_asset.s3_object_key in json.dumps(policy["PolicyDocument"])
    role = stack.storage.service_account.role.node.default_child
    assert isinstance(role, cdk.CfnElement)
    role_id = stack.get_logical_id(role)
    assert policy["Roles"] == [{"Ref": role_id}]
    # the asset holds the code without caches
    assembly = app.synth()
    staged = Path(assembly.directory) / f"asset.{job.code_asset.asset_hash}"
    assert sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()) == [
        "big_train/__init__.py",
        "big_train/vocab.txt",
    ]


def test_large_code_without_a_role_to_read_it_names_the_props(tmp_path):
    stack = cdk.Stack(cdk.App(), "Bare", env=cdk.Environment(region="us-west-2"))
    provider = eks.KubectlProvider.from_kubectl_provider_attributes(
        stack, "Kubectl", service_token="arn:aws:lambda:us-west-2:111122223333:function:kubectl"
    )
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0123456789abcdef0",
        availability_zones=["us-west-2a"],
        private_subnet_ids=["subnet-00aaaaaaaaaaaaaaa"],
    )
    cluster = eks.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name="c", kubectl_provider=provider, vpc=vpc
    )
    with pytest.raises(ValueError, match="pass storage= .* or code_reader="):
        RayTrainingJob(
            stack,
            "Job",
            cluster=cluster,
            train_function="big_train:train_func",
            code=_large_code(tmp_path),
            storage_path=CKPT,
        )


def test_the_project_app_ships_large_code_from_the_gpu_stack_with_cdk_nag_clean(tmp_path):
    import tempfile

    from ray_efa.infra.app import build_stacks, feature_flags

    # GIVEN the project's own two stacks with a large codeDir (the service account lives in the cluster stack)
    settings = Settings.from_context(
        {"trainFunction": "big_train:train_func", "codeDir": str(_large_code(tmp_path)), "jobName": "big"}
    )
    app = cdk.App(outdir=tempfile.mkdtemp(dir=tmp_path), context=feature_flags())
    stacks = build_stacks(app, settings)
    # WHEN synthesized (cdk-nag raises on any unacknowledged finding) THEN the asset and its read grant are in the
    # GPU stack, attached to the cluster stack's role by an import: no reference back, so no cycle
    app.synth()
    gpu = Template.from_stack(stacks.gpu)
    # (the GPU stack's other policy is the job guard's own role's)
    (policy,) = [
        p["Properties"]
        for p in gpu.find_resources("AWS::IAM::Policy").values()
        if p["Properties"]["PolicyDocument"]["Statement"][0]["Action"] == "s3:GetObject"
    ]
    assert "Fn::ImportValue" in json.dumps(policy["Roles"])
    _, _, ray_job = find(gpu, "RayJob", "big")
    assert ray_job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["initContainers"]
    assert stacks.gpu.training_job is not None and stacks.gpu.training_job.code_asset is not None


@needs_cdk_cli
def test_cdk_synth_ships_your_function_under_its_job_name(tmp_path):
    import subprocess

    from tests.infra.test_app import offline_env

    # WHEN the real CDK CLI synthesizes the project's app with the three settings (codeDir relative to the app dir)
    result = subprocess.run(
        [
            "npx",
            "cdk",
            "synth",
            "--quiet",
            "--output",
            str(tmp_path),
            "-c",
            "trainFunction=own_training.train:train_func",
            "-c",
            "codeDir=examples/own-training/src",
            "-c",
            "jobName=mlp-exp",
            "-c",
            'trainConfig={"epochs": 3}',
        ],
        cwd=ROOT,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # THEN the GPU stack applies the code ConfigMap of codeDir and the RayJob mlp-exp, whose settings name the function
    template = Template.from_json(json.loads((tmp_path / "ray-train-gpu.template.json").read_text()))
    _, _, code = find(template, "ConfigMap", "mlp-exp-user-code")
    assert code["data"]["own_training.train.py"] == (EXAMPLE_SRC / "own_training" / "train.py").read_text()
    settings = _job_settings(template, "mlp-exp")
    assert (settings["trainFunction"], settings["codeDir"], settings["trainConfig"]) == (
        "own_training.train:train_func",
        USER_CODE_PATH,
        {"epochs": 3},
    )
    _, _, job = find(template, "RayJob", "mlp-exp")
    assert job["metadata"]["namespace"] == "ray"
    # and a function that is not there stops synth before anything is written, naming trainFunction
    bad = subprocess.run(
        [
            "npx",
            "cdk",
            "synth",
            "--quiet",
            "--output",
            str(tmp_path / "bad"),
            "-c",
            "trainFunction=own_training.train:nope",
            "-c",
            "codeDir=examples/own-training/src",
        ],
        cwd=ROOT,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bad.returncode != 0 and "trainFunction: must name a function of own_training.train" in bad.stderr
    assert not (tmp_path / "bad" / "ray-train-gpu.template.json").exists()


def test_the_job_waits_for_the_namespace_and_the_service_account_it_was_given():
    # GIVEN the stack, where the job was told to wait for the GPU nodes only
    stack = Platform(cdk.App(), "Platform")
    job = RayTrainingJob(stack, "Job", cluster=stack.cluster, after=[stack.gpu.nodegroup])
    template = Template.from_stack(stack)
    # THEN its first object (its own NetworkPolicy, not the namespace's default-deny) also waits for the namespace and
    # the pods' service account (no race at deploy)
    first_id, first, _ = find(template, "NetworkPolicy", network_policy_name(job.name))
    waits = set(first["DependsOn"])
    namespace = stack.workload.namespace.node.default_child
    assert isinstance(namespace, cdk.CfnElement)
    namespace_id = stack.get_logical_id(namespace)
    assert namespace_id in waits
    assert any(
        stack.get_logical_id(c.node.default_child) in waits
        for c in stack.storage.service_account.node.find_all()
        if isinstance(c.node.default_child, cdk.CfnResource)
    )
