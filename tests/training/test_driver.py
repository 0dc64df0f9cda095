"""The driver's decisions that need no cluster: workers and resources, run config, plan refusals, gate exit codes."""

import json

import pytest

from ray_efa.core import catalog
from ray_efa.core.settings import Settings, SettingsError
from ray_efa.training import driver
from ray_efa.training.driver import EXIT_FAILED, EXIT_OK, EXIT_UNPROVEN, transport_gate
from ray_efa.training.local import LOCAL_WORKERS


def test_local_scaling_is_cpu_workers():
    config = driver.scaling_config(Settings(), local=True)
    assert (config.num_workers, config.use_gpu, config.resources_per_worker) == (LOCAL_WORKERS, False, {"CPU": 1})


@pytest.mark.parametrize(
    ("instance", "nodes", "workers", "cpus"),
    [
        # g6.12xlarge: 48 vCPU, worker pod 44 CPUs (catalog), 1 kept for Ray, 4 GPUs -> 10 CPUs per worker
        ("g6.12xlarge", 2, 8, 10),
        # p5en.48xlarge: 192 vCPU, worker pod 176 CPUs, 1 kept, 8 GPUs -> 21 CPUs per worker
        ("p5en.48xlarge", 2, 16, 21),
        ("g6e.48xlarge", 1, 8, 21),
    ],
)
def test_cluster_scaling_is_one_worker_per_gpu_with_its_share_of_the_pod(instance, nodes, workers, cpus):
    settings = Settings.from_context({"gpuInstanceType": instance, "gpuNodeCount": nodes})
    config = driver.scaling_config(settings, local=False)
    assert (config.num_workers, config.use_gpu) == (workers, True)
    assert config.resources_per_worker == {"CPU": cpus, "GPU": 1}
    pod = catalog.worker_pod_resources(catalog.gpu_instance(instance))
    assert cpus * pod.gpus < pod.cpu  # room is left on the pod for Ray's own tasks


def test_run_config_takes_storage_and_failures_from_the_settings():
    settings = Settings.from_context({"storagePath": "s3://bucket/runs", "maxFailures": 3})
    config = driver.run_config(settings, "run-1")
    assert config.failure_config is not None
    assert (config.name, config.storage_path, config.failure_config.max_failures) == ("run-1", "s3://bucket/runs", 3)


def test_default_run_names_say_where_and_what():
    settings = Settings()
    assert driver.default_run_name(settings, local=True).startswith("local-qwen2.5-1.5b-")
    assert driver.default_run_name(settings, local=False).startswith("ray-train-qwen2.5-1.5b-")


def test_a_function_of_yours_names_its_run_by_what_tells_it_apart():
    # Ray Train's conventional train_func says nothing: the module says which function of which package ran
    own = Settings.from_context({"trainFunction": "own_training.train:train_func"})
    assert driver.default_run_name(own, local=True).startswith("local-own_training.train-")
    other = Settings.from_context({"trainFunction": "vision.loop:train_loop_per_worker"})
    assert driver.default_run_name(other, local=False).startswith("ray-train-vision.loop-")
    assert driver.function_label("pkg.train:fit_mlp") == "fit_mlp"  # a name of its own is the run's


@pytest.mark.parametrize(
    ("verdict", "local", "exit_code"),
    [(0, False, 0), (1, False, 1), (3, False, 3), (0, True, 0), (1, True, 1), (3, True, 0)],
)
def test_proves_nothing_fails_only_a_cluster_run(verdict, local, exit_code):
    assert driver.gate_exit_code(verdict, local=local) == exit_code


def test_local_plan_is_never_refused():
    driver.check_plan(Settings.from_context({"microBatch": 64, "seqLen": 32768, "gpuNodeCount": 4}), local=True)


