"""Holding the gathered parameters for a step (ParallelPlan.hold_gathered): one all-gather of each FSDP unit a step,
and the same training as gathering them for every use. Real FSDP2 on gloo ranks: one rank, where parallelize() holds
them by default (nothing to shard: each all-gather is a cast and a copy), and two, where it holds them only when told.

Two optimizer steps of SGD (lr 1, no clipping), so that a step run on parameters the optimizer has not yet updated
(held past the step's last backward) changes the second step's result.
"""

from __future__ import annotations

import pytest
import torch
from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup  # spied on: the gathers counted
from torch.distributed.tensor import DTensor

from ray_efa.core.models import model_preset
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model
from ray_efa.training.parallelize import ParallelPlan, parallelize
from ray_efa.training.train import train_step
from tests.training.gloo_ranks import run_cases

SEQ = 32
STEPS = 2
CPU = torch.device("cpu")
pytestmark = pytest.mark.xdist_group("gloo-spawn")


def _case(rank: int, accumulation: int, hold: bool | None, replicas: int = 1) -> dict:
    model = parallelize(
        build_model(model_preset("tiny"), seed=0, device=CPU), ParallelPlan(hold_gathered=hold, replicas=replicas)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    data = TokenBatches(vocab_size=1024, seq_len=SEQ, micro_batch=2, seed=0, rank=rank)
    gathers: list[int] = []
    real_to_unsharded = FSDPParamGroup._to_unsharded

    def counted_to_unsharded(self: FSDPParamGroup) -> None:
        # each time a unit's parameters become gathered (on one rank FSDP2 casts and copies them, with no collective)
        gathers[-1] += not self.is_unsharded
        real_to_unsharded(self)

    FSDPParamGroup._to_unsharded = counted_to_unsharded  # this process only, put back below
    try:
        for step in range(1, STEPS + 1):
            inputs, labels = data.batch(step)
            batches = list(zip(inputs.chunk(accumulation), labels.chunk(accumulation)))
            gathers.append(0)
            train_step(model, optimizer, batches if accumulation > 1 else batches[0], lr=1.0, grad_clip=0.0, device=CPU)
    finally:
        FSDPParamGroup._to_unsharded = real_to_unsharded
    full = {}
    for name, p in model.named_parameters():
        assert isinstance(p, DTensor)  # resharded after the step: the optimizer updated the sharded parameters
        full[name] = p.full_tensor().detach().flatten().tolist()
    return {"parameters": full, "gathers_per_step": gathers, "held": bool(getattr(model, "hold_gathered", False))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hold-gathered")
    # (accumulation, hold, replicas): at world 2, FSDP over both ranks and HSDP of 2 replicas of one rank each
    cases = {
        1: [(1, None, 1), (2, None, 1), (2, False, 1)],
        2: [(1, False, 1), (2, True, 1), (2, None, 1), (1, False, 2), (2, None, 2)],
    }
    results = {}
    for world, args in cases.items():
        for arg, result in zip(args, run_cases(_case, args, world=world, tmp_path=tmp)):
            result["parameters"] = {k: torch.tensor(v) for k, v in result["parameters"].items()}
            results[(world, *arg)] = result
    return results


def _relative_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    num = sum(float((a[k] - b[k]).pow(2).sum()) for k in a)
    den = sum(float(b[k].pow(2).sum()) for k in b)
    return (num / den) ** 0.5


def test_one_rank_holds_the_gathered_model_for_the_step_and_gathers_once(runs):
    # GIVEN one rank (nothing to shard) and the default plan, 2 steps of 2 accumulated micro-batches
    held, gathered = runs[(1, 2, None, 1)], runs[(1, 2, False, 1)]
    units = model_preset("tiny").num_hidden_layers + 1  # one FSDP unit per layer and the root
    # THEN parallelize() held the gathered parameters, each unit was all-gathered once a step, where gathering for
    # every use takes one a unit and micro-batch in forward and again in backward (all but the last layer, which
    # keeps its own from forward)
    assert held["held"] and not gathered["held"]
    assert held["gathers_per_step"] == [units] * STEPS
    assert gathered["gathers_per_step"] == [2 * (2 * units - 1)] * STEPS
    # and the training is the same: the parameters after 2 steps are those of one micro-batch of both sequences
    one = runs[(1, 1, None, 1)]["parameters"]
    assert _relative_difference(held["parameters"], one) < 1e-5
    assert _relative_difference(gathered["parameters"], one) < 1e-5


def test_two_ranks_hold_only_when_told(runs):
    # GIVEN two ranks sharding each parameter: holding would keep the whole model gathered on each
    units = model_preset("tiny").num_hidden_layers + 1
    default, told = runs[(2, 2, None, 1)], runs[(2, 2, True, 1)]
    # THEN the default gathers for every use, and holding, when the plan asks for it, gathers once a step
    assert not default["held"] and told["held"]
    assert default["gathers_per_step"] == [2 * (2 * units - 1)] * STEPS
    assert told["gathers_per_step"] == [units] * STEPS
    # with the same training either way
    one = runs[(2, 1, False, 1)]["parameters"]
    assert _relative_difference(told["parameters"], one) < 1e-5
    assert _relative_difference(default["parameters"], one) < 1e-5


def test_hsdp_with_one_rank_a_node_holds_them_too(runs):
    # GIVEN HSDP over 2 "nodes" of one rank each (each parameter's shard group is one rank; gradients all-reduced
    # across the replicas), 2 steps of 2 accumulated micro-batches
    held = runs[(2, 2, None, 2)]
    units = model_preset("tiny").num_hidden_layers + 1
    # THEN the gathered model is held for the step, and the training is that of one micro-batch of both
    assert held["held"] and held["gathers_per_step"] == [units] * STEPS
    assert _relative_difference(held["parameters"], runs[(2, 1, False, 2)]["parameters"]) < 1e-5
