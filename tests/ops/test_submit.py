"""`ray-efa submit`: a real kubernetes client against a local API that serves responses written in the API server's
and KubeRay's format (tests/ops/fixtures/submit: no cluster was reachable to record them; each RayJob status is
checked against the RayJob CRD's status schema below). It creates exactly what `ray-efa manifests` writes, follows
the job, prints the submitter's log and the gate's verdict, and exits with the job's code."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from ray_efa.cli import manifests, submit
from ray_efa.ops.submit import JobState, job_exit_code, unique_job_name
from tests.ops.kube_api_writes import RECORDINGS, KubeApiWithWrites, load

ROOT = Path(__file__).resolve().parents[2]
JOB = "mlp-exp-run1"
SETTINGS = ("trainFunction=own_training.train:train_func", "codeDir=examples/own-training/src",
            "storagePath=s3://research-checkpoints/runs", 'trainConfig={"epochs": 3}', "jobName=mlp-exp")
RAYJOB_PATH = f"/apis/ray.io/v1/namespaces/ray/rayjobs/{JOB}"


def _cli(module, name: str, *argv: str) -> int:
    parser = argparse.ArgumentParser(prog="ray-efa")
    module.register(parser.add_subparsers().add_parser, name)
    args = parser.parse_args([name, *argv])
    try:
        return int(args.run(args) or 0)
    except SystemExit as exit_:
        return int(exit_.code or 0)


def _kubeconfig(tmp_path: Path, url: str) -> Path:
    """Two contexts; the current one points nowhere, so only --kube-context research reaches the API."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "elsewhere",
        "clusters": [{"name": "fake", "cluster": {"server": url}},
                     {"name": "none", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "me", "user": {"token": "test-token"}}],
        "contexts": [{"name": "research", "context": {"cluster": "fake", "user": "me"}},
                     {"name": "elsewhere", "context": {"cluster": "none", "user": "me"}}],
    }))
    return path


def _submitter_pod() -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{JOB}-7xk2q", "namespace": "ray", "creationTimestamp": "2026-12-01T15:04:30Z",
        "labels": {"job-name": JOB, "batch.kubernetes.io/job-name": JOB}}, "spec": {"containers": []},
        "status": {"phase": "Succeeded"}}


