"""Random token batches: a pure function of (seed, rank, step), so resumed runs see the same data."""

import torch

from ray_efa.training.data import TokenBatches


def _batches(**overrides):
    args = {"vocab_size": 1024, "seq_len": 16, "micro_batch": 3, "seed": 0, "rank": 0, "pool_size": 0, **overrides}
    return TokenBatches(**args)


def test_a_batch_is_inputs_and_next_token_labels_in_range():
    inputs, labels = _batches().batch(1)
    assert inputs.shape == labels.shape == (3, 16) and inputs.dtype == torch.int64
    # labels are the inputs shifted by one token
    assert torch.equal(inputs[:, 1:], labels[:, :-1])
    assert 0 <= int(inputs.min()) and int(labels.max()) < 1024


def test_the_same_seed_rank_and_step_give_the_same_batch_in_any_order():
    # GIVEN two independent generators, one asked for steps 1..5, the other only for step 5 (a resumed run)
    first, resumed = _batches(), _batches()
    for step in range(1, 5):
        first.batch(step)
    # THEN step 5 is the same batch
    assert all(torch.equal(a, b) for a, b in zip(first.batch(5), resumed.batch(5)))


def test_steps_ranks_and_seeds_each_change_the_batch():
    base = _batches().batch(1)[0]
    assert not torch.equal(base, _batches().batch(2)[0])
    assert not torch.equal(base, _batches(rank=1).batch(1)[0])
    assert not torch.equal(base, _batches(seed=1).batch(1)[0])


def test_a_pool_repeats_its_sequences_so_they_can_be_memorized():
    # GIVEN a pool of 4 sequences per rank
    pool = _batches(pool_size=4)
    # WHEN 50 batches are drawn
    rows = {tuple(row.tolist()) for step in range(1, 51) for row in pool.batch(step)[0]}
    # THEN every row comes from the 4 sequences of the pool (and the pool is used, not one sequence)
    assert 2 <= len(rows) <= 4
    # and another rank has its own pool
    other = {tuple(row.tolist()) for step in range(1, 51) for row in _batches(pool_size=4, rank=1).batch(step)[0]}
    assert rows.isdisjoint(other)
