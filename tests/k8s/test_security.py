"""Least privilege in the manifests: token auth where KubeRay has it, a NetworkPolicy that admits exactly the Ray
cluster's own pods, its submitter and the operator, and a securityContext on every container.

The policy is tested against the labels of the pods KubeRay will create from these manifests (tests/k8s/netpol.py
copies KubeRay's own labelling), so a selector that missed a Ray pod (the job would hang) or matched a stranger
(the guard would be open) fails here.
"""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from ray_efa.core.settings import KUBERAY_VERSIONS
from ray_efa.k8s.security import token_auth
from tests.k8s.conftest import BASE, container, synthesize
from tests.k8s.netpol import Pod, admitted, ray_pod_labels, selects, submitter_pod_labels
from tests.k8s.schemas import crd_errors, k8s_validate

NS = "ray"
GCS, DASHBOARD, CLIENT, RAYLET = 6379, 8265, 10001, 43127  # the last: a port Ray picks at run time


def _policies(synth) -> list[dict]:
    return [o for o in synth.objects() if o["kind"] == "NetworkPolicy"]


def _job_pods(synth, network: str, cluster: str) -> dict[str, Pod]:
    """The head, a worker and the submitter that KubeRay creates for RayJob train-<network> (cluster `cluster`)."""
    job = synth.ray_job(network)["spec"]
    spec = job["rayClusterSpec"]
    group = spec["workerGroupSpecs"][0]
    return {
        "head": Pod(f"{cluster}-head", NS, ray_pod_labels(spec["headGroupSpec"]["template"], cluster=cluster,
                                                          node_type="head", group="headgroup")),
        "worker": Pod(f"{cluster}-gpu-worker", NS, ray_pod_labels(group["template"], cluster=cluster,
                                                                  node_type="worker", group=group["groupName"])),
        "submitter": Pod(f"train-{network}-abcde", NS, submitter_pod_labels(job["submitterPodTemplate"],
                                                                            ray_job=f"train-{network}")),
    }


def _raycluster_pods(synth) -> dict[str, Pod]:
    spec = synth.ray_cluster["spec"]
    group = spec["workerGroupSpecs"][0]
    return {
        "head": Pod("ray-efa-head", NS, ray_pod_labels(spec["headGroupSpec"]["template"], cluster="ray-efa",
                                                       node_type="head", group="headgroup")),
        "worker": Pod("ray-efa-gpu-worker", NS, ray_pod_labels(group["template"], cluster="ray-efa",
                                                               node_type="worker", group=group["groupName"])),
    }


OPERATOR = Pod("kuberay-operator-7c9d", "kuberay-system", {
    # kuberay-operator chart 1.7.0 templates/deployment.yaml, release kuberay-operator
    "app.kubernetes.io/name": "kuberay-operator", "app.kubernetes.io/instance": "kuberay-operator",
    "app.kubernetes.io/component": "kuberay-operator", "pod-template-hash": "7c9d"})


# -- token authentication -----------------------------------------------------------------------------------------


def test_every_ray_cluster_requires_a_token_with_kuberay_1_7(default_synth):
    # GIVEN the default settings (KubeRay 1.7.0, Ray 2.58.0) THEN the RayCluster and both RayJobs' clusters say so
    assert default_synth.settings.addons.kuberay_version == "1.7.0"
    for owner, spec in default_synth.cluster_specs():
        assert spec["authOptions"] == {"mode": "token"}, owner


def test_no_token_is_in_the_manifests(default_synth):
    # The token is KubeRay's to generate and inject: nothing secret, no Secret and no token env is synthesized.
    assert not [o for o in default_synth.objects() if o["kind"] == "Secret"]
    for where, template in default_synth.pod_templates():
        assert not [e for e in container(template).get("env", []) if e["name"].startswith("RAY_AUTH")], where


def test_kuberay_1_4_has_no_token_auth_and_says_why():
    settings = BASE.replace(kuberayVersion="1.4.0")
    synth = synthesize(settings)
    for owner, spec in synth.cluster_specs():
        assert "authOptions" not in spec, owner
    auth = token_auth(settings)
    assert not auth.enabled and "kuberayVersion 1.4.0 has no authOptions" in auth.reason


