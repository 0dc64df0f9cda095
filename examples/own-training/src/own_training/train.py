"""`train_func(config)`: a plain Ray Train loop (DDP, AdamW, one report per epoch), nothing of ray-efa-stack in it.

config holds the keys of the trainConfig setting at the top level (lr, epochs, hidden, batch_size, samples; the
defaults below for any not given), and config["settings"] the resolved ray-efa settings (used here for the seed).
Run it with the project's driver, which adds the bandwidth preflight before it and the transport gate after it:

    ray-efa train --local -c trainFunction=own_training.train:train_func -c codeDir=examples/own-training/src \\
        -c trainConfig='{"epochs": 8, "lr": 0.01}'
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from own_training.model import mlp, teacher_data

DEFAULTS = {"lr": 3e-3, "epochs": 10, "hidden": 64, "batch_size": 64, "samples": 1024, "inputs": 16, "outputs": 4}


def _global_mean(value: torch.Tensor) -> float:
    """The mean over every rank: an all-reduce through the process group Ray Train set up (gloo or NCCL)."""
    value = value.detach().float().clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return (value / dist.get_world_size()).item()


def train_func(config: dict) -> dict:
    import ray.train
    import ray.train.torch

    c = {**DEFAULTS, **{k: v for k, v in config.items() if k in DEFAULTS}}
    seed = int(config["settings"]["seed"])
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = ray.train.torch.get_device()

    torch.manual_seed(seed)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    model = ray.train.torch.prepare_model(mlp(c["inputs"], c["hidden"], c["outputs"]))  # DDP when world > 1
    optimizer = torch.optim.AdamW(model.parameters(), lr=c["lr"])
    x, y = teacher_data(samples=c["samples"], inputs=c["inputs"], outputs=c["outputs"], seed=seed, rank=rank)
    x, y = x.to(device), y.to(device)

    losses = []
    for epoch in range(1, c["epochs"] + 1):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed + epoch))
        total = torch.zeros((), device=device)
        for start in range(0, len(x), c["batch_size"]):
            batch = order[start:start + c["batch_size"]]
            loss = nn.functional.mse_loss(model(x[batch]), y[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # DDP all-reduces the gradients here
            optimizer.step()
            total += loss.detach() * len(batch)
        epoch_loss = _global_mean(total / len(x))
        losses.append(epoch_loss)
        if rank == 0:
            print(f"epoch {epoch}/{c['epochs']}  loss {epoch_loss:.4f}  ({world} workers)", flush=True)
        ray.train.report({"epoch": epoch, "loss": epoch_loss, "first_loss": losses[0], "world_size": world})
    return {"losses": losses}
