"""The held-out loss: every rank runs its eval shard (Ray Train's `get_dataset_shard("eval")`) through the model
without gradients; the token-weighted mean over all ranks is eval_loss, and exp(eval_loss) the perplexity.

Beside it, eval_unigram_entropy: the entropy of the held-out target tokens' own frequencies, the loss of the best
model that ignores context (it even knows the held-out counts). An eval loss below it is learned context, not just
which tokens are common; ln(vocab) would be a much weaker bar, since any model learns the unigram in a few steps.

The eval shards are equal (DataConfig splits with equal=True), so every rank runs the same number of forwards, as
FSDP's all-gathers require. The partial last micro-batch of each shard is evaluated too: no held-out row is skipped.
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
def evaluate(model: torch.nn.Module, shard: DataIterator, *, micro_batch: int, max_batches: int,
             device: torch.device, world_size: int, row_tokens: int, vocab_size: int) -> dict[str, float]:
    """{"eval_loss", "eval_perplexity", "eval_tokens", "eval_unigram_entropy"} over the whole eval split (or
    `max_batches` micro-batches of each shard); the model is back in training mode afterwards."""
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)  # sum of token losses, tokens
    counts = torch.zeros(vocab_size, dtype=torch.float64, device=device)  # of each target token (the unigram)
    try:
        for index, batch in enumerate(shard.iter_batches(batch_size=micro_batch, batch_format="numpy")):
            if max_batches and index >= max_batches:
                break
            tokens = torch.from_numpy(batch[ROW_COLUMN].astype(np.int64))
            inputs, labels = tokens[:, :-1].to(device), tokens[:, 1:].to(device)
            loss = model(inputs, labels)  # the mean over this batch's tokens
            total += torch.stack([loss.double() * labels.numel(), torch.tensor(float(labels.numel()), device=device,
                                                                               dtype=torch.float64)])
            counts += torch.bincount(labels.reshape(-1), minlength=vocab_size).double()
    finally:
        model.train()
    if dist.is_initialized() and world_size > 1:
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    loss_sum, count = total.tolist()
    if count == 0:
        raise too_small("the eval split", rows=0, row_tokens=row_tokens, needed=world_size, world_size=world_size)
    mean = loss_sum / count
    p = counts[counts > 0] / count
    unigram = float(-(p * p.log()).sum())
    return {"eval_loss": mean, "eval_perplexity": math.exp(min(mean, 700.0)), "eval_tokens": count,
            "eval_unigram_entropy": unigram}
