"""Every synthesized object validates: Ray objects against the pinned KubeRay CRDs with unknown fields rejected, core
objects (and every embedded pod template) with kubernetes-validate for the cluster's Kubernetes version. Each validator
is also shown to reject a broken manifest, so a pass means something."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest
from kubernetes_validate.utils import all_versions

from ray_efa.core.settings import KUBERAY_VERSIONS
from ray_efa.k8s.code_bundle import collect_code
from tests.k8s.conftest import synthesize
from tests.k8s.schemas import crd_errors, k8s_validate, pod_template_object


@pytest.mark.parametrize("kuberay_version", KUBERAY_VERSIONS)
def test_ray_objects_validate_against_the_pinned_kuberay_crds(synth, kuberay_version):
    # GIVEN the manifests for settings pinning this KubeRay release
    pinned = synthesize(synth.settings.replace(kuberayVersion=kuberay_version))
    ray_objects = [o for o in pinned.objects() if o["apiVersion"] == "ray.io/v1"]
    assert [o["kind"] for o in ray_objects] == ["RayCluster", "RayJob", "RayJob"]
    # WHEN each is checked against that release's CRD, unknown fields rejected THEN nothing is wrong
    for obj in ray_objects:
        assert crd_errors(obj, pinned.settings.addons.kuberay_version) == [], obj["metadata"]["name"]


def test_kubernetes_validate_has_the_clusters_kubernetes_version(default_synth):
    version = default_synth.settings.cluster.kubernetes_version
    assert version == "1.36" and f"{version}.0" in all_versions()


def test_core_objects_validate_for_the_clusters_kubernetes_version(synth):
    version = synth.settings.cluster.kubernetes_version
    core_objects = [o for o in synth.objects() if o["apiVersion"] == "v1"]
    # the RayCluster's and both RayJobs' code and settings ConfigMaps, and the namespace
    per_owner = len(collect_code(synth.settings).config_maps("x-code"))
    assert sorted(o["kind"] for o in core_objects) == ["ConfigMap"] * 3 * per_owner + ["Namespace"]
    for obj in core_objects:
        assert k8s_validate(obj, version) == version, obj["metadata"]["name"]


def test_every_embedded_pod_template_validates_as_a_core_pod_template(synth):
    version = synth.settings.cluster.kubernetes_version
    for where, template in synth.pod_templates():
        assert k8s_validate(pod_template_object(template), version) == version, where


# -- each validator rejects a broken manifest ---------------------------------------------------------------------


def _broken(obj: dict, path: tuple, value) -> dict:
    obj = copy.deepcopy(obj)
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return obj


@pytest.mark.parametrize("kuberay_version", KUBERAY_VERSIONS)
def test_strict_crd_schema_rejects_a_misspelt_field_the_published_schema_lets_through(default_synth, kuberay_version):
    # GIVEN a RayCluster whose worker group says "replica" instead of "replicas"
    broken = _broken(default_synth.ray_cluster, ("spec", "workerGroupSpecs", 0, "replica"), 3)
    # THEN the published CRD accepts it (the API server would silently prune it), and the strict one does not
    assert crd_errors(broken, kuberay_version, strict_schema=False) == []
    assert any("'replica' was unexpected" in e for e in crd_errors(broken, kuberay_version))


@pytest.mark.parametrize("kuberay_version", KUBERAY_VERSIONS)
def test_crd_schema_rejects_a_wrongly_typed_rayjob_field(default_synth, kuberay_version):
    broken = _broken(default_synth.ray_job("efa"), ("spec", "backoffLimit"), "2")
    assert any(e.startswith("spec.backoffLimit:") for e in crd_errors(broken, kuberay_version))


@pytest.mark.parametrize("kuberay_version", KUBERAY_VERSIONS)
def test_crd_schema_rejects_a_misspelt_field_inside_an_embedded_pod(default_synth, kuberay_version):
    broken = _broken(
        default_synth.ray_job("efa"),
        ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "nodeSelectr"),
        {"role": "system"},
    )
    assert any("'nodeSelectr' was unexpected" in e for e in crd_errors(broken, kuberay_version))


def test_kubernetes_validate_rejects_a_broken_config_map(default_synth):
    (config_map,) = [o for o in default_synth.charts["rayjob-efa"] if o["metadata"]["name"] == "train-efa-settings"]
    broken = _broken(config_map, ("data", "settings.json"), {"not": "a string"})
    with pytest.raises(kubernetes_validate.ValidationError):
        k8s_validate(broken, "1.36")


def test_kubernetes_validate_rejects_an_unknown_namespace_field(default_synth):
    (namespace,) = default_synth.charts["namespace"]
    with pytest.raises(kubernetes_validate.ValidationError, match="'finalizer' was unexpected"):
        k8s_validate(_broken(namespace, ("spec",), {"finalizer": ["x"]}), "1.36")


def test_kubernetes_validate_rejects_a_misspelt_container_field(default_synth):
    template = _broken(
        default_synth.ray_cluster["spec"]["headGroupSpec"]["template"],
        ("spec", "containers", 0, "imagePullPolcy"),
        "Always",
    )
    with pytest.raises(kubernetes_validate.ValidationError, match="'imagePullPolcy' was unexpected"):
        k8s_validate(pod_template_object(template), "1.36")