def _deployed(*context: str) -> dict:
    """The settings ConfigMap that a deployment's training job wrote into the cluster for `context` (the built-in
    function's RayJob), as the chart the stacks apply makes it."""
    import cdk8s

    from ray_efa.core.settings import Settings
    from ray_efa.k8s.workload import ray_job_chart

    settings = Settings.from_context(dict(c.split("=", 1) for c in context))
    return next(o for o in ray_job_chart(cdk8s.App(), settings).to_json()
                if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-settings"))


DEPLOYED = ("jobName=mlp-exp", "storagePath=s3://research-checkpoints/runs")
"""The cluster these tests submit to: deployed with the defaults (as the repository's cdk.json) and their bucket."""


def _api(outcome: str, *, deployed: tuple[str, ...] = DEPLOYED, **kwargs) -> KubeApiWithWrites:
    return KubeApiWithWrites(
        statuses={RAYJOB_PATH: load(f"statuses_{outcome}.json")},
        collections={"/api/v1/namespaces/ray/pods": [_submitter_pod()],
                     "/api/v1/namespaces/ray/configmaps": [_deployed(*deployed)]},
        logs={f"{JOB}-7xk2q": (RECORDINGS / f"submitter_{outcome}.log").read_text()},
        **kwargs,
    )


@pytest.mark.parametrize("outcome", ["complete", "unproven"])
def test_recorded_statuses_follow_the_rayjob_crd_schema(outcome):
    import jsonschema

    from tests.k8s.schemas import crd_schema, strict

    status_schema = strict(crd_schema("1.7.0", "RayJob")["properties"]["status"])
    for status in load(f"statuses_{outcome}.json"):
        assert list(jsonschema.Draft7Validator(status_schema).iter_errors(status)) == [], status


def test_submit_creates_the_manifests_objects_follows_the_job_and_ends_with_the_verdict(tmp_path, capsys):
    # GIVEN a cluster whose RayJob goes Initializing, Running, Complete
    with _api("complete") as api:
        # WHEN `ray-efa submit` runs the own function against the kube context "research"
        code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                    "--name", JOB, "--poll", "0.01", *(a for s in SETTINGS for a in ("-c", s)))
    out, err = capsys.readouterr()
    # THEN it succeeds, with each state, the driver's log, the gate's verdict and the exit code
    assert code == 0, err
    assert [line.split("] ", 1)[1] for line in err.splitlines() if line.startswith("[")] == [
        f"RayJob {JOB}: New", f"RayJob {JOB}: Initializing, Ray cluster {JOB}-x8k2p",
        f"RayJob {JOB}: Running (RUNNING), Ray cluster {JOB}-x8k2p",
        f"RayJob {JOB}: Complete (SUCCEEDED), Ray cluster {JOB}-x8k2p"]
    assert "epoch 3/3  loss 0.4020  (16 workers)" in out and "RAY_EFA_RUN_SUMMARY {" in out
    assert out.rstrip().endswith("exit code 0")
    assert "transport gate: PASS: all 16 processes" in out.splitlines()[-2]
    assert f"clean up: kubectl -n ray delete rayjob/{JOB}" in err
    # and what it created is exactly what `ray-efa manifests` writes for the same settings, in that order
    dist = tmp_path / "dist"
    assert _cli(manifests, "manifests", "--out", str(dist), *(a for s in (*SETTINGS, f"jobName={JOB}") for a in ("-c", s))) == 0
    written = list(yaml.safe_load_all((dist / "0002-rayjob-efa.yaml").read_text()))
    assert api.created == written
    # the network policy, then the code ConfigMaps (as many as the packages' sizes need), the RayJob last
    kinds = [o["kind"] for o in api.created]
    assert kinds[0] == "NetworkPolicy" and kinds[-1] == "RayJob"
    assert set(kinds[1:-1]) == {"ConfigMap"} and len(kinds) >= 4
    assert [m for m, _ in api.requests].count("POST") == len(written)
    # and the RayJob owns the rest, so that deleting it deletes them (the clean-up line names the RayJob alone)
    job_uid = api.stored(RAYJOB_PATH)["metadata"]["uid"]
    owners = {o["metadata"]["name"]: api.stored(_object_path(o))["metadata"].get("ownerReferences") for o in written[:-1]}
    assert owners == {name: [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": JOB, "uid": job_uid}] for name in owners}
    assert f"clean up: kubectl -n ray delete rayjob/{JOB} (its ConfigMaps and NetworkPolicy go with it" in err


def _object_path(obj: dict) -> str:
    plural = {"ConfigMap": "/api/v1/namespaces/ray/configmaps",
              "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/ray/networkpolicies"}[obj["kind"]]
    return f"{plural}/{obj['metadata']['name']}"


def test_without_patch_rights_the_job_runs_and_the_clean_up_line_names_every_object(tmp_path, capsys):
    # GIVEN credentials that may create but not patch (an RBAC role without "patch" on configmaps)
    with _api("complete", refuse_patches=403) as api:
        code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                    "--name", JOB, "--poll", "0.01", *(a for s in SETTINGS for a in ("-c", s)))
    err = capsys.readouterr().err
    # THEN the job still runs to its verdict; each object left unowned is named, and the clean-up line lists them all
    assert code == 0, err
    created = [f"{o['kind'].lower()}/{o['metadata']['name']}" for o in api.created]
    warnings = [line for line in err.splitlines() if line.startswith("warning: could not make RayJob")]
    assert len(warnings) == len(created) - 1 and all("403" in w for w in warnings)
    assert f"clean up: kubectl -n ray delete {' '.join(reversed(created))}" in err


def test_a_job_the_gate_cannot_prove_ends_with_exit_3(tmp_path, capsys):
    with _api("unproven") as api:
        code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                    "--name", JOB, "--poll", "0.01", *(a for s in SETTINGS for a in ("-c", s)))
    out = capsys.readouterr().out
    assert code == 3
    assert f"RayJob ray/{JOB}: Failed (FAILED), Ray cluster {JOB}-x8k2p, reason AppFailed" in out
    assert "transport gate: NO PROOF" in out and out.rstrip().endswith("exit code 3")


