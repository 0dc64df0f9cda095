"""The held-out loss: the eval split goes whole to every rank (training.dataset.data_config leaves it unsplit); each
rank takes its slice of every block of microBatch x world size rows and runs it through the model without gradients;
the token-weighted mean over all ranks is eval_loss, and exp(eval_loss) the perplexity.

Why not a Ray Train shard per rank: DataConfig splits with `streaming_split(equal=True)`, which drops the rows past
a multiple of the world size (ray/train/_internal/data_config.py), so eval_loss would leave out up to world size - 1
held-out rows. Here every row counts once: the last block's slices are shorter, and a rank left with no row runs
one anyway, weighted 0, because FSDP's all-gathers need the same number of forwards on every rank.

Beside it, eval_unigram_entropy: the entropy of the held-out target tokens' own frequencies, the loss of the best
model that ignores context (it even knows the held-out counts). An eval loss below it is learned context, not just
which tokens are common; ln(vocab) would be a much weaker bar, since any model learns the unigram in a few steps.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.distributed as dist

from ray_efa.training.dataset import ROW_COLUMN, too_small

if TYPE_CHECKING:
    from ray.data import DataIterator

__all__ = ["evaluate"]


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    split: DataIterator,
    *,
    micro_batch: int,
    max_batches: int,
    device: torch.device,
    rank: int,
    world_size: int,
    row_tokens: int,
    vocab_size: int,
) -> dict[str, float]:
    """{"eval_loss", "eval_perplexity", "eval_tokens", "eval_unigram_entropy"} over the whole eval split (or its
    first `max_batches` x world size micro-batches); the model is back in training mode afterwards.

    split: the whole eval split, the same rows in the same order on every rank."""
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)  # sum of token losses, tokens
    counts = torch.zeros(vocab_size, dtype=torch.float64, device=device)  # of each target token (the unigram)
    try:
        block = micro_batch * world_size
        for index, batch in enumerate(split.iter_batches(batch_size=block, batch_format="numpy")):
            if max_batches and index >= max_batches:
                break
            rows = batch[ROW_COLUMN]
            mine = rows[rank * micro_batch : (rank + 1) * micro_batch]
            weight = 1.0 if len(mine) else 0.0
            tokens = torch.from_numpy((mine if len(mine) else rows[:1]).astype(np.int64))
            inputs, labels = tokens[:, :-1].to(device), tokens[:, 1:].to(device)
            loss = model(inputs, labels)  # the mean over this batch's tokens
            n = weight * labels.numel()
            total += torch.stack([loss.double() * n, torch.tensor(n, device=device, dtype=torch.float64)])
            if weight:
                counts += torch.bincount(labels.reshape(-1), minlength=vocab_size).double()
    finally:
        model.train()
    if dist.is_initialized() and world_size > 1:
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    loss_sum, count = total.tolist()
    if count == 0:
        raise too_small("the eval split", rows=0, row_tokens=row_tokens, needed=1, world_size=world_size)
    mean = loss_sum / count
    p = counts[counts > 0] / count
    unigram = float(-(p * p.log()).sum())
    return {
        "eval_loss": mean,
        "eval_perplexity": math.exp(min(mean, 700.0)),
        "eval_tokens": count,
        "eval_unigram_entropy": unigram,
    }
