"""`ray-efa manifests --out DIR`: plain YAML, one file per chart in apply order, deterministic, all or nothing."""

from __future__ import annotations

import argparse
import json

import pytest
import yaml

from ray_efa.cli import manifests
from ray_efa.core.output_dir import RECORD_NAME
from ray_efa.core.settings import Settings
from ray_efa.k8s import code_bundle, objects
from ray_efa.k8s.code_bundle import collect_code
from ray_efa.k8s.objects import ray_job_objects

EXPECTED_FILES = ["0000-namespace.yaml", "0001-raycluster.yaml", "0002-rayjob-efa.yaml", "0003-rayjob-tcp.yaml"]


def _run(*argv: str) -> int:
    """Run the subcommand through its own parser, as `ray-efa manifests ...` does."""
    parser = argparse.ArgumentParser(prog="ray-efa")
    manifests.register(parser.add_subparsers().add_parser, "manifests")
    args = parser.parse_args(["manifests", "--allow-no-storage", *argv])  # the storage rule: its own test below
    return args.run(args)


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("manifests") / "dist"
    assert _run("--out", str(out)) == 0
    return out


def _files(out):
    """The folder's entries, less the record of what ray-efa wrote (core.output_dir)."""
    return sorted(p.name for p in out.iterdir() if p.name != RECORD_NAME)


def test_writes_one_file_per_chart_in_apply_order(dist):
    assert _files(dist) == EXPECTED_FILES
    assert json.loads((dist / RECORD_NAME).read_text())["entries"] == EXPECTED_FILES


def test_files_are_plain_yaml_of_the_charts(dist):
    docs = {p.name: list(yaml.safe_load_all(p.read_text())) for p in dist.glob("*.yaml")}
    code = [
        ("ConfigMap", name) for name, _ in collect_code(Settings()).config_maps("train-efa-code")
    ]  # code, then settings
    assert [(d["kind"], d["metadata"]["name"]) for d in docs["0002-rayjob-efa.yaml"]] == [
        ("NetworkPolicy", "train-efa-ray-ingress"),
        *code,
        ("RayJob", "train-efa"),
    ]
    assert ("ConfigMap", "train-efa-code-training") in code and code[-1] == ("ConfigMap", "train-efa-settings")
    assert docs["0000-namespace.yaml"][0]["kind"] == "Namespace"


def test_output_is_deterministic(dist, tmp_path):
    again = tmp_path / "again"
    assert _run("--out", str(again)) == 0
    assert {p.name: p.read_bytes() for p in again.iterdir()} == {p.name: p.read_bytes() for p in dist.iterdir()}
    assert _files(again) == EXPECTED_FILES


def test_context_overrides_reach_the_manifests(tmp_path):
    out = tmp_path / "dist"
    assert _run("--out", str(out), "-c", "gpuNodeCount=5", "-c", "namespace=training") == 0
    cluster = list(yaml.safe_load_all((out / "0001-raycluster.yaml").read_text()))[-1]
    assert cluster["metadata"]["namespace"] == "training" and cluster["spec"]["workerGroupSpecs"][0]["replicas"] == 5


def _earlier_run(out):
    """An output folder as an earlier run left it: its files (here with other content) and its record."""
    assert _run("--out", str(out)) == 0
    for name in EXPECTED_FILES:
        (out / name).write_text("earlier")
    return {p.name: p.read_bytes() for p in out.iterdir()}


def test_bad_settings_exit_2_and_leave_the_output_alone(tmp_path, capsys):
    # GIVEN an output directory from an earlier run
    out = tmp_path / "dist"
    before = _earlier_run(out)
    # WHEN the settings are invalid
    with pytest.raises(SystemExit) as exit_:
        _run("--out", str(out), "-c", "gpuNodeCount=65")
    # THEN the command exits 2 naming the setting, and the directory is untouched
    assert exit_.value.code == 2
    assert "gpuNodeCount: must be between 0 and 64, got 65" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_plan_that_cannot_fit_exits_2_naming_the_setting_and_writes_nothing(tmp_path, capsys):
    # GIVEN an earlier output
    out = tmp_path / "dist"
    out.mkdir()
    (out / "keep.yaml").write_text("earlier")
    # WHEN the micro batch is 32 times what fits an L4
    with pytest.raises(SystemExit) as exit_:
        _run("--out", str(out), "-c", "microBatch=64")
    # THEN exit 2, the memory planner's refusal names microBatch and its default as the fix, nothing is written
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "microBatch: the training plan needs" in err and "microBatch=32 (" in err  # the micro batch that fits
    assert [p.name for p in out.iterdir()] == ["keep.yaml"]