def test_a_missing_namespace_is_named_with_what_to_check(tmp_path, capsys):
    # GIVEN the deployment's settings, but a namespace the API refuses creates in (deleted since)
    with KubeApiWithWrites(namespaces=(), collections={"/api/v1/namespaces/ray/configmaps": [_deployed(*DEPLOYED)]}) as api:
        code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                    "--name", JOB, *(a for s in SETTINGS for a in ("-c", s)))
    err = capsys.readouterr().err
    assert code == 1
    assert f"cannot create NetworkPolicy ray/{JOB}-ray-ingress: 404 Not Found" in err and "ray-efa verify" in err


def test_bad_settings_are_exit_2_before_any_request(tmp_path, capsys):
    with KubeApiWithWrites() as api:
        code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                    *(a for s in (*SETTINGS, "trainFunction=own_training.train:nope") for a in ("-c", s)))
    assert code == 2 and "trainFunction: must name a function of own_training.train" in capsys.readouterr().err
    assert api.requests == []


def test_a_cluster_deployed_without_shared_storage_is_exit_2_before_anything_is_created(tmp_path, capsys):
    # GIVEN a cluster deployed with no storagePath, and local settings that name none either
    settings = [s for s in SETTINGS if not s.startswith("storagePath=")]
    with _api("complete", deployed=("jobName=mlp-exp",)) as api:
        code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                    *(a for s in settings for a in ("-c", s)))
    # THEN the job is refused as the driver would refuse it on the cluster, and nothing is created
    assert code == 2 and "storagePath: must be s3://... or a shared filesystem" in capsys.readouterr().err
    assert [m for m, _ in api.requests if m != "GET"] == []


def test_unique_names_fit_job_name_and_differ():
    names = {unique_job_name("train-efa") for _ in range(20)}
    assert len(names) == 20 and all(n.startswith("train-efa-") and len(n) == 15 for n in names)
    assert unique_job_name("x" * 43, token="abcde") == "x" * 37 + "-abcde"


@pytest.mark.parametrize(("status", "code"), [
    ({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}, 0),
    ({"jobDeploymentStatus": "Failed", "jobStatus": "FAILED",
      "message": "Job entrypoint command failed with exit code 2, last available logs"}, 2),
    ({"jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded", "message": "The RayJob has passed the deadline"}, 1),
])
def test_the_exit_code_is_the_drivers(status, code):
    state = JobState(deployment=status["jobDeploymentStatus"], job=status.get("jobStatus", ""), status=status)
    assert job_exit_code(state) == code
    assert json.dumps(status)  # plain data


def test_json_puts_one_object_on_stdout_and_the_log_on_stderr(tmp_path, capsys):
    with _api("complete") as api:
        code = _cli(submit, "submit", "--json", "--kube-context", "research", "--kubeconfig",
                    str(_kubeconfig(tmp_path, api.url)), "--name", JOB, "--poll", "0.01",
                    *(a for s in SETTINGS for a in ("-c", s)))
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert code == 0 and result["exit_code"] == 0 and result["ray_job"] == JOB
    assert (result["deployment_status"], result["job_status"]) == ("Complete", "SUCCEEDED")
    assert result["run_summary"]["devices"] == 16 and result["transport_gate"][0].startswith("transport gate: PASS")
    assert "epoch 3/3" in err