def test_a_ray_older_than_kuberay_allows_gets_no_token_auth():
    # GIVEN an image of our own with Ray 2.51 (KubeRay rejects token mode below 2.52.0)
    settings = BASE.replace(dlcImage="registry.example.com/ray:2.51-custom", rayVersion="2.51.0")
    # THEN the spec leaves authOptions out rather than be rejected by the operator
    for owner, spec in synthesize(settings).cluster_specs():
        assert "authOptions" not in spec, owner
    assert "rayVersion 2.51.0 is older than 2.52.0" in token_auth(settings).reason


@pytest.mark.parametrize("kuberay_version", KUBERAY_VERSIONS)
def test_the_crd_of_each_kuberay_version_accepts_what_is_synthesized_for_it(kuberay_version):
    synth = synthesize(BASE.replace(kuberayVersion=kuberay_version))
    for obj in (o for o in synth.objects() if o["apiVersion"] == "ray.io/v1"):
        assert crd_errors(obj, kuberay_version) == [], obj["metadata"]["name"]


def test_the_1_4_crd_would_reject_auth_options(default_synth):
    # The reason 1.4.0 gets no authOptions: its CRD has no such field (the API server would prune it silently).
    assert any("'authOptions' was unexpected" in e for e in crd_errors(default_synth.ray_cluster, "1.4.0"))


# -- securityContext ---------------------------------------------------------------------------------------------


