"""The run's metrics history, kept by rank 0 in the run folder (training.run_folder) while it trains.

- metrics.jsonl: one JSON object per report ({"step", "wall_time", and every metric}), appended and flushed at once,
  so a run killed mid-way leaves every report up to its last (at worst the last line is cut; readers skip it).
- tensorboard/: TensorBoard event files (tensorboardX's writer; Ray brings tensorboardX), one scalar per metric, tags as the metric
  keys (loss, throughput/tokens_per_s, ...): `tensorboard --logdir <run folder>`. A resumed attempt starts a new event
  file that starts with a purge (SessionLog START at its first step), so TensorBoard drops the steps the failed attempt ran past its checkpoint.

On a local or shared filesystem both are written in place. S3 has no appends: there they are written to a local
folder and each file is uploaded whole at most every UPLOAD_EVERY_S seconds and at close (a killed run loses at most
that much). A storage error never stops training: it is said once and the history stops there.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ray_efa.training.run_folder import METRICS_FILE, TENSORBOARD_DIR, RunFolder

__all__ = [
    "History",
    "open_history",
    "UPLOAD_EVERY_S",
    "LAST_CHECKPOINT",
    "CHECKPOINT_KEY",
    "cut_back",
    "last_checkpointed_step",
]

UPLOAD_EVERY_S = 30.0
LAST_CHECKPOINT = "last checkpoint"
CHECKPOINT_KEY = "ray_efa/checkpoint"
"""True in a record whose ray.train.report carried a checkpoint (a function of yours): where a resumed run cuts back."""


def _number(value: Any) -> Any:
    """JSON has no NaN or infinity: null instead (strict readers such as jq reject Python's NaN)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


class History:
    """`log(metrics, step)` at each report; `close()` at the end."""

    def __init__(
        self,
        folder: RunFolder,
        *,
        start_step: int = 0,
        upload_every_s: float = UPLOAD_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        keep_through: int | None | str = "start",
    ) -> None:
        """`keep_through`: the last step of the earlier history this attempt resumes after ("start": start_step when
        it is above 0; LAST_CHECKPOINT: the last report that carried a checkpoint); None, or 0: a fresh run, whose
        earlier history (another run under this name) is kept aside as metrics.<UTC time>.jsonl, said on stderr."""
        self.folder: RunFolder
        self.folder, self._every, self._clock = folder, upload_every_s, clock
        local = folder.local_path()
        self._staging: Path | None = None
        if local is None:
            self._staging = self._root = Path(tempfile.mkdtemp(prefix="ray-efa-history-"))
        else:
            self._root = local
        self._uploaded = clock()
        self._writer: Any = None
        self._failed = False
        if keep_through == "start":
            keep_through = start_step or None
        self._guard(lambda: self._open(start_step, keep_through))

    def _open(self, start_step: int, keep_through: int | str | None) -> None:
        self._root.mkdir(parents=True, exist_ok=True)
        metrics = self._root / METRICS_FILE
        if self._staging is not None:  # the earlier attempts' reports: this attempt appends to them
            metrics.write_bytes(self.folder.read_bytes(METRICS_FILE) or b"")
        earlier = metrics.read_bytes() if metrics.exists() else b""
        through = last_checkpointed_step(earlier) if keep_through == LAST_CHECKPOINT else keep_through
        through = through if isinstance(through, int) else None
        if earlier.strip() and not through:  # one run, one history: the earlier run's is kept aside, named
            aside = f"metrics.{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}.jsonl"
            self.folder.write_bytes(aside, earlier)
            metrics.write_bytes(b"")
            _warn(
                f"{self.folder.uri} held the history of an earlier run with nothing to resume: kept as {aside}; "
                f"this run starts a fresh {METRICS_FILE}"
            )
        elif earlier.strip() and through:  # resumed: the history is cut back to the checkpoint it resumes from
            kept = cut_back(earlier, through)
            if kept != earlier:
                metrics.write_bytes(kept)
        cut = metrics.exists() and metrics.stat().st_size > 0 and not metrics.read_bytes().endswith(b"\n")
        self._lines = open(metrics, "a", encoding="utf-8")
        if cut:  # a line cut by a kill: the next record starts on a line of its own
            self._lines.write("\n")
        try:  # its synchronous writer: SummaryWriter's queue and thread would leave the last reports unwritten
            from tensorboardX.event_file_writer import EventsWriter
            from tensorboardX.proto.event_pb2 import Event, SessionLog  # pyright: ignore[reportAttributeAccessIssue]
            from tensorboardX.proto.summary_pb2 import Summary  # pyright: ignore[reportAttributeAccessIssue]
        except ImportError:
            _warn("tensorboardX is not installed: metrics.jsonl only, no TensorBoard events")
            return
        self._event, self._summary = Event, Summary
        (self._root / TENSORBOARD_DIR).mkdir(exist_ok=True)
        # One file per attempt. TensorBoard reads a folder's files in name order, and a later attempt's purge must
        # come after the earlier file: the name holds the second (tensorboardX's), then nanoseconds break a tie.
        self._writer = EventsWriter(str(self._root / TENSORBOARD_DIR / "events"), f".{time.time_ns():020d}")
        if start_step:  # TensorBoard drops what earlier files hold from this step on (SummaryWriter's purge_step)
            self._writer.write_event(Event(step=start_step + 1, session_log=SessionLog(status=SessionLog.START)))
        self._writer.flush()

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Append one report (rank 0, at a report step); numbers only go to TensorBoard."""
        self._guard(lambda: self._log(metrics, step))

    def _log(self, metrics: Mapping[str, Any], step: int) -> None:
        record = {"step": step, "wall_time": time.time(), **{k: _number(v) for k, v in metrics.items() if k != "step"}}
        self._lines.write(json.dumps(record) + "\n")
        self._lines.flush()
        if self._writer is not None:
            values = [
                self._summary.Value(tag=key, simple_value=value)
                for key, value in record.items()
                if key not in ("step", "wall_time") and isinstance(value, (int, float)) and not isinstance(value, bool)
            ]
            self._writer.write_event(
                self._event(wall_time=record["wall_time"], step=step, summary=self._summary(value=values))
            )
            self._writer.flush()
        if self._staging is not None and self._clock() - self._uploaded >= self._every:
            self._upload()

    def close(self) -> None:
        """Flush, upload what is staged, and remove the staging folder."""

        def finish() -> None:
            self._lines.close()
            if self._writer is not None:
                self._writer.close()
            self._upload()

        self._guard(finish)
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)

    def _upload(self) -> None:
        if self._staging is None:
            return
        for path in sorted(p for p in self._staging.rglob("*") if p.is_file()):
            self.folder.write_bytes(path.relative_to(self._staging).as_posix(), path.read_bytes())
        self._uploaded = self._clock()

    def _guard(self, action: Callable[[], None]) -> None:
        if self._failed:
            return
        try:
            action()
        except Exception as error:  # noqa: BLE001 - a history that cannot be written must not stop training
            self._failed = True
            _warn(f"cannot write the metrics history to {self.folder.uri}: {error}; training goes on without it")


def _records(data: bytes) -> list[tuple[bytes, dict[str, Any] | None]]:
    out = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        out.append((line, record if isinstance(record, dict) else None))
    return out


def last_checkpointed_step(data: bytes) -> int | None:
    """The step of the last report in a history that carried a checkpoint (CHECKPOINT_KEY); None when none did."""
    steps = [r["step"] for _, r in _records(data) if r and r.get(CHECKPOINT_KEY) and isinstance(r.get("step"), int)]
    return steps[-1] if steps else None


def cut_back(data: bytes, step: int) -> bytes:
    """The history up to and including `step` (unreadable lines dropped): what a resumed attempt appends to."""
    kept = [line for line, r in _records(data) if r and isinstance(r.get("step"), int) and r["step"] <= step]
    return b"".join(line + b"\n" for line in kept)


def _warn(message: str) -> None:
    sys.stderr.write(f"ray_efa.training.history: {message}\n")


def open_history(start_step: int, keep_through: int | None | str = "start") -> History | None:
    """Rank 0's history in this Ray Train run's folder (the storage Ray Train resolved); None on other ranks."""
    import ray.train

    context = ray.train.get_context()
    if context.get_world_rank() != 0:
        return None
    storage = context.get_storage()
    if storage is None:  # not inside a Ray Train run: nowhere to keep it
        return None
    return History(
        RunFolder(storage.storage_filesystem, storage.experiment_fs_path),
        start_step=start_step,
        keep_through=keep_through,
    )
