"""Checkpoints: torch.distributed.checkpoint (DCP) shards inside Ray Train checkpoints.

Save: every rank writes its own shard of the model and AdamW state (`__<rank>_0.distcp`; rank 0 also the DCP
`.metadata` and `train_state.json` with the step) into a local temporary directory, then every rank passes that
directory to `ray.train.report`. Ray merges the directories into one checkpoint folder under
`<storagePath>/<run name>/checkpoint_<step>` (a local path, a shared filesystem or s3://...) - the file names never
collide. Load: `ray.train.get_checkpoint()` (the latest reported checkpoint of this run, after a worker-group restart
or a re-run with the same name) is opened as a directory and every rank reads the shards it needs, whatever the world
size that wrote them.

The step is all the other state there is: the learning rate and the batches are pure functions of it. train_state.json
also records the run's shape (world size, micro batch, seq length, accumulation: `run_shape`), so that a resume after
the plan changed its mind (another gpuNodeCount, an auto micro batch that differs there) re-maps the data position in
samples, or refuses naming the setting (`remap_train_state`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from ray_efa.core.settings import Problem, SettingsError, TrainingSettings

__all__ = [
    "save_and_report",
    "restore",
    "restore_with_state",
    "save_shards",
    "load_shards",
    "TRAIN_STATE_FILE",
    "run_shape",
    "remap_train_state",
]

TRAIN_STATE_FILE = "train_state.json"


def _dir_name(step: int) -> str:
    return f"checkpoint_{step:06d}"


def save_and_report(
    metrics: dict[str, Any],
    *,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    rank: int,
    train_state: dict[str, Any] | None = None,
) -> None:
    """Write this rank's shard, then report it with `metrics` (a barrier: every rank calls this at the same step).

    `train_state`: more of rank 0's state for train_state.json (the data position of a Ray Data run), JSON-ready.
    """
    import ray.train

    local = Path(tempfile.mkdtemp(prefix=f"ray-efa-ckpt-{step}-"))
    try:
        save_shards(model, optimizer, local)
        if rank == 0:
            (local / TRAIN_STATE_FILE).write_text(json.dumps({**(train_state or {}), "step": step}))
        ray.train.report(
            metrics, checkpoint=ray.train.Checkpoint.from_directory(local), checkpoint_dir_name=_dir_name(step)
        )
    finally:
        shutil.rmtree(local, ignore_errors=True)  # the upload is synchronous: storage has its copy now


def restore(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Load the run's latest checkpoint into model and optimizer, in place; return its step (0: none, start fresh)."""
    return restore_with_state(model, optimizer)[0]


def restore_with_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[int, dict[str, Any]]:
    """restore(), and the whole train_state.json ({} without a checkpoint)."""
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return 0, {}
    with checkpoint.as_directory() as directory:
        train_state = json.loads((Path(directory) / TRAIN_STATE_FILE).read_text())
        step = train_state["step"]
        load_shards(model, optimizer, Path(directory))
    return int(step), train_state


def save_shards(model: torch.nn.Module, optimizer: torch.optim.Optimizer, directory: Path) -> None:
    """This rank's shard of the model and AdamW state into `directory` (DCP; every rank calls it)."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    # torch's dcp/__init__ imports save and load without re-exporting them (no `as` alias, no __all__), so to a
    # type checker they are private, although they are the documented API.
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=directory)  # pyright: ignore[reportPrivateImportUsage]


def load_shards(model: torch.nn.Module, optimizer: torch.optim.Optimizer, directory: Path) -> None:
    """The model and AdamW state saved by save_shards in `directory`, into `model` and `optimizer`, in place, whatever
    the world size that wrote them (every rank calls it)."""
    # get_state_dict first creates AdamW's state (with zeros), so that DCP has tensors to load into.
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=directory)  # pyright: ignore[reportPrivateImportUsage] (see save_shards)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def run_shape(t: TrainingSettings, world_size: int) -> dict[str, int]:
    """What train_state.json records of the run's batch: decided values (core.strategy.resolve), and the ranks."""
    return {
        "world_size": world_size,
        "micro_batch": int(t.micro_batch),
        "seq_len": t.seq_len,
        "grad_accumulation": int(t.grad_accumulation),
    }


def _sequences_per_step(shape: dict[str, int]) -> int:
    return shape["micro_batch"] * shape["grad_accumulation"] * shape["world_size"]


def _split(shape: dict[str, int]) -> str:
    return (
        f"microBatch {shape['micro_batch']} x gradAccumulation {shape['grad_accumulation']} x "
        f"{shape['world_size']} ranks of seqLen {shape['seq_len']}"
    )


def remap_train_state(saved: dict[str, Any], shape: dict[str, int]) -> dict[str, Any]:
    """train_state.json (`saved`) for a run of `shape`: as saved when the shape is the same (or a checkpoint from
    before shapes were recorded); else with the data position re-mapped in samples. A step counts global batches
    (the learning-rate schedule, `steps`), so the sequences per step must stay; SettingsError names what differs.

    The data position is micro-batches consumed per rank (training.dataset.ShardBatches): the samples consumed over
    the job are consumed x microBatch x world size, and the new run skips as many (the same number of samples; which
    ones each rank holds follows Ray Data's split of the new world size)."""
    old = saved.get("shape")
    if not old or old == shape:
        return saved
    if old["seq_len"] != shape["seq_len"]:
        raise SettingsError(
            [
                Problem(
                    "seqLen",
                    shape["seq_len"],
                    f"must be {old['seq_len']} to resume this run: its "
                    "checkpoint's data position counts sequences of that length (or start a new run "
                    "name)",
                )
            ]
        )
    if _sequences_per_step(old) != _sequences_per_step(shape):
        raise SettingsError(
            [
                Problem(
                    "globalBatchTokens",
                    _sequences_per_step(shape) * shape["seq_len"],
                    f"must be {_sequences_per_step(old) * old['seq_len']:,} tokens to resume this run: its steps were global "
                    f"batches of {_split(old)}, this run's {_split(shape)} (set globalBatchTokens, microBatch or "
                    "gradAccumulation to reach it, or start a new run name)",
                )
            ]
        )
    data = saved.get("data")
    if not data:
        return {**saved, "shape": shape}
    samples = data["consumed"] * old["micro_batch"] * old["world_size"]
    per_batch = shape["micro_batch"] * shape["world_size"]
    if samples % per_batch:
        raise SettingsError(
            [
                Problem(
                    "microBatch",
                    shape["micro_batch"],
                    f"must divide the {samples:,} samples this run's checkpoint consumed "
                    f"in epoch {data['epoch']} over {shape['world_size']} ranks to resume it ({_split(old)} before)",
                )
            ]
        )
    return {**saved, "shape": shape, "data": {**data, "consumed": samples // per_batch}}
