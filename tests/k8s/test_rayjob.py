"""The training RayJob and its TCP comparison variant: entrypoint, lifecycle, runtime_env, submitter, env."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
import yaml

from ray_efa.core import perf
from ray_efa.core.preflight_floor import preflight_floor
from ray_efa.core.settings import Settings
from ray_efa.core.strategy import resolve
from ray_efa.k8s.code_bundle import collect_code
from ray_efa.k8s.names import CODE_MOUNT_PATH, check_object_name
from ray_efa.k8s.objects import workload_objects
from tests.k8s.conftest import (
    BASE,
    NOT_NETWORK_ENV,
    container,
    env,
    materialize_code,
    projected_config_maps,
    synthesize,
    worker_group,
)


def _settings_json(synth, network: str) -> dict:
    (config_map,) = [
        o for o in synth.charts[f"rayjob-{network}"] if o["metadata"]["name"] == f"train-{network}-settings"
    ]
    return json.loads(config_map["data"]["settings.json"])


def test_entrypoint_runs_the_driver_with_the_shipped_settings_and_nothing_else(default_synth):
    # GIVEN the EFA job
    job = default_synth.ray_job("efa")
    # WHEN its entrypoint is split as the head's shell would
    argv = shlex.split(job["spec"]["entrypoint"])
    # THEN it is the driver alone: its exit status is the Ray job's (no `|| true`, `;`, `&&` to mask a failed gate)
    assert argv == ["python", "-m", "ray_efa.training.driver", "--settings", f"{CODE_MOUNT_PATH}/settings.json"]


def test_entrypoint_settings_file_is_mounted_on_the_head(default_synth):
    spec = default_synth.ray_job("efa")["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    (mount,) = [m for m in container(spec)["volumeMounts"] if m["mountPath"] == CODE_MOUNT_PATH]
    (volume,) = [v for v in spec["spec"]["volumes"] if v["name"] == mount["name"]]
    assert projected_config_maps(volume)["train-efa-settings"] == [{"key": "settings.json", "path": "settings.json"}]


def test_job_lifecycle_comes_from_settings(default_synth):
    spec = default_synth.ray_job("efa")["spec"]
    workload = default_synth.settings.workload
    assert (spec["ttlSecondsAfterFinished"], spec["activeDeadlineSeconds"], spec["backoffLimit"]) == (
        workload.job_ttl_seconds_after_finished,
        workload.job_active_deadline_seconds,
        workload.job_backoff_limit,
    )
    assert (123, 4567, 2) == (spec["ttlSecondsAfterFinished"], spec["activeDeadlineSeconds"], spec["backoffLimit"])


def test_job_fails_when_it_has_not_reached_running_by_its_pre_running_deadline(default_synth):
    # A failing init container leaves the RayJob Initializing (KubeRay issue 4637): KubeRay 1.7.0 fails it at this
    # deadline instead of jobActiveDeadlineSeconds'
    spec = default_synth.ray_job("efa")["spec"]
    assert spec["preRunningDeadlineSeconds"] == default_synth.settings.workload.job_pre_running_deadline_seconds == 1200
    assert spec["preRunningDeadlineSeconds"] < spec["activeDeadlineSeconds"]


def test_the_pre_running_deadline_is_left_out_where_it_cannot_act():
    from ray_efa.k8s.ray_job import pre_running_deadline  # noqa: PLC0415

    assert pre_running_deadline(BASE.replace(jobPreRunningDeadlineSeconds=900)) == 900
    # KubeRay 1.4.0's CRD has no such field (its schema would prune it; its operator ignores it)
    assert pre_running_deadline(BASE.replace(kuberayVersion="1.4.0")) is None
    # at or past activeDeadlineSeconds, which counts from the same moment, it would never act
    assert pre_running_deadline(BASE.replace(jobPreRunningDeadlineSeconds=4567)) is None
    assert pre_running_deadline(BASE.replace(jobPreRunningDeadlineSeconds=4566)) == 4566


@pytest.mark.parametrize("bad", [0, -5, 2**31, "soon"])
def test_a_pre_running_deadline_that_is_not_a_positive_int32_is_refused_naming_the_setting(bad):
    with pytest.raises(ValueError, match=r"jobPreRunningDeadlineSeconds: .*got"):
        Settings.from_context({"jobPreRunningDeadlineSeconds": bad})


def test_the_crds_say_which_kuberay_has_the_pre_running_deadline():
    from ray_efa.k8s.ray_job import PRE_RUNNING_DEADLINE_MIN_KUBERAY  # noqa: PLC0415
    from tests.k8s.schemas import crd_file  # noqa: PLC0415

    def fields(version: str) -> dict:
        crd = yaml.load(
            crd_file(version, "ray.io_rayjobs.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        )
        return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]

    assert fields("1.7.0")["preRunningDeadlineSeconds"] == {"format": "int32", "minimum": 1, "type": "integer"}
    assert "preRunningDeadlineSeconds" not in fields("1.4.0")
    assert PRE_RUNNING_DEADLINE_MIN_KUBERAY == (1, 7, 0)


def test_job_owns_its_cluster_and_shuts_it_down(default_synth):
    spec = default_synth.ray_job("efa")["spec"]
    # clusterSelector would ignore shutdown/TTL and a retry would delete the shared cluster (kuberay#4516).
    assert "clusterSelector" not in spec and "rayClusterSpec" in spec
    assert spec["shutdownAfterJobFinishes"] is True


def test_job_is_submitted_by_a_kubernetes_job(default_synth):
    assert default_synth.ray_job("efa")["spec"]["submissionMode"] == "K8sJobMode"


def test_runtime_env_only_sets_the_controller_poll_interval_never_pip(default_synth):
    # the Ray Train controller drains each worker's one-report queue at this interval; training.reporting spaces
    # its reports by the same variable, so the loop never waits on a report. Packages never go through runtime_env
    # pip (it clones the image's whole venv on every node): the pods' init container installs them (test_packages).
    for settings in (BASE, BASE.replace(precision="fp8"), BASE.replace(pipPackages="", precision="bf16")):
        job = synthesize(settings).ray_job("efa") if settings is not BASE else default_synth.ray_job("efa")
        assert yaml.safe_load(job["spec"]["runtimeEnvYAML"]) == {
            "env_vars": {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "1.0"}
        }


def test_submitter_runs_on_a_system_node_and_never_restarts_in_place(default_synth):
    pod = default_synth.ray_job("efa")["spec"]["submitterPodTemplate"]["spec"]
    assert pod["nodeSelector"] == {"role": "system"}
    assert pod["restartPolicy"] == "Never"  # a Job's pods must be Never or OnFailure
    assert "command" not in container({"spec": pod})  # KubeRay writes the `ray job submit` command


def test_tcp_variant_workers_force_nccl_sockets(default_synth):
    worker_env = env(worker_group(default_synth.ray_job("tcp")["spec"]["rayClusterSpec"])["template"])
    assert {k: v for k, v in worker_env.items() if k not in NOT_NETWORK_ENV} == {
        "NCCL_NET": "Socket",
        "FI_PROVIDER": "tcp",
        "NCCL_NET_PLUGIN": "none",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "INFO",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "NCCL_SOCKET_NTHREADS": "2",
        "NCCL_NSOCKS_PERTHREAD": "8",  # g6.12xlarge: NCCL's own choice on an ENA NIC
    }


@pytest.mark.parametrize(
    "instance, placement",
    [
        ("g6.12xlarge", {}),
        ("g6e.48xlarge", {}),
        ("p5en.48xlarge", {}),
        ("p6-b200.48xlarge", {}),
        ("p5en.48xlarge", {"capacityReservationId": "cr-0123456789abcdef0"}),  # no placement group: 5 Gbit/s a flow
    ],
)
def test_the_tcp_rayjob_sets_its_sockets_from_the_card_and_the_model_uses_them(instance, placement):
    # GIVEN the synthesized TCP comparison RayJob (a pod's veth would leave NCCL at 1 socket a connection)
    synth = synthesize(BASE.replace(gpuInstanceType=instance, **placement))
    worker_env = env(worker_group(synth.ray_job("tcp")["spec"]["rayClusterSpec"])["template"])
    threads, per_thread = int(worker_env["NCCL_SOCKET_NTHREADS"]), int(worker_env["NCCL_NSOCKS_PERTHREAD"])
    # THEN NCCL's caps hold (net_socket.cc: 16 threads, 64 sockets) and the sockets fill card 0 at EC2's flow limit
    row, in_group = synth.settings.nodes.gpu_instance, synth.settings.nodes.use_placement_group
    assert 1 <= threads <= 16 and threads * per_thread <= 64
    flow = perf.FLOW_GBPS["placement" if in_group else "spread"]
    assert threads * per_thread >= min(64, row.primary_card_gbps / flow)
    # AND the step model and the TCP floor count the sockets the job runs with
    assert perf.socket_layout(row, placement_group=in_group).sockets == threads * per_thread
    # AND the EFA job leaves NCCL's socket transport alone
    efa_env = env(worker_group(synth.ray_job("efa")["spec"]["rayClusterSpec"])["template"])
    assert not {"NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD"} & set(efa_env)


def test_the_tcp_rayjob_ships_settings_whose_floor_is_tcps_even_when_the_efa_floor_is_set():
    # GIVEN an EFA job with a floor measured on its nodes (ray-efa calibrate), on the default g6.12xlarge
    synth = synthesize(BASE.replace(preflightMinBusbwGbps=2.8))
    efa = Settings.from_context(_settings_json(synth, "efa"))
    tcp = Settings.from_context(_settings_json(synth, "tcp"))
    # THEN the EFA job runs with it and the TCP comparison job with the socket model's floor, at most 1.5 GB/s
    assert preflight_floor(efa).floor_gb_s == 2.8 and preflight_floor(efa).network == "efa"
    assert preflight_floor(tcp).network == "tcp" and preflight_floor(tcp).floor_gb_s <= 1.5
    assert preflight_floor(tcp).source.startswith("socket model")


@pytest.mark.parametrize("instance", ["g6e.24xlarge", "g6e.48xlarge"])
def test_the_g6e_efa_rayjob_ships_settings_whose_floor_a_healthy_node_clears(instance):
    synth = synthesize(BASE.replace(gpuInstanceType=instance))
    floor = preflight_floor(Settings.from_context(_settings_json(synth, "efa")))
    assert floor.network == "efa" and floor.floor_gb_s <= 2.5


def test_tcp_variant_never_asks_for_gpudirect_rdma():
    # GIVEN an instance with GPUDirect RDMA, where the EFA run sets FI_EFA_USE_DEVICE_RDMA
    synth = synthesize(BASE.replace(gpuInstanceType="p5.48xlarge"))
    # THEN the TCP run does not
    assert "FI_EFA_USE_DEVICE_RDMA" not in env(worker_group(synth.ray_job("tcp")["spec"]["rayClusterSpec"])["template"])
    assert (
        env(worker_group(synth.ray_job("efa")["spec"]["rayClusterSpec"])["template"])["FI_EFA_USE_DEVICE_RDMA"] == "1"
    )


def test_each_job_ships_settings_for_its_own_network(default_synth):
    assert _settings_json(default_synth, "efa")["network"] == "efa"
    assert _settings_json(default_synth, "tcp")["network"] == "tcp"


def _trains_as(settings_json: dict) -> dict:
    """The training levers a job's settings.json makes its driver run (core.strategy.resolve, on its own network)."""
    t = resolve(Settings.from_json(json.dumps(settings_json))).training
    return {
        "microBatch": t.micro_batch,
        "gradAccumulation": t.grad_accumulation,
        "precision": t.precision,
        "activationCheckpointing": t.activation_checkpointing,
        "sharding": t.sharding,
        "gradReduceDtype": t.grad_reduce_dtype,
        "seqLen": t.seq_len,
        "compile": t.compile,
    }