def test_every_container_drops_every_capability_and_cannot_escalate(synth):
    for where, template in synth.pod_templates():
        context = container(template)["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, where
        assert context["capabilities"]["drop"] == ["ALL"], where


def test_only_workers_get_ipc_lock_for_efa_memory_registration(synth):
    for where, template in synth.pod_templates():
        added = container(template)["securityContext"]["capabilities"].get("add")
        assert added == (["IPC_LOCK"] if " worker " in where else None), where


def test_no_container_is_privileged_or_shares_the_hosts_namespaces(synth):
    for where, template in synth.pod_templates():
        for each in template["spec"]["containers"] + template["spec"].get("initContainers", []):
            assert "privileged" not in each["securityContext"], where
        assert not template["spec"].get("hostNetwork") and not template["spec"].get("hostIPC"), where
        assert not template["spec"].get("hostPID"), where


def test_only_workers_mount_the_host_and_only_its_rdma_sysfs_folders_read_only(synth):
    # The EFA counters exist only in the host's network namespace view of sysfs (training.efa_counters): the workers
    # mount exactly /sys/class/infiniband and /sys/devices, read-only, in the Ray container alone.
    for where, template in synth.pod_templates():
        host = {v["name"]: v["hostPath"] for v in template["spec"].get("volumes", []) if "hostPath" in v}
        if " worker " not in where:
            assert host == {}, where
            continue
        assert sorted(h["path"] for h in host.values()) == ["/sys/class/infiniband", "/sys/devices"], where
        assert {h["type"] for h in host.values()} == {"Directory"}, where
        mounts = {m["name"]: m for m in container(template)["volumeMounts"] if m["name"] in host}
        assert {n: (m["mountPath"], m.get("readOnly")) for n, m in mounts.items()} == {
            n: ("/host" + h["path"], True) for n, h in host.items()}, where
        assert not [m for m in mounts.values() if "mountPropagation" in m], where
        for init in template["spec"].get("initContainers", []):
            assert not [m for m in init.get("volumeMounts", []) if m["name"] in host], where


def test_the_namespace_enforces_no_pod_security_level_that_refuses_the_workers(default_synth):
    # The workers' IPC_LOCK and read-only hostPath are outside Pod Security "baseline" (and so "restricted"): a
    # namespace labelled to enforce either would refuse every worker pod.
    (namespace,) = [o for o in default_synth.objects() if o["kind"] == "Namespace"]
    labels = namespace["metadata"].get("labels", {})
    assert labels.get("pod-security.kubernetes.io/enforce", "privileged") == "privileged"


def test_the_code_is_mounted_read_only(synth):
    for where, template in synth.pod_templates():
        for mount in container(template).get("volumeMounts", []):
            if mount["name"] == "code":
                assert mount["readOnly"] is True, where


def test_ray_pods_know_their_region_without_imds(default_synth):
    # IMDS is out of pods' reach (hop limit 1), so the SDKs must not need it for the region.
    for where, template in default_synth.pod_templates():
        if "submitter" in where:
            continue
        env = {e["name"]: e.get("value") for e in container(template)["env"]}
        assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "us-east-2", where


# -- the NetworkPolicy ---------------------------------------------------------------------------------------------


def test_each_ray_object_has_its_network_policy_next_to_it(default_synth):
    for chart, owner in (("raycluster", "ray-efa"), ("rayjob-efa", "train-efa"), ("rayjob-tcp", "train-tcp")):
        kinds = [(o["kind"], o["metadata"]["name"]) for o in default_synth.charts[chart]]
        # before the Ray object, so its pods never run unguarded
        assert kinds[0] == ("NetworkPolicy", f"{owner}-ray-ingress"), chart


def test_network_policies_validate_for_the_clusters_kubernetes_version(synth):
    version = synth.settings.cluster.kubernetes_version
    for policy in _policies(synth):
        assert k8s_validate(policy, version) == version, policy["metadata"]["name"]


def test_kubernetes_validate_rejects_a_misspelt_policy_field(default_synth):
    broken = copy.deepcopy(_policies(default_synth)[0])
    broken["spec"]["ingres"] = broken["spec"].pop("ingress")
    with pytest.raises(kubernetes_validate.ValidationError):
        k8s_validate(broken, default_synth.settings.cluster.kubernetes_version)


@pytest.mark.parametrize("network", ["efa", "tcp"])
def test_the_job_runs_its_pods_reach_each_other_on_every_port(default_synth, network):
    pods = _job_pods(default_synth, network, f"train-{network}-x7k2p")
    policies = _policies(default_synth)
    # THEN the policy selects the head and the workers (else it guards nothing)
    (policy,) = [p for p in policies if p["metadata"]["name"] == f"train-{network}-ray-ingress"]
    assert selects(policy["spec"]["podSelector"], pods["head"].labels)
    assert selects(policy["spec"]["podSelector"], pods["worker"].labels)
    assert not selects(policy["spec"]["podSelector"], pods["submitter"].labels)
    # AND the job's own traffic passes: workers to the GCS, head and workers to each other on any port
    for port in (GCS, DASHBOARD, CLIENT, RAYLET):
        assert admitted(policies, pods["worker"], pods["head"], port), port
        assert admitted(policies, pods["head"], pods["worker"], port), port
        assert admitted(policies, pods["worker"], pods["worker"], port), port


@pytest.mark.parametrize("network", ["efa", "tcp"])
def test_the_submitter_and_the_operator_reach_only_the_dashboard(default_synth, network):
    pods = _job_pods(default_synth, network, f"train-{network}-x7k2p")
    policies = _policies(default_synth)
    assert admitted(policies, pods["submitter"], pods["head"], DASHBOARD)
    assert admitted(policies, OPERATOR, pods["head"], DASHBOARD)
    for port in (GCS, CLIENT, RAYLET):
        assert not admitted(policies, pods["submitter"], pods["head"], port), port
        assert not admitted(policies, OPERATOR, pods["head"], port), port


def test_nobody_else_gets_in(default_synth):
    policies = _policies(default_synth)
    efa = _job_pods(default_synth, "efa", "train-efa-x7k2p")
    tcp = _job_pods(default_synth, "tcp", "train-tcp-q4w8z")
    standing = _raycluster_pods(default_synth)
    strangers = {
        "a pod in another namespace": Pod("curl", "default", {"app": "curl"}),
        "a pod in another namespace labelled like the submitter": Pod("mimic", "default", dict(efa["submitter"].labels)),
        "another pod in the operator's namespace": Pod("webhook", "kuberay-system", {"app": "webhook"}),
        "an unlabelled pod in the Ray namespace": Pod("debug", NS, {"run": "debug"}),
        "the TCP job's head": tcp["head"],
        "the TCP job's submitter": tcp["submitter"],
        "the standing RayCluster's worker": standing["worker"],
    }
    for who, source in strangers.items():
        for target in ("head", "worker"):
            for port in (GCS, DASHBOARD, CLIENT, RAYLET):
                assert not admitted(policies, source, efa[target], port), (who, target, port)


def test_the_standing_raycluster_admits_its_own_pods_and_the_operator_only(default_synth):
    policies = _policies(default_synth)
    pods = _raycluster_pods(default_synth)
    efa = _job_pods(default_synth, "efa", "train-efa-x7k2p")
    assert admitted(policies, pods["worker"], pods["head"], GCS)
    assert admitted(policies, OPERATOR, pods["head"], DASHBOARD)
    # no RayJob submits to it through a submitter pod: a job's submitter is not let in
    assert not admitted(policies, efa["submitter"], pods["head"], DASHBOARD)


def test_the_policy_follows_the_workload_namespace():
    synth = synthesize(BASE.replace(namespace="training"))
    assert {p["metadata"]["namespace"] for p in _policies(synth)} == {"training"}
