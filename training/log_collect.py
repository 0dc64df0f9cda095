"""Collect the NCCL lines of every Ray worker process, on every node, through Ray itself.

NCCL writes its INFO log to the stdout of each Ray Train worker, which Ray keeps in the session logs of the worker's
node (/tmp/ray/session_latest/logs/worker-*.out and .err). The copy Ray forwards to the driver is deduplicated ("[repeated
7x across cluster]") and loses which process printed what; `kubectl logs` shows nothing. So the driver runs one small
task pinned to each alive node that reads that node's worker logs and returns their NCCL lines:

    paths = collect_nccl_logs(Path("/tmp/nccl"))                 # driver side, after ray.init()
    verdict = training.transport.classify_paths(paths).verdict("efa")

Only lines of the calling driver's job are kept: Ray workers mark each task's output with ":job_id:<hex>", so a
long-lived RayCluster's earlier jobs cannot vouch for this one.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "NodeLines",
    "collect_nccl_logs",
    "is_collected_log",
    "is_collected_file",
    "find_logs_dir",
    "read_nccl_lines",
    "MAX_LINES_PER_NODE",
]

log: logging.Logger = logging.getLogger(__name__)

MAX_LINES_PER_NODE = 200_000
"""NCCL lines returned per node at most (a 16-GPU node logs a few thousand at init); the rest is dropped and said so."""
_MAX_LINE_CHARS = 16_384
_JOB_MARKER = ":job_id:"  # ray_constants.LOG_PREFIX_JOB_ID: Ray prints it before each task's output
_WORKER_FILE = re.compile(
    r"^worker-(?P<worker>[0-9a-f]+)-(?P<job>[0-9a-f]+)-(?P<pid>\d+)\.(?P<stream>out|err)(?:\.(?P<rotation>\d+))?$"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeLines:
    """What one node's collection task found."""

    node_id: str
    ip: str
    hostname: str
    logs_dir: str | None
    """The Ray session logs directory read, or None if none was found on the node."""
    files: int
    lines: tuple[str, ...]
    truncated: bool
    counter_files: tuple[tuple[str, str], ...] = ()
    """(name, text) of the EFA counter snapshots the job's workers spooled on this node (training.efa_counters)."""


def find_logs_dir() -> Path | None:
    """The logs directory of the Ray session this process belongs to, found the most robust way available.

    In order: the runtime context (temp dir + session name), Ray's node object, $RAY_TMPDIR or /tmp
    ray/session_latest/logs, then the newest ray/session_*/logs there.
    """
    candidates: list[Path] = []
    try:
        import ray

        context = ray.get_runtime_context()
        candidates.append(Path(context.get_temp_dir()) / context.get_session_name() / "logs")
    except Exception:  # not in a Ray worker, or an API that moved: try the next way
        pass
    try:
        from ray._private import worker as ray_worker  # private, so only a fallback

        node = ray_worker.global_worker.node
        if node is not None:  # None outside a connected worker
            candidates.append(Path(node.get_logs_dir_path()))
    except Exception:
        pass
    roots = [Path(os.environ["RAY_TMPDIR"]) / "ray"] if os.environ.get("RAY_TMPDIR") else []
    roots.append(Path("/tmp/ray"))
    candidates += [root / "session_latest" / "logs" for root in roots]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    sessions = [p for root in roots if root.is_dir() for p in root.glob("session_*/logs") if p.is_dir()]
    return max(sessions, key=lambda p: p.stat().st_mtime) if sessions else None


def _worker_files(logs_dir: Path) -> list[list[Path]]:
    """Worker stdout/stderr files grouped per worker stream, each group oldest first (rotated .N files, then the live one)."""
    groups: dict[tuple[str, str, str], list[tuple[int, Path]]] = {}
    for path in logs_dir.iterdir():
        m = _WORKER_FILE.match(path.name)
        if m:
            # A higher rotation number is older; the live file (no number) is the newest.
            age = int(m["rotation"]) if m["rotation"] else 0
            groups.setdefault((m["worker"], m["pid"], m["stream"]), []).append((age, path))
    return [[p for _, p in sorted(files, key=lambda f: -f[0])] for _, files in sorted(groups.items())]


def read_nccl_lines(
    logs_dir: Path, job_id: str | None, max_lines: int = MAX_LINES_PER_NODE
) -> tuple[list[str], int, bool]:
    """The NCCL lines of the worker logs in `logs_dir`, of job `job_id` only (None: every job).

    Returns (lines, files read, truncated). A worker's lines count for the job named by the last ":job_id:" marker
    before them; lines before any marker count when the file name carries the job id.
    """
    lines: list[str] = []
    files = 0
    truncated = False
    for group in _worker_files(logs_dir):
        current: str | None = None
        for path in group:
            match = _WORKER_FILE.match(path.name)
            assert match is not None  # _worker_files keeps only the names that match
            name_job = match["job"]
            try:
                stream = path.open("r", encoding="utf-8", errors="replace")
            except OSError as error:  # a worker log removed or unreadable while we read: skip it, say so
                log.warning("cannot read %s: %s", path, error)
                continue
            files += 1
            with stream:
                for line in _bounded(stream):
                    if line.startswith(_JOB_MARKER):
                        current = line[len(_JOB_MARKER) :].strip()
                        continue
                    if "NCCL" not in line:
                        continue
                    job = current or name_job
                    if job_id is not None and job != job_id:
                        continue
                    if len(lines) >= max_lines:
                        truncated = True
                        break
                    lines.append(line.rstrip("\n"))
    return lines, files, truncated


