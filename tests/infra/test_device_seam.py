"""Device allocation is a seam: the RayJob's workers ask for what the app installs on the GPU nodes. The device plugins
advertise nvidia.com/gpu and vpc.amazonaws.com/efa; the DRA drivers serve ResourceClaims. A job asking for the other
kind synthesized before and its workers were Pending until the deadline (issue 46); now synth fails naming
deviceAllocation and the construct. Real synths of a platform app on an imported cluster, one stack each."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Template

from ray_efa.core.addons import GPU_DEVICE_CLASS
from ray_efa.core.settings import Settings
from ray_efa.infra import EfaGpuNodegroup, GpuDevicePlugins, GpuDraDrivers, RayTrainingJob
from tests.infra.test_seams import _imported, _synth_errors
from tests.infra.test_workload import find

CKPT = "s3://ckpt-bucket/runs"  # a job on 2 GPU nodes needs shared storage (shared_storage_problem)


def _app(installed: type, allocation: str | None, *, job_first: bool = False):
    app, stack, vpc, cluster = _imported()
    gpu = EfaGpuNodegroup(stack, "Gpu", cluster=cluster, vpc=vpc)
    settings = Settings.from_context({"deviceAllocation": allocation} if allocation else {})

    def job() -> None:
        RayTrainingJob(stack, "Job", cluster=cluster, settings=settings, gpu_nodes=gpu, storage_path=CKPT)

    if job_first:  # the check runs at synth: the order the platform builds its constructs in does not matter
        job()
    installed(stack, "Devices", cluster=cluster, gpu_nodes=gpu)
    if not job_first:
        job()
    return app, stack


def test_dra_drivers_without_the_device_plugins_refuse_a_job_that_asks_for_nvidia_com_gpu():
    app, _ = _app(GpuDraDrivers, None, job_first=True)
    errors = _synth_errors(app)
    assert (
        "RayTrainingJob deviceAllocation: the settings say 'device-plugin', so the workers ask for nvidia.com/gpu"
        in errors
    )
    assert "GpuDraDrivers Platform/Devices" in errors and "Set deviceAllocation to dra" in errors


def test_device_plugins_refuse_a_job_whose_workers_claim_dra_devices():
    app, _ = _app(GpuDevicePlugins, "dra")
    errors = _synth_errors(app)
    assert f"the settings say 'dra', so the workers claim {GPU_DEVICE_CLASS}" in errors
    assert "GpuDevicePlugins Platform/Devices" in errors and "no GpuDraDrivers serves those claims" in errors


@pytest.mark.parametrize(("installed", "allocation"), [(GpuDevicePlugins, None), (GpuDraDrivers, "dra")])
def test_a_job_asking_for_what_is_installed_synthesizes(installed, allocation):
    app, stack = _app(installed, allocation)
    app.synth()
    _, _, ray_job = find(Template.from_stack(stack), "RayJob")
    worker = ray_job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    requests = worker["containers"][0]["resources"]["requests"]
    if allocation == "dra":
        assert "nvidia.com/gpu" not in requests and worker["resourceClaims"]
    else:
        assert int(requests["nvidia.com/gpu"]) >= 1 and int(requests["vpc.amazonaws.com/efa"]) >= 1
        assert "resourceClaims" not in worker
