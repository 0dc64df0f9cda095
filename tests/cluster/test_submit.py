"""`ray-efa submit` and `follow` against the real API server: the deployed settings ConfigMap read from the cluster,
the objects created (and refused) by the API server itself, ownerReferences followed by the real garbage collector,
RBAC that refuses a patch, the RayClusters listed, and the submitter's log served by KWOK's kubelet API.

No operator runs in this module's control plane: it cannot finish a RayJob (it asks the head's Ray dashboard, which
does not run), so each test that follows a job moves it through the statuses a real one took, as the operator would
write them (tests/cluster/submitted.py says how). tests/cluster/test_submit_follow.py runs submit and follow with the
real operator, up to what it can do here, and a failing init container.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.api_client import ApiClient

from tests.cluster.conftest import SharedPlane, module_plane, served_crds, served_kuberay
from tests.cluster.controlplane import ControlPlane
from tests.cluster.submitted import (
    SUBMITTER,
    clear,
    contains,
    deployed_settings_map,
    kubeconfig,
    load,
    module_nodes,
    progress,
    requests,
    research_cli,
    settings_args,
    writes,
)
from tests.ops.cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
JOB = "mlp-exp-run1"
SETTINGS = (
    "trainFunction=own_training.train:train_func",
    "codeDir=examples/own-training/src",
    "storagePath=s3://research-checkpoints/runs",
    'trainConfig={"epochs": 3}',
    "jobName=mlp-exp",
)
DEPLOYED = ("jobName=mlp-exp", "storagePath=s3://research-checkpoints/runs")
"""The cluster these tests submit to: deployed with the defaults (as the repository's cdk.json) and their bucket."""
PLATFORM = (
    "gpuInstanceType=p5.48xlarge",
    "gpuNodeCount=3",
    "region=ap-southeast-2",
    "namespace=research",
    'gpuNodeSelector={"example.com/pool": "p5-train"}',
    'systemNodeSelector={"example.com/pool": "platform"}',
    "storagePath=s3://company-checkpoints/research",
    "placementGroup=off",
)
"""A platform team's cluster: 3 x p5.48xlarge in ap-southeast-2, namespace research, company node labels, an
existing checkpoint bucket; its training job is the default train-efa."""
NAMESPACES = ("ray", "research")
SERVED = f"kuberayVersion={served_kuberay()}"
"""Every deployment here is of the KubeRay version whose CRDs the API server serves (conftest.served_kuberay): the
RayJob submit makes takes the deployed kuberayVersion, and the server refuses fields its schema does not declare."""


@pytest.fixture(scope="module")
def control_plane(shared_plane: SharedPlane) -> Iterator[ControlPlane]:
    """The process's control plane, without the KubeRay operator for this module (the module docstring says why)."""
    with module_plane(shared_plane, operator=False) as plane:
        yield plane


@pytest.fixture(scope="module")
def plane(control_plane: ControlPlane, api: ApiClient) -> Iterator[ControlPlane]:
    """The namespaces of the two deployments and a system node (default and platform labels) for the submitters."""
    core = client.CoreV1Api(api)
    for name in NAMESPACES:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    with module_nodes(api, {"example.com/pool": "platform"}):
        yield control_plane


@pytest.fixture(autouse=True)
def _cleared(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "plane" in request.fixturenames:
        api = request.getfixturevalue("api")
        for namespace in NAMESPACES:
            clear(api, namespace)


_users = itertools.count()


@pytest.fixture
def user() -> str:
    """A user of the test's own (in system:masters), so that the audit log's requests of it are the test's."""
    return f"{SUBMITTER}-{next(_users)}"


@pytest.fixture
def config(plane: ControlPlane, tmp_path: Path, user: str) -> str:
    return kubeconfig(plane, tmp_path / "users", user=user)


def deploy(plane: ControlPlane, *context: str, namespace: str | None = None) -> dict[str, Any]:
    """The settings ConfigMap of a deployment of `context` in the cluster (in `namespace`, if given: else its own)."""
    config_map = deployed_settings_map(SERVED, *context)
    if namespace:
        config_map["metadata"]["namespace"] = namespace
    (stored,) = plane.apply([config_map])
    return stored


FOLLOWED = ("--name", JOB, "--poll", "0.05")
"""submit's flags for a job it follows to its end: its name, and a poll quick enough for the recorded states."""


def submit(config: str, *flags: str, settings: Iterable[str] = SETTINGS) -> int:
    """`ray-efa submit` of `settings` with `flags`, as the user of `config`; its exit code."""
    return research_cli("submit", config, *flags, settings=settings)


def follow(config: str, *flags: str) -> int:
    """`ray-efa follow JOB` with `flags`, as the user of `config`, polling as submit does here; its exit code."""
    return research_cli("follow", config, JOB, "--poll", "0.05", *flags)


def states(err: str) -> list[str]:
    return [line.split("] ", 1)[1] for line in err.splitlines() if line.startswith("[")]


def creates(plane: ControlPlane, user: str) -> list[str]:
    """`kind/name` of each object `user` created, in order (the audit log's objectRef), not the SelfSubjectReview
    (a question to the API server, stored nowhere) submit asks its user name with."""
    return [
        f"{e['objectRef']['resource']}/{e['objectRef']['name']}"
        for e in plane.audit_events(user)
        if e["verb"] == "create"
        and e.get("responseStatus", {}).get("code") == 201
        and e["objectRef"]["resource"] != "selfsubjectreviews"
    ]


def stored(api: ApiClient, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server holds it."""
    from kubernetes.dynamic import DynamicClient

    resource = DynamicClient(api).resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    return resource.get(name=obj["metadata"]["name"], namespace=obj["metadata"]["namespace"]).to_dict()


def ray_job(api: ApiClient, namespace: str = "ray", name: str = JOB) -> dict[str, Any]:
    objects: Any = client.CustomObjectsApi(api)
    return objects.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", name)


def shipped(api: ApiClient, namespace: str) -> dict[str, Any]:
    """settings.json of the job's settings ConfigMap as the cluster holds it."""
    core: Any = client.CoreV1Api(api)
    data = core.read_namespaced_config_map(f"{JOB}-settings", namespace).data
    return json.loads(data["settings.json"])


@pytest.mark.parametrize("outcome", ["complete", "unproven"])
def test_recorded_statuses_follow_the_rayjob_crd_schema(outcome):
    import jsonschema

    from tests.k8s.schemas import strict

    # the status schema of the RayJob CRD the API server serves: the deployed version's where ../shared has it, else
    # the operator's own (conftest.served_crds), so that a clone alone checks them too
    (path,) = [crd for crd in served_crds() if crd.name == "ray.io_rayjobs.yaml"]
    (version,) = [v for v in yaml.safe_load(path.read_text())["spec"]["versions"] if v["name"] == "v1"]
    status_schema = strict(version["schema"]["openAPIV3Schema"]["properties"]["status"])
    for status in load(f"statuses_{outcome}.json"):
        assert list(jsonschema.Draft7Validator(status_schema).iter_errors(status)) == [], status


@pytest.mark.synth  # `ray-efa manifests` in this process, for what submit must have created (a cdk8s synth)
def test_submit_creates_the_manifests_objects_follows_the_job_and_ends_with_the_verdict(
    plane, api, config, user, monkeypatch, tmp_path, capsys
):
    # GIVEN a cluster deployed with the defaults, whose RayJob will go Initializing, Running, Complete
    deploy(plane, *DEPLOYED)
    moved = progress(monkeypatch, plane, "ray", JOB, "complete")
    # WHEN `ray-efa submit` runs the own function against the kube context "research"
    code = submit(config, *FOLLOWED)
    out, err = capsys.readouterr()
    # THEN it succeeds, with each state, the driver's log (KWOK's kubelet API, through the API server), the gate's
    # verdict and the exit code
    assert code == 0, err
    assert states(err) == [
        f"RayJob {JOB}: New",
        f"RayJob {JOB}: Initializing, Ray cluster {JOB}-x8k2p",
        f"RayJob {JOB}: Running (RUNNING), Ray cluster {JOB}-x8k2p",
        f"RayJob {JOB}: Complete (SUCCEEDED), Ray cluster {JOB}-x8k2p",
    ]
    assert len(moved.written) == 3
    assert "epoch 3/3  loss 0.4020  (16 workers)" in out and "RAY_EFA_RUN_SUMMARY {" in out
    assert out.rstrip().endswith("exit code 0")
    assert "transport gate: PASS: all 16 processes" in out.splitlines()[-2]
    assert f"clean up: kubectl -n ray delete rayjob/{JOB}" in err
    # and what it created is exactly what `ray-efa manifests` writes for the same settings, in that order, each
    # object stored by the API server with every field as written
    dist = tmp_path / "dist"
    assert run_cli("manifests", "--out", str(dist), *settings_args(SERVED, *SETTINGS, f"jobName={JOB}")) == 0
    written = list(yaml.safe_load_all((dist / "0002-rayjob-efa.yaml").read_text()))
    plural = {"NetworkPolicy": "networkpolicies", "ConfigMap": "configmaps", "RayJob": "rayjobs"}
    assert creates(plane, user) == [f"{plural[o['kind']]}/{o['metadata']['name']}" for o in written]
    kinds = [o["kind"] for o in written]
    assert kinds[0] == "NetworkPolicy" and kinds[-1] == "RayJob"
    assert set(kinds[1:-1]) == {"ConfigMap"} and len(kinds) >= 4
    assert [m for m, path in writes(plane, user) if "selfsubjectreviews" not in path].count("POST") == len(written)
    for obj in written:
        held = stored(api, obj)
        assert contains(held, {k: v for k, v in obj.items() if k != "metadata"}), obj["metadata"]["name"]
        assert contains(held["metadata"], obj["metadata"]), obj["metadata"]["name"]
    # and the RayJob says who submitted it from where (what `ray-efa jobs` shows)
    assert ray_job(api)["metadata"]["annotations"]["ray-efa-stack/submitted-by"].endswith("(ray-efa submit)")
    # and the RayJob owns the rest, so that deleting it deletes them (the clean-up line names the RayJob alone)
    job_uid = ray_job(api)["metadata"]["uid"]
    owners = {o["metadata"]["name"]: stored(api, o)["metadata"].get("ownerReferences") for o in written[:-1]}
    assert owners == {
        name: [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": JOB, "uid": job_uid}] for name in owners
    }
    assert f"clean up: kubectl -n ray delete rayjob/{JOB} (its ConfigMaps and NetworkPolicy go with it" in err


def test_deleting_the_rayjob_deletes_what_submit_created_with_it(plane, api, config, monkeypatch, capsys):
    # GIVEN a job submitted and finished
    deploy(plane, *DEPLOYED)
    progress(monkeypatch, plane, "ray", JOB, "complete")
    assert submit(config, *FOLLOWED) == 0, capsys.readouterr().err
    core: Any = client.CoreV1Api(api)
    networking: Any = client.NetworkingV1Api(api)
    batch: Any = client.BatchV1Api(api)

    def mine() -> list[str]:
        return sorted(
            c.metadata.name
            for c in core.list_namespaced_config_map("ray").items
            if c.metadata.name.startswith(f"{JOB}-")
        )

    assert f"{JOB}-settings" in mine()
    # WHEN the clean-up line's command runs (the RayJob alone is deleted)
    client.CustomObjectsApi(api).delete_namespaced_custom_object("ray.io", "v1", "ray", "rayjobs", JOB)
    # THEN the real garbage collector deletes its ConfigMaps and NetworkPolicy, and the submitter's Job
    from tests.cluster.conftest import wait_for

    wait_for(
        lambda: (
            not mine()
            and not networking.list_namespaced_network_policy("ray").items
            and not batch.list_namespaced_job("ray").items
        ),
        "the job's ConfigMaps, NetworkPolicy and Job deleted with it",
        timeout_s=60,
    )
    assert deploy(plane, *DEPLOYED)["metadata"]["name"] == "mlp-exp-settings"  # the deployment's own stays


def test_without_patch_rights_the_job_runs_and_the_clean_up_line_names_every_object(
    plane, api, monkeypatch, tmp_path, capsys
):
    # GIVEN credentials that may create but not patch: a Role without "patch" on configmaps and networkpolicies
    deploy(plane, *DEPLOYED)
    rules = [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create"]},
        {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["create"]},
        {"apiGroups": ["ray.io"], "resources": ["rayjobs", "rayclusters"], "verbs": ["get", "list", "create"]},
    ]
    plane.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "no-patch", "namespace": "ray"},
                "rules": rules,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "no-patch", "namespace": "ray"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "no-patch"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "no-patch"}],
            },
        ]
    )
    config = kubeconfig(plane, tmp_path / "users", user="no-patch", groups=())
    progress(monkeypatch, plane, "ray", JOB, "complete")
    try:
        code = submit(config, *FOLLOWED)
    finally:
        rbac = client.RbacAuthorizationV1Api(api)
        rbac.delete_namespaced_role_binding("no-patch", "ray")
        rbac.delete_namespaced_role("no-patch", "ray")
    err = capsys.readouterr().err
    # THEN the job still runs to its verdict; each object left unowned is named with the API server's 403, and the
    # clean-up line lists them all
    assert code == 0, err
    singular = {"networkpolicies": "networkpolicy", "configmaps": "configmap", "rayjobs": "rayjob"}
    created = [f"{singular[c.split('/')[0]]}/{c.split('/')[1]}" for c in creates(plane, "no-patch")]
    warnings = [line for line in err.splitlines() if line.startswith("warning: could not make RayJob")]
    assert len(warnings) == len(created) - 1 and all("403 Forbidden" in w for w in warnings), warnings
    assert 'User "no-patch" cannot patch resource' in warnings[0]
    assert f"clean up: kubectl -n ray delete {' '.join(reversed(created))}" in err


