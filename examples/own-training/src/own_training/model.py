"""The model and the data: a student MLP and the fixed random teacher whose outputs it learns."""

from __future__ import annotations

import math

import torch
from torch import nn


def mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inputs, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, outputs)
    )


@torch.no_grad()
def teacher_data(*, samples: int, inputs: int, outputs: int, seed: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) of `samples` rows for one rank: the same teacher on every rank (seed), each rank its own inputs."""
    teacher = mlp(inputs, 32, outputs)
    for p, g in zip(teacher.parameters(), _generators(seed, len(list(teacher.parameters())))):
        p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))  # outputs of order 1
    x = torch.randn(samples, inputs, generator=torch.Generator().manual_seed(seed * 1000 + rank + 1))
    return x, teacher(x)


def _generators(seed: int, n: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed * 7919 + i) for i in range(n)]
