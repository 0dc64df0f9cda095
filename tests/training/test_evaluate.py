"""training.evaluate: every held-out row counts once, whatever the rows and ranks (no row on two ranks, none left out).

Each rank is run here in turn, in one process (no process group: the sums stay per rank, and the test adds them).
The split is a stand-in for Ray Data's DataIterator that keeps its one contract evaluate relies on: iter_batches
yields blocks of batch_size rows, the last one shorter. The model records the rows it is given and scores every
token 1.0, so a rank's eval_tokens is what it counted.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ray_efa.training.dataset import ROW_COLUMN
from ray_efa.training.evaluate import evaluate

ROW_TOKENS = 5  # tokens per packed row: 4 input tokens and their 4 labels


class _Split:
    """The eval split: rows whose tokens all hold the row's own number."""

    def __init__(self, rows: int) -> None:
        self.rows = np.repeat(np.arange(rows, dtype=np.int64)[:, None], ROW_TOKENS, axis=1)

    def iter_batches(self, *, batch_size: int, batch_format: str):
        assert batch_format == "numpy"
        for start in range(0, len(self.rows), batch_size):
            yield {ROW_COLUMN: self.rows[start : start + batch_size]}


class _Recorder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.seen.extend(int(row[0]) for row in inputs)
        return torch.ones((), dtype=torch.float32)


@pytest.mark.parametrize(
    ("rows", "micro_batch", "world_size", "max_batches"),
    [
        (11, 2, 3, 0),  # blocks of 6: the second holds 5 rows, the last rank gets one
        (7, 2, 3, 0),  # the second block holds 1 row: two ranks get none (each runs a row weighted 0)
        (24, 3, 4, 0),  # whole blocks
        (10, 1, 4, 0),  # one row per rank and block
        (23, 2, 4, 2),  # evalBatches 2: the first 2 blocks of 8 rows only
    ],
)
def test_every_held_out_row_is_counted_once_across_the_ranks(rows, micro_batch, world_size, max_batches):
    counted: list[float] = []
    scored: list[int] = []
    for rank in range(world_size):
        model = _Recorder()
        result = evaluate(
            model,
            _Split(rows),  # pyright: ignore[reportArgumentType]
            micro_batch=micro_batch,
            max_batches=max_batches,
            device=torch.device("cpu"),
            rank=rank,
            world_size=world_size,
            row_tokens=ROW_TOKENS,
            vocab_size=rows,
        )
        counted.append(result["eval_tokens"])
        # a rank left with no row of the last block runs one anyway, weighted 0, last: only its counted rows score
        scored.extend(model.seen[: int(result["eval_tokens"]) // (ROW_TOKENS - 1)])
    expected = rows if not max_batches else min(rows, max_batches * micro_batch * world_size)
    # THEN the ranks' tokens add up to every row's 4 labels, once
    assert sum(counted) == expected * (ROW_TOKENS - 1)
    # and the rows scored are each row once
    assert sorted(scored) == list(range(expected))


class _LabelLoss(torch.nn.Module):
    """A model whose loss is the mean of its labels: every token of row r scores r."""

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return labels.double().mean()


@pytest.mark.parametrize(("world_size", "micro_batch"), [(1, 2), (2, 2), (3, 1)])
def test_eval_loss_is_the_mean_over_every_held_out_token(world_size, micro_batch):
    # GIVEN 5 held-out rows whose tokens each score the row's number, in blocks whose last one is shorter
    # WHEN each rank evaluates its slices (the sums the all-reduce would add, added here)
    sums = [0.0, 0.0]
    for rank in range(world_size):
        result = evaluate(
            _LabelLoss(),
            _Split(5),  # pyright: ignore[reportArgumentType]
            micro_batch=micro_batch,
            max_batches=0,
            device=torch.device("cpu"),
            rank=rank,
            world_size=world_size,
            row_tokens=ROW_TOKENS,
            vocab_size=5,
        )
        sums[0] += result["eval_loss"] * result["eval_tokens"]
        sums[1] += result["eval_tokens"]
    # THEN eval_loss is the token-weighted mean, (0 + 1 + 2 + 3 + 4) / 5 rows of 4 tokens: not the mean of the
    # batches' means (2.33 on one rank: a short last batch weighs as much as a full one), nor a sum over batches
    # divided by the tokens (0.35)
    assert sums[0] / sums[1] == pytest.approx(2.0)
    assert sums[1] == 5 * (ROW_TOKENS - 1)


def test_eval_loss_and_perplexity_of_one_rank():
    result = evaluate(
        _LabelLoss(),
        _Split(5),  # pyright: ignore[reportArgumentType]
        micro_batch=2,
        max_batches=0,
        device=torch.device("cpu"),
        rank=0,
        world_size=1,
        row_tokens=ROW_TOKENS,
        vocab_size=5,
    )
    assert result["eval_loss"] == pytest.approx(2.0)
    assert result["eval_perplexity"] == pytest.approx(np.exp(2.0))
