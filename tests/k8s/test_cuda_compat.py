"""The DLC's CUDA forward-compatibility setup in the GPU workers (k8s.cuda_compat), run by a real bash as KubeRay
composes the container command (ray-operator/controllers/ray/common/pod.go: `/bin/bash -c -- "<args> && <ulimit>;
<ray start>"`), with a fake compat library and a fake /proc/driver/nvidia/version in a temporary directory."""

from __future__ import annotations

import subprocess

import pytest

from ray_efa.core.settings import Settings
from ray_efa.k8s.cuda_compat import cuda_compat_setup
from ray_efa.k8s.objects import ray_job_objects

IMAGE_DRIVER = "580.95.05"  # what the CUDA 13.0 compat package's libcuda.so.1 points at


def kuberay_command(args: list[str], generated: str) -> list[str]:
    """KubeRay's BuildPod: the container's args (each wrapped in spaces) && the generated command."""
    cmd = "".join(f" {a} " for a in args)
    return ["/bin/bash", "-c", "--", f"{cmd} && {generated}"]


def run(tmp_path, host_driver: str | None, with_compat: bool = True) -> subprocess.CompletedProcess:
    compat = tmp_path / "compat"
    if with_compat:
        compat.mkdir()
        (compat / f"libcuda.so.{IMAGE_DRIVER}").write_text("")
        (compat / "libcuda.so.1").symlink_to(f"libcuda.so.{IMAGE_DRIVER}")
    version = tmp_path / "version"
    if host_driver:
        version.write_text(
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {host_driver}  Release Build  (dvs-builder)\n"
        )
    setup = cuda_compat_setup(compat_dir=str(compat), driver_version_file=str(version))
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/amazon/efa/lib"}  # no nvidia-smi on PATH here
    return subprocess.run(
        kuberay_command([setup], 'echo "ray start sees LD_LIBRARY_PATH=$LD_LIBRARY_PATH"'),
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )


@pytest.mark.parametrize(
    "host_driver, compat_first",
    [
        ("570.172.08", True),  # older than the image's CUDA driver: forward compatibility on
        ("535.247.01", True),
        (IMAGE_DRIVER, False),  # the same driver: the host's own
        ("580.105.08", False),  # newer: the host's own
        (None, False),  # driver unknown (no /proc/driver/nvidia, no nvidia-smi): nothing to decide
    ],
)
def test_ray_start_runs_with_the_compat_libraries_exactly_when_the_host_driver_is_older(
    tmp_path, host_driver, compat_first
):
    result = run(tmp_path, host_driver)
    assert result.returncode == 0, result.stderr
    seen = result.stdout.strip().splitlines()[-1]
    assert seen.startswith("ray start sees LD_LIBRARY_PATH=")
    assert (seen == f"ray start sees LD_LIBRARY_PATH={tmp_path}/compat:/opt/amazon/efa/lib") is compat_first
    if compat_first:
        assert f"host NVIDIA driver {host_driver} is older than the image CUDA driver {IMAGE_DRIVER}" in result.stdout


def test_an_image_without_compat_libraries_starts_ray_unchanged(tmp_path):
    result = run(tmp_path, "535.247.01", with_compat=False)
    assert result.returncode == 0 and result.stdout.strip() == "ray start sees LD_LIBRARY_PATH=/opt/amazon/efa/lib"


def test_the_gpu_workers_run_it_before_ray_start_and_keep_kuberays_command():
    job = ray_job_objects(Settings())[-1]
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    # args only: KubeRay keeps them in front of its generated `ray start`; a command or "ray start" in them would
    # make KubeRay leave the command alone
    assert worker["args"] == [cuda_compat_setup()] and "command" not in worker
    assert "ray start" not in worker["args"][0]