def test_a_bad_name_is_exit_2_naming_the_flag(tmp_path, capsys):
    with KubeApiWithWrites() as api:
        code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                    "--name", "Run_1", *(a for s in SETTINGS for a in ("-c", s)))
    assert code == 2 and "--name: must be a DNS-1035 label" in capsys.readouterr().err
    assert api.requests == []


def _binary_code(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "__init__.py").write_text("def fit(config): ...\n")
    (code / "pkg" / "vocab.bin").write_bytes(bytes(range(256)) * 4)  # binary: no ConfigMap can hold it
    return code


def test_code_no_config_map_can_hold_is_uploaded_under_storage_path_and_fetched_by_the_pods(tmp_path, capsys):
    # GIVEN binary code, storagePath in a bucket (moto: the S3 API cannot exist here) and a cluster that runs the job
    import boto3
    from moto import mock_aws

    from ray_efa.k8s.code_archive import build_code_archive

    code = _binary_code(tmp_path)
    settings = ("trainFunction=pkg:fit", f"codeDir={code}", "storagePath=s3://research-checkpoints/runs")
    archive = build_code_archive(code, storage_path="s3://research-checkpoints/runs")
    uri = f"s3://research-checkpoints/runs/ray-efa-code/{archive.file_name}"
    with mock_aws(), _api("complete") as api:
        s3 = boto3.client("s3", region_name="us-east-2")
        s3.create_bucket(Bucket="research-checkpoints", CreateBucketConfiguration={"LocationConstraint": "us-east-2"})
        # WHEN `ray-efa submit` runs it
        exit_code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig",
                         str(_kubeconfig(tmp_path, api.url)), "--name", JOB, "--poll", "0.01",
                         *(a for s in settings for a in ("-c", s)))
        stored = s3.get_object(Bucket="research-checkpoints", Key=uri.removeprefix("s3://research-checkpoints/"))
        assert stored["Body"].read() == archive.data
    err = capsys.readouterr().err
    # THEN the zip went to storagePath before the job, whose every Ray pod fetches it, and no ConfigMap holds it
    assert exit_code == 0, err
    assert f"codeDir (2 files, 0.0 MiB zipped) uploaded to {uri}" in err
    assert err.index("uploaded to") < err.index("submitted RayJob")
    job = api.created[-1]
    spec = job["spec"]["rayClusterSpec"]
    for template in [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]:
        (init,) = template["spec"]["initContainers"]
        assert init["command"][-2] == uri
    assert not [o for o in api.created if o["metadata"]["name"].endswith("-user-code")]
    assert f"the code zip {uri} stays" in err


def test_an_upload_s3_refuses_is_exit_1_before_any_object_is_created(tmp_path, capsys):
    from moto import mock_aws

    code = _binary_code(tmp_path)
    settings = ("trainFunction=pkg:fit", f"codeDir={code}", "storagePath=s3://no-such-bucket-here/runs")
    with mock_aws(), _api("complete", deployed=("storagePath=s3://no-such-bucket-here/runs",)) as api:
        exit_code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig",
                         str(_kubeconfig(tmp_path, api.url)), "--name", JOB, "--poll", "0.01", "--timeout", "1",
                         *(a for s in settings for a in ("-c", s)))
    assert exit_code == 1
    assert "cannot upload the code to s3://no-such-bucket-here/runs/ray-efa-code/code-" in capsys.readouterr().err
    assert [m for m, _ in api.requests if m != "GET"] == []


def test_code_no_config_map_can_hold_without_s3_storage_is_exit_2_before_anything_is_created(tmp_path, capsys):
    code = _binary_code(tmp_path)
    shared = ("storagePath=/mnt/fsx/runs", "sharedVolumeClaim=fsx", "sharedVolumeMountPath=/mnt/fsx")
    settings = ("trainFunction=pkg:fit", f"codeDir={code}", *shared)
    with _api("complete", deployed=shared) as api:
        exit_code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig",
                         str(_kubeconfig(tmp_path, api.url)), *(a for s in settings for a in ("-c", s)))
    assert exit_code == 2
    assert "under an s3:// storagePath (storagePath is /mnt/fsx/runs" in capsys.readouterr().err
    assert [m for m, _ in api.requests if m != "GET"] == []