def test_a_job_the_gate_cannot_prove_ends_with_exit_3(plane, config, monkeypatch, capsys):
    deploy(plane, *DEPLOYED)
    progress(monkeypatch, plane, "ray", JOB, "unproven")
    code = submit(config, *FOLLOWED)
    out = capsys.readouterr().out
    assert code == 3
    assert f"RayJob ray/{JOB}: Failed (FAILED), Ray cluster {JOB}-x8k2p, reason AppFailed" in out
    assert "transport gate: NO PROOF" in out and out.rstrip().endswith("exit code 3")


def test_a_missing_namespace_is_named_with_what_to_check(plane, config, user, capsys):
    # GIVEN deployed settings whose namespace is not there (deleted since; its settings ConfigMap left in "ray")
    deploy(plane, *DEPLOYED, "namespace=ray-gone", namespace="ray")
    code = submit(config, "--name", JOB)
    err = capsys.readouterr().err
    # THEN the API server's 404 for the first create is named, with what to check
    assert code == 1, err
    assert (
        f"cannot create NetworkPolicy ray-gone/{JOB}-" in err
        and '404 Not Found: namespaces "ray-gone" not found' in err
        and "ray-efa verify" in err
    )
    assert [c.split("/")[0] for c in creates(plane, user)] == []


