"""The NCCL and libfabric environment of each inter-node network, as data.

One table, read by the RayCluster manifests (k8s/) and by the training driver, so that no environment value is typed
twice. "efa" is the production path (aws-ofi-nccl on the libfabric efa provider); "tcp" is the comparison run that
forces NCCL's own Socket transport on the same nodes, to measure what EFA buys.

Pure Python on purpose: the k8s charts import it outside the container and the job imports it inside.
"""

from __future__ import annotations

from ray_efa.core import catalog, perf
from ray_efa.core.settings import setting_choices

__all__ = ["NETWORKS", "network_env", "expected_transport", "POLL_INTERVAL_ENV", "RAY_DEFAULT_POLL_INTERVAL_S",
           "JOB_POLL_INTERVAL_S", "job_env", "TORCHAO_VERSION"]

NETWORKS: tuple[str, ...] = setting_choices("network")
"""The values the `network` setting allows (read from the settings, not repeated here)."""

# Both networks pin the pod interface (the image's nccl.conf only excludes docker0 and lo) and turn on the NCCL
# INFO log, because the transport gate reads that log to prove which transport carried the traffic.
# The caching allocator with expandable segments grows one mapping instead of stacking fixed blocks, so less memory
# sits reserved but unused; core.memory's plan is calibrated against reserved memory with it on (docs/BENCHMARKS.md).
_COMMON = {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}

_ENV: dict[str, dict[str, str]] = {
    # aws-ofi-nccl is the NCCL net plugin "ofi" (libnccl-net-ofi.so); FI_PROVIDER keeps libfabric on EFA.
    "efa": {"FI_PROVIDER": "efa", "NCCL_NET_PLUGIN": "ofi", **_COMMON},
    # NCCL_NET=Socket picks NCCL's internal TCP transport; NCCL_NET_PLUGIN=none stops the OFI plugin from loading at
    # all, and FI_PROVIDER=tcp overrides the image's efa default for anything else that opens libfabric.
    "tcp": {"NCCL_NET": "Socket", "FI_PROVIDER": "tcp", "NCCL_NET_PLUGIN": "none", **_COMMON},
}

# Ray Train v2's controller poll (ray/train/v2/_internal/constants.py; propagated driver -> controller -> workers)
POLL_INTERVAL_ENV = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"
RAY_DEFAULT_POLL_INTERVAL_S = 2.0
JOB_POLL_INTERVAL_S = 1.0  # the job's: training.reporting spaces reports by it


TORCHAO_VERSION = "0.18.0"  # precision fp8's, installed by the Ray pods' init container (k8s.pip_packages)


def job_env() -> dict[str, str]:
    """The job's environment on any network (RayJob runtime_env env_vars)."""
    return {POLL_INTERVAL_ENV: str(JOB_POLL_INTERVAL_S)}


# The transport the gate must see in the NCCL log for each network (training.transport's `expect` values).
_EXPECTED_TRANSPORT = {"efa": "efa", "tcp": "socket"}


def _check_network(network: str) -> None:
    if network not in NETWORKS:
        raise ValueError(f"network must be one of {', '.join(NETWORKS)}, got {network!r}")


def network_env(network: str, instance: catalog.InstanceType | str, *, placement_group: bool = True) -> dict[str, str]:
    """The environment variables every Ray worker needs for `network` ("efa" or "tcp") on `instance`.

    FI_EFA_USE_DEVICE_RDMA=1 is added only on EFA instances with GPUDirect RDMA (core.catalog.use_device_rdma);
    on g5/g6/g6e it aborts the ranks. "tcp" sets NCCL's sockets per connection (NCCL_SOCKET_NTHREADS x
    NCCL_NSOCKS_PERTHREAD, core.perf.socket_layout) from the primary card's bandwidth and EC2's per-flow limit, in a
    cluster placement group (`placement_group`) or not: in a pod NCCL would pick 1 socket a connection itself.
    `instance` is a catalog row or an instance type name.
    """
    _check_network(network)
    row = catalog.gpu_instance(instance) if isinstance(instance, str) else instance
    env = dict(_ENV[network])
    if network == "efa" and catalog.use_device_rdma(row):
        env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    if network == "tcp":
        env.update(perf.socket_layout(row, placement_group=placement_group).env())
    return env


def expected_transport(network: str) -> str:
    """The transport (an `expect` value of training.transport) that a run on `network` must show in its NCCL log."""
    _check_network(network)
    return _EXPECTED_TRANSPORT[network]