def _ray_cluster(name: str, *, replicas: int, owner: str | None = None, state: str | None = "ready") -> dict:
    """A RayCluster as the API lists it (KubeRay's fields that submit reads: worker replicas, owner, state)."""
    meta: dict = {"name": name, "namespace": "ray"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": owner, "uid": "u-1"}]
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta,
            "spec": {"workerGroupSpecs": [{"groupName": "gpu", "replicas": replicas, "minReplicas": replicas}]},
            **({"status": {"state": state}} if state else {})}


def test_a_ray_cluster_that_holds_the_gpu_nodes_is_named_before_the_job_is_created(tmp_path, capsys):
    # GIVEN the cluster of an earlier job still running, and a RayCluster scaled to no workers (which holds none)
    clusters = [_ray_cluster("train-efa-a1b2c-x8k2p", replicas=2, owner="train-efa-a1b2c"),
                _ray_cluster("idle", replicas=0)]
    with _api("complete") as api:
        api.collections["/apis/ray.io/v1/namespaces/ray/rayclusters"] = clusters
        code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                    "--name", JOB, "--poll", "0.01", *(a for s in SETTINGS for a in ("-c", s)))
    err = capsys.readouterr().err
    # THEN the job is still submitted (queueing behind it may be what the user wants), with what it will wait for and
    # that its deadline counts meanwhile (KubeRay counts activeDeadlineSeconds from Initializing)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: RayCluster ray/train-efa-a1b2c-x8k2p (of RayJob train-efa-a1b2c, ready) holds the "
                        f"GPU nodes: the workers of {JOB} wait until it is gone, and its jobActiveDeadlineSeconds (3600 s) "
                        "counts from now"]
    assert err.index("warning: RayCluster") < err.index("submitted RayJob")


def test_no_warning_when_no_ray_cluster_holds_the_gpu_nodes(tmp_path, capsys):
    with _api("complete") as api:
        code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                    "--name", JOB, "--poll", "0.01", *(a for s in SETTINGS for a in ("-c", s)))
    err = capsys.readouterr().err
    assert code == 0 and "holds the GPU nodes" not in err
    assert ("GET", "/apis/ray.io/v1/namespaces/ray/rayclusters") in api.requests