def test_bad_settings_are_exit_2_before_any_request(plane, config, user, capsys):
    code = submit(config, settings=(*SETTINGS, "trainFunction=own_training.train:nope"))
    assert code == 2 and "trainFunction: must name a function of own_training.train" in capsys.readouterr().err
    assert requests(plane, user) == []


def test_a_cluster_deployed_without_shared_storage_is_exit_2_before_anything_is_created(plane, config, user, capsys):
    # GIVEN a cluster deployed with no storagePath, and local settings that name none either
    deploy(plane, "jobName=mlp-exp")
    code = submit(config, settings=(s for s in SETTINGS if not s.startswith("storagePath=")))
    # THEN the job is refused as the driver would refuse it on the cluster, and nothing is created
    assert code == 2 and "storagePath: must be s3://... or a shared filesystem" in capsys.readouterr().err
    assert ("GET", "/api/v1/namespaces/ray/configmaps/mlp-exp-settings") in requests(plane, user)
    assert writes(plane, user) == []


def test_json_puts_one_object_on_stdout_and_the_log_on_stderr(plane, config, monkeypatch, capsys):
    deploy(plane, *DEPLOYED)
    progress(monkeypatch, plane, "ray", JOB, "complete")
    code = submit(config, "--json", *FOLLOWED)
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert code == 0 and result["exit_code"] == 0 and result["ray_job"] == JOB
    assert (result["deployment_status"], result["job_status"]) == ("Complete", "SUCCEEDED")
    assert result["run_summary"]["devices"] == 16 and result["transport_gate"][0].startswith("transport gate: PASS")
    assert "epoch 3/3" in err


