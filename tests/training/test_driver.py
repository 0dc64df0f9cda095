"""The driver's decisions that need no cluster: workers and resources, run config, plan refusals, gate exit codes."""

import json

import pytest

from ray_efa.core import catalog
from ray_efa.core.settings import Settings, SettingsError
from ray_efa.training import driver
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
    assert (config.name, config.storage_path, config.failure_config.max_failures) == ("run-1", "s3://bucket/runs", 3)


def test_default_run_names_say_where_and_what():
    settings = Settings()
    assert driver.default_run_name(settings, local=True).startswith("local-qwen2.5-1.5b-")
    assert driver.default_run_name(settings, local=False).startswith("ray-train-qwen2.5-1.5b-")


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
    settings = Settings.from_context({"gpuNodeCount": 4, "microBatch": 8, "seqLen": 4096, "compile": False,
                                      "lossChunkSize": 0})
    # WHEN the cluster plan is checked
    with pytest.raises(SettingsError) as raised:
        driver.check_plan(settings, local=False)
    # THEN both the storage and the memory problem are named
    keys = [p.key for p in raised.value.problems]
    assert keys == ["storagePath", "microBatch"]
    assert "shared" in raised.value.problems[0].message


def test_one_node_needs_no_shared_storage():
    # One node shards over 4 GPUs instead of 8: the default microBatch 2 needs more than an L4, 1 fits.
    driver.check_plan(Settings.from_context({"gpuNodeCount": 1, "microBatch": 1}), local=False)


@pytest.mark.parametrize(
    ("argv", "content", "message"),
    [
        ([], None, "--settings: is required without --local"),
        (["--settings", "{path}"], "{not json", "ray_efa.training.driver:"),
        (["--settings", "{path}"], json.dumps({"seqLen": 99999, "model": "tiny"}), "seqLen: must be <= 32768"),
        (["--settings", "{path}"], Settings.from_context({"microBatch": 8, "seqLen": 4096}).to_json(), "GiB per GPU"),
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
