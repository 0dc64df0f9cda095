"""training.train's step and loop on one CPU rank: gradient clipping changes the update, and gradient accumulation
reads each micro-batch once.

The optimizer is SGD with lr 1 and no momentum, so a parameter's change in one step IS its (clipped) gradient: the
update's norm is the clip value whenever the gradient's norm is larger. The runs compared elsewhere go through AdamW,
which normalizes a gradient by its own running scale and so barely reacts to a uniform rescale: a clip computed and
reported but never applied passed every test before this one.
"""

from __future__ import annotations

import math

import pytest
import torch

from ray_efa.core.models import model_preset
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model
from ray_efa.training.train import run_steps, train_step
from tests.core.shapes import fixed_training

CPU = torch.device("cpu")
SEQ = 16


def _update_norm(before: list[torch.Tensor], model: torch.nn.Module) -> float:
    return math.sqrt(sum(float(((b - p.detach()) ** 2).sum()) for b, p in zip(before, model.parameters(), strict=True)))


@pytest.mark.parametrize("clip", [0.05, 0.5])
def test_a_gradient_above_the_clip_value_moves_the_weights_by_exactly_the_clip_value(clip):
    # GIVEN the tiny model, SGD at lr 1 and one batch of random tokens (the gradient's norm is several times the clip)
    model = build_model(model_preset("tiny"), seed=0, device=CPU)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    batch = TokenBatches(vocab_size=1024, seq_len=SEQ, micro_batch=2, seed=0, rank=0).batch(1)
    # WHEN one step runs with gradClip `clip`
    result = train_step(model, optimizer, batch, lr=1.0, grad_clip=clip, device=CPU)
    # THEN the norm reported is the gradient's before clipping, above the clip value
    assert result.grad_norm is not None and float(result.grad_norm) > 2 * clip
    # and the weights moved by the clipped gradient: an update whose norm is the clip value, not the gradient's norm
    assert _update_norm(before, model) == pytest.approx(clip, rel=1e-3)


def test_without_a_clip_the_update_is_the_whole_gradient():
    model = build_model(model_preset("tiny"), seed=0, device=CPU)
    before = [p.detach().clone() for p in model.parameters()]
    batch = TokenBatches(vocab_size=1024, seq_len=SEQ, micro_batch=2, seed=0, rank=0).batch(1)
    model(*batch).backward()
    gradient = math.sqrt(sum(float((p.grad**2).sum()) for p in model.parameters() if p.grad is not None))
    model.zero_grad(set_to_none=True)
    result = train_step(model, torch.optim.SGD(model.parameters(), lr=1.0), batch, lr=1.0, grad_clip=0.0, device=CPU)
    assert result.grad_norm is None  # gradClip 0: no norm computed
    assert _update_norm(before, model) == pytest.approx(gradient, rel=1e-4)


class _Accumulating(torch.nn.Module):
    """A stand-in for the sharded model (run_steps switches its gradient sync per micro-batch, as FSDP2's does); its
    loss depends on the tokens, so every micro-batch has a gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(()))
        self.syncs: list[bool] = []

    def set_requires_gradient_sync(self, sync: bool, *, recurse: bool = True) -> None:
        self.syncs.append(sync)

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.weight * labels.float().mean()


@pytest.mark.parametrize("k", [2, 4])
def test_gradient_accumulation_reads_each_micro_batch_once_across_consecutive_steps(k):
    # GIVEN gradAccumulation k on random tokens (the benchmark plan: a micro-batch is a function of its index)
    t = fixed_training(model="tiny", steps=5, warmup_steps=1, grad_accumulation=k, seq_len=SEQ)
    tokens = TokenBatches(vocab_size=1024, seq_len=SEQ, micro_batch=2, seed=0, rank=0)
    model = _Accumulating()
    read: list[int] = []
    steps: list[int] = []

    class Data:
        def batch(self, index):
            read.append(index)
            return tokens.batch(index)

    class Reporter:
        def step(self, step, loss, lr, grad_norm=None):
            steps.append(step)

    # WHEN steps 3 to 5 run (a resumed run: micro-batches go on where step 2 left them)
    run_steps(
        model, torch.optim.SGD(model.parameters(), lr=1.0), Data(), Reporter(), t, start=2, last_step=5, device=CPU
    )
    # THEN each step read k micro-batches of its own, none shared with another step: the micro-batches an
    # uninterrupted run reads from step 3 on, each once, in order
    per_step = [read[i : i + k] for i in range(0, len(read), k)]
    assert steps == [3, 4, 5] and len(per_step) == 3
    assert all(len(set(a) & set(b)) == 0 for a in per_step for b in per_step if a is not b)
    assert read == list(range(2 * k + 1, 5 * k + 1))
    # and the gradients crossed the network only in each step's last micro-batch
    assert model.syncs == ([False] * (k - 1) + [True]) * 3
