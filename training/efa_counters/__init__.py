"""EFA hardware counters: the bytes each node's EFA devices really carried during training, a second witness to the logs.

The kernel's efa driver counts every device's traffic and exposes it in sysfs, one decimal number per file:

    /sys/class/infiniband/<device>/ports/<port>/hw_counters/{tx_bytes,rx_bytes,tx_pkts,rx_pkts,send_bytes,...}

Counter names: amzn-drivers kernel/linux/efa/src/efa_verbs.c, EFA_DEFINE_PORT_STATS (commit 64788ef7c182, driver
3.1.0), filled in efa_fill_port_stats from the device's basic, messages, RDMA read, RDMA write and network statistics
(efa_admin_cmds_defs.h: efa_admin_basic_stats ...). An EFA device is one whose driver is "efa" or whose PCI vendor is
0x1d0f (Amazon). The counters are the device's, shared by every process on the node: snapshot once per node, and
judge only the devices the job was given (its /dev/infiniband/uverbsN, mapped by
/sys/class/infiniband_verbs/uverbsN/ibdev), never another job's on the same node.

Where they can be read. The RDMA class is namespaced by network namespace (Linux drivers/infiniband/core/device.c,
ib_class's ns_type), and a pod's /sys is a sysfs mounted in the pod's namespace (fs/sysfs/mount.c
sysfs_init_fs_context tags the mount with the mounter's namespace): there the devices are compat copies, which
sysfs.c setup_port gives no hw_counters (`if (port_num && is_full_dev)`; a1ecb30f hides the device-level ones too).
A bind of the host's own sysfs keeps the host's (init) namespace view, so the worker pods mount the host's
/sys/class/infiniband and /sys/devices read-only under HOST_SYS (k8s.cluster_spec) and the reader prefers them.
Counters that cannot be read (no hw_counters, no tx_bytes/rx_bytes, a listing or a file refused) are "not visible"
and named, never zero: they neither confirm nor contradict the logs.

    before = take_snapshot("before", run=job_id)       # local rank 0 of each node, after the preflight
    ...train...
    after = take_snapshot("after", run=job_id, steps=n, predicted_bytes_per_step=b)
    # in a Ray Train worker: snapshot_ray_worker("before"), snapshot_ray_worker("after", steps=n, settings=s)
    verdict = judge([before, after, ...], expect="efa")  # one row per node: bytes sent/received vs predicted

Snapshots are JSON files (`write_snapshot`, `load_snapshots`); a bad file raises CounterFileError naming it. Pure
standard library, like training.transport: the job and the CLI both import it. Snapshot and the verdict (`judge`,
CounterVerdict) are training.efa_counters.counter_verdict's, exported here too.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray_efa.core import pod_env
from ray_efa.training.efa_counters.counter_verdict import (
    FORMAT,
    MIN_SHARE,
    REQUIRED_COUNTERS,
    CounterVerdict,
    NodeCounters,
    Snapshot,
    judge,
)

__all__ = [
    "PORT_COUNTERS",
    "SYSFS_ROOT",
    "VERBS_ROOT",
    "DEV_ROOT",
    "HOST_SYS",
    "HOST_SYS_FOLDERS",
    "FORMAT",
    "MIN_SHARE",
    "CounterFileError",
    "Snapshot",
    "SysfsRead",
    "Filesystem",
    "LOCAL",
    "NodeCounters",
    "CounterVerdict",
    "read_sysfs",
    "job_devices",
    "default_sysfs_root",
    "take_snapshot",
    "write_snapshot",
    "load_snapshot",
    "load_snapshots",
    "is_counter_file",
    "judge",
    "spool_dir",
    "snapshot_ray_worker",
    "read_spool",
    "predicted_bytes_per_step",
    "is_written_snapshot",
]


PORT_COUNTERS: tuple[str, ...] = (
    "tx_bytes",
    "tx_pkts",
    "rx_bytes",
    "rx_pkts",
    "rx_drops",
    "send_bytes",
    "send_wrs",
    "recv_bytes",
    "recv_wrs",
    "rdma_read_wrs",
    "rdma_read_bytes",
    "rdma_read_wr_err",
    "rdma_read_resp_bytes",
    "rdma_write_wrs",
    "rdma_write_bytes",
    "rdma_write_wr_err",
    "rdma_write_recv_bytes",
    "retrans_bytes",
    "retrans_pkts",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
)
"""The efa driver's per-port hardware counters (efa_verbs.c EFA_DEFINE_PORT_STATS). The names carry no prefix in any
driver version (amzn-drivers 030ef70, 2020, already has tx_bytes and rx_bytes); older drivers have fewer of them
(no send_*, rdma_* or retrans_*), which the reader skips."""

SYSFS_ROOT = Path("/sys/class/infiniband")
VERBS_ROOT = Path("/sys/class/infiniband_verbs")
"""uverbsN -> its device (`ibdev`). This class is not namespaced (drivers/infiniband/core/uverbs_main.c uverbs_class
has no ns_type), so the pod's own /sys answers for it."""
DEV_ROOT = Path("/dev/infiniband")
HOST_SYS = Path(pod_env.HOST_SYS)
"""Where the worker pods mount the host's /sys folders (core.pod_env.HOST_SYS_FOLDERS) read-only."""
HOST_SYS_FOLDERS = pod_env.HOST_SYS_FOLDERS
_AMAZON_VENDOR = "0x1d0f"
_MAX_FILE_BYTES = 4 << 20


