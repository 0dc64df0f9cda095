"""The pods' environment, as data: the NCCL and libfabric variables of each inter-node network, the job's own
variables, the NCCL log the transport gate needs, and where the pods see the host's EFA devices.

One table, read by the RayCluster manifests (k8s/), by the training driver and by the transport gate (training/), so
that no environment value is typed twice. "efa" is the production path (aws-ofi-nccl on the libfabric efa provider);
"tcp" is the comparison run that forces NCCL's own Socket transport on the same nodes, to measure what EFA buys.

In core/ on purpose: the k8s charts import it outside the container and the job imports it inside.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from ray_efa.core import catalog, perf
from ray_efa.core.settings import setting_choices
from ray_efa.core.settings.checks import GATE_LOG_SUBSYSTEMS

__all__ = [
    "NETWORKS",
    "network_env",
    "expected_transport",
    "POLL_INTERVAL_ENV",
    "RAY_DEFAULT_POLL_INTERVAL_S",
    "JOB_POLL_INTERVAL_S",
    "job_env",
    "TORCHAO_VERSION",
    "GATE_LOG_ENV",
    "GATE_LOG_SUBSYSTEMS",
    "HOST_SYS",
    "HOST_SYS_FOLDERS",
]

NETWORKS: tuple[str, ...] = setting_choices("network")
"""The values the `network` setting allows (read from the settings, not repeated here)."""

GATE_LOG_ENV = {"NCCL_DEBUG": "INFO"}
"""The NCCL log the transport gate (training.transport) reads to prove which transport carried the traffic: INFO
lines. Every network's environment sets it."""
# GATE_LOG_SUBSYSTEMS (INIT, NET): the NCCL_DEBUG_SUBSYS subsystems whose INFO lines name the network and the
# channels (core.settings.checks, which refuses an ncclDebugSubsys without them). NCCL does not log every subsystem by
# default: 2.29's default is INIT, BOOTSTRAP and ENV (src/debug.cc, ncclDebugInit), and the gate's lines come through
# it because NCCL logs each of them under INIT (the channel and plugin lines as INIT|NET). The pods get NCCL's
# default unless the ncclDebugSubsys setting names one (network_env).

# Both networks pin the pod interface (the image's nccl.conf only excludes docker0 and lo) and turn on the gate's log.
# The caching allocator with expandable segments grows one mapping instead of stacking fixed blocks, so less memory
# sits reserved but unused; core.memory's plan is calibrated against reserved memory with it on (docs/BENCHMARKS.md).
_COMMON = {"NCCL_SOCKET_IFNAME": "eth0", **GATE_LOG_ENV, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}

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

HOST_SYS = PurePosixPath("/host/sys")
"""Where the worker pods mount folders of the host's /sys read-only (k8s.cluster_spec.worker_template), for the EFA
counters (training.efa_counters) that the pod's own /sys cannot show."""
HOST_SYS_FOLDERS = ("class/infiniband", "devices")
"""The host's sysfs folders the pods mount under HOST_SYS: the class's links and the device folders they point to
(relative links, `../../devices/...`, that resolve inside HOST_SYS). Neither has a mount below it, so readOnly makes
all of it read-only (a hostPath of all of /sys would leave its submounts, cgroup among them, writable)."""


def job_env() -> dict[str, str]:
    """The job's environment on any network (RayJob runtime_env env_vars)."""
    return {POLL_INTERVAL_ENV: str(JOB_POLL_INTERVAL_S)}


# The transport the gate must see in the NCCL log for each network (training.transport's `expect` values).
_EXPECTED_TRANSPORT = {"efa": "efa", "tcp": "socket"}


def _check_network(network: str) -> None:
    if network not in NETWORKS:
        raise ValueError(f"network must be one of {', '.join(NETWORKS)}, got {network!r}")


def network_env(
    network: str, instance: catalog.InstanceType | str, *, placement_group: bool = True, debug_subsys: str | None = None
) -> dict[str, str]:
    """The environment variables every Ray worker needs for `network` ("efa" or "tcp") on `instance`.

    FI_EFA_USE_DEVICE_RDMA=1 is added only on EFA instances with GPUDirect RDMA (core.catalog.use_device_rdma);
    on g5/g6/g6e it aborts the ranks. "tcp" sets NCCL's sockets per connection (NCCL_SOCKET_NTHREADS x
    NCCL_NSOCKS_PERTHREAD, core.perf.socket_layout) from the primary card's bandwidth and EC2's per-flow limit, in a
    cluster placement group (`placement_group`) or not: in a pod NCCL would pick 1 socket a connection itself.
    `instance` is a catalog row or an instance type name. `debug_subsys` (the ncclDebugSubsys setting, checked there)
    becomes NCCL_DEBUG_SUBSYS; None leaves NCCL's default.
    """
    _check_network(network)
    row = catalog.gpu_instance(instance) if isinstance(instance, str) else instance
    env = dict(_ENV[network])
    if network == "efa" and catalog.use_device_rdma(row):
        env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    if network == "tcp":
        env.update(perf.socket_layout(row, placement_group=placement_group).env())
    if debug_subsys is not None:
        env["NCCL_DEBUG_SUBSYS"] = debug_subsys
    return env


def expected_transport(network: str) -> str:
    """The transport (an `expect` value of training.transport) that a run on `network` must show in its NCCL log."""
    _check_network(network)
    return _EXPECTED_TRANSPORT[network]