def test_tcp_variant_differs_from_the_efa_run_only_in_network(default_synth):
    efa, tcp = _settings_json(default_synth, "efa"), _settings_json(default_synth, "tcp")
    # the TCP job states the levers the EFA job leaves at auto, as the EFA job's driver decides them; nothing else
    assert {k for k in efa if efa[k] != tcp[k]} - {"network"} <= {k for k in efa if efa[k] == "auto"}
    assert _trains_as(efa) == _trains_as(tcp)


@pytest.mark.parametrize("instance", ["p5.48xlarge", "p5en.48xlarge", "p4d.24xlarge"])
def test_the_tcp_comparison_trains_the_efa_jobs_levers_not_its_own(instance):
    # GIVEN 2 x p5.48xlarge, where auto on TCP alone would pick another job (fp8, HSDP, a bf16 wire) than on EFA
    synth = synthesize(BASE.replace(gpuInstanceType=instance, gpuNodeCount=2))
    efa, tcp = _settings_json(synth, "efa"), _settings_json(synth, "tcp")
    # THEN the comparison RayJob trains exactly what the EFA job trains: the network flipped, nothing else
    assert tcp["network"] == "tcp" and _trains_as(efa) == _trains_as(tcp)
    assert all(
        tcp[k] != "auto"
        for k in (
            "microBatch",
            "gradAccumulation",
            "precision",
            "sharding",
            "gradReduceDtype",
            "activationCheckpointing",
        )
    )


