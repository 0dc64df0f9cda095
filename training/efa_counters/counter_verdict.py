"""A node's EFA counters at one moment (Snapshot), and the verdict on a job's snapshots (training.efa_counters
reads and writes them): per node, the bytes its EFA devices carried between the "before" and "after" snapshots
against the bytes the run predicted, and the job's verdict from the nodes.

    verdict = judge([before, after, ...], expect="efa")  # one row per node: bytes sent/received vs predicted

EFA expected: a node whose devices carried less than MIN_SHARE of the predicted bytes fails; a TCP run whose EFA
devices were busy fails too; counters that cannot be read, were reset or belong to another node prove nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from ray_efa.core.pod_env import HOST_SYS

REQUIRED_COUNTERS = ("tx_bytes", "rx_bytes")
"""All bytes the device put on and took off the wire (efa_admin_basic_stats): what the verdict compares."""
FORMAT = "ray-efa/efa-counters/1"
MIN_SHARE = 0.10
"""EFA expected: a node whose devices carried less than this share of the predicted bytes fails the gate."""
_MOVED_BYTES = 64 << 20
"""With no prediction, this many bytes each way count as "EFA carried traffic" (a training step sends far more)."""
_UNREADABLE = "counters not readable here: "
_FIX = (
    f"the worker pods of this project read the host's view, {HOST_SYS}/class/infiniband (a read-only hostPath, "
    "k8s/cluster_spec.py); elsewhere mount the host's /sys/class/infiniband and /sys/devices read-only the same "
    "way, or snapshot on the host naming the job's devices (--devices)"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Snapshot:
    """One node's EFA counters at one moment."""

    phase: str
    """"before" or "after" training."""
    run: str
    """The job the snapshot belongs to (the Ray job id), so that one folder's snapshots of two runs are not mixed."""
    host: str
    node_ip: str | None
    time_s: float
    devices: dict[str, dict[str, dict[str, int]]]
    """EFA device -> port -> counter -> value, for every EFA device whose tx_bytes and rx_bytes could be read."""
    guids: dict[str, str]
    """EFA device -> node_guid, to tell a device of another node. The efa driver reports one only from amzn-drivers
    2.12.0 (d22dfde "Add support for node guid"); before, every device reads 0000:0000:0000:0000, and the check
    cannot tell nodes apart."""
    uverbs: tuple[str, ...]
    """/dev/infiniband/uverbs* in the pod: the EFA devices the pod was given (vpc.amazonaws.com/efa)."""
    problems: tuple[str, ...] = ()
    """What could not be read of a device that was read (a counter that is not a number, a refused optional one)."""
    steps: int | None = None
    """Optimizer steps between the before snapshot and this one (after only; None where not known)."""
    predicted_bytes_per_step: float | None = None
    """Bytes core.perf predicts each node sends (and receives) between nodes per step (after only)."""
    job_devices: tuple[str, ...] | None = None
    """The job's EFA devices, by name: the pod's uverbsN mapped to their devices, or the --devices a snapshot from the
    host side was given. None: not known (a snapshot of an older version), so every EFA device of the node counts."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """EFA device -> why its counters are not visible here (no hw_counters, no tx_bytes, permission denied)."""
    not_visible: str | None = None
    """Why no counter of this node can be judged here (the class listing refused, a uverbsN that names no device)."""
    sysfs: str | None = None
    """The sysfs class folder read (the host's view under HOST_SYS, or the pod's own /sys/class/infiniband)."""
    source: str | None = None
    """The file it was read from."""

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "phase": self.phase,
            "run": self.run,
            "host": self.host,
            "node_ip": self.node_ip,
            "time_s": self.time_s,
            "devices": self.devices,
            "guids": self.guids,
            "uverbs": list(self.uverbs),
            "problems": list(self.problems),
            "steps": self.steps,
            "predicted_bytes_per_step": self.predicted_bytes_per_step,
            "job_devices": None if self.job_devices is None else list(self.job_devices),
            "unreadable": self.unreadable,
            "not_visible": self.not_visible,
            "sysfs": self.sysfs,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeCounters:
    """One node's EFA traffic during training, judged."""

    host: str
    run: str
    devices: int
    sent_bytes: int | None
    received_bytes: int | None
    predicted_bytes: float | None
    """Per direction, for the steps between the snapshots (None: no prediction)."""
    steps: int | None
    status: str
    """"pass", "LOW" (fail), "EFA moved" (fail: a TCP run), "no EFA device" (fail if EFA expected, else fine),
    "moved" / "idle" (no prediction to compare), "no traffic predicted", "not judged" (IB expected), "superseded" (a
    node of an attempt Ray Train restarted away from), "not visible" (the job's counters cannot be read where the
    snapshot was taken: neither proof nor contradiction), or a named problem that can never pass: "incomplete",
    "reset", "mismatch", "foreign"."""
    detail: str
    fails: bool = False
    """The counters contradict the expected transport on this node."""
    files: tuple[str, ...] = ()

    @property
    def share(self) -> float | None:
        if not self.predicted_bytes or self.sent_bytes is None or self.received_bytes is None:
            return None
        return min(self.sent_bytes, self.received_bytes) / self.predicted_bytes


