"""training.one_rank: where a unit's shard group is one rank, its post-backward gives the gradients FSDP2 gives, bit for
bit, on real FSDP2 over one gloo rank (bf16 parameters, fp32 reduction, the gathered model held, with one, two and
three micro-batches; fp8 linears with the fp8 all-gather), and a group with a replicate dimension keeps FSDP2's.

On CUDA with NCCL the same comparison is bench/one_rank_check.py's (the GPU has its own kernels and streams).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy
from torch.distributed.tensor import DTensor

from ray_efa.core.models import model_preset
from ray_efa.training import one_rank
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model
from ray_efa.training.parallelize import ParallelPlan, parallelize, set_gradient_sync, set_hold_gathered
from tests.training.gloo_ranks import run_cases

CPU = torch.device("cpu")
WIDE_MLP = dataclasses.replace(model_preset("tiny"), name="tiny-wide-mlp", intermediate_size=1040, vocab_size=1040)
"""test_fp8.py's model: an MLP wide enough that its gate and up projections are converted to fp8."""
pytestmark = [pytest.mark.xdist_group("gloo-spawn"), pytest.mark.spawn]


def _gradients(accumulation: int, replicas: int, ours: bool, fp8: bool) -> dict:
    """One step's accumulated gradients of the tiny model, as train_step runs the micro-batches (sharded, whole)."""
    # fp8: torchao's float8 linears and fp8 all-gather (fp32 parameters: the CPU's _scaled_mm, as test_fp8.py runs it)
    policy = None if fp8 else MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = parallelize(
        build_model(WIDE_MLP if fp8 else model_preset("tiny"), seed=0, device=CPU),
        ParallelPlan(mixed_precision=policy, replicas=replicas, fp8=fp8, one_rank_gradients=ours),
    )
    if fp8:
        from torchao.float8.float8_linear import Float8Linear

        assert any(isinstance(m, Float8Linear) for m in model.modules())  # the case is fp8's, not a plain one
    data = TokenBatches(vocab_size=1024, seq_len=32, micro_batch=accumulation, seed=0, rank=0)
    inputs, labels = data.batch(1)
    sums = [0]
    real_sum = one_rank.sum_in_fp32

    def counted(a, b, fused):
        sums[0] += 1
        return real_sum(a, b, fused)

    one_rank.sum_in_fp32 = counted  # type: ignore[assignment]
    try:
        for index, (x, y) in enumerate(zip(inputs.chunk(accumulation), labels.chunk(accumulation))):
            if accumulation > 1:
                set_gradient_sync(model, index == accumulation - 1)
                set_hold_gathered(model, index < accumulation - 1)
            (model(x, y) / accumulation).backward()
    finally:
        one_rank.sum_in_fp32 = real_sum  # type: ignore[assignment]
    grads: dict[str, list[float]] = {}
    for name, p in model.named_parameters():
        assert isinstance(p, DTensor) and isinstance(p.grad, DTensor)
        grads[name] = p.grad.full_tensor().flatten().tolist()
    dtypes = {str(p.grad.dtype) for p in model.parameters() if p.grad is not None}
    return {"grads": grads, "dtypes": dtypes, "units": model.one_rank_units, "sums": sums[0]}


def _case(rank: int, accumulation: int, replicas: int, fp8: bool = False) -> dict:
    fsdp = _gradients(accumulation, replicas, ours=False, fp8=fp8)
    ours = _gradients(accumulation, replicas, ours=True, fp8=fp8)
    assert fsdp["units"] == 0
    return {
        "same": fsdp["grads"] == ours["grads"],
        "dtypes": sorted(fsdp["dtypes"] | ours["dtypes"]),
        "units": ours["units"],
        "sums": ours["sums"],
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one-rank")
    one = run_cases(_case, [(1, 1), (2, 1), (3, 1), (2, 1, True)], world=1, tmp_path=tmp)
    two = run_cases(_case, [(2, 2)], world=2, tmp_path=tmp)
    return {(1, 1): one[0], (2, 1): one[1], (3, 1): one[2], (2, 1, "fp8"): one[3], (2, 2): two[0]}


def test_one_rank_gradients_are_fsdp2s_bit_for_bit(runs):
    units = model_preset("tiny").num_hidden_layers + 1
    parameters = len(list(build_model(model_preset("tiny"), seed=0, device=CPU).parameters()))
    for accumulation in (1, 2, 3):
        run = runs[(accumulation, 1)]
        # GIVEN one rank, bf16 parameters and fp32 reduction, one, two or three micro-batches accumulated
        # THEN every unit took the one-rank path and the gradients are FSDP2's, in fp32
        assert run["units"] == units, accumulation
        assert run["same"], accumulation
        assert run["dtypes"] == ["torch.float32"]
        # and from two micro-batches on, each parameter's first two bf16 gradients were summed into fp32 at once
        assert run["sums"] == (parameters if accumulation > 1 else 0), accumulation
    # and with fp8 linears and the fp8 all-gather (fp32 parameters: autograd accumulates, nothing to sum)
    fp8 = runs[(2, 1, "fp8")]
    assert fp8["units"] == units and fp8["same"] and fp8["sums"] == 0


def test_a_replicated_group_is_left_to_fsdp2(runs):
    # GIVEN HSDP over 2 "nodes" of one rank each: the shard group is one rank, but gradients cross the replicas
    run = runs[(2, 2)]
    # THEN no unit takes the one-rank path, and the gradients are FSDP2's
    assert run["units"] == 0
    assert run["same"]


def test_the_fused_sum_is_the_cast_and_add():
    # GIVEN bf16 gradients of mixed magnitudes (where a bf16 sum would round)
    a = torch.randn(4099).bfloat16()
    b = (torch.randn(4099) * 1e-3).bfloat16()
    # THEN the compiled one-pass sum is the cast-and-add's, value for value, in fp32, and not the bf16 sum cast up
    fused = one_rank.sum_in_fp32(a, b, fused=True)
    assert fused.dtype == torch.float32
    assert torch.equal(fused, a.float() + b.float())
    assert torch.equal(one_rank.sum_in_fp32(a, b, fused=False), fused)
    assert not torch.equal(fused, (a + b).float())
