"""training.checkpoint on one CPU rank: what a save writes, a restore puts back, AdamW's state included.

Ray Train's two calls are the only stand-ins: `ray.train.report` keeps the folder it is handed (Ray would upload it to
the run's storage), `ray.train.get_checkpoint` hands that folder back as a real `ray.train.Checkpoint` (Ray would
hand the run's latest). The slow Ray tests (test_fine_tune_ray.py, test_train_ray.py) run the real ones; this test
names a lost optimizer state in seconds.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from ray_efa.core.models import model_preset
from ray_efa.training import checkpoint
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model
from ray_efa.training.train import build_optimizer, train_step
from tests.core.shapes import fixed_training

CPU = torch.device("cpu")


def _adamw_state(optimizer: torch.optim.Optimizer) -> list[dict[str, torch.Tensor]]:
    return [
        {key: torch.as_tensor(value).clone() for key, value in optimizer.state[p].items()}
        for group in optimizer.param_groups
        for p in group["params"]
    ]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")  # one process: DCP says so
def test_a_restore_puts_back_the_weights_adamw_state_and_the_train_state(tmp_path, monkeypatch):
    import ray.train

    # GIVEN the tiny model after 2 AdamW steps, saved at step 2 with a data position
    t = fixed_training(model="tiny", seq_len=16, learning_rate=1e-2)
    tokens = TokenBatches(vocab_size=1024, seq_len=16, micro_batch=2, seed=0, rank=0)
    model = build_model(model_preset("tiny"), seed=0, device=CPU)
    optimizer = build_optimizer(model, t, CPU)
    for step in (1, 2):
        train_step(model, optimizer, tokens.batch(step), lr=1e-2, grad_clip=1.0, device=CPU)
    saved = tmp_path / "checkpoint_000002"

    def report(metrics, *, checkpoint, checkpoint_dir_name=None):
        shutil.copytree(checkpoint.path, saved)

    monkeypatch.setattr(ray.train, "report", report)
    checkpoint.save_and_report(
        {"loss": 1.0},
        step=2,
        model=model,
        optimizer=optimizer,
        rank=0,
        train_state={"data": {"epoch": 1, "consumed": 4}},
    )
    # WHEN a fresh model (other initial weights) and a fresh AdamW restore it
    monkeypatch.setattr(ray.train, "get_checkpoint", lambda: ray.train.Checkpoint.from_directory(str(saved)))
    fresh = build_model(model_preset("tiny"), seed=1, device=CPU)
    fresh_optimizer = build_optimizer(fresh, t, CPU)
    step, train_state = checkpoint.restore_with_state(fresh, fresh_optimizer)
    # THEN the step, the data position, the weights and AdamW's moments and step counts are the saved ones
    assert step == 2 and train_state["data"] == {"epoch": 1, "consumed": 4}
    for mine, theirs in zip(model.parameters(), fresh.parameters(), strict=True):
        torch.testing.assert_close(theirs, mine, rtol=0, atol=0)
    restored, expected = _adamw_state(fresh_optimizer), _adamw_state(optimizer)
    assert [sorted(s) for s in restored] == [sorted(s) for s in expected]
    assert all(float(s["step"]) == 2 for s in restored)
    for got, want in zip(restored, expected, strict=True):
        for key in want:
            torch.testing.assert_close(got[key], want[key], rtol=0, atol=0)
    # and the next step lands exactly where the uninterrupted run's does (a lost state would warm AdamW up again)
    for m, o in ((model, optimizer), (fresh, fresh_optimizer)):
        train_step(m, o, tokens.batch(3), lr=1e-2, grad_clip=1.0, device=CPU)
    for mine, theirs in zip(model.parameters(), fresh.parameters(), strict=True):
        torch.testing.assert_close(theirs, mine, rtol=0, atol=0)


def test_no_checkpoint_starts_from_step_0(monkeypatch):
    import ray.train

    monkeypatch.setattr(ray.train, "get_checkpoint", lambda: None)
    model = build_model(model_preset("tiny"), seed=0, device=CPU)
    optimizer = build_optimizer(model, fixed_training(model="tiny"), CPU)
    assert checkpoint.restore_with_state(model, optimizer) == (0, {})
    assert not optimizer.state  # nothing created: AdamW starts from its first step
