"""Make the real NCCL log fixtures of tests/training/fixtures/nccl/real/ on a machine with 2 GPUs.

    python tools/make_nccl_fixtures.py OUT_DIR

Each variant runs a few all-reduces between 2 processes with NCCL_DEBUG=INFO and keeps what NCCL printed:
  nvlink               plain torchrun: NVLink (P2P) inside one node, the network never used
  socket               NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: the channels go via NET/Socket
  ofi_missing          NCCL_NET_PLUGIN=ofi with no plugin installed, plus P2P/SHM off: "Could not find: ofi
                       libnccl-net-ofi.so", then Socket, silently
  two_hosts_socket     NCCL_HOSTID differs per rank, so NCCL sees 2 nodes (nNodes 2) and sends over NET/Socket:
                       what a multi-node job that lost EFA looks like
  two_hosts_ofi_missing  the same with NCCL_NET_PLUGIN=ofi and no plugin: the silent fallback of a multi-node job
  ray_nvlink           the all-reduce through Ray Train (TorchTrainer, 2 GPU workers): the driver's output with
                       "(RayTrainWorker pid=N, ip=...)" prefixes, and the workers' session log files
  ray_socket           the same with P2P and SHM off: NET/Socket channels, through Ray
NVLink multicast stays off (NCCL_NVLS_ENABLE=0), as the device machine requires.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ALLREDUCE = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.ones(64 << 20, device="cuda")
    for _ in range(3):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    assert x[0].item() == dist.get_world_size() ** 3  # three all-reduces of ones
    dist.destroy_process_group()
""")

VARIANTS = {
    "nvlink": {},
    "socket": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
    "ofi_missing": {"NCCL_NET_PLUGIN": "ofi", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
}

BASE_ENV = {
    "NCCL_DEBUG": "INFO",
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def torchrun(out: Path, name: str, env: dict[str, str], script: Path) -> None:
    log = out / f"{name}.log"
    with log.open("w") as sink:
        subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)],
            env={**os.environ, **BASE_ENV, **env},
            stdout=sink,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=240,
        )
    print(f"{name}: {sum(1 for _ in log.open())} lines")


def two_hosts_script(out: Path) -> Path:
    # NCCL_HOSTID must differ per rank, and torchrun sets the same env for both: set it before NCCL initializes.
    script = out / "_two_hosts.py"
    script.write_text('import os\nos.environ["NCCL_HOSTID"] = "fake-host-" + os.environ["LOCAL_RANK"]\n' + ALLREDUCE)
    return script


def ray_train(out: Path, name: str, env: dict[str, str]) -> None:
    """A Ray Train run of the same all-reduce; the driver output carries the forwarded, prefixed worker lines."""
    driver = out / f"_{name}_driver.py"
    driver.write_text(
        textwrap.dedent(f"""
        import os, ray, torch, torch.distributed as dist
        from ray.train import ScalingConfig
        from ray.train.torch import TorchTrainer

        def loop(config):
            x = torch.ones(64 << 20, device="cuda")
            for _ in range(3):
                dist.all_reduce(x)
            torch.cuda.synchronize()

        ray.init(include_dashboard=False, runtime_env={{"env_vars": {dict(BASE_ENV, **env)!r}}})
        TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2, use_gpu=True)).fit()
    """)
    )
    log = out / f"{name}.log"
    with log.open("w") as sink:
        subprocess.run(
            [sys.executable, str(driver)],
            env={**os.environ, **BASE_ENV, **env},
            stdout=sink,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=300,
        )
    sessions = sorted(glob.glob("/tmp/ray/session_*/logs"), key=os.path.getmtime)
    worker_dir = out / f"{name}_worker_logs"
    worker_dir.mkdir(exist_ok=True)
    for path in glob.glob(f"{sessions[-1]}/worker-*"):
        if os.path.getsize(path) and "NCCL" in Path(path).read_text(errors="replace"):
            shutil.copy(path, worker_dir)
    print(
        f"{name}: {sum(1 for _ in log.open())} driver lines, {len(list(worker_dir.iterdir()))} worker logs with NCCL lines"
    )


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    plain = out / "_allreduce.py"
    plain.write_text(ALLREDUCE)
    for name, env in VARIANTS.items():
        torchrun(out, name, env, plain)
    torchrun(out, "two_hosts_socket", {}, two_hosts_script(out))
    torchrun(out, "two_hosts_ofi_missing", {"NCCL_NET_PLUGIN": "ofi"}, two_hosts_script(out))
    ray_train(out, "ray_nvlink", {})
    ray_train(out, "ray_socket", VARIANTS["socket"])
    for helper in out.glob("_*.py"):
        helper.unlink()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