def test_a_bad_name_is_exit_2_naming_the_flag(plane, config, user, capsys):
    code = submit(config, "--name", "Run_1")
    assert code == 2 and "--name: must be a DNS-1035 label" in capsys.readouterr().err
    assert requests(plane, user) == []


def _binary_code(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "__init__.py").write_text("def fit(config): ...\n")
    (code / "pkg" / "vocab.bin").write_bytes(bytes(range(256)) * 4)  # binary: no ConfigMap can hold it
    return code


def test_code_no_config_map_can_hold_is_uploaded_under_storage_path_and_fetched_by_the_pods(
    plane, api, config, user, monkeypatch, tmp_path, capsys
):
    # GIVEN binary code, storagePath in a bucket (moto: the S3 API cannot exist here) and a cluster that runs the job
    import boto3
    from moto import mock_aws

    from ray_efa.k8s.code_archive import build_code_archive

    deploy(plane, *DEPLOYED)
    code = _binary_code(tmp_path)
    settings = ("trainFunction=pkg:fit", f"codeDir={code}", "storagePath=s3://research-checkpoints/runs")
    archive = build_code_archive(code, storage_path="s3://research-checkpoints/runs")
    uri = f"s3://research-checkpoints/runs/ray-efa-code/{archive.file_name}"
    progress(monkeypatch, plane, "ray", JOB, "complete")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-2")
        s3.create_bucket(Bucket="research-checkpoints", CreateBucketConfiguration={"LocationConstraint": "us-east-2"})
        # WHEN `ray-efa submit` runs it
        exit_code = submit(config, *FOLLOWED, settings=settings)
        stored_zip = s3.get_object(Bucket="research-checkpoints", Key=uri.removeprefix("s3://research-checkpoints/"))
        assert stored_zip["Body"].read() == archive.data
    err = capsys.readouterr().err
    # THEN the zip went to storagePath before the job, whose every Ray pod fetches it, and no ConfigMap holds it
    assert exit_code == 0, err
    assert f"codeDir (2 files, 0.0 MiB zipped) uploaded to {uri}" in err
    assert err.index("uploaded to") < err.index("submitted RayJob")
    spec = ray_job(api)["spec"]["rayClusterSpec"]
    for template in [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]:
        (init,) = template["spec"]["initContainers"]
        assert init["command"][-2] == uri
    assert not [c for c in creates(plane, user) if c.endswith("-user-code")]
    assert f"the code zip {uri} stays" in err


