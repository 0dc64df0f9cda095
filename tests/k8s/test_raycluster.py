"""The Ray cluster, as the long-lived RayCluster and as each RayJob's own cluster: head, worker group, pods."""

from __future__ import annotations

import json
import re

import pytest

from ray_efa.core import catalog
from tests.k8s.conftest import BASE, NOT_NETWORK_ENV, container, env, head, synthesize, volume_at, worker_group


def _instance(synth) -> str:
    return synth.settings.nodes.gpu_instance_type


def _row(synth) -> catalog.GpuInstanceType:
    # The catalog's row, not a copy of it: tests/core/test_catalog.py holds the rows to AWS's instance facts.
    return catalog.gpu_instance(_instance(synth))


def test_head_runs_on_system_nodes(synth):
    for owner, spec in synth.cluster_specs():
        assert head(spec)["template"]["spec"]["nodeSelector"] == {"role": "system"}, owner


def test_head_advertises_no_gpus(synth):
    for owner, spec in synth.cluster_specs():
        assert head(spec)["rayStartParams"]["num-gpus"] == "0", owner


def test_head_hides_gpus_from_the_nvidia_hook(synth):
    for owner, spec in synth.cluster_specs():
        assert env(head(spec)["template"])["NVIDIA_VISIBLE_DEVICES"] == "void", owner


def test_head_exposes_gcs_dashboard_and_client_ports_by_kuberay_names(synth):
    for owner, spec in synth.cluster_specs():
        ports = {p["name"]: p["containerPort"] for p in container(head(spec)["template"])["ports"]}
        assert ports == {"gcs-server": 6379, "dashboard": 8265, "client": 10001}, owner


def test_ray_session_directory_is_an_empty_dir_on_head_and_workers(synth):
    for owner, spec in synth.cluster_specs():
        for template in (head(spec)["template"], worker_group(spec)["template"]):
            assert volume_at(template, "/tmp/ray")["emptyDir"] == {}, owner


def test_head_runs_ray_stop_before_it_stops(synth):
    for owner, spec in synth.cluster_specs():
        command = container(head(spec)["template"])["lifecycle"]["preStop"]["exec"]["command"]
        assert command[-1] == "ray stop" and command[0] in ("/bin/sh", "/bin/bash"), owner


def test_worker_group_is_fixed_at_one_pod_per_gpu_node(synth):
    nodes = synth.settings.nodes.gpu_node_count
    assert nodes == 3  # BASE sets a non-default count, so a hard-coded 2 cannot pass
    for owner, spec in synth.cluster_specs():
        group = worker_group(spec)
        assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (nodes, nodes, nodes), owner
        assert spec["enableInTreeAutoscaling"] is False, owner


def test_workers_run_on_gpu_nodes_and_tolerate_their_taint(synth):
    for owner, spec in synth.cluster_specs():
        pod = worker_group(spec)["template"]["spec"]
        assert pod["nodeSelector"] == {"role": "gpu-worker"}, owner
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"], owner


def test_worker_gpus_match_the_instance_in_ray_and_in_kubernetes(synth):
    gpus = _row(synth).gpus
    for owner, spec in synth.cluster_specs():
        group = worker_group(spec)
        resources = container(group["template"])["resources"]
        assert group["rayStartParams"]["num-gpus"] == str(gpus), owner
        assert resources["limits"]["nvidia.com/gpu"] == str(gpus) == resources["requests"]["nvidia.com/gpu"], owner


def test_worker_requests_every_efa_interface_of_the_node(synth):
    efa = _row(synth).efa_interfaces
    for owner, spec in synth.cluster_specs():
        resources = container(worker_group(spec)["template"])["resources"]
        assert (
            resources["limits"]["vpc.amazonaws.com/efa"] == str(efa) == resources["requests"]["vpc.amazonaws.com/efa"]
        ), owner


def test_worker_cpu_and_memory_come_from_the_catalog(synth):
    expected = catalog.worker_pod_resources(catalog.gpu_instance(_instance(synth)))
    for owner, spec in synth.cluster_specs():
        limits = container(worker_group(spec)["template"])["resources"]["limits"]
        assert (limits["cpu"], limits["memory"]) == (str(expected.cpu), f"{expected.memory_gib}Gi"), owner


def test_head_cpu_and_memory_come_from_the_catalog(synth):
    cpu, memory = catalog.head_pod_resources(synth.settings.nodes.system_instance)
    for owner, spec in synth.cluster_specs():
        limits = container(head(spec)["template"])["resources"]["limits"]
        assert (limits["cpu"], limits["memory"]) == (str(cpu), f"{memory}Gi"), owner