def test_cluster_plan_names_every_problem_at_once():
    # GIVEN 4 GPU nodes without shared storage and a batch no L4 holds (eager step, unchunked loss)
    settings = Settings.from_context(
        {"gpuNodeCount": 4, "microBatch": 8, "seqLen": 4096, "compile": False, "lossChunkSize": 0}
    )
    # WHEN the cluster plan is checked
    with pytest.raises(SettingsError) as raised:
        driver.check_plan(settings, local=False)
    # THEN both the storage and the memory problem are named
    storage, memory = raised.value.problems  # exactly these two
    assert storage.key == "storagePath" and "shared" in storage.message
    # it points to where the value is (the cluster stack's output), with no "got None"
    assert "output CheckpointStoragePath" in storage.message and "--stack-name ray-train-cluster" in storage.message
    assert "storagePath: must be" in str(raised.value) and "got None" not in str(raised.value)
    # the memory problem names the lever that fits alone (core.strategy.check_fits: with activationCheckpointing
    # auto, the default loss chunk does; a larger GPU too)
    assert "GiB per GPU" in memory.message and memory.key == "lossChunkSize"
    assert "gpuInstanceType=" in memory.message


def test_one_node_needs_no_shared_storage():
    # One node shards over 4 GPUs instead of 8: the default microBatch 2 needs more than an L4, 1 fits.
    driver.check_plan(Settings.from_context({"gpuNodeCount": 1, "microBatch": 1}), local=False)


@pytest.mark.parametrize(
    ("argv", "content", "message"),
    [
        ([], None, "--settings: is required without --local"),
        (["--settings", "{path}"], "{not json", "ray_efa.training.driver:"),
        (["--settings", "{path}"], json.dumps({"seqLen": 99999, "model": "tiny"}), "seqLen: must be <= 32768"),
        (
            ["--settings", "{path}"],
            Settings.from_context({"microBatch": 32, "seqLen": 8192}).to_json(),
            "GiB per GPU",
        ),  # even checkpointed
    ],
    ids=["no-settings", "bad-json", "bad-value", "plan-too-big"],
)
def test_driver_main_refuses_bad_settings_before_ray_starts(tmp_path, capsys, argv, content, message):
    import ray

    path = tmp_path / "settings.json"
    if content is not None:
        path.write_text(content)
    code = driver.main([a.format(path=path) for a in argv])
    assert code == driver.EXIT_BAD_SETTINGS
    assert message in capsys.readouterr().err
    assert not ray.is_initialized()


# -- the gate at the end of a cluster run: logs and EFA counters ----------------------------------------------------

FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures"


def _fake_collection(monkeypatch, counters_case: str | None, extra: dict[str, str] | None = None):
    """What collect_nccl_logs writes on a 2-node cluster (a real collection needs the cluster; test_log_collect runs
    it on a local Ray): the nodes' NCCL log and the EFA counter snapshots of one fixture case."""
    import shutil

    from ray_efa.training import log_collect

    def collect(out_dir):  # one file per node, as collect_nccl_logs writes them
        logs = []
        for node, ip in ((1, "10.0.1.11"), (2, "10.0.1.12")):
            log = out_dir / f"nccl-{ip}-{node:08d}.log"
            log.write_text(
                f"# ray-efa log collection: node {node} host ip-10-0-1-{node} ip {ip}\n"
                + (FIXTURES / "nccl" / "synthetic" / f"efa_split_node{node}.log").read_text()
            )
            logs.append(log)
        for path in sorted((FIXTURES / "efa_counters" / counters_case).glob("*.json")) if counters_case else []:
            shutil.copy(path, out_dir / path.name)
        for name, text in (extra or {}).items():
            (out_dir / name).write_text(text)
        return logs

    monkeypatch.setattr(log_collect, "collect_nccl_logs", collect)


def _cluster_settings():
    return Settings.from_context({})


