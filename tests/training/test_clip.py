"""Gradient clipping folded into fused AdamW (training.train.clip_and_step): the same step as clip_grad_norm_ and then
the optimizer, one pass over the gradients fewer.

fused AdamW runs on CPU too (torch >= 2.4), so the path a GPU job takes is exercised here: on a plain module, and on
FSDP2's DTensor shards over 2 gloo ranks, where the norm is the whole model's and the divisor a replicated scalar.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch.distributed.tensor import DTensor

from ray_efa.core.models import model_preset
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model
from ray_efa.training.parallelize import ParallelPlan, parallelize
from ray_efa.training.train import clip_and_step
from tests.training.gloo_ranks import run_cases

CPU = torch.device("cpu")
pytestmark = pytest.mark.xdist_group("gloo-spawn")


def _fused(model: torch.nn.Module) -> torch.optim.AdamW:
    return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, fused=True)


def _whole(tensor: torch.Tensor | None) -> torch.Tensor:
    """The whole tensor: a DTensor's gathered from its shards, a plain one as it is (None is an error here)."""
    assert tensor is not None
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _reference_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, clip: float) -> torch.Tensor:
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return norm


@pytest.mark.parametrize("clip", [0.5, 1e4], ids=["clipped", "under-the-limit"])
def test_fused_clip_takes_clip_grad_norms_step(clip):
    # GIVEN two copies of a model, each with fused AdamW, and gradients whose norm is about 200
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    ours, reference = copy.deepcopy(model), copy.deepcopy(model)
    ours_opt, reference_opt = _fused(ours), _fused(reference)
    for _ in range(3):
        x = torch.randn(8, 16)
        for m in (ours, reference):
            m(x).pow(2).sum().mul(10).backward()
        # WHEN one steps through clip_and_step and the other clips with clip_grad_norm_ and then steps
        norm = clip_and_step(ours, ours_opt, clip)
        expected = _reference_step(reference, reference_opt, clip)
        # THEN both report the norm before clipping, leave the same clipped gradients (fused AdamW writes the divided
        # gradients back, as clip_grad_norm_ multiplies them in place) and take the same step (a divide against a
        # multiply: rounding only)
        assert float(_whole(norm)) == pytest.approx(float(expected), rel=1e-6)
        for a, b in zip(ours.parameters(), reference.parameters()):
            # (after the first step the parameters differ by rounding, and so do the next gradients: atol)
            grad, expected_grad = _whole(a.grad), _whole(b.grad)
            torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-5 * float(expected_grad.abs().max()))
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
        ours_opt.zero_grad()
        reference_opt.zero_grad()
    assert (
        getattr(ours_opt, "grad_scale", None) is None
    )  # nothing left on the optimizer for a later step (or a checkpoint)


def test_without_clipping_it_steps_and_reports_no_norm():
    model = torch.nn.Linear(4, 4)
    optimizer = _fused(model)
    before = model.weight.detach().clone()
    model(torch.ones(2, 4)).sum().backward()
    assert clip_and_step(model, optimizer, 0.0) is None
    assert not torch.equal(model.weight, before)


def _sharded_case(rank: int, clip: float, replicas: int = 1) -> dict:
    steps, grad_differences = [], []
    plan = ParallelPlan(replicas=replicas)
    models = [parallelize(build_model(model_preset("tiny"), seed=0, device=CPU), plan) for _ in range(2)]
    optimizers = [_fused(m) for m in models]
    data = TokenBatches(vocab_size=1024, seq_len=32, micro_batch=2, seed=0, rank=rank)
    for step in range(1, 4):
        inputs, labels = data.batch(step)
        for m in models:
            m(inputs, labels).backward()
        norm = clip_and_step(models[0], optimizers[0], clip)
        expected = _reference_step(models[1], optimizers[1], clip)
        grads = [(_whole(a.grad), _whole(b.grad)) for a, b in zip(*(m.parameters() for m in models))]
        grad_differences.append(max(float((a - b).abs().max() / b.abs().max().clamp(min=1e-30)) for a, b in grads))
        for o in optimizers:
            o.zero_grad()
        steps.append([float(_whole(norm)), float(_whole(expected))])
    differences = [
        float((_whole(a) - _whole(b)).abs().max()) for a, b in zip(models[0].parameters(), models[1].parameters())
    ]
    sharded = all(isinstance(p, DTensor) for p in models[0].parameters())
    return {
        "hsdp": bool(getattr(models[0], "hsdp", False)),
        "norms": steps,
        "grad_relative_difference": max(grad_differences),
        "max_difference": max(differences),
        "sharded": sharded,
    }


@pytest.mark.spawn  # gloo ranks
def test_fused_clip_on_fsdp_shards_takes_clip_grad_norms_step(tmp_path):
    # GIVEN the tiny model sharded by FSDP2 over 2 gloo ranks, twice, each with fused AdamW over DTensor shards
    clipped, under = run_cases(_sharded_case, [(0.5,), (1e4,)], world=2, tmp_path=tmp_path)
    # and HSDP over 2 "nodes" of 2 ranks (the norm over a 2-D mesh's shards and replicas), clipped
    (hsdp,) = run_cases(_sharded_case, [(0.5, 2)], world=4, tmp_path=tmp_path)
    assert hsdp["hsdp"] and not clipped["hsdp"]
    for run in (clipped, under, hsdp):
        assert run["sharded"]
        # THEN clip_and_step reports the whole model's norm and steps as clip_grad_norm_ + step, shard by shard
        for ours, expected in run["norms"]:
            assert ours == pytest.approx(expected, rel=1e-6)
        assert run["grad_relative_difference"] < 1e-5  # the clipped gradients, against each tensor's largest
        # Adam moves a parameter whose gradient is ~1e-10 (the k biases: attention is invariant to them) by
        # g / (|g| + eps), where one rounding of g shows at 1e-5: the parameters agree to 1% of a step (lr 1e-2)
        assert run["max_difference"] < 1e-4
    assert clipped["norms"][0][0] > 0.5  # the clip was below the norm: the clipped case clipped