def test_an_upload_s3_refuses_is_exit_1_before_any_object_is_created(plane, config, user, tmp_path, capsys):
    from moto import mock_aws

    deploy(plane, "storagePath=s3://no-such-bucket-here/runs")
    code = _binary_code(tmp_path)
    settings = ("trainFunction=pkg:fit", f"codeDir={code}", "storagePath=s3://no-such-bucket-here/runs")
    with mock_aws():
        exit_code = submit(config, *FOLLOWED, "--timeout", "1", settings=settings)
    assert exit_code == 1
    assert "cannot upload the code to s3://no-such-bucket-here/runs/ray-efa-code/code-" in capsys.readouterr().err
    assert writes(plane, user) == []


def test_code_no_config_map_can_hold_without_s3_storage_is_exit_2_before_anything_is_created(
    plane, config, user, tmp_path, capsys
):
    code = _binary_code(tmp_path)
    shared = ("storagePath=/mnt/fsx/runs", "sharedVolumeClaim=fsx", "sharedVolumeMountPath=/mnt/fsx")
    deploy(plane, *shared)
    exit_code = submit(config, settings=("trainFunction=pkg:fit", f"codeDir={code}", *shared))
    assert exit_code == 2
    assert "under an s3:// storagePath (storagePath is /mnt/fsx/runs" in capsys.readouterr().err
    assert writes(plane, user) == []


def _ray_cluster(name: str, *, replicas: int, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """A RayCluster with `replicas` workers (KubeRay's fields that submit reads: worker replicas, owner, state)."""
    template = {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.58.0"}]}}
    meta: dict[str, Any] = {"name": name, "namespace": "ray"}
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayJob",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }
        ]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": meta,
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": template},
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": replicas,
                    "minReplicas": replicas,
                    "maxReplicas": max(replicas, 1),
                    "rayStartParams": {},
                    "template": template,
                }
            ],
        },
    }


def _earlier_job(plane: ControlPlane, job_name: str, *context: str) -> dict[str, Any]:
    """The objects of an earlier job `job_name` in the cluster (as kubectl applies the manifests: the chart's objects,
    k8s.objects.ray_job_objects); its RayJob."""
    from ray_efa.core.settings import Settings
    from ray_efa.k8s.objects import ray_job_objects

    objects = ray_job_objects(
        Settings.from_context({"jobName": job_name, **dict(c.split("=", 1) for c in (SERVED, *context))})
    )
    plane.apply([o for o in objects if o["kind"] != "RayJob"])
    (job,) = plane.apply([o for o in objects if o["kind"] == "RayJob"])
    return job


def test_a_ray_cluster_that_holds_the_gpu_nodes_is_named_before_the_job_is_created(
    plane, api, config, monkeypatch, capsys
):
    # GIVEN the cluster of an earlier job still running, and a RayCluster scaled to no workers (which holds none)
    deploy(plane, *DEPLOYED)
    earlier = _earlier_job(plane, "train-efa-a1b2c", *DEPLOYED[1:])
    objects = client.CustomObjectsApi(api)
    for cluster in plane.apply(
        [_ray_cluster("train-efa-a1b2c-x8k2p", replicas=2, owner=earlier), _ray_cluster("idle", replicas=0)]
    ):
        objects.patch_namespaced_custom_object_status(
            "ray.io", "v1", "ray", "rayclusters", cluster["metadata"]["name"], {"status": {"state": "ready"}}
        )
    progress(monkeypatch, plane, "ray", JOB, "complete")
    code = submit(config, *FOLLOWED)
    err = capsys.readouterr().err
    # THEN the job is still submitted (queueing behind it may be what the user wants), with what it will wait for and
    # that its deadline counts meanwhile (KubeRay counts activeDeadlineSeconds from Initializing)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: RayCluster ray/train-efa-a1b2c-x8k2p (of RayJob train-efa-a1b2c, ready) holds the "
        f"GPU nodes: the workers of {JOB} wait until it is gone, and its jobActiveDeadlineSeconds (3600 s) "
        "counts from now"
    ]
    assert err.index("warning: RayCluster") < err.index("submitted RayJob")


def test_no_warning_when_no_ray_cluster_holds_the_gpu_nodes(plane, config, user, monkeypatch, capsys):
    deploy(plane, *DEPLOYED)
    progress(monkeypatch, plane, "ray", JOB, "complete")
    code = submit(config, *FOLLOWED)
    err = capsys.readouterr().err
    assert code == 0 and "holds the GPU nodes" not in err
    assert ("GET", "/apis/ray.io/v1/namespaces/ray/rayclusters") in requests(plane, user)


