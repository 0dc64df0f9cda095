"""Your own training in the manifests: trainFunction, codeDir and jobName name the job, ship the code in a ConfigMap
(or from an S3 zip), and put it on every Ray pod's import path; everything validates against the real CRD schemas."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from ray_efa.core.settings import KUBERAY_VERSIONS, Settings, SettingsError
from ray_efa.k8s.code_bundle import LAST_APPLIED_MAX_BYTES, ManifestError
from ray_efa.k8s.names import CODE_MOUNT_PATH, USER_CODE_PATH, ray_job_name
from ray_efa.k8s.objects import manifest_objects, ray_job_objects
from ray_efa.k8s.pip_packages import PACKAGES_SITE_PATH
from ray_efa.k8s.user_code import FETCH_SCRIPT
from tests.k8s.conftest import BASE, container, env, fetch_like_the_pods, volume_at
from tests.k8s.schemas import crd_errors, k8s_validate, pod_template_object

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_SRC = ROOT / "examples" / "own-training" / "src"
OWN = BASE.replace(
    trainFunction="own_training.train:train_func",
    codeDir=str(EXAMPLE_SRC),
    jobName="mlp-exp",
    trainConfig='{"epochs": 3}',
    storagePath="s3://bucket/runs",
)


def _charts(settings: Settings) -> dict[str, list[dict]]:
    return manifest_objects(settings)


@pytest.fixture(scope="module")
def own() -> dict[str, list[dict]]:
    return _charts(OWN)


def _job(charts, network: str) -> dict:
    (job,) = [o for o in charts[f"rayjob-{network}"] if o["kind"] == "RayJob"]
    return job


def _pods(job: dict) -> list[tuple[str, dict]]:
    spec = job["spec"]["rayClusterSpec"]
    return [
        ("head", spec["headGroupSpec"]["template"]),
        *((f"worker {g['groupName']}", g["template"]) for g in spec["workerGroupSpecs"]),
    ]


def test_job_name_names_every_object_of_both_jobs(own):
    # GIVEN jobName mlp-exp THEN the EFA job is mlp-exp and its TCP comparison mlp-exp-tcp, each with its own objects
    for network, name in (("efa", "mlp-exp"), ("tcp", "mlp-exp-tcp")):
        names = sorted((o["kind"], o["metadata"]["name"]) for o in own[f"rayjob-{network}"])
        code = [
            o["metadata"]["name"]
            for o in own[f"rayjob-{network}"]
            if o["kind"] == "ConfigMap" and o["metadata"]["labels"].get("app.kubernetes.io/component") == "code"
        ]
        assert f"{name}-code" in code and f"{name}-code-training" in code
        assert all(c == f"{name}-code" or c.startswith(f"{name}-code-") for c in code)  # the code, in chunks
        assert names == sorted(
            [
                ("NetworkPolicy", f"{name}-ray-ingress"),
                *(("ConfigMap", c) for c in code),
                ("ConfigMap", f"{name}-settings"),
                ("ConfigMap", f"{name}-user-code"),
                ("RayJob", name),
            ]
        )
    # and the default keeps its names
    assert (ray_job_name("efa"), ray_job_name("tcp")) == ("train-efa", "train-tcp")
    assert (ray_job_name("efa", "exp1-efa"), ray_job_name("tcp", "exp1-efa")) == ("exp1-efa", "exp1-tcp")


def test_the_code_config_map_holds_code_dir_and_every_pod_mounts_it_on_its_path(own):
    (config_map,) = [o for o in own["rayjob-efa"] if o["metadata"]["name"] == "mlp-exp-user-code"]
    assert config_map["data"]["own_training.train.py"] == (EXAMPLE_SRC / "own_training" / "train.py").read_text()
    assert sorted(config_map["data"]) == ["own_training.__init__.py", "own_training.model.py", "own_training.train.py"]
    for where, template in _pods(_job(own, "efa")):
        volume = volume_at(template, USER_CODE_PATH)
        assert volume["configMap"]["name"] == "mlp-exp-user-code", where
        assert {i["path"] for i in volume["configMap"]["items"]} == {
            "own_training/__init__.py",
            "own_training/model.py",
            "own_training/train.py",
        }
        # codeDir after the project's code, then the pipPackages (BASE names two), installed by their own init
        # container: nothing fetches the code
        assert env(template)["PYTHONPATH"] == f"{CODE_MOUNT_PATH}:{USER_CODE_PATH}:{PACKAGES_SITE_PATH}", where
        assert [c["name"] for c in template["spec"]["initContainers"]] == ["install-packages"], where


def test_the_pods_settings_name_the_function_and_where_the_code_is(own):
    (config_map,) = [o for o in own["rayjob-efa"] if o["metadata"]["name"] == "mlp-exp-settings"]
    shipped = json.loads(config_map["data"]["settings.json"])
    assert shipped["trainFunction"] == "own_training.train:train_func"
    assert shipped["codeDir"] == USER_CODE_PATH and shipped["jobName"] == "mlp-exp"
    assert shipped["trainConfig"] == {"epochs": 3}


@pytest.mark.parametrize("kuberay_version", KUBERAY_VERSIONS)
def test_own_training_manifests_validate_against_the_crds(kuberay_version):
    charts = _charts(OWN.replace(kuberayVersion=kuberay_version))
    for network in ("efa", "tcp"):
        job = _job(charts, network)
        assert crd_errors(job, kuberay_version) == [], network
        for where, template in _pods(job):
            assert k8s_validate(pod_template_object(template), "1.36") == "1.36", where
        for obj in charts[f"rayjob-{network}"]:
            if obj["kind"] == "ConfigMap":
                k8s_validate(obj, "1.36")


def test_a_zip_in_s3_is_fetched_by_an_init_container_into_the_same_path():
    # GIVEN the code as an archive (what RayTrainingJob's S3 asset gives)
    uri = "s3://cdk-assets-bucket/0123abcd.zip"
    job = next(o for o in ray_job_objects(OWN, code_archive_uri=uri) if o["kind"] == "RayJob")
    # THEN no code ConfigMap is needed, and each pod unpacks the zip into an emptyDir at USER_CODE_PATH first
    for where, template in _pods(job):
        (init,) = [c for c in template["spec"]["initContainers"] if c["name"] == "fetch-code"]
        assert init["command"] == ["python", "-c", FETCH_SCRIPT, uri, USER_CODE_PATH], where
        assert init["image"] == container(template)["image"]
        assert {e["name"] for e in init["env"]} >= {"AWS_REGION", "NVIDIA_VISIBLE_DEVICES", "PYTHONUNBUFFERED"}
        assert init["resources"]["requests"] == init["resources"]["limits"]  # the pod stays Guaranteed
        assert "emptyDir" in volume_at(template, USER_CODE_PATH)
        assert k8s_validate(pod_template_object(template), "1.36") == "1.36", where
    assert crd_errors(job, "1.7.0") == []


def test_the_fetch_script_unpacks_a_zip_through_pyarrows_s3_filesystem(tmp_path):
    # GIVEN a zip as CDK stages codeDir (contents at its root)
    staged = io.BytesIO()
    with zipfile.ZipFile(staged, "w") as z:
        z.writestr("own_training/__init__.py", "")
        z.writestr("own_training/train.py", "def train_func(config): ...\n")
    # WHEN the init container's script runs THEN the package is at the path the pods import it from
    dest = fetch_like_the_pods(staged.getvalue(), tmp_path)
    assert (dest / "own_training" / "train.py").read_text() == "def train_func(config): ...\n"


def test_a_missing_function_stops_the_manifests_naming_train_function():
    with pytest.raises(SettingsError) as raised:
        _charts(OWN.replace(trainFunction="own_training.train:nope"))
    assert raised.value.problems[0].key == "trainFunction"


def test_code_too_large_for_a_config_map_names_the_route(tmp_path):
    # GIVEN a codeDir over kubectl's annotation limit
    code = tmp_path / "big"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "__init__.py").write_text("def fit(c): ...\n")
    (code / "pkg" / "table.py").write_text("X = '" + "x" * LAST_APPLIED_MAX_BYTES + "'\n")
    # THEN the manifests refuse it, saying that cdk deploy ships it as an S3 asset
    with pytest.raises(ManifestError, match="S3 asset with `cdk deploy`"):
        _charts(BASE.replace(trainFunction="pkg:fit", codeDir=str(code)))


def _manifests_cli(*argv: str) -> int:
    import argparse

    from ray_efa.cli import manifests

    parser = argparse.ArgumentParser(prog="ray-efa")
    manifests.register(parser.add_subparsers().add_parser, "manifests")
    args = parser.parse_args(["manifests", "--allow-no-storage", *argv])
    try:
        return args.run(args)
    except SystemExit as exit_:  # resolve_or_exit: bad settings
        return int(exit_.code or 0)


def test_manifests_cli_ships_the_code_and_names_the_job(tmp_path, capsys):
    import yaml

    # WHEN `ray-efa manifests` runs with the three settings (codeDir relative to the app directory, the checkout)
    out = tmp_path / "dist"
    code = _manifests_cli(
        "--out",
        str(out),
        "-c",
        "trainFunction=own_training.train:train_func",
        "-c",
        "codeDir=examples/own-training/src",
        "-c",
        "jobName=mlp-exp",
        "-c",
        "storagePath=s3://b/p",
    )
    # THEN the job files name the job, ship the code and say how to follow the job
    assert code == 0, capsys.readouterr().err
    docs = list(yaml.safe_load_all((out / "0002-rayjob-efa.yaml").read_text()))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs][-2:] == [
        ("ConfigMap", "mlp-exp-user-code"),
        ("RayJob", "mlp-exp"),
    ]
    assert "kubectl -n ray get rayjob mlp-exp -w" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("context", "key"),
    [
        (("trainFunction=own_training.train:nope", f"codeDir={EXAMPLE_SRC}"), "trainFunction"),
        (("trainFunction=own_training.train:train_func", "codeDir=examples/missing"), "codeDir"),
        (("trainFunction=own_training.train:train_func", "codeDir=."), "codeDir"),
        (("jobName=Bad_Name",), "jobName"),
    ],
    ids=["missing-function", "missing-dir", "repository-root", "bad-job-name"],
)
def test_manifests_cli_refuses_bad_code_settings_with_exit_2_writing_nothing(tmp_path, capsys, context, key):
    out = tmp_path / "dist"
    assert _manifests_cli("--out", str(out), *(arg for c in context for arg in ("-c", c))) == 2
    assert f"  - {key}: " in capsys.readouterr().err
    assert not out.exists()


def _binary_code(tmp_path: Path) -> Path:
    code = tmp_path / "big"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "__init__.py").write_text("def fit(c): ...\n")
    (code / "pkg" / "weights.bin").write_bytes(bytes(range(256)))  # binary: no ConfigMap data
    return code


def test_manifests_cli_refuses_code_too_large_for_a_config_map_without_s3_storage_naming_both(tmp_path, capsys):
    code = _binary_code(tmp_path)
    out = tmp_path / "dist"
    assert (
        _manifests_cli(
            "--out",
            str(out),
            "-c",
            "trainFunction=pkg:fit",
            "-c",
            f"codeDir={code}",
            "-c",
            "storagePath=/mnt/fsx/runs",
            "-c",
            "sharedVolumeClaim=fsx",
            "-c",
            "sharedVolumeMountPath=/mnt/fsx",
        )
        == 2
    )
    err = capsys.readouterr().err
    assert f"codeDir {code} cannot ship in a ConfigMap" in err and "not UTF-8 text" in err
    assert "under an s3:// storagePath (storagePath is /mnt/fsx/runs" in err and "cdk deploy" in err
    assert not out.exists()


def test_manifests_cli_ships_binary_code_as_a_zip_under_s3_storage_with_its_upload_line(tmp_path, capsys):
    import yaml

    from ray_efa.k8s.code_archive import build_code_archive

    # GIVEN code no ConfigMap can hold, and storagePath on S3
    code = _binary_code(tmp_path)
    out = tmp_path / "dist"
    argv = (
        "--out",
        str(out),
        "-c",
        "trainFunction=pkg:fit",
        "-c",
        f"codeDir={code}",
        "-c",
        "storagePath=s3://research-ckpt/ray-efa",
    )
    # WHEN `ray-efa manifests` runs
    assert _manifests_cli(*argv) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    # THEN the zip is in the folder, and every Ray pod of every object fetches it from storagePath
    archive = build_code_archive(code, storage_path="s3://research-ckpt/ray-efa")
    uri = f"s3://research-ckpt/ray-efa/ray-efa-code/{archive.file_name}"
    assert (out / archive.file_name).read_bytes() == archive.data
    objects = [d for f in sorted(out.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    rays = [o for o in objects if o["kind"] in ("RayCluster", "RayJob")]
    assert len(rays) == 3  # the RayCluster and the two jobs
    for ray in rays:
        spec = ray["spec"].get("rayClusterSpec", ray["spec"])
        for template in [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]:
            (init,) = template["spec"]["initContainers"]
            assert init["command"][-2:] == [uri, USER_CODE_PATH]
    assert not [o for o in objects if o["metadata"]["name"].endswith("-user-code")]
    # and the steps say to upload it first, to exactly that URI
    steps = printed.split("train:\n", 1)[1].splitlines()
    assert steps[0].split("#")[0].split() == ["aws", "s3", "cp", str(out / archive.file_name), uri]
    # and a second run over the same folder replaces its own files, the zip included, with the same bytes
    assert _manifests_cli(*argv) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [".ray-efa-output.json", archive.file_name, *(p.name for p in out.glob("*.yaml"))]
    )
    assert (out / archive.file_name).read_bytes() == archive.data


def test_manifests_cli_names_the_follow_line_for_the_jobs_namespace(tmp_path, capsys):
    # the default namespace needs no -c; another one must be named, or `ray-efa follow` looks in the wrong place
    assert _manifests_cli("--out", str(tmp_path / "a"), "-c", "jobName=mlp-exp") == 0
    assert "  ray-efa follow mlp-exp   #" in capsys.readouterr().out
    assert _manifests_cli("--out", str(tmp_path / "b"), "-c", "jobName=mlp-exp", "-c", "namespace=ml") == 0
    assert "  ray-efa follow mlp-exp -c namespace=ml   #" in capsys.readouterr().out
