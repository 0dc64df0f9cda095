"""The metrics history in the run folder: metrics.jsonl streamed line by line, TensorBoard events that TensorBoard's
own reader loads, S3-like storage (no appends) staged and uploaded whole, and storage errors that never stop training.

The S3 stand-in is a real pyarrow filesystem that is not the local one (pyarrow's FSSpecHandler over fsspec's
in-memory filesystem), so the History takes the same upload path it takes for S3.
"""

from __future__ import annotations

import json

import pyarrow.fs
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ray_efa.training.history import History
from ray_efa.training.run_folder import METRICS_FILE, TENSORBOARD_DIR, RunFolder


def _metrics(step: int) -> dict:
    return {
        "step": step,
        "loss": 7.0 - step,
        "lr": 1e-3 * step,
        "throughput/tokens_per_s": 1000.0 + step,
        "time/step_s": 0.5,
        "grad_norm": float("nan") if step == 2 else 1.0 / step,
    }


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _scalars(logdir, tag: str) -> dict[int, float]:
    events = EventAccumulator(str(logdir))
    events.Reload()
    return {e.step: e.value for e in events.Scalars(tag)}


def test_each_report_is_on_disk_as_soon_as_it_is_logged(tmp_path):
    # GIVEN a history in a local run folder
    history = History(RunFolder(pyarrow.fs.LocalFileSystem(), str(tmp_path / "run")))
    # WHEN two reports are logged (and the history is NOT closed: a run killed right after)
    history.log(_metrics(1), 1)
    history.log(_metrics(2), 2)
    # THEN both are already in metrics.jsonl, every metric with its step and wall time; NaN is JSON null
    records = _records(tmp_path / "run" / METRICS_FILE)
    assert [r["step"] for r in records] == [1, 2]
    assert records[0]["loss"] == 6.0 and records[0]["throughput/tokens_per_s"] == 1001.0 and records[0]["wall_time"] > 0
    assert records[1]["grad_norm"] is None
    # and TensorBoard's own reader loads the event files, one tag per metric
    assert _scalars(tmp_path / "run" / TENSORBOARD_DIR, "loss") == {1: 6.0, 2: 5.0}
    assert _scalars(tmp_path / "run" / TENSORBOARD_DIR, "throughput/tokens_per_s") == {1: 1001.0, 2: 1002.0}
    assert _scalars(tmp_path / "run" / TENSORBOARD_DIR, "grad_norm") == {1: 1.0}  # NaN has no point
    history.close()


def test_a_resumed_attempt_cuts_the_history_back_to_its_checkpoint_and_tensorboard_drops_the_redone_steps(tmp_path):
    # GIVEN an attempt that reported steps 1..4 and was killed while writing its last line
    folder = RunFolder(pyarrow.fs.LocalFileSystem(), str(tmp_path / "run"))
    first = History(folder)
    for step in range(1, 5):
        first.log(_metrics(step), step)
    metrics = tmp_path / "run" / METRICS_FILE
    metrics.write_bytes(metrics.read_bytes() + b'{"step": 5, "lo')
    # WHEN the next attempt resumes from the checkpoint of step 2 and reports steps 3..4 with other losses
    second = History(folder, start_step=2)
    for step in (3, 4):
        second.log({**_metrics(step), "loss": 10.0 + step}, step)
    second.close()
    # THEN the history is cut back to the checkpoint it resumed from (the cut line too): each step once, one run
    lines = metrics.read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3, 4]
    assert [json.loads(line)["loss"] for line in lines][2:] == [13.0, 14.0]
    # and TensorBoard shows each step once: the resumed attempt's values from step 3 on (purge_step)
    assert _scalars(tmp_path / "run" / TENSORBOARD_DIR, "loss") == {1: 6.0, 2: 5.0, 3: 13.0, 4: 14.0}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_storage_without_appends_gets_whole_files_at_most_every_interval_and_at_close(tmp_path):
    # GIVEN a run folder on a filesystem that is not the local one (as S3 is)
    memory = MemoryFileSystem()
    memory.store.clear()
    fs = pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(memory))
    folder = RunFolder(fs, "/bucket/runs/r1")
    clock = Clock()
    history = History(folder, upload_every_s=30, clock=clock)

    def uploaded() -> list[int]:
        data = folder.read_bytes(METRICS_FILE)
        return [json.loads(line)["step"] for line in data.decode().splitlines()] if data else []

    # WHEN reports come faster than the upload interval
    history.log(_metrics(1), 1)
    clock.now = 10
    history.log(_metrics(2), 2)
    # THEN nothing is uploaded yet; once the interval has passed, the whole file is
    assert uploaded() == []
    clock.now = 31
    history.log(_metrics(3), 3)
    assert uploaded() == [1, 2, 3]
    history.log(_metrics(4), 4)
    assert uploaded() == [1, 2, 3]
    # and close uploads the rest, the TensorBoard events included
    history.close()
    assert uploaded() == [1, 2, 3, 4]
    events = fs.get_file_info(pyarrow.fs.FileSelector("/bucket/runs/r1/tensorboard"))
    assert len(events) == 1 and events[0].base_name.startswith("events.out.tfevents.") and events[0].size > 100
    # WHEN a restarted attempt (from step 2) writes to the same folder THEN it keeps the earlier attempt's lines up to
    # its checkpoint, and its own after them
    again = History(folder, start_step=2, clock=clock)
    again.log(_metrics(3), 3)
    again.close()
    assert uploaded() == [1, 2, 3]
    assert len(fs.get_file_info(pyarrow.fs.FileSelector("/bucket/runs/r1/tensorboard"))) == 2


class RefusingMemoryFileSystem(MemoryFileSystem):
    """fsspec's in-memory filesystem, refusing every write as a bucket without write permission does."""

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        if "r" not in mode:
            raise PermissionError("Access Denied")
        return super()._open(path, mode, block_size, autocommit, cache_options, **kwargs)

    def mkdir(self, path, create_parents=True, **kwargs):
        raise PermissionError("Access Denied")

    def makedirs(self, path, exist_ok=False):
        raise PermissionError("Access Denied")


def test_a_storage_error_is_said_once_and_never_stops_training(capsys):
    # GIVEN storage that refuses every write
    folder = RunFolder(pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(RefusingMemoryFileSystem())), "/refusing/r")
    history = History(folder, upload_every_s=0)
    # WHEN reports are logged and the history closed THEN nothing raises, and one warning names the folder and why
    for step in (1, 2, 3):
        history.log(_metrics(step), step)
    history.close()
    err = capsys.readouterr().err
    assert err.count("cannot write the metrics history") == 1
    assert "Access Denied" in err and "training goes on without it" in err


@pytest.mark.parametrize("kind", ["local", "remote"])
def test_the_run_folder_writes_and_reads_its_files(tmp_path, kind):
    fs = (
        pyarrow.fs.LocalFileSystem()
        if kind == "local"
        else pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(MemoryFileSystem()))
    )
    folder = RunFolder(fs, str(tmp_path / "run"))
    folder.write_json("summary.json", {"b": 1, "a": [1.5]})
    data = folder.read_bytes("summary.json")
    assert data is not None and json.loads(data) == {"a": [1.5], "b": 1}
    assert folder.read_bytes("absent.json") is None
    assert (folder.local_path() is not None) == (kind == "local")