def _bounded(stream) -> Iterable[str]:
    """Lines cut at _MAX_LINE_CHARS, so one pathological line cannot fill the task's memory."""
    skipping = False
    while chunk := stream.readline(_MAX_LINE_CHARS):
        if not skipping:
            yield chunk
        skipping = len(chunk) >= _MAX_LINE_CHARS and not chunk.endswith("\n")


def _read_this_node(job_id: str | None, max_lines: int) -> NodeLines:
    """Runs on a node, as a Ray task: read its worker logs."""
    import ray

    logs_dir = find_logs_dir()
    lines, files, truncated = read_nccl_lines(logs_dir, job_id, max_lines) if logs_dir else ([], 0, False)
    from ray_efa.training.efa_counters import read_spool

    return NodeLines(
        node_id=ray.get_runtime_context().get_node_id(),
        ip=ray.util.get_node_ip_address(),
        hostname=socket.gethostname(),
        logs_dir=str(logs_dir) if logs_dir else None,
        files=files,
        lines=tuple(lines),
        truncated=truncated,
        counter_files=tuple(read_spool(job_id)) if job_id else (),
    )


def collect_nccl_logs(
    out_dir: Path,
    *,
    job_id: str | None = None,
    all_jobs: bool = False,
    timeout_s: float = 120.0,
    max_lines_per_node: int = MAX_LINES_PER_NODE,
) -> list[Path]:
    """Write the NCCL lines of every alive node's Ray workers to out_dir, one file per node; return the paths.

    The EFA counter snapshots the job's workers spooled on each node are written beside them
    (efa-counters-<node>-....json, see training.efa_counters); they are not in the returned list.

    Call from the driver after ray.init(). `job_id` defaults to the driver's own job; `all_jobs=True` keeps every
    job's lines. A node that does not answer within `timeout_s` (or dies) is logged and skipped: its file is missing
    from the result, so callers can compare len(result) with the node count.
    """
    import ray
    from ray.exceptions import RayError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not ray.is_initialized():
        raise RuntimeError("collect_nccl_logs needs a connected Ray driver: call ray.init() first")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
    if max_lines_per_node < 1:
        raise ValueError(f"max_lines_per_node must be >= 1, got {max_lines_per_node!r}")
    job = None if all_jobs else (job_id or ray.get_runtime_context().get_job_id())
    nodes = sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: (n["NodeManagerAddress"], n["NodeID"]))
    # num_cpus=0: the task must run even on a GPU-less head with num-cpus 0 and on nodes whose CPUs training holds.
    task = ray.remote(num_cpus=0, max_retries=0)(_read_this_node)
    refs = [
        task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False),
            name=f"collect_nccl_logs:{n['NodeManagerAddress']}",
        ).remote(job, max_lines_per_node)
        for n in nodes
    ]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    paths: list[Path] = []
    for node, ref in zip(nodes, refs):
        try:
            result: NodeLines = ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
        except (RayError, TimeoutError) as error:
            log.warning("no NCCL logs from node %s (%s): %s", node["NodeID"], node["NodeManagerAddress"], error)
            ray.cancel(ref, force=True)
            continue
        paths.append(_write(out_dir, result, job))
    return paths


_HEADER = "# ray-efa log collection:"


def is_collected_log(entry: Path) -> bool:
    """A file `collect_nccl_logs` wrote (its name and first line), so that a later run may replace it."""
    if not (entry.is_file() and entry.name.startswith("nccl-") and entry.name.endswith(".log")):
        return False
    try:
        with entry.open("rb") as f:
            return f.read(len(_HEADER)) == _HEADER.encode()
    except OSError:
        return False


def _write(out_dir: Path, node: NodeLines, job: str | None) -> Path:
    safe_ip = re.sub(r"[^0-9A-Za-z.-]", "_", node.ip)
    path = out_dir / f"nccl-{safe_ip}-{node.node_id[:8]}.log"
    # Header lines start with '#' and never contain the word the classifier looks for, so they cannot count as evidence.
    header = [
        f"{_HEADER} node {node.node_id} host {node.hostname} ip {node.ip}",
        f"# logs dir {node.logs_dir or '(none found)'}; worker files read {node.files}; job {job or 'all'}; "
        f"lines kept {len(node.lines)}" + ("; TRUNCATED" if node.truncated else ""),
    ]
    with path.open("w", encoding="utf-8") as f:
        for line in header:
            f.write(line + "\n")
        for line in node.lines:
            f.write(line + "\n")
    for name, text in node.counter_files:  # efa-counters-<host>-<phase>-<us>.json: the node id keeps them apart
        (out_dir / f"efa-counters-{node.node_id[:8]}-{name.removeprefix('efa-counters-')}").write_text(
            text, encoding="utf-8"
        )
    return path


def is_collected_file(entry: Path) -> bool:
    """A file `collect_nccl_logs` wrote: a node's log or an EFA counter snapshot."""
    from ray_efa.training.efa_counters import is_written_snapshot

    return is_collected_log(entry) or is_written_snapshot(entry)