def _existing_job(outcome: str) -> KubeApiWithWrites:
    """The API with RayJob JOB already there (created by an earlier submit, or by kubectl from the manifests)."""
    api = _api(outcome)
    api.collections["/apis/ray.io/v1/namespaces/ray/rayjobs"] = [
        {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": JOB, "namespace": "ray", "uid": "u-9"}}]
    return api


def test_follow_picks_up_a_running_job_and_ends_with_its_verdict_and_exit_code(tmp_path, capsys):
    from ray_efa.cli import follow

    with _existing_job("complete") as api:
        code = _cli(follow, "follow", JOB, "--kube-context", "research", "--kubeconfig",
                    str(_kubeconfig(tmp_path, api.url)), "--poll", "0.01")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"RayJob {JOB}: Complete (SUCCEEDED), Ray cluster {JOB}-x8k2p" in err
    assert "epoch 3/3  loss 0.4020  (16 workers)" in out  # the submitter's whole log, from its start
    assert "transport gate: PASS: all 16 processes" in out and out.rstrip().endswith("exit code 0")
    assert [m for m, _ in api.requests if m != "GET"] == []  # it reads, never writes


def test_follow_exits_with_the_jobs_code_and_json_has_the_outcome(tmp_path, capsys):
    from ray_efa.cli import follow

    with _existing_job("unproven") as api:
        code = _cli(follow, "follow", JOB, "--json", "--kube-context", "research", "--kubeconfig",
                    str(_kubeconfig(tmp_path, api.url)), "--poll", "0.01")
    result = json.loads(capsys.readouterr().out)
    assert code == 3 and result["exit_code"] == 3 and result["ray_job"] == JOB
    assert result["transport_gate"][0].startswith("transport gate: NO PROOF")


def test_follow_of_a_job_that_is_not_there_is_exit_2_naming_it(tmp_path, capsys):
    from ray_efa.cli import follow

    with KubeApiWithWrites() as api:
        code = _cli(follow, "follow", "no-such-job", "--kube-context", "research", "--kubeconfig",
                    str(_kubeconfig(tmp_path, api.url)), "--poll", "0.01")
    assert code == 2
    assert "no RayJob ray/no-such-job (kubectl -n ray get rayjobs lists them)" in capsys.readouterr().err


PLATFORM = ("gpuInstanceType=p5.48xlarge", "gpuNodeCount=3", "region=ap-southeast-2", "namespace=research",
            'gpuNodeSelector={"example.com/pool": "p5-train"}', 'systemNodeSelector={"example.com/pool": "platform"}',
            "storagePath=s3://company-checkpoints/research", "placementGroup=off")
"""A platform team's cluster: 3 x p5.48xlarge in ap-southeast-2, namespace research, company node labels, an
existing checkpoint bucket; its training job is the default train-efa."""
PLATFORM_PATHS = {"/api/v1/namespaces/research/configmaps", "/api/v1/namespaces/research/pods"}


def _platform_api(*others: dict) -> KubeApiWithWrites:
    """The platform's cluster; `others`: more settings ConfigMaps (in namespace research)."""
    job_path = f"/apis/ray.io/v1/namespaces/research/rayjobs/{JOB}"
    pod = _submitter_pod()
    pod["metadata"]["namespace"] = "research"
    return KubeApiWithWrites(
        namespaces=("research",), statuses={job_path: load("statuses_complete.json")},
        collections={"/api/v1/namespaces/research/configmaps": [_deployed(*PLATFORM), *others],
                     "/api/v1/namespaces/research/pods": [pod]},
        logs={f"{JOB}-7xk2q": (RECORDINGS / "submitter_complete.log").read_text()})


def _researcher(tmp_path: Path, monkeypatch) -> tuple[str, ...]:
    """A researcher's own repository, with no cdk.json: their function, code and config, nothing of the cluster."""
    home = tmp_path / "research-repo"
    home.mkdir(exist_ok=True)
    monkeypatch.chdir(home)
    return ("trainFunction=own_training.train:train_func", f"codeDir={ROOT / 'examples/own-training/src'}",
            'trainConfig={"epochs": 3}', "jobName=mlp-exp")


def test_a_job_is_built_for_the_cluster_as_deployed_not_for_the_local_defaults(tmp_path, monkeypatch, capsys):
    # GIVEN the platform's cluster, where an earlier submitted job (owned by its RayJob) left other settings behind
    stale = _deployed("jobName=old-run-k3x9a", "namespace=research", "gpuInstanceType=g6e.12xlarge")
    stale["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "old-run-k3x9a",
                                             "uid": "u-7"}]
    with _platform_api(stale) as api:
        # WHEN a researcher submits from their own repository, naming nothing of the cluster
        code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                    "--name", JOB, "--poll", "0.01", *(a for s in _researcher(tmp_path, monkeypatch) for a in ("-c", s)))
    err = capsys.readouterr().err
    # THEN it looked for the settings of its jobName in its namespace (the API's 404), found the deployment's
    assert code == 0, err
    assert ("GET", "/api/v1/namespaces/ray/configmaps/mlp-exp-settings") in api.requests
    assert "cluster: 3 x p5.48xlarge in namespace research, ap-southeast-2 (from ConfigMap research/train-efa-settings)" in err
    # and the job is the deployed cluster's: its namespace, node count, node labels, bucket and instance's resources
    job = api.created[-1]
    assert {o["metadata"]["namespace"] for o in api.created} == {"research"}
    spec = job["spec"]["rayClusterSpec"]
    (workers,) = spec["workerGroupSpecs"]
    assert workers["replicas"] == 3
    assert workers["template"]["spec"]["nodeSelector"] == {"example.com/pool": "p5-train"}
    assert spec["headGroupSpec"]["template"]["spec"]["nodeSelector"] == {"example.com/pool": "platform"}
    (worker,) = workers["template"]["spec"]["containers"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "8"
    shipped = json.loads(next(o for o in api.created if o["metadata"]["name"] == f"{JOB}-settings")["data"]["settings.json"])
    assert {k: shipped[k] for k in ("gpuInstanceType", "gpuNodeCount", "region", "storagePath", "namespace")} == {
        "gpuInstanceType": "p5.48xlarge", "gpuNodeCount": 3, "region": "ap-southeast-2",
        "storagePath": "s3://company-checkpoints/research", "namespace": "research"}
    # while the job's own side stays the researcher's
    assert shipped["trainFunction"] == "own_training.train:train_func" and shipped["trainConfig"] == {"epochs": 3}


def test_a_command_line_value_that_contradicts_the_deployment_is_exit_2_naming_both(tmp_path, capsys):
    # GIVEN the repository's cdk.json (2 x g6.12xlarge in us-east-2), the platform's cluster, and on the command line
    # storagePath and gpuNodeCount that are not the cluster's
    with _platform_api() as api:
        code = _cli(submit, "submit", "--json", "--kube-context", "research", "--kubeconfig",
                    str(_kubeconfig(tmp_path, api.url)), "--name", JOB,
                    *(a for s in (*SETTINGS, "gpuNodeCount=2") for a in ("-c", s)))
    out, err = capsys.readouterr()
    # THEN exit 2, each contradiction of the command line named with its value and the deployed one; what cdk.json
    # holds (the type, the region) describes the checkout's own deployment and yields to the cluster's
    assert code == 2, err
    problems = {p["key"]: p for p in json.loads(out)["problems"]}
    assert set(problems) == {"gpuNodeCount", "storagePath"}
    assert "gpuNodeCount: the cluster was deployed with 3 " in err and ", got 2" in err
    assert "storagePath: the cluster was deployed with \"s3://company-checkpoints/research\"" in err
    assert "(from -c)" in problems["storagePath"]["message"] and "(from -c)" in problems["gpuNodeCount"]["message"]
    # and nothing was created
    assert [m for m, _ in api.requests if m != "GET"] == []


def test_submit_from_the_checkout_takes_the_deployed_cluster_over_cdk_json(tmp_path, capsys):
    # GIVEN the repository's cdk.json (clusterName, region, gpuInstanceType g6.12xlarge, gpuNodeCount 2) and a cluster
    # somebody else deployed (3 x p5.48xlarge in ap-southeast-2): nothing contradicting on the command line
    settings = [s for s in SETTINGS if not s.startswith("storagePath=")]
    with _platform_api() as api:
        code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                    "--name", JOB, "--poll", "0.01", *(a for s in settings for a in ("-c", s)))
    err = capsys.readouterr().err
    # THEN the job is built for the cluster as deployed, not for the checkout's defaults
    assert code == 0, err
    shipped = json.loads(next(o for o in api.created if o["metadata"]["name"] == f"{JOB}-settings")["data"]["settings.json"])
    assert (shipped["gpuInstanceType"], shipped["gpuNodeCount"], shipped["region"]) == ("p5.48xlarge", 3,
                                                                                        "ap-southeast-2")