class CounterFileError(ValueError):
    """A counter snapshot file that cannot be used: unreadable, not JSON, or with wrong fields (exit 2)."""

    def __init__(self, path: str | Path, message: str):
        super().__init__(f"{path}: {message}")
        self.filename: str = str(path)


def _list(path: Path) -> list[str]:
    return sorted(os.listdir(path))


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii", errors="replace").strip()


@dataclass(frozen=True, slots=True)
class Filesystem:
    """The reader's three filesystem calls, in one place. The tests replace one to fail as the kernel does for a
    container (EACCES on a listing or a file): chmod 000 on a temporary tree does not stop root."""

    listdir: Callable[[Path], list[str]] = _list
    read: Callable[[Path], str] = _read
    readlink: Callable[[Path], str] = os.readlink


LOCAL = Filesystem()


def _why(error: OSError) -> str:
    return error.strerror or type(error).__name__


@dataclass(frozen=True, kw_only=True, slots=True)
class SysfsRead:
    """What an infiniband sysfs class folder shows of its EFA devices."""

    devices: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    """EFA device -> port -> counters, for the devices whose tx_bytes and rx_bytes were read."""
    guids: dict[str, str] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    """EFA device -> why its counters are not visible here."""
    not_visible: str | None = None
    """The folder itself could not be listed."""
    problems: tuple[str, ...] = ()


def _is_efa(device: Path, fs: Filesystem) -> bool:
    try:  # a link read as text: in the host's view under HOST_SYS it points outside the mounted folders
        return os.path.basename(fs.readlink(device / "device" / "driver")) == "efa"
    except OSError:
        pass
    try:
        return fs.read(device / "device" / "vendor").lower() == _AMAZON_VENDOR
    except OSError:
        pass
    try:  # no PCI link (a copied tree): the efa driver's own counter names decide
        return any(
            "rdma_read_resp_bytes" in fs.listdir(device / "ports" / p / "hw_counters")
            for p in fs.listdir(device / "ports")
        )
    except OSError:
        return False


def _read_port(device: str, port: str, hw: Path, fs: Filesystem) -> tuple[dict[str, int], str | None, list[str]]:
    """(counters, why the port's traffic is not visible or None, problems) of one port's hw_counters folder."""
    try:
        present = set(fs.listdir(hw))
    except FileNotFoundError:
        return (
            {},
            (
                f"port {port} has no hw_counters ({hw.parent}): this namespace sees the device's compat copy, "
                "which the kernel gives no counters (drivers/infiniband/core/sysfs.c setup_port: only the full "
                "device of the host's network namespace has them)"
            ),
            [],
        )
    except OSError as error:
        return {}, f"cannot list {hw}: {_why(error)}", []
    counters: dict[str, int] = {}
    problems: list[str] = []
    for name in PORT_COUNTERS:
        if name not in present:
            if name in REQUIRED_COUNTERS:
                return {}, f"port {port} has no {name} in {hw} (an efa driver without port statistics?)", []
            continue  # counters an older driver or device lacks (rdma_write_* before RDMA write)
        try:
            text = fs.read(hw / name)
        except OSError as error:
            if name in REQUIRED_COUNTERS:
                return {}, f"cannot read {hw / name}: {_why(error)}", []
            problems.append(f"{device} port {port}: cannot read {name}: {_why(error)}")
            continue
        if not text.isdigit():
            problems.append(f"{device} port {port}: {name} is not a number: {text[:40]!r}")
            continue
        counters[name] = int(text)
    return counters, None, problems