def test_the_rayjob_objects_themselves_refuse_a_plan_that_cannot_fit():
    # GIVEN settings whose plan does not fit (one node of four L4s, the 1.5B model with 32 x 8192 tokens per GPU: no auto lever fits it)
    from ray_efa.core.settings import Settings, SettingsError

    settings = Settings.from_context({"gpuNodeCount": 1, "microBatch": 32, "seqLen": 8192})
    # WHEN any caller builds the RayJob's objects (the CDK stack does, through infra.training_job; the charts and
    # `ray-efa submit` too) THEN it is refused
    with pytest.raises(SettingsError, match="microBatch: the training plan needs"):
        ray_job_objects(settings)


def test_failed_synthesis_exits_1_and_leaves_the_output_alone(tmp_path, monkeypatch, capsys):
    # GIVEN an earlier output, and code too big for a ConfigMap
    out = tmp_path / "dist"
    before = _earlier_run(out)
    capsys.readouterr()
    big = code_bundle.CodeBundle(files=(code_bundle.ShippedFile(path="core/big.py", text="#" * (1 << 20)),))
    monkeypatch.setattr(objects, "collect_code", lambda settings: big)
    # WHEN the manifests are written THEN the error is named, nothing is half-written, no staging dir is left
    assert _run("--out", str(out)) == 1
    assert "over the Kubernetes limit of 1,048,576 bytes" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["dist"] and {
        p.name: p.read_bytes() for p in out.iterdir()
    } == before


def test_stale_files_of_an_earlier_run_are_gone(tmp_path):
    # GIVEN a folder an earlier run wrote, with a chart this run no longer makes (listed in the record)
    out = tmp_path / "dist"
    _earlier_run(out)
    (out / "0009-old-chart.yaml").write_text("stale")
    record = json.loads((out / RECORD_NAME).read_text())
    (out / RECORD_NAME).write_text(json.dumps({**record, "entries": record["entries"] + ["0009-old-chart.yaml"]}))
    assert _run("--out", str(out)) == 0
    assert _files(out) == EXPECTED_FILES


def test_json_output_names_the_files_and_the_job(tmp_path, capsys):
    assert _run("--out", str(tmp_path / "d"), "--json", "-c", "network=tcp") == 0
    report = json.loads(capsys.readouterr().out)
    assert [p.rsplit("/", 1)[-1] for p in report["files"]] == EXPECTED_FILES
    assert (report["namespace"], report["ray_job"]) == ("ray", "train-tcp")


def test_multi_node_manifests_without_storage_path_warn_how_to_fix():
    from ray_efa.core.settings import Settings
    from ray_efa.k8s.dist import storage_warning

    warning = storage_warning(Settings())
    assert warning is not None
    assert "storagePath is unset, so the RayJobs will refuse to train on 2 nodes" in warning
    assert "CheckpointStoragePath" in warning
    assert storage_warning(Settings.from_context({"storagePath": "s3://b/p"})) is None
    assert storage_warning(Settings.from_context({"gpuNodeCount": 1})) is None


def test_scaled_to_zero_writes_no_job_and_says_how_to_come_back(tmp_path, capsys):
    out = tmp_path / "dist"
    before = _earlier_run(out)
    with pytest.raises(SystemExit) as exit_:
        _run("--out", str(out), "-c", "gpuNodeCount=0")
    # THEN exit 2 naming gpuNodeCount: a RayJob needs GPU workers, and the manifests are only jobs and their cluster
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "gpuNodeCount: is 0: the GPU node group is scaled to zero" in err and "-c gpuNodeCount=2" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_multi_node_job_without_storage_path_is_refused_unless_allowed(tmp_path, capsys):
    # GIVEN the default 2 GPU nodes and no storagePath: RayJobs that would refuse to train, minutes after apply
    parser = argparse.ArgumentParser(prog="ray-efa")
    manifests.register(parser.add_subparsers().add_parser, "manifests")
    args = parser.parse_args(["manifests", "--out", str(tmp_path / "dist")])
    # WHEN `ray-efa manifests` runs THEN exit 2 naming storagePath, the bucket's output and the way past, nothing written
    assert args.run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "ray-efa manifests: storagePath must be s3://... or a shared filesystem when gpuNodeCount is 2"
    )
    assert "CheckpointStoragePath" in err and "or --allow-no-storage to write them anyway" in err
    assert not (tmp_path / "dist").exists()
    # AND one node, or a storagePath, writes them
    for context in ("gpuNodeCount=1", "storagePath=s3://research-checkpoints/runs"):
        args = parser.parse_args(["manifests", "--out", str(tmp_path / context.split("=")[0]), "-c", context])
        assert args.run(args) == 0
