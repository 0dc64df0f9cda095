"""Random token batches, seeded per rank and per step.

Batch `step` of rank `r` is a pure function of (seed, r, step), so a run resumed at step k sees exactly the batches
an uninterrupted run sees from step k on, with no data-loader state in the checkpoint. With `pool_size` > 0 each rank
draws its batches from a fixed pool of random sequences (also a pure function of seed and rank), which a model can
memorize: the local run uses it to show a falling loss, since fresh random tokens carry nothing to learn.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["TokenBatches"]

# Stream ids keep the pool's generator apart from the per-step generators.
_POOL_STREAM, _STEP_STREAM = 0, 1


class TokenBatches:
    """Batches of `micro_batch` sequences of `seq_len` tokens: inputs and their next-token labels."""

    def __init__(self, *, vocab_size: int, seq_len: int, micro_batch: int, seed: int, rank: int, pool_size: int = 0):
        self.vocab_size: int
        self.seq_len: int
        self.micro_batch: int
        self.seed: int
        self.rank: int
        self.pool_size: int
        self.vocab_size, self.seq_len, self.micro_batch = vocab_size, seq_len, micro_batch
        self.seed, self.rank, self.pool_size = seed, rank, pool_size
        # One token more than seq_len per sequence: inputs are tokens[:-1], labels tokens[1:].
        self._pool = self._tokens(_POOL_STREAM, 0, pool_size) if pool_size else None

    def _tokens(self, stream: int, step: int, rows: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.rank, stream, step])
        return rng.integers(0, self.vocab_size, size=(rows, self.seq_len + 1), dtype=np.int64)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids, labels) of `step`, each (micro_batch, seq_len) int64 on the CPU."""
        if self._pool is None:
            tokens = self._tokens(_STEP_STREAM, step, self.micro_batch)
        else:
            rows = np.random.default_rng([self.seed, self.rank, _STEP_STREAM, step]).integers(
                0, self.pool_size, self.micro_batch
            )
            tokens = self._pool[rows]
        tokens = torch.from_numpy(tokens)
        return tokens[:, :-1], tokens[:, 1:]
