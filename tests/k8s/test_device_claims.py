"""deviceAllocation dra: the GPU workers claim their GPUs and EFA interfaces from a ResourceClaimTemplate
(k8s.device_claims), validated against the real Kubernetes 1.36 schemas (kubernetes-validate, strict) and the pinned
KubeRay CRDs with unknown fields rejected."""

from __future__ import annotations

import dataclasses

import pytest

from ray_efa.core import catalog
from ray_efa.core import settings as settings_module
from ray_efa.core.settings import KUBERAY_VERSIONS, Settings
from ray_efa.core.settings.framework import rule_problems
from ray_efa.k8s.device_claims import (
    CLAIM_NAME,
    MAX_DEVICES_PER_CLAIM,
    PCIE_ROOT,
    claim_device_count,
    worker_device_claims,
)
from ray_efa.k8s.objects import manifest_objects, ray_job_objects
from tests.k8s.schemas import crd_errors, k8s_validate, pod_template_object

# instance -> (GPUs, EFA interfaces per GPU when they pair up, else None)
PAIRING = {
    "g6.12xlarge": (4, None),
    "p4d.24xlarge": (8, None),
    "p5.48xlarge": (8, 4),
    "p5en.48xlarge": (8, 2),
    "p6-b200.48xlarge": (8, 1),
}


def job_objects(**context) -> list[dict]:
    return ray_job_objects(Settings.from_context({"deviceAllocation": "dra", **context}))


def worker_spec(job: dict) -> dict:
    return job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]


@pytest.mark.parametrize("instance_type", PAIRING)
def test_each_gpu_gets_the_efa_interfaces_on_its_pcie_root_within_claims_of_32(instance_type):
    objects = job_objects(gpuInstanceType=instance_type)
    templates = [o for o in objects if o["kind"] == "ResourceClaimTemplate"]
    gpus, per_gpu = PAIRING[instance_type]
    counts: dict[str, tuple[str, int]] = {}
    for template in templates:
        devices = template["spec"]["spec"]["devices"]
        claim = {r["name"]: (r["exactly"]["deviceClassName"], r["exactly"]["count"]) for r in devices["requests"]}
        # THEN no claim asks more than the scheduler allocates (resource/v1 AllocationResultsMaxSize = 32) ...
        assert sum(count for _, count in claim.values()) <= 32
        if per_gpu is not None:  # ... and each GPU's EFA interfaces are in the GPU's own claim, on its PCIe root
            indices = sorted(int(name.split("-")[1]) for name in claim if name.startswith("gpu-"))
            assert set(claim) == {f"{kind}-{i}" for i in indices for kind in ("gpu", "efa")}
            assert devices["constraints"] == [
                {"requests": [f"gpu-{i}", f"efa-{i}"], "matchAttribute": PCIE_ROOT} for i in indices
            ]
        counts.update(claim)
        # ... each a valid resource.k8s.io/v1 object for Kubernetes 1.36 (unknown fields rejected)
        assert k8s_validate(template, "1.36") == "1.36"
    if per_gpu is None:  # fewer EFA interfaces than GPUs: all of each, no pairing, one claim
        efa = {"g6.12xlarge": 1, "p4d.24xlarge": 4}[instance_type]
        assert counts == {"gpus": ("gpu.nvidia.com", gpus), "efa": ("efa.networking.k8s.aws", efa)}
        assert len(templates) == 1 and "constraints" not in templates[0]["spec"]["spec"]["devices"]
    else:  # all the node's devices, across the claims
        assert len(counts) == 2 * gpus
        assert all(counts[f"gpu-{i}"] == ("gpu.nvidia.com", 1) for i in range(gpus))
        assert all(counts[f"efa-{i}"] == ("efa.networking.k8s.aws", per_gpu) for i in range(gpus))


def test_p5_splits_its_40_devices_into_two_claims_of_20():
    # 8 GPUs + 8 x 4 EFA = 40 devices: one claim would be refused ("exceeds the claim limit of 32")
    templates = [o for o in job_objects(gpuInstanceType="p5.48xlarge") if o["kind"] == "ResourceClaimTemplate"]
    sizes = [sum(r["exactly"]["count"] for r in t["spec"]["spec"]["devices"]["requests"]) for t in templates]
    assert sizes == [20, 20]
    assert [t["metadata"]["name"] for t in templates] == ["train-efa-gpus-efa-0", "train-efa-gpus-efa-1"]