def test_tcp_variant_keeps_the_same_pod_resources(default_synth):
    # The comparison measures the transport alone: same nodes, same devices, same CPU and memory.
    resources = [
        container(worker_group(default_synth.ray_job(n)["spec"]["rayClusterSpec"])["template"])["resources"]
        for n in ("efa", "tcp")
    ]
    assert resources[0] == resources[1]


def test_ray_object_names_are_valid_for_kuberay(default_synth):
    for obj in default_synth.objects():
        if obj["kind"] in ("RayCluster", "RayJob"):
            assert check_object_name(obj["metadata"]["name"]) == obj["metadata"]["name"]


def test_invalid_ray_object_name_is_rejected_with_the_rule():
    with pytest.raises(ValueError, match=r"DNS-1035 .* at most 47 characters, got 'Train_EFA'"):
        check_object_name("Train_EFA")


def test_a_tcp_run_gets_an_efa_comparison():
    synth = synthesize(BASE.replace(network="tcp"))
    assert set(synth.charts) == {"namespace", "raycluster", "rayjob-efa", "rayjob-tcp"}
    assert env(worker_group(synth.ray_cluster["spec"])["template"])["NCCL_NET"] == "Socket"


@pytest.mark.parametrize("network", ["efa", "tcp"])
def test_the_workload_is_the_namespace_then_the_job_of_the_network(network):
    # GIVEN settings for a run on `network`
    settings = BASE.replace(network=network)
    # WHEN the objects of the CDK stack's charts are built (build_workload wraps them: tests/k8s/test_charts.py)
    charts = workload_objects(settings)
    # THEN they are the namespace, then that network's RayJob with its NetworkPolicy and ConfigMap first, and no
    # standing RayCluster
    assert list(charts) == ["namespace", f"rayjob-{network}"]
    config_maps = [("ConfigMap", name) for name, _ in collect_code(settings).config_maps(f"train-{network}-code")]
    assert (
        config_maps[0] == ("ConfigMap", f"train-{network}-code") and config_maps[-1][1] == f"train-{network}-settings"
    )
    assert [[(o["kind"], o["metadata"]["name"]) for o in objects] for objects in charts.values()] == [
        [("Namespace", "ray")],
        [("NetworkPolicy", f"train-{network}-ray-ingress"), *config_maps, ("RayJob", f"train-{network}")],
    ]


def test_a_failing_driver_fails_the_entrypoint_as_the_head_runs_it(default_synth, tmp_path):
    # GIVEN the EFA job's ConfigMap written out where its pods mount it (here: tmp_path), and settings the driver
    # refuses (3 GPU nodes and no shared storagePath for the checkpoints)
    from ray_efa.training.driver import EXIT_BAD_SETTINGS

    root = materialize_code(default_synth, "efa", tmp_path)
    assert default_synth.settings.workload.storage_path is None and default_synth.settings.nodes.gpu_node_count == 3
    entrypoint = default_synth.ray_job("efa")["spec"]["entrypoint"].replace(CODE_MOUNT_PATH, str(root))
    # WHEN the entrypoint runs through a shell, as Ray's job supervisor runs it, with the pod's PYTHONPATH
    path = f"{os.path.dirname(sys.executable)}:/usr/bin:/bin"
    done = subprocess.run(
        entrypoint,
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": path, "PYTHONPATH": str(root)},
        timeout=120,
    )
    # THEN the driver's own failure is the command's exit status, which Ray turns into a FAILED job
    assert done.returncode == EXIT_BAD_SETTINGS, done.stderr
    assert "storagePath" in done.stderr
