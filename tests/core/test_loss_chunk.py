"""lossChunkSize auto: the plan takes the largest chunk that fits, and prices each chunk's measured cost."""

import pytest

from ray_efa.core import catalog, memory, perf, strategy
from ray_efa.core.problems import SettingsError
from ray_efa.core.settings import Settings
from tests.core.shapes import fixed_training

H100 = catalog.GPUS["H100"]


def test_each_chunk_costs_what_the_h100_measured():
    # GIVEN the default job's micro-batch on one H100 (16 x 2048 tokens): 32 chunks of 1024 against 8 of 4096
    small = fixed_training(model="qwen2.5-1.5b", micro_batch=16, seq_len=2048, loss_chunk_size=1024)
    large = small.model_copy(update={"loss_chunk_size": 4096})
    # THEN 1024 is the reference the compute constants were fitted at, and 4096 saves the 66.8 ms a micro-batch the
    # H100 measured (1.3056 s against 1.1720 s a step of two micro-batches: docs/BENCHMARKS.md) with the loss of the
    # time, scaled by what bench/loss_chunk.py measured the fused sum to leave of a chunk's cost (0.464 / 1.090 ms)
    assert perf.loss_chunk_seconds(small.preset, small, H100) == 0.0
    saved = (1.3056 - 1.1720) / 2 * 0.464 / 1.090
    assert perf.loss_chunk_seconds(large.preset, large, H100) == pytest.approx(-saved, rel=0.01)
    unchunked = small.model_copy(update={"loss_chunk_size": 0})
    assert perf.loss_chunk_seconds(unchunked.preset, unchunked, H100) == 0.0  # UNCHUNKED_LOSS_SPEED prices that


def test_compiled_chunks_hold_the_measured_bytes_beyond_1024_tokens():
    # the H100's peak allocated rose 2.33 GiB from lossChunkSize 1024 to 4096 (3072 x 151,936 more logits)
    at = {
        c: memory.estimate_for(
            fixed_training(model="qwen2.5-1.5b", micro_batch=16, seq_len=2048, loss_chunk_size=c, precision="fp8"),
            world_size=1,
            gpu=H100,
        ).logits_gib
        for c in (1024, 4096)
    }
    assert at[4096] - at[1024] == pytest.approx(2.33, abs=0.02)


def test_the_default_job_on_an_h100_takes_the_largest_chunk_that_fits():
    settings = Settings.from_context({"gpuInstanceType": "p5.4xlarge", "gpuNodeCount": 1})
    t = strategy.resolve(settings).training
    # fp8 without checkpointing; micro 16 plans over AUTO_MEMORY_SHARE at any chunk (77.98 GiB at 1024 of the 75.67
    # it allows) and the shape is micro 8, where the largest chunk, 4096, fits
    assert (t.precision, t.micro_batch, t.activation_checkpointing, t.loss_chunk_size) == ("fp8", 8, False, 4096)
    with pytest.raises(SettingsError, match="microBatch=8"):  # micro 16 at chunk 4096 plans over the card
        strategy.check_fits(
            settings.replace(
                microBatch=16, gradAccumulation=16, precision="fp8", activationCheckpointing=False, lossChunkSize=4096
            )
        )
    chosen = memory.estimate(strategy.resolve(settings), "fsdp")
    assert chosen.total_gib <= strategy.AUTO_MEMORY_SHARE * chosen.capacity_gib


def test_a_chunk_that_is_set_is_kept():
    settings = Settings.from_context({"gpuInstanceType": "p5.4xlarge", "gpuNodeCount": 1, "lossChunkSize": 1024})
    assert strategy.resolve(settings).training.loss_chunk_size == 1024
    zero = Settings.from_context({"gpuInstanceType": "p5.4xlarge", "gpuNodeCount": 1, "lossChunkSize": 0})
    assert strategy.resolve(zero).training.loss_chunk_size == 0


def test_auto_counts_as_the_reference_chunk_before_the_plan_decides():
    assert fixed_training(loss_chunk_size="auto").loss_chunk == 1024
