"""Where the pods read modelPath, dataset and storagePath: a shared filesystem's PersistentVolumeClaim mounted into
every Ray pod (sharedVolumeClaim at sharedVolumeMountPath), the node-local model cache, and a synth that refuses a
local path no pod can read."""

from __future__ import annotations

import pytest

from ray_efa.core.settings import SettingsError
from ray_efa.k8s.cluster_spec import MODEL_CACHE_PATH
from ray_efa.k8s.objects import ray_job_objects
from tests.k8s.conftest import BASE, env, synthesize, volume_at
from tests.k8s.schemas import crd_errors, k8s_validate, pod_template_object

FSX = BASE.replace(
    sharedVolumeClaim="fsx-claim",
    sharedVolumeMountPath="/mnt/fsx",
    storagePath="/mnt/fsx/runs",
    modelPath="/mnt/fsx/models/qwen",
    modelConfig="qwen2.5-1.5b",
    dataset="/mnt/fsx/data/text",
)


def _ray_pods(synth):
    return [(where, t) for where, t in synth.pod_templates() if "submitter" not in where]


def test_the_claim_is_mounted_into_every_ray_pod_and_validates():
    synth = synthesize(FSX)
    pods = _ray_pods(synth)
    assert len(pods) == 6  # head and workers of the RayCluster and of both RayJobs
    for where, template in pods:
        assert volume_at(template, "/mnt/fsx") == {
            "name": "shared",
            "persistentVolumeClaim": {"claimName": "fsx-claim"},
        }, where
        assert volume_at(template, MODEL_CACHE_PATH) == {"emptyDir": {}, "name": "model-cache"}, where
        assert env(template)["RAY_EFA_MODEL_CACHE"] == MODEL_CACHE_PATH and env(template)["HF_HUB_CACHE"].startswith(
            MODEL_CACHE_PATH
        )
        assert k8s_validate(pod_template_object(template), FSX.cluster.kubernetes_version)
    for obj in synth.objects():
        if obj["apiVersion"] == "ray.io/v1":
            assert crd_errors(obj, FSX.addons.kuberay_version) == []


def test_no_claim_no_shared_volume(default_synth):
    for where, template in _ray_pods(default_synth):
        assert "shared" not in {v["name"] for v in template["spec"]["volumes"]}, where


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"sharedVolumeClaim": None}, "storagePath"),
        ({"dataset": "/home/me/text"}, "dataset"),
        ({"modelPath": "/opt/models/qwen"}, "modelPath"),
    ],
)
def test_synth_refuses_a_path_no_pod_can_read(change, key):
    with pytest.raises(SettingsError) as error:
        ray_job_objects(FSX.replace(**change))
    assert key in [p.key for p in error.value.problems]
    assert "no pod can read" in str(error.value)