@pytest.mark.parametrize(
    "case, code, says",
    [
        ("g6_2node_efa", EXIT_OK, "EFA counters prove it"),
        ("g6_2node_tcp_fallback", EXIT_FAILED, "FAIL: EFA counters contradict"),
        ("g6_2node_device_reset", EXIT_UNPROVEN, "the EFA counters cannot be trusted"),
        # the pods' own /sys (compat devices without hw_counters): not readable, so the logs' PASS stands
        ("g6_2node_pod_view", EXIT_OK, "EFA counters not readable on 2 of 2 nodes"),
        (None, EXIT_OK, "no EFA counter snapshots were given"),
    ],
)
def test_the_cluster_gate_judges_the_collected_counters_with_the_logs(monkeypatch, tmp_path, capsys, case, code, says):
    _fake_collection(monkeypatch, case)
    assert transport_gate(_cluster_settings(), local=False, logs_dir=tmp_path / "logs") == code
    out = capsys.readouterr().out
    assert says in out
    assert sorted(p.name for p in (tmp_path / "logs").glob("efa-counters-*.json")) == (
        sorted(p.name for p in (FIXTURES / "efa_counters" / case).glob("*.json")) if case else []
    )


def test_an_unreadable_collected_snapshot_never_lets_the_job_pass(monkeypatch, tmp_path, capsys):
    _fake_collection(monkeypatch, "g6_2node_efa", {"efa-counters-zzzzzzzz-x-after-1.json": '{"format": "ray-efa/efa'})
    assert transport_gate(_cluster_settings(), local=False, logs_dir=tmp_path / "logs") == EXIT_UNPROVEN
    out = capsys.readouterr().out
    assert "NO PROOF: an EFA counter snapshot cannot be used" in out and "efa-counters-zzzzzzzz-x-after-1.json" in out


def test_the_local_gate_ignores_counters(monkeypatch, tmp_path, capsys):
    _fake_collection(monkeypatch, "g6_2node_tcp_fallback")
    # the local run's gloo never uses EFA: its verdict is the logs' alone
    assert transport_gate(_cluster_settings(), local=True, logs_dir=tmp_path / "logs") == EXIT_OK
    assert "EFA hardware counters" not in capsys.readouterr().out


def test_the_gate_needs_a_log_of_every_gpu_node(tmp_path):
    # GIVEN the collector's files of a 2-node job: node 1's NCCL lines, the head's file without any, no file of node 2
    node1 = tmp_path / "nccl-10.0.1.11-aaaa.log"
    node1.write_text(
        "# ray-efa log collection: node a host ip-10-0-1-11 ip 10.0.1.11\n"
        "ip-10-0-1-11:4100:4101 [0] NCCL INFO Using network Libfabric\n"
    )
    head = tmp_path / "nccl-10.0.0.5-bbbb.log"
    head.write_text("# ray-efa log collection: node b host head ip 10.0.0.5\n")
    # THEN two GPU nodes are not covered, naming the file it has; one is
    why = driver.nodes_without_logs([node1, head], 2)
    assert why is not None and "from 1 of the job's 2 GPU nodes (nccl-10.0.1.11-aaaa.log)" in why
    assert driver.nodes_without_logs([node1, head], 1) is None


def test_the_gate_keeps_its_evidence_next_to_the_verdict(monkeypatch, tmp_path, capsys):
    import io
    import json
    import tarfile

    import pyarrow.fs

    from ray_efa.training.run_folder import GATE_LOGS_FILE, VERDICT_FILE, RunFolder

    # GIVEN a 2-node collection (NCCL logs and EFA counter snapshots) and a run folder on a real pyarrow filesystem
    _fake_collection(monkeypatch, "g6_2node_efa")
    folder = RunFolder(pyarrow.fs.LocalFileSystem(), str(tmp_path / "run"))
    # WHEN the gate judges them
    assert transport_gate(_cluster_settings(), local=False, logs_dir=tmp_path / "logs", run_folder=folder) == EXIT_OK
    # THEN the folder holds the verdict and, beside it, every file it was judged on, byte for byte
    assert json.loads(folder.read_bytes(VERDICT_FILE) or b"{}")["exit_code"] == EXIT_OK
    with tarfile.open(fileobj=io.BytesIO(folder.read_bytes(GATE_LOGS_FILE) or b""), mode="r:gz") as tar:
        archived = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    collected = {p.name: p.read_bytes() for p in (tmp_path / "logs").iterdir()}
    assert archived == {n: b for n, b in collected.items() if n in archived}, sorted(set(collected) - set(archived))
    assert any(n.startswith("nccl-") for n in archived)
    assert any(n.startswith("efa-counters-") for n in archived)
