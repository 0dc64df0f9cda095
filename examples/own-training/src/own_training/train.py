"""`train_func(config)`: a plain Ray Train loop (DDP, AdamW, one report per epoch), nothing of ray-efa-stack in it.

config holds the keys of the trainConfig setting at the top level (lr, epochs, hidden, batch_size, samples,
checkpoint_every; the defaults below for any not given), and config["settings"] the resolved ray-efa settings (used
here for the seed). Run it with the project's driver, which adds the bandwidth preflight before it and the transport
gate after it:

    ray-efa train --local -c trainFunction=own_training.train:train_func -c codeDir=examples/own-training/src \\
        -c trainConfig='{"epochs": 8, "lr": 0.01}'

It keeps the checkpoint contract (docs/own-training.md): every checkpoint_every epochs rank 0 reports a checkpoint
with its metrics, and a restarted attempt (maxFailures: a lost worker or node) starts from
`ray.train.get_checkpoint()`, the last one reported, instead of epoch 1.
"""

from __future__ import annotations

import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn

from own_training.model import mlp, teacher_data

DEFAULTS = {
    "lr": 3e-3,
    "epochs": 10,
    "hidden": 64,
    "batch_size": 64,
    "samples": 1024,
    "inputs": 16,
    "outputs": 4,
    "checkpoint_every": 1,
}
CHECKPOINT_FILE = "state.pt"


def _global_mean(value: torch.Tensor) -> float:
    """The mean over every rank: an all-reduce through the process group Ray Train set up (gloo or NCCL)."""
    value = value.detach().float().clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return (value / dist.get_world_size()).item()


def _last_checkpoint() -> dict | None:
    """The state of the last checkpoint this run reported (every rank reads it); None when there is none: a fresh
    start. After a restart (maxFailures) Ray hands the new attempt this run's latest checkpoint."""
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as folder:
        return torch.load(os.path.join(folder, CHECKPOINT_FILE), weights_only=True)


def _report(metrics: dict, *, rank: int, state: dict | None) -> None:
    """ray.train.report on every rank; with `state`, rank 0 saves it and reports it as the checkpoint (DDP's weights
    are the same on every rank: one copy is the whole model). Ray copies the folder into the run's storage."""
    import ray.train

    if state is None or rank != 0:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as folder:
        torch.save(state, os.path.join(folder, CHECKPOINT_FILE))
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


def train_func(config: dict) -> dict:
    import ray.train
    import ray.train.torch

    c = {**DEFAULTS, **{k: v for k, v in config.items() if k in DEFAULTS}}
    seed = int(config["settings"]["seed"])
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()

    torch.manual_seed(seed)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    student = mlp(c["inputs"], c["hidden"], c["outputs"])
    resumed = _last_checkpoint()
    if resumed is not None:
        student.load_state_dict(resumed["model"])  # before DDP wraps it: the plain module's keys
    model = ray.train.torch.prepare_model(student)  # DDP when world > 1; on the worker's device
    optimizer = torch.optim.AdamW(model.parameters(), lr=c["lr"])
    start, losses = 0, []
    if resumed is not None:
        optimizer.load_state_dict(resumed["optimizer"])  # its state follows the parameters' device
        start, losses = int(resumed["epoch"]), [float(x) for x in resumed["losses"]]
        if rank == 0:
            print(f"resumed from the checkpoint of epoch {start}", flush=True)
    x, y = teacher_data(samples=c["samples"], inputs=c["inputs"], outputs=c["outputs"], seed=seed, rank=rank)
    x, y = x.to(device), y.to(device)

    for epoch in range(start + 1, c["epochs"] + 1):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed + epoch))
        total = torch.zeros((), device=device)
        for begin in range(0, len(x), c["batch_size"]):
            batch = order[begin : begin + c["batch_size"]]
            loss = nn.functional.mse_loss(model(x[batch]), y[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # DDP all-reduces the gradients here
            optimizer.step()
            total += loss.detach() * len(batch)
        epoch_loss = _global_mean(total / len(x))
        losses.append(epoch_loss)
        if rank == 0:
            print(f"epoch {epoch}/{c['epochs']}  loss {epoch_loss:.4f}  ({world} workers)", flush=True)
        due = c["checkpoint_every"] > 0 and (epoch % c["checkpoint_every"] == 0 or epoch == c["epochs"])
        state = (
            {"model": student.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch, "losses": losses}
            if due
            else None
        )
        # "step" is the x axis of `ray-efa report` and where a resumed run's history continues
        _report(
            {"step": epoch, "epoch": epoch, "loss": epoch_loss, "first_loss": losses[0], "world_size": world},
            rank=rank,
            state=state,
        )
    return {"losses": losses}