def read_sysfs(root: Path = SYSFS_ROOT, *, fs: Filesystem = LOCAL) -> SysfsRead:
    """The EFA devices of an infiniband sysfs class folder: their counters where visible, else why not."""
    try:
        names = fs.listdir(root)
    except FileNotFoundError:
        return SysfsRead()  # no RDMA class at all: the node has no device (or the driver is not loaded)
    except OSError as error:
        return SysfsRead(not_visible=f"cannot list {root}: {_why(error)}")
    devices: dict[str, dict[str, dict[str, int]]] = {}
    guids: dict[str, str] = {}
    unreadable: dict[str, str] = {}
    problems: list[str] = []
    for name in names:
        device = root / name
        if not _is_efa(device, fs):
            continue
        try:
            guids[name] = fs.read(device / "node_guid")
        except OSError:
            guids[name] = ""
        try:
            port_names = fs.listdir(device / "ports")
        except OSError as error:
            unreadable[name] = f"cannot list {device / 'ports'}: {_why(error)}"
            continue
        if not port_names:
            unreadable[name] = f"{device / 'ports'} is empty"
            continue
        ports: dict[str, dict[str, int]] = {}
        for port in port_names:
            counters, hidden, found = _read_port(name, port, device / "ports" / port / "hw_counters", fs)
            if hidden is not None:
                unreadable[name] = hidden
                break
            ports[port], problems = counters, problems + found
        else:
            devices[name] = ports
    return SysfsRead(devices=devices, guids=guids, unreadable=unreadable, problems=tuple(problems))


def job_devices(
    dev_root: Path = DEV_ROOT, verbs_root: Path = VERBS_ROOT, *, fs: Filesystem = LOCAL
) -> tuple[tuple[str, ...], tuple[str, ...] | None, str | None]:
    """(the pod's uverbsN, their devices or None, why not) from /dev/infiniband and the infiniband_verbs class."""
    try:
        uverbs = tuple(sorted(n for n in fs.listdir(dev_root) if n.startswith("uverbs")))
    except OSError:
        return (), (), None  # no /dev/infiniband: the pod was given no RDMA device
    names: list[str] = []
    for verbs in uverbs:
        try:
            names.append(fs.read(verbs_root / verbs / "ibdev"))
        except OSError as error:
            return (
                uverbs,
                None,
                (
                    f"cannot tell which device /dev/infiniband/{verbs} is "
                    f"({verbs_root / verbs / 'ibdev'}: {_why(error)})"
                ),
            )
    return uverbs, tuple(sorted(set(names))), None


def default_sysfs_root() -> Path:
    """$RAY_EFA_SYSFS_ROOT, else the host's view where the pod mounts it (HOST_SYS/class/infiniband), else the pod's
    own /sys/class/infiniband."""
    if os.environ.get("RAY_EFA_SYSFS_ROOT"):
        return Path(os.environ["RAY_EFA_SYSFS_ROOT"])
    host = HOST_SYS / "class" / "infiniband"
    return host if host.is_dir() else SYSFS_ROOT