def _existing_job(plane: ControlPlane) -> None:
    """RayJob JOB already there, created by kubectl from the manifests (or an earlier submit)."""
    _earlier_job(plane, JOB, *SETTINGS[:4])


def test_follow_picks_up_a_running_job_and_ends_with_its_verdict_and_exit_code(
    plane, config, user, monkeypatch, capsys
):
    _existing_job(plane)
    progress(monkeypatch, plane, "ray", JOB, "complete")
    code = follow(config)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"RayJob {JOB}: Complete (SUCCEEDED), Ray cluster {JOB}-x8k2p" in err
    assert "epoch 3/3  loss 0.4020  (16 workers)" in out  # the submitter's whole log, from its start
    assert "transport gate: PASS: all 16 processes" in out and out.rstrip().endswith("exit code 0")
    assert requests(plane, user) and writes(plane, user) == []  # it reads, never writes


def test_follow_exits_with_the_jobs_code_and_json_has_the_outcome(plane, config, monkeypatch, capsys):
    _existing_job(plane)
    progress(monkeypatch, plane, "ray", JOB, "unproven")
    code = follow(config, "--json")
    result = json.loads(capsys.readouterr().out)
    assert code == 3 and result["exit_code"] == 3 and result["ray_job"] == JOB
    assert result["transport_gate"][0].startswith("transport gate: NO PROOF")


def test_follow_says_when_the_submitters_log_cannot_be_read_and_goes_on_to_the_verdict(
    plane, api, config, monkeypatch, capsys
):
    # GIVEN a job whose submitter ran on a node that is gone since (scaled in): its pod is still listed, ended, but the
    # API server finds no node to ask for its log
    _existing_job(plane)
    progress(monkeypatch, plane, "ray", JOB, "complete", submitter=False)
    core = client.CoreV1Api(api)
    pod = f"{JOB}-7xk2q"
    # a manifest dict as the body: the client takes one (the kubernetes stubs name only the model)
    core.create_namespaced_pod(
        "ray",
        {  # pyright: ignore[reportArgumentType]
            "metadata": {"name": pod, "labels": {"job-name": JOB}},
            "spec": {
                "nodeName": "sys-scaled-in",
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "ray-job-submitter", "image": "registry.k8s.io/pause:3.10"}],
            },
        },
    )
    core.patch_namespaced_pod_status(pod, "ray", {"status": {"phase": "Succeeded"}})
    # WHEN it is followed
    code = follow(config)
    out, err = capsys.readouterr()
    # THEN the log's place says it cannot be read and why, and the job's end still ends the command with its code
    assert code == 0, err
    note = next(line for line in out.splitlines() if line.startswith(f"(the log of pod ray/{pod} cannot be read: "))
    assert "sys-scaled-in" in note, note
    assert "transport gate: no verdict in the submitter's log" in out and out.rstrip().endswith("exit code 0")


def _researcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    """A researcher's own repository, with no cdk.json: their function, code and config, nothing of the cluster."""
    home = tmp_path / "research-repo"
    home.mkdir(exist_ok=True)
    monkeypatch.chdir(home)
    return (
        "trainFunction=own_training.train:train_func",
        f"codeDir={ROOT / 'examples/own-training/src'}",
        'trainConfig={"epochs": 3}',
        "jobName=mlp-exp",
    )


