"""A resume after the plan changed its mind (training.checkpoint.remap_train_state): the data position re-mapped in
samples, or a refusal naming the setting; pure functions over train_state.json's contents."""

from __future__ import annotations

import numpy as np
import pytest

from ray_efa.core.settings import Settings, SettingsError
from ray_efa.core.strategy import resolve
from ray_efa.training import checkpoint
from ray_efa.training.checkpoint import remap_train_state, run_shape
from ray_efa.training.dataset import ROW_COLUMN, ShardBatches


def _shape(world: int, micro: int, accumulation: int, seq: int = 2048) -> dict[str, int]:
    return {"world_size": world, "micro_batch": micro, "seq_len": seq, "grad_accumulation": accumulation}


def test_the_same_shape_resumes_as_saved():
    saved = {"step": 10, "data": {"epoch": 0, "consumed": 40}, "shape": _shape(8, 4, 4)}
    assert remap_train_state(saved, _shape(8, 4, 4)) == saved


def test_a_resized_cluster_with_the_same_global_batch_continues_at_the_same_sample():
    # GIVEN 10 steps on 8 ranks of 4 x 4 (640 sequences per rank consumed... 40 micro-batches of 4 each)
    saved = {"step": 10, "data": {"epoch": 0, "consumed": 40}, "shape": _shape(8, 4, 4)}
    # WHEN the cluster doubles and auto halves the accumulation (the same 128 sequences a step)
    remapped = remap_train_state(saved, _shape(16, 8, 1))
    # THEN the step stays and each rank skips the same share of the samples: 40 x 4 x 8 = 1280 = 10 x 8 x 16
    assert remapped["step"] == 10 and remapped["data"] == {"epoch": 0, "consumed": 10}
    assert remapped["shape"] == _shape(16, 8, 1)


def test_a_changed_global_batch_is_refused_naming_global_batch_tokens():
    saved = {"step": 10, "data": {"epoch": 0, "consumed": 40}, "shape": _shape(8, 4, 4)}
    with pytest.raises(SettingsError) as raised:
        remap_train_state(saved, _shape(8, 2, 1))
    (problem,) = raised.value.problems
    assert problem.key == "globalBatchTokens" and "must be 262,144 tokens to resume this run" in problem.message


def test_a_changed_sequence_length_is_refused_naming_seq_len():
    saved = {"step": 3, "shape": _shape(1, 4, 4)}
    with pytest.raises(SettingsError) as raised:
        remap_train_state(saved, _shape(1, 8, 4, seq=1024))
    assert [p.key for p in raised.value.problems] == ["seqLen"]


def test_a_position_the_new_micro_batch_cannot_divide_is_refused_naming_micro_batch():
    saved = {"step": 1, "data": {"epoch": 2, "consumed": 3}, "shape": _shape(2, 1, 6)}  # 6 samples consumed
    with pytest.raises(SettingsError) as raised:
        remap_train_state(saved, _shape(1, 4, 3))  # 12 a step as before, but 6 is no whole number of 4s
    assert [p.key for p in raised.value.problems] == ["microBatch"]


def test_a_checkpoint_without_a_shape_resumes_as_before():
    saved = {"step": 5, "data": {"epoch": 0, "consumed": 5}}
    assert remap_train_state(saved, _shape(8, 4, 4)) == saved


def test_the_shape_recorded_is_the_decided_one():
    t = resolve(Settings.from_context({"gpuInstanceType": "p5.48xlarge", "gpuNodeCount": 4})).training
    shape = run_shape(t, 32)
    assert shape["micro_batch"] * shape["grad_accumulation"] * 32 * shape["seq_len"] == t.global_batch_tokens


class _Shard:
    """A rank's shard as ShardBatches reads it (ray.data.DataIterator.iter_batches: batches of exactly batch_size
    rows of the shard's deterministic order, the last one shorter), over rows whose every token is the sample's id.
    Ray's own iterator is run by the Ray tests (tests/training/test_fine_tune_ray.py); here, without Ray, the order."""

    def __init__(self, samples: int, row_tokens: int) -> None:
        self.rows = np.repeat(np.arange(samples, dtype=np.int32)[:, None], row_tokens, axis=1)

    def iter_batches(self, *, batch_size: int, batch_format: str, drop_last: bool):
        assert batch_format == "numpy" and not drop_last
        for start in range(0, len(self.rows), batch_size):
            yield {ROW_COLUMN: self.rows[start : start + batch_size]}


