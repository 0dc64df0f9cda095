"""The learning-rate schedule, and the test-only fault hooks of train_func (training.faults)."""

import math

import pytest

from ray_efa.core.settings import TrainingSettings
from ray_efa.training.faults import FaultInjection, InjectedFault
from ray_efa.training.train import learning_rate


@pytest.mark.parametrize(
    ("step", "expected"),
    # warm-up, peak, first decay step, half-way down the cosine, the floor at the last step
    [(1, 0.2), (5, 1.0), (6, 0.1 + 0.45 * (1 + math.cos(math.pi / 20))), (15, 0.55), (25, 0.1)],
)
def test_linear_warm_up_then_cosine_to_a_tenth(step, expected):
    t = TrainingSettings(steps=25, warmup_steps=5, learning_rate=1.0)
    assert learning_rate(step, t) == pytest.approx(expected)


def test_warm_up_longer_than_the_run_is_cut_to_the_run():
    t = TrainingSettings(steps=3, warmup_steps=5, learning_rate=1.0)
    assert [learning_rate(s, t) for s in (1, 2, 3)] == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_injected_fault_fires_on_its_rank_and_step_only_in_an_attempt_from_scratch():
    faults = FaultInjection.from_config({"_faults": {"raise_at_step": 5, "raise_on_rank": 1}})
    assert faults is not None
    hook = faults.hook(rank=1, start_step=0)
    assert hook is not None
    with pytest.raises(InjectedFault, match="step 5 on rank 1"):
        hook(5)
    hook(4)  # another step
    assert faults.hook(rank=0, start_step=0) is None  # another rank: no hook at all
    assert faults.hook(rank=1, start_step=4) is None  # the restarted attempt
    assert faults.last_step(10) == 10


def test_a_run_without_faults_installs_nothing_and_a_stop_ends_the_loop_early():
    assert FaultInjection.from_config({}) is None  # every real run: no hook, no check in the loop
    stop = FaultInjection.from_config({"_faults": {"stop_after_step": 3}})
    assert stop is not None and stop.last_step(6) == 3 and stop.hook(rank=1, start_step=0) is None


def test_a_resumed_loop_goes_on_with_the_schedule_and_the_micro_batches_where_it_stopped():
    # GIVEN a run of 25 steps (warm-up 5, peak 1.0) resumed after step 15, on a plain (unsharded, so one micro-batch a
    # step) tiny model: the loop itself (training.train.run_steps), with what it hands the data and the reporter recorded
    import torch

    from ray_efa.core.models import model_preset
    from ray_efa.training.data import TokenBatches
    from ray_efa.training.model import build_model
    from ray_efa.training.train import build_optimizer, run_steps
    from tests.core.shapes import fixed_training

    cpu = torch.device("cpu")
    t = fixed_training(model="tiny", steps=25, warmup_steps=5, learning_rate=1.0, grad_accumulation=1, seq_len=16)
    model = build_model(model_preset("tiny"), seed=0, device=cpu)
    tokens = TokenBatches(vocab_size=1024, seq_len=16, micro_batch=2, seed=0, rank=0)
    read, said = [], []

    class Data:
        def batch(self, index):
            read.append(index)
            return tokens.batch(index)

    class Said:
        def step(self, step, loss, lr, grad_norm=None):
            said.append((step, lr))

    # WHEN it runs steps 16 and 17
    run_steps(model, build_optimizer(model, t, cpu), Data(), Said(), t, start=15, last_step=17, device=cpu)
    # THEN each step runs at its own step's learning rate (step 16 half-way down the cosine, not a new warm-up) on
    # its own micro-batches (16 and 17: as an uninterrupted run)
    assert said == [(16, pytest.approx(learning_rate(16, t))), (17, pytest.approx(learning_rate(17, t)))]
    assert said[0][1] == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 11 / 20)))
    assert read == [16, 17]