def test_a_storage_path_under_the_deployed_one_is_no_contradiction(tmp_path, monkeypatch, capsys):
    settings = (*_researcher(tmp_path, monkeypatch), "storagePath=s3://company-checkpoints/research/mlp")
    with _platform_api() as api:
        code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                    "--name", JOB, "--poll", "0.01", *(a for s in settings for a in ("-c", s)))
    assert code == 0, capsys.readouterr().err
    shipped = json.loads(next(o for o in api.created if o["metadata"]["name"] == f"{JOB}-settings")["data"]["settings.json"])
    assert shipped["storagePath"] == "s3://company-checkpoints/research/mlp"


def test_a_cluster_without_deployed_settings_is_exit_2_saying_what_to_do(tmp_path, monkeypatch, capsys):
    # GIVEN a cluster that holds no settings ConfigMap (deployed with trainingJob false, or not by ray-efa-stack)
    with KubeApiWithWrites() as api:
        code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                    *(a for s in _researcher(tmp_path, monkeypatch) for a in ("-c", s)))
        # and one named with --deployed that is not there (the API server's 404 Status)
        named = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                     "--deployed", "research/train-efa", *(a for s in _researcher(tmp_path, monkeypatch) for a in ("-c", s)))
    err = capsys.readouterr().err
    assert (code, named) == (2, 2)
    assert ("no ConfigMap ray/mlp-exp-settings, nor any other settings ConfigMap of a deployment in the cluster, so its "
            "deployed settings are unknown: --deployed NAMESPACE/JOB names the deployment's training job") in err
    assert "no ConfigMap research/train-efa-settings in the cluster (404 Not Found)" in err
    assert "trainingJob false" in err
    assert [m for m, _ in api.requests if m != "GET"] == []


