"""The Deep Learning Container's own startup, run where KubeRay starts Ray: CUDA forward compatibility.

The AWS Ray Train DLC's ENTRYPOINT (aws/deep-learning-containers, scripts/docker/ray-train/entrypoint.sh, installed as
/usr/local/bin/entrypoint.sh by docker/ray-train/Dockerfile.cuda) puts the image's CUDA forward-compatibility driver
libraries first on LD_LIBRARY_PATH when the host's NVIDIA driver is older than the one they come from
(/usr/local/cuda/compat/libcuda.so.1 -> libcuda.so.<driver>), then execs the command. KubeRay never runs it: it
replaces the Ray container's command with `/bin/bash -c -- "<args> && ulimit ...; ray start ..."`
(ray-project/kuberay ray-operator/controllers/ray/common/pod.go, BuildPod, v1.4.0 and v1.7.0 alike: the container's
own command and args are kept in front of the generated `ray start`, joined by `&&`, unless they say `ray start`
themselves). So the GPU workers' container args are that same check, in the same shell as `ray start`: Ray and every
worker process it starts inherit the LD_LIBRARY_PATH. Without it, a host driver older than the image's CUDA (13.0
needs driver 580) fails every rank at CUDA initialization, late and with CUDA's words only.

The check is the entrypoint's, byte for byte in effect: only when the compat library exists, the host driver is known
(/proc/driver/nvidia/version, else nvidia-smi) and is strictly older than the compat library's. It says what it did on
the container's log. On an image without /usr/local/cuda/compat it does nothing.
"""

from __future__ import annotations

__all__ = ["COMPAT_DIR", "cuda_compat_setup"]

COMPAT_DIR = "/usr/local/cuda/compat"
_DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"


def cuda_compat_setup(compat_dir: str = COMPAT_DIR, driver_version_file: str = _DRIVER_VERSION_FILE) -> str:
    """A bash command (one line, exit status 0) that exports LD_LIBRARY_PATH=<compat_dir>:... when the host driver is
    older than the image's CUDA forward-compatibility driver, as the DLC's entrypoint does. The paths are parameters
    for the tests; the pods use the defaults."""
    return (
        f'compat="{compat_dir}/libcuda.so.1"; '
        'if [ -f "$compat" ]; then '
        '  image_driver=$(readlink "$compat" | cut -d. -f3-); '
        f"  host_driver=$(sed -n 's/^NVRM.*Kernel Module *\\([0-9.]*\\).*$/\\1/p' {driver_version_file} 2>/dev/null); "
        '  [ -n "$host_driver" ] || host_driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader --id=0 2>/dev/null); '
        '  if [ -n "$host_driver" ] && [ -n "$image_driver" ] && [ "$host_driver" != "$image_driver" ] '
        '     && [ "$(printf \'%s\\n%s\\n\' "$host_driver" "$image_driver" | sort -V | head -n1)" = "$host_driver" ]; then '
        f'    export LD_LIBRARY_PATH="{compat_dir}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"; '
        '    echo "ray-efa: host NVIDIA driver $host_driver is older than the image CUDA driver $image_driver: '
        f'CUDA forward compatibility on ({compat_dir} first on LD_LIBRARY_PATH)"; '
        "  fi; "
        "fi"
    )