def _trained(batches: ShardBatches, micro_batches: int) -> list[int]:
    """The sample ids of the next micro-batches (each row's first input token is its id)."""
    return [int(row[0]) for _ in range(micro_batches) for row in batches.next()[0]]


@pytest.mark.parametrize(("before", "after"), [(2, 4), (4, 2), (8, 16), (16, 8)])
def test_a_resume_at_another_micro_batch_trains_each_sample_of_the_epoch_exactly_once(before, after):
    # GIVEN an epoch of 640 samples on one rank, cut after sample 96 (a checkpoint at microBatch `before`), resumed
    # at microBatch `after` with the same global batch (gradient accumulation makes up the difference)
    samples, cut, row_tokens = 640, 96, 5
    first = ShardBatches(_Shard(samples, row_tokens), micro_batch=before, row_tokens=row_tokens, seed=7)
    trained = _trained(first, cut // before)
    old = {"world_size": 1, "micro_batch": before, "seq_len": 4, "grad_accumulation": 16 // before}
    new = {**old, "micro_batch": after, "grad_accumulation": 16 // after}
    state = checkpoint.remap_train_state({"shape": old, "data": first.state()}, new)["data"]
    resumed = ShardBatches(_Shard(samples, row_tokens), micro_batch=after, row_tokens=row_tokens, seed=7, **state)
    # WHEN the resumed run trains the rest of the epoch
    trained += _trained(resumed, (samples - cut) // after)
    # THEN every sample of the epoch was trained once: none twice, none skipped
    assert sorted(trained) == list(range(samples))
    assert resumed.epoch == 0  # still the first epoch
    # and the order is the one an uninterrupted run at either micro batch trains (a seeded order of the samples)
    whole = _trained(
        ShardBatches(_Shard(samples, row_tokens), micro_batch=after, row_tokens=row_tokens, seed=7), samples // after
    )
    assert trained == whole and whole != list(range(samples))


def test_each_epoch_trains_every_sample_once_in_an_order_of_its_own():
    # GIVEN a rank's shard of 512 samples (two shuffle windows), read at microBatch 4 for two whole epochs
    samples, micro, row_tokens = 512, 4, 5
    batches = ShardBatches(_Shard(samples, row_tokens), micro_batch=micro, row_tokens=row_tokens, seed=7)
    first = _trained(batches, samples // micro)
    second = _trained(batches, samples // micro)
    # THEN each epoch trains every sample once, and the second in another order than the first (the shuffle is seeded
    # by the epoch too: the same order every epoch would present the samples in one fixed sequence all run long)
    assert sorted(first) == sorted(second) == list(range(samples))
    assert second != first
    assert sum(a == b for a, b in zip(first, second, strict=True)) < samples // 10
    # and the order of an epoch is the same on every run: a resume re-reads the epoch it stopped in as it was
    again = ShardBatches(_Shard(samples, row_tokens), micro_batch=micro, row_tokens=row_tokens, seed=7, epoch=1)
    assert _trained(again, samples // micro) == second


def test_the_position_after_an_epoch_rollover_counts_the_new_epochs_micro_batches():
    # GIVEN an epoch of 10 micro-batches of 2 samples (21 samples: the last, partial micro-batch is dropped)
    batches = ShardBatches(_Shard(21, 5), micro_batch=2, row_tokens=5, seed=3)
    _trained(batches, 10)
    assert batches.state() == {"epoch": 0, "consumed": 10}
    # WHEN 3 micro-batches of the next epoch are read
    trained = _trained(batches, 3)
    # THEN the position is 3 micro-batches into epoch 1: a resume from it goes on with the 4th
    assert batches.state() == {"epoch": 1, "consumed": 3}
    state = batches.state()
    resumed = ShardBatches(
        _Shard(21, 5), micro_batch=2, row_tokens=5, seed=3, epoch=state["epoch"], consumed=state["consumed"]
    )
    rest = _trained(resumed, 7)
    assert sorted(trained + rest) == sorted(set(trained + rest)) and len(trained + rest) == 20
    assert resumed.state() == {"epoch": 1, "consumed": 10}
