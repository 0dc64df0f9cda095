"""bench/one_rank_grads.py, a candidate lever for one GPU: FSDP2's post-backward without its one-rank copies gives the
gradients FSDP2 gives, bit for bit, on real FSDP2 over one gloo rank (bf16 parameters, fp32 reduction, the gathered
model held, with and without accumulation; fp8 linears with the fp8 all-gather), and leaves a group with a replicate dimension to FSDP2.

Its speed is a GPU's to show (bench/step_profile.py's `r1g` variant); here only that it changes nothing else.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import pytest
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy
from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
from torch.distributed.tensor import DTensor

from ray_efa.core.models import model_preset
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model
from ray_efa.training.parallelize import ParallelPlan, parallelize, set_gradient_sync, set_hold_gathered
from tests.load_script import load_script
from tests.training.gloo_ranks import run_cases

CPU = torch.device("cpu")
WIDE_MLP = dataclasses.replace(model_preset("tiny"), name="tiny-wide-mlp", intermediate_size=1040, vocab_size=1040)
"""test_fp8.py's model: an MLP wide enough that its gate and up projections are converted to fp8."""
ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.xdist_group("gloo-spawn"), pytest.mark.spawn]


def _gradients(
    accumulation: int, replicas: int, patched: bool, fp8: bool
) -> tuple[dict[str, list[float]], set[str], int]:
    """One step's accumulated gradients of the tiny model, as train_step runs the micro-batches (sharded, whole)."""
    one_rank_grads = load_script(ROOT / "bench" / "one_rank_grads.py")
    # fp8: torchao's float8 linears and fp8 all-gather (fp32 parameters: the CPU's _scaled_mm, as test_fp8.py runs it)
    policy = None if fp8 else MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = parallelize(
        build_model(WIDE_MLP if fp8 else model_preset("tiny"), seed=0, device=CPU),
        ParallelPlan(mixed_precision=policy, replicas=replicas, fp8=fp8),
    )
    if fp8:
        from torchao.float8.float8_linear import Float8Linear

        assert any(isinstance(m, Float8Linear) for m in model.modules())  # the case is fp8's, not a plain one
    data = TokenBatches(vocab_size=1024, seq_len=32, micro_batch=2, seed=0, rank=0)
    inputs, labels = data.batch(1)
    calls = [0]
    real = one_rank_grads._post_backward

    def counted(self, *unused):
        calls[0] += one_rank_grads.one_rank(self)
        return real(self, *unused)

    vars(one_rank_grads)["_post_backward"] = counted  # installed() installs what the name holds then
    context = one_rank_grads.installed() if patched else contextlib.nullcontext()
    with context:
        for index, (x, y) in enumerate(zip(inputs.chunk(accumulation), labels.chunk(accumulation))):
            if accumulation > 1:
                set_gradient_sync(model, index == accumulation - 1)
                set_hold_gathered(model, index < accumulation - 1)
            (model(x, y) / accumulation).backward()
    assert FSDPParamGroup.post_backward is one_rank_grads._FSDP_POST_BACKWARD  # put back when the context ends
    grads: dict[str, list[float]] = {}
    for name, p in model.named_parameters():
        assert isinstance(p, DTensor) and isinstance(p.grad, DTensor)
        grads[name] = p.grad.full_tensor().flatten().tolist()
    return grads, {str(p.grad.dtype) for p in model.parameters() if p.grad is not None}, calls[0]


def _case(rank: int, accumulation: int, replicas: int, fp8: bool = False) -> dict:
    fsdp, fsdp_dtypes, _ = _gradients(accumulation, replicas, patched=False, fp8=fp8)
    ours, our_dtypes, calls = _gradients(accumulation, replicas, patched=True, fp8=fp8)
    return {"same": fsdp == ours, "dtypes": sorted(fsdp_dtypes | our_dtypes), "one_rank_calls": calls}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one-rank-grads")
    one = run_cases(_case, [(1, 1), (2, 1), (2, 1, True)], world=1, tmp_path=tmp)
    two = run_cases(_case, [(2, 2)], world=2, tmp_path=tmp)
    return {(1, 1): one[0], (2, 1): one[1], (2, 1, "fp8"): one[2], (2, 2): two[0]}


def test_one_rank_gradients_are_fsdp2s_bit_for_bit(runs):
    units = model_preset("tiny").num_hidden_layers + 1
    for accumulation in (1, 2):
        run = runs[(accumulation, 1)]
        # GIVEN one rank, bf16 parameters and fp32 reduction, one micro-batch or two accumulated
        # THEN every unit took the one-rank path (each micro-batch's post-backward) and the gradients are FSDP2's
        assert run["one_rank_calls"] == units * accumulation, accumulation
        assert run["same"], accumulation
        assert run["dtypes"] == ["torch.float32"]
    # and with fp8 linears and the fp8 all-gather (two accumulated micro-batches)
    fp8 = runs[(2, 1, "fp8")]
    assert fp8["one_rank_calls"] == units * 2 and fp8["same"]


def test_a_replicated_group_is_left_to_fsdp2(runs):
    # GIVEN HSDP over 2 "nodes" of one rank each: the shard group is one rank, but gradients cross the replicas
    run = runs[(2, 2)]
    # THEN no group takes the one-rank path, and the gradients are FSDP2's
    assert run["one_rank_calls"] == 0
    assert run["same"]
