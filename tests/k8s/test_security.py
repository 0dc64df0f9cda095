"""Least privilege in the manifests: token auth where KubeRay has it, a NetworkPolicy in front of every Ray object,
and a securityContext on every container.

What each NetworkPolicy admits is tested against the pods the real KubeRay operator creates from these manifests
(tests/cluster/test_network_policy.py, on the real control plane); here what needs no pods: where the policies are
and that they validate.
"""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from ray_efa.core.settings import KUBERAY_VERSIONS
from ray_efa.k8s.security import token_auth
from tests.k8s.conftest import BASE, container, synthesize
from tests.k8s.schemas import crd_errors, k8s_validate


def _policies(synth) -> list[dict]:
    return [o for o in synth.objects() if o["kind"] == "NetworkPolicy"]


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
            n: ("/host" + h["path"], True) for n, h in host.items()
        }, where
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


def test_the_policy_follows_the_workload_namespace():
    synth = synthesize(BASE.replace(namespace="training"))
    assert {p["metadata"]["namespace"] for p in _policies(synth)} == {"training"}