def take_snapshot(
    phase: str,
    *,
    run: str,
    root: Path = SYSFS_ROOT,
    dev_root: Path = DEV_ROOT,
    verbs_root: Path | None = None,
    devices: Iterable[str] | None = None,
    host: str | None = None,
    node_ip: str | None = None,
    steps: int | None = None,
    predicted_bytes_per_step: float | None = None,
    fs: Filesystem = LOCAL,
) -> Snapshot:
    """This node's EFA counters now. Never raises for what sysfs holds: what cannot be read is recorded.

    The job's devices are `devices` where given (a snapshot taken outside the pod), else the pod's uverbsN mapped
    through `verbs_root` (default: the infiniband_verbs folder beside `root`, else the pod's own VERBS_ROOT: the
    host's view under HOST_SYS mounts no infiniband_verbs, which needs none).
    """
    if phase not in ("before", "after"):
        raise ValueError(f"phase must be 'before' or 'after', got {phase!r}")
    root = Path(root)
    seen = read_sysfs(root, fs=fs)
    beside = root.parent / "infiniband_verbs"
    verbs = Path(verbs_root) if verbs_root is not None else beside if beside.is_dir() else VERBS_ROOT
    uverbs, mapped, unmapped = job_devices(Path(dev_root), verbs, fs=fs)
    if devices is not None:
        mapped, unmapped = tuple(sorted(set(devices))), None
    return Snapshot(
        phase=phase,
        run=run,
        host=host or socket.gethostname().split(".")[0],
        node_ip=node_ip,
        time_s=time.time(),
        devices=seen.devices,
        guids=seen.guids,
        uverbs=uverbs,
        problems=seen.problems,
        steps=steps,
        predicted_bytes_per_step=predicted_bytes_per_step,
        job_devices=mapped,
        unreadable=seen.unreadable,
        not_visible=seen.not_visible or unmapped,
        sysfs=str(root),
    )


def write_snapshot(snapshot: Snapshot, directory: Path) -> Path:
    """Write the snapshot as efa-counters-<host>-<phase>-<time>.json into `directory`; return the path."""
    directory.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-." else "_" for c in snapshot.host)
    path = directory / f"efa-counters-{safe}-{snapshot.phase}-{int(snapshot.time_s * 1e6)}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(snapshot.to_json(), sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # a reader never sees half a file
    return path