def test_a_job_is_built_for_the_cluster_as_deployed_not_for_the_local_defaults(
    plane, api, config, user, tmp_path, monkeypatch, capsys
):
    # GIVEN the platform's cluster, where an earlier submitted job (owned by its RayJob) left other settings behind
    deploy(plane, *PLATFORM)
    stale = _earlier_job(plane, "old-run-k3x9a", "namespace=research", "gpuInstanceType=g6e.12xlarge")
    client.CoreV1Api(api).patch_namespaced_config_map(
        "old-run-k3x9a-settings",
        "research",
        {
            "metadata": {
                "ownerReferences": [
                    {
                        "apiVersion": "ray.io/v1",
                        "kind": "RayJob",
                        "name": "old-run-k3x9a",
                        "uid": stale["metadata"]["uid"],
                    }
                ]
            }
        },
    )
    progress(monkeypatch, plane, "research", JOB, "complete")
    # WHEN a researcher submits from their own repository, naming nothing of the cluster
    code = submit(config, *FOLLOWED, settings=_researcher(tmp_path, monkeypatch))
    err = capsys.readouterr().err
    # THEN it looked for the settings of its jobName in its namespace (the API's 404), found the deployment's
    assert code == 0, err
    assert ("GET", "/api/v1/namespaces/ray/configmaps/mlp-exp-settings") in requests(plane, user)
    assert (
        "cluster: 3 x p5.48xlarge in namespace research, ap-southeast-2 (from ConfigMap research/train-efa-settings)"
        in err
    )
    # and the job is the deployed cluster's: its namespace, node count, node labels, bucket and instance's resources
    assert {c.split("/")[0] for c in creates(plane, user)} == {"networkpolicies", "configmaps", "rayjobs"}
    spec = ray_job(api, "research")["spec"]["rayClusterSpec"]
    (workers,) = spec["workerGroupSpecs"]
    assert workers["replicas"] == 3
    assert workers["template"]["spec"]["nodeSelector"] == {"example.com/pool": "p5-train"}
    assert spec["headGroupSpec"]["template"]["spec"]["nodeSelector"] == {"example.com/pool": "platform"}
    (worker,) = workers["template"]["spec"]["containers"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "8"
    settings = shipped(api, "research")
    assert {k: settings[k] for k in ("gpuInstanceType", "gpuNodeCount", "region", "storagePath", "namespace")} == {
        "gpuInstanceType": "p5.48xlarge",
        "gpuNodeCount": 3,
        "region": "ap-southeast-2",
        "storagePath": "s3://company-checkpoints/research",
        "namespace": "research",
    }
    # while the job's own side stays the researcher's
    assert settings["trainFunction"] == "own_training.train:train_func" and settings["trainConfig"] == {"epochs": 3}


def test_a_command_line_value_that_contradicts_the_deployment_is_exit_2_naming_both(plane, config, user, capsys):
    # GIVEN the repository's cdk.json (2 x g6.12xlarge in us-east-2), the platform's cluster, and on the command line
    # storagePath and gpuNodeCount that are not the cluster's
    deploy(plane, *PLATFORM)
    code = submit(config, "--json", "--name", JOB, settings=(*SETTINGS, "gpuNodeCount=2"))
    out, err = capsys.readouterr()
    # THEN exit 2, each contradiction of the command line named with its value and the deployed one; what cdk.json
    # holds (the type, the region) describes the checkout's own deployment and yields to the cluster's
    assert code == 2, err
    problems = {p["key"]: p for p in json.loads(out)["problems"]}
    assert set(problems) == {"gpuNodeCount", "storagePath"}
    assert "gpuNodeCount: the cluster was deployed with 3 " in err and ", got 2" in err
    assert 'storagePath: the cluster was deployed with "s3://company-checkpoints/research"' in err
    assert "(from -c)" in problems["storagePath"]["message"] and "(from -c)" in problems["gpuNodeCount"]["message"]
    # and nothing was created
    assert writes(plane, user) == []


def test_submit_from_the_checkout_takes_the_deployed_cluster_over_cdk_json(plane, api, config, monkeypatch, capsys):
    # GIVEN the repository's cdk.json (clusterName, region, gpuInstanceType g6.12xlarge, gpuNodeCount 2) and a cluster
    # somebody else deployed (3 x p5.48xlarge in ap-southeast-2): nothing contradicting on the command line
    deploy(plane, *PLATFORM)
    progress(monkeypatch, plane, "research", JOB, "complete")
    code = submit(config, *FOLLOWED, settings=(s for s in SETTINGS if not s.startswith("storagePath=")))
    err = capsys.readouterr().err
    # THEN the job is built for the cluster as deployed, not for the checkout's defaults
    assert code == 0, err
    settings = shipped(api, "research")
    assert (settings["gpuInstanceType"], settings["gpuNodeCount"], settings["region"]) == (
        "p5.48xlarge",
        3,
        "ap-southeast-2",
    )


def test_a_storage_path_under_the_deployed_one_is_no_contradiction(plane, api, config, tmp_path, monkeypatch, capsys):
    deploy(plane, *PLATFORM)
    progress(monkeypatch, plane, "research", JOB, "complete")
    settings = (*_researcher(tmp_path, monkeypatch), "storagePath=s3://company-checkpoints/research/mlp")
    code = submit(config, *FOLLOWED, settings=settings)
    assert code == 0, capsys.readouterr().err
    assert shipped(api, "research")["storagePath"] == "s3://company-checkpoints/research/mlp"


def test_a_cluster_without_deployed_settings_is_exit_2_saying_what_to_do(
    plane, config, user, tmp_path, monkeypatch, capsys
):
    # GIVEN a cluster that holds no settings ConfigMap (deployed with trainingJob false, or not by ray-efa-stack)
    code = submit(config, settings=_researcher(tmp_path, monkeypatch))
    # and one named with --deployed that is not there (the API server's 404 Status)
    named = submit(config, "--deployed", "research/train-efa", settings=_researcher(tmp_path, monkeypatch))
    err = capsys.readouterr().err
    assert (code, named) == (2, 2)
    assert (
        "no ConfigMap ray/mlp-exp-settings, nor any other settings ConfigMap of a deployment in the cluster, so its "
        "deployed settings are unknown: --deployed NAMESPACE/JOB names the deployment's training job"
    ) in err
    assert "no ConfigMap research/train-efa-settings in the cluster (404 Not Found)" in err
    assert "trainingJob false" in err
    assert writes(plane, user) == []


def test_deployments_that_differ_must_be_named(plane, config, tmp_path, monkeypatch, capsys):
    # GIVEN two deployments' settings in one cluster (two teams' jobs, other instance types)
    deploy(plane, *PLATFORM)
    deploy(plane, "namespace=research", "jobName=vision", "gpuInstanceType=g6e.12xlarge")
    progress(monkeypatch, plane, "research", JOB, "complete")
    code = submit(config, settings=_researcher(tmp_path, monkeypatch))
    named = submit(config, *FOLLOWED, "--deployed", "research/train-efa", settings=_researcher(tmp_path, monkeypatch))
    err = capsys.readouterr().err
    assert (
        code == 2
        and (
            "differ (ConfigMap research/train-efa-settings, ConfigMap research/vision-settings): name the "
            "one to run on with --deployed NAMESPACE/JOB"
        )
        in err
    )
    assert named == 0, err
    assert "from ConfigMap research/train-efa-settings" in err


def test_a_job_setting_the_deployed_nodes_cannot_run_is_exit_2_naming_it(
    plane, config, user, tmp_path, monkeypatch, capsys
):
    # GIVEN a cluster of A100 nodes (no fp8 tensor cores), and a job that asks for fp8
    deploy(plane, "gpuInstanceType=p4d.24xlarge", "storagePath=s3://research-checkpoints/runs")
    code = submit(config, settings=(*_researcher(tmp_path, monkeypatch), "precision=fp8"))
    err = capsys.readouterr().err
    # THEN the rule across the two sides names the job's setting, before anything is created
    assert code == 2, err
    assert "the local settings on the cluster of ConfigMap ray/train-efa-settings are not valid together" in err
    assert "  - precision: " in err
    assert writes(plane, user) == []


def test_the_submitters_log_read_whole_is_its_text_not_the_bytes_repr(plane, api):
    # The kubernetes client (36) deserializes a text/plain body into "b'...'": submitter_log reads the raw body, here
    # as KWOK's kubelet API serves it through the API server.
    from ray_efa.ops.submit import submitter_log
    from tests.cluster.conftest import wait_for

    text = "epoch 1/3\ntransport gate: PASS: all 16 processes\n"
    core: Any = client.CoreV1Api(api)
    core.create_namespaced_pod(
        "ray",
        {
            "metadata": {"name": f"{JOB}-7xk2q", "labels": {"job-name": JOB}},
            "spec": {
                "nodeSelector": {"example.com/pool": "platform"},
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "ray-job-submitter", "image": "registry.k8s.io/pause:3.10"}],
            },
        },
    )
    wait_for(lambda: core.read_namespaced_pod(f"{JOB}-7xk2q", "ray").status.phase == "Running", "the pod Running")
    plane.serve_logs("ray", {"ray-job-submitter": text}, pods=[f"{JOB}-7xk2q"])
    assert (
        wait_for(lambda: submitter_log(api, "ray", JOB) == text and submitter_log(api, "ray", JOB), "the log served")
        == text
    )