@pytest.mark.parametrize("instance", catalog.GPU_INSTANCES.values(), ids=lambda i: i.name)
def test_every_catalog_row_fits_the_claim_limit(instance):
    claims = worker_device_claims(instance)
    assert all(claim_device_count(claim) <= MAX_DEVICES_PER_CLAIM for claim in claims)
    assert sum(claim_device_count(claim) for claim in claims) == instance.gpus + instance.efa_interfaces


def test_a_type_whose_gpu_and_efa_cannot_fit_one_claim_is_refused_naming_the_limit():
    too_many = dataclasses.replace(catalog.GPU_INSTANCES["p5.48xlarge"], name="x.big", gpus=1, efa_interfaces=32)
    with pytest.raises(ValueError, match="x.big: one GPU with its 32 EFA interfaces exceeds the 32 devices"):
        worker_device_claims(too_many)


@pytest.mark.parametrize("kuberay_version", KUBERAY_VERSIONS)
def test_the_workers_claim_it_and_ask_for_no_extended_resources_valid_for_both_crds(kuberay_version):
    objects = job_objects(gpuInstanceType="p5.48xlarge", kuberayVersion=kuberay_version)
    kinds = [o["kind"] for o in objects]
    assert kinds.index("ResourceClaimTemplate") < kinds.index("RayJob")  # applied before the pods that claim from it
    job = objects[-1]
    spec = worker_spec(job)
    (container,) = spec["containers"]
    names = [f"{CLAIM_NAME}-0", f"{CLAIM_NAME}-1"]  # p5's 40 devices in two claims of 20
    assert spec["resourceClaims"] == [{"name": n, "resourceClaimTemplateName": f"train-efa-{n}"} for n in names]
    assert container["resources"]["claims"] == [{"name": n} for n in names]
    assert not {"nvidia.com/gpu", "vpc.amazonaws.com/efa"} & set(container["resources"]["limits"])
    # still Guaranteed: CPU and memory requests equal limits
    assert container["resources"]["limits"] == container["resources"]["requests"]
    assert crd_errors(job, kuberay_version) == []
    assert (
        k8s_validate(pod_template_object(job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]), "1.36")
        == "1.36"
    )


def test_the_long_lived_raycluster_gets_its_own_template():
    charts = manifest_objects(Settings.from_context({"deviceAllocation": "dra"}))
    templates = [o["metadata"]["name"] for c in charts.values() for o in c if o["kind"] == "ResourceClaimTemplate"]
    assert templates == ["ray-efa-gpus-efa", "train-efa-gpus-efa", "train-tcp-gpus-efa"]  # one per Ray object


def test_device_plugins_stay_the_default_with_extended_resources_and_no_claims():
    objects = ray_job_objects(Settings())
    assert "ResourceClaimTemplate" not in [o["kind"] for o in objects]
    spec = worker_spec(objects[-1])
    assert "resourceClaims" not in spec
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_dra_on_a_kubernetes_without_it_is_refused_naming_the_setting():
    # Every kubernetesVersion the settings allow today (1.35, 1.36) has DRA; the rule is for an older one, as a
    # platform's imported cluster may run (and for the day the list grows): checked through the settings' own rules.
    problems = rule_problems(
        settings_module.Settings._rules(),
        {**Settings().to_context(), "deviceAllocation": "dra", "kubernetesVersion": "1.33"},
        set(),
    )
    (problem,) = [p for p in problems if p.key == "deviceAllocation"]
    assert "needs Kubernetes 1.34 or later" in problem.message and problem.value == "dra"
    assert not [p for p in problems if p.key == "deviceAllocation" and p.value == "device-plugin"]


def test_a_claim_device_count_is_only_for_exact_requests():
    from kubernetes.client import V1DeviceClaim, V1DeviceRequest, V1DeviceSubRequest, V1ExactDeviceRequest

    def claim(*requests: V1DeviceRequest) -> V1DeviceClaim:
        return V1DeviceClaim(requests=list(requests))

    exact = V1DeviceRequest(name="gpus", exactly=V1ExactDeviceRequest(device_class_name="gpu", count=3))
    default = V1DeviceRequest(name="efa", exactly=V1ExactDeviceRequest(device_class_name="efa"))
    assert claim_device_count(claim(exact, default)) == 4  # a count left out is the API's default, 1
    every = V1DeviceRequest(name="all", exactly=V1ExactDeviceRequest(device_class_name="gpu", allocation_mode="All"))
    listed = V1DeviceRequest(name="any", first_available=[V1DeviceSubRequest(name="a", device_class_name="gpu")])
    for request in (every, listed):
        with pytest.raises(ValueError, match=f"device request '{request.name}' has no fixed count"):
            claim_device_count(claim(exact, request))