def test_efa_workers_get_the_efa_nccl_env_and_rdma_only_with_gpudirect(synth):
    rdma = _row(synth).gpudirect_rdma
    expected = {
        "FI_PROVIDER": "efa",
        "NCCL_NET_PLUGIN": "ofi",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "INFO",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }
    if rdma:
        expected["FI_EFA_USE_DEVICE_RDMA"] = "1"
    for owner, spec in (
        ("RayCluster", synth.ray_cluster["spec"]),
        ("RayJob efa", synth.ray_job("efa")["spec"]["rayClusterSpec"]),
    ):
        worker_env = env(worker_group(spec)["template"])
        assert {k: v for k, v in worker_env.items() if k not in NOT_NETWORK_ENV} == expected, owner


def test_every_container_of_every_ray_pod_runs_python_unbuffered(synth):
    # NCCL writes its INFO lines to C's stdout without flushing (debug.cc); PYTHONUNBUFFERED makes CPython unbuffer
    # it (initconfig.c, config_init_stdio), whatever dlcImage sets: the gate's evidence is not lost on _exit
    for where, template in synth.pod_templates():
        for c in [*template["spec"].get("initContainers", []), *template["spec"]["containers"]]:
            assert {"name": "PYTHONUNBUFFERED", "value": "1"} in c.get("env", []), f"{where}: {c['name']}"


def test_dev_shm_is_a_bounded_memory_empty_dir(synth):
    shm_gib = catalog.worker_pod_resources(catalog.gpu_instance(_instance(synth))).shm_gib
    for owner, spec in synth.cluster_specs():
        volume = volume_at(worker_group(spec)["template"], "/dev/shm")
        assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": f"{shm_gib}Gi"}, owner
        assert 0 < shm_gib < catalog.worker_pod_resources(catalog.gpu_instance(_instance(synth))).memory_gib


def test_every_container_of_every_ray_pod_is_guaranteed_qos(synth):
    templates = list(synth.pod_templates())
    assert len(templates) == 8  # 3 clusters x (head + worker) + 2 submitters
    for where, template in templates:
        for c in template["spec"]["containers"]:
            requests, limits = c["resources"]["requests"], c["resources"]["limits"]
            assert requests["cpu"] == limits["cpu"] and requests["memory"] == limits["memory"], f"{where}: {c['name']}"


def test_every_ray_container_runs_the_dlc_image(synth):
    for where, template in synth.pod_templates():
        assert container(template)["image"] == synth.settings.workload.dlc_image, where


def test_ray_version_matches_the_image(synth):
    for owner, spec in synth.cluster_specs():
        assert spec["rayVersion"] == synth.settings.workload.ray_version == "2.58.0", owner


def test_the_efa_jobs_cluster_is_the_raycluster_but_for_the_code_it_mounts(synth):
    # GIVEN the long-lived RayCluster and the EFA RayJob's own cluster, built by the same builder
    cluster = synth.ray_cluster["spec"]
    job_cluster = synth.ray_job("efa")["spec"]["rayClusterSpec"]
    # WHEN the job's ConfigMap names and the owner its pods are labelled with are swapped for the RayCluster's
    renamed = json.loads(
        re.sub(r'"train-efa-(code|code-[a-z0-9-]+|settings)"', r'"ray-efa-\1"', json.dumps(job_cluster)).replace(
            '"train-efa"', '"ray-efa"'
        )
    )
    # THEN nothing else differs
    assert renamed == cluster


@pytest.mark.parametrize("nodes", [1, 8])
def test_worker_replicas_follow_gpu_node_count(nodes):
    # activation checkpointing: the 1.5B plan fits one node's four L4s only with it (the charts refuse plans that do not)
    spec = synthesize(BASE.replace(gpuNodeCount=nodes, activationCheckpointing=True)).ray_cluster["spec"]
    group = worker_group(spec)
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (nodes, nodes, nodes)


def test_pods_follow_the_node_selector_settings():
    # GIVEN a platform's own node labels for both sides
    system, gpu = {"pool": "platform-system"}, {"pool": "platform-gpu", "team": "ml"}
    synth = synthesize(BASE.replace(systemNodeSelector=system, gpuNodeSelector=gpu))
    for owner, spec in synth.cluster_specs():
        # THEN the head runs on the system side and every worker on the GPU side
        assert head(spec)["template"]["spec"]["nodeSelector"] == system, owner
        assert worker_group(spec)["template"]["spec"]["nodeSelector"] == gpu, owner
    # and the RayJob's submitter with the head
    assert synth.ray_job("efa")["spec"]["submitterPodTemplate"]["spec"]["nodeSelector"] == system