def test_deployments_that_differ_must_be_named(tmp_path, monkeypatch, capsys):
    # GIVEN two deployments' settings in one cluster (two teams' namespaces, other instance types)
    other = _deployed("namespace=research", "jobName=vision", "gpuInstanceType=g6e.12xlarge")
    with _platform_api(other) as api:
        code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                    *(a for s in _researcher(tmp_path, monkeypatch) for a in ("-c", s)))
        named = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                     "--name", JOB, "--poll", "0.01", "--deployed", "research/train-efa",
                     *(a for s in _researcher(tmp_path, monkeypatch) for a in ("-c", s)))
    err = capsys.readouterr().err
    assert code == 2 and ("differ (ConfigMap research/train-efa-settings, ConfigMap research/vision-settings): name the "
                          "one to run on with --deployed NAMESPACE/JOB") in err
    assert named == 0, err
    assert "from ConfigMap research/train-efa-settings" in err


def test_a_job_setting_the_deployed_nodes_cannot_run_is_exit_2_naming_it(tmp_path, monkeypatch, capsys):
    # GIVEN a cluster of A100 nodes (no fp8 tensor cores), and a job that asks for fp8
    settings = (*_researcher(tmp_path, monkeypatch), "precision=fp8")
    deployed = ("gpuInstanceType=p4d.24xlarge", "storagePath=s3://research-checkpoints/runs")
    with _api("complete", deployed=deployed) as api:
        code = _cli(submit, "submit", "--kube-context", "research", "--kubeconfig", str(_kubeconfig(tmp_path, api.url)),
                    *(a for s in settings for a in ("-c", s)))
    err = capsys.readouterr().err
    # THEN the rule across the two sides names the job's setting, before anything is created
    assert code == 2, err
    assert "the local settings on the cluster of ConfigMap ray/train-efa-settings are not valid together" in err
    assert "  - precision: " in err
    assert [m for m, _ in api.requests if m != "GET"] == []


def test_the_submitters_log_read_whole_is_its_text_not_the_bytes_repr():
    # The kubernetes client (36) deserializes a text/plain body into "b'...'": submitter_log reads the raw body.
    from kubernetes import client

    from ray_efa.ops.submit import submitter_log

    text = "epoch 1/3\ntransport gate: PASS: all 16 processes\n"
    with KubeApiWithWrites(collections={"/api/v1/namespaces/ray/pods": [_submitter_pod()]},
                           logs={f"{JOB}-7xk2q": text}) as api:
        configuration = client.Configuration()
        configuration.host = api.url
        assert submitter_log(client.ApiClient(configuration), "ray", JOB) == text