def is_counter_file(path: str | Path) -> bool:
    """A snapshot file by its name: efa-counters-*.json (what write_snapshot and the log collector write)."""
    name = Path(path).name
    return name.startswith("efa-counters-") and name.endswith(".json")


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def load_snapshot(path: str | Path) -> Snapshot:
    """Read one snapshot file; CounterFileError names the file and what is wrong with it."""
    path = Path(path)
    try:
        if path.stat().st_size > _MAX_FILE_BYTES:
            raise CounterFileError(path, f"larger than {_MAX_FILE_BYTES >> 20} MiB: not a counter snapshot")
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise CounterFileError(path, f"cannot read: {error.strerror or error}") from None
    except (UnicodeDecodeError, ValueError) as error:
        if isinstance(error, CounterFileError):
            raise
        raise CounterFileError(path, f"not JSON (cut short or not a counter snapshot): {error}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CounterFileError(path, f'not an EFA counter snapshot (no "format": "{FORMAT}")')
    if data.get("phase") not in ("before", "after"):
        raise CounterFileError(path, f"phase must be 'before' or 'after', got {data.get('phase')!r}")
    for key in ("run", "host"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise CounterFileError(path, f"{key} must be a non-empty string, got {data.get(key)!r}")
    stamp = data.get("time_s")
    if isinstance(stamp, bool) or not isinstance(stamp, (int, float)):
        raise CounterFileError(path, f"time_s must be a number, got {stamp!r}")
    devices = data.get("devices")
    if not isinstance(devices, dict):
        raise CounterFileError(path, f"devices must be an object, got {type(devices).__name__}")
    for device, ports in devices.items():
        if not isinstance(ports, dict):
            raise CounterFileError(path, f"devices.{device} must be an object of ports")
        for port, counters in ports.items():
            if not isinstance(counters, dict):
                raise CounterFileError(path, f"devices.{device}.{port} must be an object of counters")
            for name, value in counters.items():
                if not _int(value):
                    raise CounterFileError(
                        path, f"counter {device}/{port}/{name} must be a whole number >= 0, got {value!r}"
                    )
    steps, per_step = data.get("steps"), data.get("predicted_bytes_per_step")
    if steps is not None and not _int(steps):
        raise CounterFileError(path, f"steps must be a whole number >= 0 or null, got {steps!r}")
    if per_step is not None and (isinstance(per_step, bool) or not isinstance(per_step, (int, float)) or per_step < 0):
        raise CounterFileError(path, f"predicted_bytes_per_step must be a number >= 0 or null, got {per_step!r}")
    guids, uverbs, problems = data.get("guids", {}), data.get("uverbs", []), data.get("problems", [])
    if not (isinstance(guids, dict) and isinstance(uverbs, list) and isinstance(problems, list)):
        raise CounterFileError(path, "guids must be an object, uverbs and problems lists")
    # Added later, absent from older snapshots: the job's devices, and what could not be read.
    own, unreadable, hidden = data.get("job_devices"), data.get("unreadable", {}), data.get("not_visible")
    if own is not None and not (isinstance(own, list) and all(isinstance(d, str) for d in own)):
        raise CounterFileError(path, f"job_devices must be a list of device names or null, got {own!r}")
    if not (isinstance(unreadable, dict) and all(isinstance(v, str) for v in unreadable.values())):
        raise CounterFileError(path, f"unreadable must be an object of device -> reason, got {unreadable!r}")
    for key in ("not_visible", "sysfs"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise CounterFileError(path, f"{key} must be a string or null, got {data[key]!r}")
    return Snapshot(
        phase=data["phase"],
        run=data["run"],
        host=data["host"],
        node_ip=data.get("node_ip") or None,
        time_s=float(stamp),
        devices=devices,
        guids={str(k): str(v) for k, v in guids.items()},
        uverbs=tuple(str(u) for u in uverbs),
        problems=tuple(str(p) for p in problems),
        steps=steps,
        predicted_bytes_per_step=None if per_step is None else float(per_step),
        job_devices=None if own is None else tuple(own),
        unreadable=dict(unreadable),
        not_visible=hidden or None,
        sysfs=data.get("sysfs") or None,
        source=str(path),
    )


def load_snapshots(paths: Iterable[str | Path]) -> list[Snapshot]:
    """Snapshots from files and folders (a folder: its efa-counters-*.json files). CounterFileError on a bad one."""
    out: list[Snapshot] = []
    for path in map(Path, paths):
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if is_counter_file(p))
            if not files:
                raise CounterFileError(path, "holds no efa-counters-*.json snapshot")
            out += [load_snapshot(p) for p in files]
        else:
            out.append(load_snapshot(path))
    return out


def spool_dir(run: str) -> Path:
    """Where a node's snapshots of run `run` wait for the driver's collector (node-local temp, per job)."""
    safe = "".join(c if c.isalnum() else "_" for c in run) or "run"
    return Path(os.environ.get("RAY_EFA_COUNTERS_DIR") or Path(tempfile.gettempdir()) / "ray-efa-counters") / safe


def read_spool(run: str, max_files: int = 64) -> list[tuple[str, str]]:
    """(file name, text) of this node's spooled snapshots of `run`, newest last; for the driver's collector task."""
    folder = spool_dir(run)
    try:
        files = sorted((p for p in folder.iterdir() if is_counter_file(p)), key=lambda p: p.name)[-max_files:]
    except OSError:
        return []
    out = []
    for path in files:
        try:
            if path.stat().st_size <= _MAX_FILE_BYTES:
                out.append((path.name, path.read_text(encoding="utf-8", errors="replace")))
        except OSError:
            continue
    return out


def predicted_bytes_per_step(settings: Any) -> float:
    """Bytes each node sends (and receives) between nodes per optimizer step, from core.perf's collectives of what the
    job runs (core.strategy.choose: auto sharding and reduction dtype resolved)."""
    from ray_efa.core.strategy import choose

    return sum(c.wire_gb * 1e9 for c in choose(settings).prediction.collectives if c.link == "inter")


def snapshot_ray_worker(phase: str, *, steps: int | None = None, settings: Any = None) -> Path | None:
    """The hook of a Ray Train worker: local rank 0 of each node spools a snapshot of its node's EFA counters; other
    ranks, and runs whose process group is not NCCL (the local gloo run), do nothing. With `settings` and `steps` the
    after snapshot carries core.perf's predicted bytes, so that the gate can compare; without, the prediction is
    unknown (a user's own train function) and the counters only support the logs. Never raises."""
    try:
        import ray
        import ray.train
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized() and "nccl" in str(dist.get_backend())):
            return None
        if ray.train.get_context().get_local_rank() != 0:
            return None
        run, ip = ray.get_runtime_context().get_job_id(), ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - not in a Ray Train worker: nothing to snapshot for the gate
        return None
    per_step = None
    if settings is not None and steps is not None:
        try:
            per_step = predicted_bytes_per_step(settings)
        except Exception:  # noqa: BLE001 - no prediction is an honest "unknown", not a failure
            per_step = None
    try:
        # The counters from the host's view where the pod mounts it; the uverbsN -> device map from the pod's own /sys
        snap = take_snapshot(
            phase,
            run=run,
            node_ip=ip,
            steps=steps,
            predicted_bytes_per_step=per_step,
            root=default_sysfs_root(),
            verbs_root=VERBS_ROOT,
        )
        return write_snapshot(snap, spool_dir(run))
    except Exception as error:  # noqa: BLE001 - a failed snapshot is a missing witness, which the gate names
        print(f"efa counters: could not snapshot ({phase}): {error}", flush=True)
        return None


def is_written_snapshot(path: Path) -> bool:
    """A snapshot file this module wrote (its name and format), so that a later run may replace it."""
    if not (is_counter_file(path) and path.is_file()):
        return False
    try:
        with path.open("rb") as f:
            head = f.read(_MAX_FILE_BYTES + 1)
        return len(head) <= _MAX_FILE_BYTES and json.loads(head).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def main(argv: list[str] | None = None) -> int:
    """`python -m ray_efa.training.efa_counters snapshot --phase before|after --out DIR [...]`: one node's snapshot
    from a shell, for jobs that do not run this project's driver (torchrun, a PyTorchJob, HyperPod): run it once per
    node before and after training, then `ray-efa check-transport --counters DIR LOG...`. Outside the job's
    container (a host shell, a DaemonSet) name the job's devices with --devices: the node's others are not its."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m ray_efa.training.efa_counters", description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot", help="write this node's EFA counters to DIR")
    snap.add_argument("--phase", choices=("before", "after"), required=True)
    snap.add_argument(
        "--out", type=Path, required=True, help="folder to write efa-counters-<host>-<phase>-<time>.json in"
    )
    snap.add_argument(
        "--run",
        default=os.environ.get("RAY_EFA_RUN", "run"),
        help="a name shared by the job's snapshots (default $RAY_EFA_RUN or 'run')",
    )
    snap.add_argument("--steps", type=int, help="after: optimizer steps since the before snapshot")
    snap.add_argument(
        "--predicted-bytes-per-step",
        type=float,
        help="after: bytes each node sends (and receives) between nodes per step",
    )
    snap.add_argument(
        "--sysfs-root",
        type=Path,
        default=None,
        help=f"the infiniband class folder to read (default $RAY_EFA_SYSFS_ROOT, else "
        f"{HOST_SYS}/class/infiniband where mounted, else {SYSFS_ROOT})",
    )
    snap.add_argument("--dev-root", type=Path, default=DEV_ROOT, help="where the pod's uverbs device files are")
    snap.add_argument(
        "--verbs-root",
        type=Path,
        default=None,
        help="the infiniband_verbs class folder that maps each uverbsN to its device (default: the one "
        f"beside --sysfs-root, else {VERBS_ROOT})",
    )
    snap.add_argument(
        "--devices",
        type=lambda text: [d for d in text.split(",") if d],
        help="the job's EFA devices, comma-separated (e.g. rdmap16s27): for a snapshot taken outside the "
        "job's pod (a host shell, a DaemonSet), whose own uverbs devices are not the job's",
    )
    args = parser.parse_args(argv)
    for name in ("steps", "predicted_bytes_per_step"):
        value = getattr(args, name)
        if value is not None and not value >= 0:
            print(f"{parser.prog}: --{name.replace('_', '-')} must be >= 0, got {value!r}", file=sys.stderr)
            return 2
    try:
        snapshot = take_snapshot(
            args.phase,
            run=args.run,
            root=args.sysfs_root or default_sysfs_root(),
            dev_root=args.dev_root,
            verbs_root=args.verbs_root,
            devices=args.devices,
            steps=args.steps,
            predicted_bytes_per_step=args.predicted_bytes_per_step,
        )
        path = write_snapshot(snapshot, args.out)
    except OSError as error:
        print(f"{parser.prog}: cannot write to {args.out}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