_BAD = ("incomplete", "reset", "mismatch", "foreign")
NOT_VISIBLE = "not visible"


@dataclass(frozen=True, kw_only=True, slots=True)
class CounterVerdict:
    """The counters' side of the gate: one row per node; `exit_code` 0 proven, 1 contradicted, 3 nothing proven."""

    expect: str
    nodes: tuple[NodeCounters, ...]
    exit_code: int
    summary: str
    notes: tuple[str, ...] = ()

    @property
    def failed(self) -> tuple[NodeCounters, ...]:
        return tuple(n for n in self.nodes if n.fails)

    @property
    def bad(self) -> tuple[NodeCounters, ...]:
        return tuple(n for n in self.nodes if n.status in _BAD)

    def render_table(self, width: int | None = None) -> str:
        """One row per node; past `width` columns (an 80-column CI log) each node becomes a block of lines instead."""
        import textwrap

        header = ("NODE", "EFA", "SENT", "RECEIVED", "PREDICTED", "SHARE", "VERDICT")
        rows = [header] + [
            (
                n.host,
                str(n.devices),
                _bytes(n.sent_bytes),
                _bytes(n.received_bytes),
                _bytes(n.predicted_bytes)
                + (f" ({n.steps} steps)" if n.predicted_bytes is not None and n.steps else ""),
                "-" if n.share is None else f"{n.share:.0%}",
                n.status,
            )
            for n in self.nodes
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        if width is not None and max(map(len, lines)) > width:
            lines = []
            for r in rows[1:]:
                lines += [
                    f"{r[0]}  {r[6]}",
                    f"  EFA devices {r[1]}; sent {r[2]}; received {r[3]}",
                    f"  predicted {r[4]}; share {r[5]}",
                ]
        wrap = max(20, width or 10**6)
        for n in self.nodes:
            if n.detail:
                lines += textwrap.wrap(
                    f"{n.host}: {n.detail}",
                    width=wrap,
                    initial_indent="  ",
                    subsequent_indent="    ",
                    break_long_words=False,
                    break_on_hyphens=False,
                )
        return "\n".join(["EFA hardware counters during training (bytes per node, each way; EFA = devices):", *lines])

    def to_json(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "summary": self.summary,
            "notes": list(self.notes),
            "nodes": [
                {
                    "host": n.host,
                    "run": n.run,
                    "efa_devices": n.devices,
                    "sent_bytes": n.sent_bytes,
                    "received_bytes": n.received_bytes,
                    "predicted_bytes": n.predicted_bytes,
                    "steps": n.steps,
                    "share": n.share,
                    "status": n.status,
                    "fails": n.fails,
                    "detail": n.detail,
                    "files": list(n.files),
                }
                for n in self.nodes
            ],
        }


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{int(value)} B"


def _not_visible(snapshot: Snapshot, names: list[str]) -> str | None:
    """Why the counters of the devices `names` cannot be judged from this snapshot, or None."""
    if snapshot.not_visible is not None:
        return snapshot.not_visible
    for name in names:
        if name in snapshot.unreadable:
            return f"{name} {snapshot.unreadable[name]}"
        if name not in snapshot.devices:
            return f"the job's device {name} is not in {snapshot.sysfs or 'the sysfs tree read'}"
    return None


def _node(
    host: str,
    run: str,
    befores: list[Snapshot],
    afters: list[Snapshot],
    expect: str,
    predicted_override: float | None,
    log_hosts: frozenset[str],
) -> NodeCounters:
    files = tuple(s.source or "" for s in befores + afters)

    def row(status: str, detail: str, **kw: Any) -> NodeCounters:
        base: dict[str, Any] = {
            "devices": 0,
            "sent_bytes": None,
            "received_bytes": None,
            "predicted_bytes": None,
            "steps": None,
        }
        fails = status in ("LOW", "EFA moved") or (status == "no EFA device" and expect == "efa")
        return NodeCounters(
            host=host, run=run, status=status, detail=detail, files=files, fails=fails, **{**base, **kw}
        )

    if log_hosts and host not in log_hosts:
        return row(
            "foreign",
            f"no NCCL process of the logs ran on host {host} (logs name {', '.join(sorted(log_hosts)[:4])}): "
            "these counters are of another node or job",
        )
    if not afters:
        return row(
            "incomplete", "a 'before' snapshot without an 'after' one (training did not end, or the file is missing)"
        )
    after = max(afters, key=lambda s: s.time_s)
    earlier = [b for b in befores if b.time_s <= after.time_s]
    if not earlier:
        return row("incomplete", "an 'after' snapshot without an earlier 'before' one")
    before = max(earlier, key=lambda b: b.time_s)
    if not any(s.devices or s.unreadable or s.not_visible for s in (before, after)):
        pod = "the node has no EFA device in /sys/class/infiniband (an instance without EFA, or the efa driver not loaded)"
        if expect == "efa":
            return row("no EFA device", f"EFA expected, but {pod}")
        return row("no EFA device", pod)
    given = after.job_devices if after.job_devices is not None else after.uverbs
    if expect == "efa" and not given:  # known whatever sysfs shows: the pod's /dev/infiniband holds no uverbs
        return row(
            "no EFA device",
            "EFA expected, but the pod was given no EFA device (no /dev/infiniband/uverbs*): "
            "request vpc.amazonaws.com/efa (a snapshot taken outside the pod names the job's devices: "
            "--devices)",
            devices=len(after.devices),
        )
    # Only the job's own devices: another job's traffic on the same node proves nothing about this one.
    names = sorted(after.job_devices if after.job_devices is not None else set(after.devices) | set(after.unreadable))
    count = {"devices": len(names)}
    hidden = _not_visible(before, names) or _not_visible(after, names)
    if hidden is not None:
        return row(NOT_VISIBLE, f"{_UNREADABLE}{hidden}; {_FIX}", **count)
    if before.job_devices is not None and after.job_devices is not None and set(before.job_devices) != set(names):
        return row(
            "mismatch",
            f"the job's EFA devices changed between the snapshots ({sorted(before.job_devices)} vs {names})",
            **count,
        )
    if (after.job_devices is None and set(before.devices) != set(after.devices)) or any(
        before.guids.get(d) != after.guids.get(d) for d in names
    ):
        return row(
            "mismatch",
            f"the before and after snapshots are of different devices ({sorted(before.devices)} "
            f"vs {sorted(after.devices)}, by name and node_guid): from another node?",
            **count,
        )
    moved = _bytes_moved(before, after, names)
    if isinstance(moved, _Problem):
        return row(moved.status, moved.detail, **count)
    sent, received = moved
    steps = after.steps
    predicted = predicted_override
    if predicted is None and steps is not None and after.predicted_bytes_per_step is not None:
        predicted = steps * after.predicted_bytes_per_step
    seen = {
        "devices": len(names),
        "sent_bytes": sent,
        "received_bytes": received,
        "predicted_bytes": predicted,
        "steps": steps,
    }
    status, detail = _amount_verdict(expect, min(sent, received), predicted, steps)
    return row(status, detail, **seen)


class _Problem(NamedTuple):
    """Why a node's counters cannot be compared: its row's status and detail."""

    status: str
    detail: str


def _bytes_moved(before: Snapshot, after: Snapshot, names: list[str]) -> tuple[int, int] | _Problem:
    """(sent, received) bytes of the devices `names` between the snapshots, summed over their ports; or why not."""
    sent = received = 0
    for device in names:
        for port, counters in after.devices[device].items():
            old = before.devices[device].get(port)
            if old is None:
                return _Problem("mismatch", f"port {port} of {device} is only in the after snapshot")
            for name in REQUIRED_COUNTERS:
                if name not in counters or name not in old:
                    return _Problem(
                        "incomplete",
                        f"{device} port {port} has no {name} in the "
                        f"{'after' if name not in counters else 'before'} snapshot "
                        f"({'; '.join((before.problems + after.problems)[:2]) or 'counter missing'})",
                    )
            for name, value in counters.items():
                if name in old and value < old[name]:
                    return _Problem(
                        "reset",
                        f"{device} port {port} {name} went down ({old[name]} -> {value}): the "
                        "device was reset between the snapshots, so its counts say nothing",
                    )
            sent += counters["tx_bytes"] - old["tx_bytes"]
            received += counters["rx_bytes"] - old["rx_bytes"]
    return sent, received


def _amount_verdict(expect: str, least: int, predicted: float | None, steps: int | None) -> tuple[str, str]:
    """(status, detail) of a node whose EFA devices moved `least` bytes each way (the smaller direction) against the
    `predicted` bytes, for the `expect`ed transport."""
    if expect == "ib":
        return "not judged", "InfiniBand expected: EFA counters are not its witness"
    if predicted is not None and predicted <= 0:
        moved = least >= _MOVED_BYTES
        return (
            "EFA moved" if moved and expect == "socket" else "no traffic predicted",
            "no traffic between nodes was predicted (one node)" + (", yet EFA carried traffic" if moved else ""),
        )
    if expect == "efa":
        if predicted is None:
            if least >= _MOVED_BYTES:
                return "moved", (
                    "EFA carried traffic; no prediction to compare with (the train function's "
                    "traffic is not modelled), so this supports the logs but proves no amount"
                )
            return "idle", (
                f"EFA carried {_bytes(least)} at most each way and no prediction says how much it should "
                "have: if the function sent tensors between nodes, they went another way"
            )
        if least < MIN_SHARE * predicted:
            return "LOW", (
                f"EFA carried {least / predicted:.1%} of the {_bytes(predicted)} predicted each way for "
                f"{steps} steps (under {MIN_SHARE:.0%}): NCCL's traffic between nodes went another way "
                "(TCP?)"
            )
        return "pass", ""
    # socket expected (the TCP comparison run): EFA should carry next to nothing
    if predicted is not None:
        if least >= MIN_SHARE * predicted:
            return "EFA moved", (
                f"a TCP run, yet EFA carried {least / predicted:.0%} of the predicted bytes: the "
                "comparison run's NCCL_NET=Socket was not applied"
            )
        return "pass", ""
    return (
        "moved" if least >= _MOVED_BYTES else "idle",
        "" if least < _MOVED_BYTES else "EFA carried traffic in a TCP run (no prediction to say how much is too much)",
    )


def judge(
    snapshots: Iterable[Snapshot],
    expect: str = "efa",
    *,
    predicted_bytes: float | None = None,
    log_hosts: Iterable[str] = (),
    hosts: int | None = None,
) -> CounterVerdict:
    """Judge snapshots (any order, any nodes) against the expected transport.

    `predicted_bytes` overrides each node's predicted bytes per direction (else steps x predicted_bytes_per_step of
    its after snapshot); `log_hosts` are the host names of the NCCL logs (a snapshot of another host is named
    "foreign"); `hosts` is the job's host count, if known (counters alone prove EFA only on every one of them).
    """
    groups: dict[tuple[str, str], tuple[list[Snapshot], list[Snapshot]]] = {}
    for s in snapshots:
        pair = groups.setdefault((s.run, s.host.split(".")[0]), ([], []))
        pair[0 if s.phase == "before" else 1].append(s)
    names = frozenset(h.split(".")[0] for h in log_hosts)
    nodes = tuple(
        _node(host, run, b, a, expect, predicted_bytes, names) for (run, host), (b, a) in sorted(groups.items())
    )
    # Ray Train restarted the run (FailureConfig): a node of a failed attempt that the last attempt did not use has a
    # before snapshot and no after one. Older than every finished node's before snapshot, it is that attempt's.
    finished = [max(b, key=lambda x: x.time_s).time_s for (_, _), (b, a) in groups.items() if a and b]
    nodes = tuple(
        replace(
            n,
            status="superseded",
            detail="a before snapshot of an attempt that did not finish (Ray Train "
            "restarted the run on other nodes): not judged",
        )
        if n.status == "incomplete"
        and not groups[(n.run, n.host)][1]
        and finished
        and max(x.time_s for x in groups[(n.run, n.host)][0]) < min(finished)
        else n
        for n in nodes
    )
    notes: list[str] = []
    runs = sorted({n.run for n in nodes})
    if len(runs) > 1:
        notes.append(
            f"snapshots of {len(runs)} runs ({', '.join(runs[:3])}): each is judged apart, and none proves the others"
        )
    failed = [n for n in nodes if n.fails]
    bad = [n for n in nodes if n.status in _BAD]
    hidden = [n for n in nodes if n.status == NOT_VISIBLE]
    if hidden:
        notes.append(
            f"EFA counters not readable on {len(hidden)} of {len(nodes)} nodes "
            f"({', '.join(n.host for n in hidden[:4])}): they neither confirm nor contradict the transport, so "
            "the logs' verdict stands"
        )
    if not nodes:
        return CounterVerdict(
            expect=expect, nodes=(), exit_code=3, summary="no EFA counter snapshots", notes=tuple(notes)
        )
    if failed:
        first = failed[0]
        return CounterVerdict(
            expect=expect,
            nodes=nodes,
            exit_code=1,
            notes=tuple(notes),
            summary=(
                f"EFA counters contradict: {len(failed)} of {len(nodes)} nodes ({', '.join(n.host for n in failed[:4])}): "
                f"{first.detail}"
            ),
        )
    passed = [n for n in nodes if n.status == "pass"]
    needed = max(hosts or 0, 2)
    if (
        passed
        and not bad
        and len(runs) == 1
        and all(n.status in ("pass", "superseded") for n in nodes)
        and len(passed) >= needed
        and expect == "efa"
    ):
        total = sum(n.sent_bytes or 0 for n in passed)
        return CounterVerdict(
            expect=expect,
            nodes=nodes,
            exit_code=0,
            notes=tuple(notes),
            summary=(
                f"EFA counters prove it: all {len(passed)} nodes sent and received at least {MIN_SHARE:.0%} of the predicted "
                f"bytes over EFA ({_bytes(total)} sent in all)"
            ),
        )
    if hidden and not bad and not passed:
        first = hidden[0].detail.removeprefix(_UNREADABLE).removesuffix(f"; {_FIX}")
        return CounterVerdict(
            expect=expect,
            nodes=nodes,
            exit_code=3,
            notes=tuple(notes),
            summary=(f"EFA counters not readable on {len(hidden)} of {len(nodes)} nodes ({hidden[0].host}: {first})"),
        )
    why = (
        f"{bad[0].host}: {bad[0].status}: {bad[0].detail}"
        if bad
        else f"counters of {len(passed)} node(s) match the prediction, {needed} needed"
        if passed and expect == "efa"
        else "the counters neither confirm nor contradict: " + ", ".join(sorted({n.status for n in nodes}))
    )
    return CounterVerdict(
        expect=expect, nodes=nodes, exit_code=3, notes=tuple(notes), summary=f"EFA counters prove nothing ({why})"
    )