@pytest.mark.parametrize(("kind", "where"), [("NetworkPolicy", "spec"), ("ConfigMap", "metadata"), ("RayJob", "spec")])
def test_an_unknown_field_is_refused_by_the_api_server_not_dropped(plane, api, kind, where):
    from ray_efa.core.settings import Settings
    from ray_efa.ops.submit import SubmitError, create_objects, submission

    # GIVEN the objects `submit` creates for a job, one of them with a field its schema does not declare (a misspelt
    # key: on a plain POST the API server stores the object without it)
    _, objects = submission(
        Settings.from_context({"jobName": "mlp-exp", "kuberayVersion": served_kuberay()}), job_name="strict-run1"
    )
    typo = next(o for o in objects if o["kind"] == kind)
    typo[where]["entrypoitn"] = "python train.py"
    # WHEN submit creates them
    with pytest.raises(SubmitError) as refused:
        create_objects(api, objects)
    # THEN the real API server refuses that object, naming the field (fieldValidation=Strict), and it is not stored
    assert f'unknown field "{where}.entrypoitn"' in str(refused.value), refused.value
    assert f"cannot create {kind} ray/{typo['metadata']['name']}" in str(refused.value)
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import NotFoundError

    resource = DynamicClient(api).resources.get(api_version=typo["apiVersion"], kind=kind)
    with pytest.raises(NotFoundError):
        resource.get(name=typo["metadata"]["name"], namespace="ray")
