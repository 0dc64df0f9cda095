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
