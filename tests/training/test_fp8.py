"""precision fp8: torchao float8 training of the decoder-layer linears under FSDP2 with fp8 all-gather, for real on 2
gloo ranks on CPU (torch 2.13's CPU _scaled_mm runs the fp8 matrix products; torchao 0.18.0, the job's pin).

The speed is the GPU's to prove (bench/speed.py); here: which modules are converted, that FSDP2 all-gathers them and
the weight scales are precomputed after each step, and that the loss follows the fp32 run within fp8 tolerance.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.distributed as dist

from ray_efa.core.fp8 import converts_to_fp8, fp8_linears
from ray_efa.core.models import model_preset
from ray_efa.core.settings import TrainingSettings
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model
from ray_efa.training.parallelize import ParallelPlan, parallelize
from ray_efa.training.train import build_optimizer, train_step
from tests.training.gloo_ranks import run_cases

pytest.importorskip("torchao", reason="torchao is in the dev extra (requirements.lock): precision fp8's dependency")

WORLD, STEPS, SEQ = 2, 6, 32
# The tiny preset with an MLP wide enough (1040 > core.fp8.SMALL_N) that its gate and up projections are worth fp8;
# every other decoder linear of it is small, so it stays bf16, as the plan predicts (core.fp8.converts_to_fp8). Its
# vocabulary is as wide, so that the output projection too would be converted if fp8 reached past the decoder layers.
MODEL = dataclasses.replace(model_preset("tiny"), name="tiny-wide-mlp", intermediate_size=1040, vocab_size=1040)
CPU = torch.device("cpu")
pytestmark = pytest.mark.xdist_group("gloo-spawn")


def _case(rank: int, fp8: bool, replicas: int = 1) -> dict:
    from torchao.float8.float8_linear import Float8Linear  # torchao's own module: its package does not export it

    model = parallelize(build_model(MODEL, seed=0, device=CPU), ParallelPlan(fp8=fp8, replicas=replicas))
    converted = sorted(
        {
            (name.rsplit(".", 1)[1], type(m).__name__)
            for name, m in model.named_modules()
            if ".layers." in name and name.endswith("proj")
        }
    )
    optimizer = build_optimizer(model, TrainingSettings(model="tiny", learning_rate=3e-3), CPU)
    data = TokenBatches(vocab_size=1024, seq_len=SEQ, micro_batch=2, seed=0, rank=rank, pool_size=2)
    losses = []
    for step in range(1, STEPS + 1):
        loss, _ = train_step(model, optimizer, data.batch(step), lr=3e-3, grad_clip=1.0, device=CPU)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / WORLD)
    return {
        "losses": losses,
        "converted": converted,
        "lm_head": type(model.hf.lm_head).__name__,
        "fp8": model.fp8,
        "fp8_all_gather": model.fp8_all_gather,
        "held": model.hold_gathered,
        "hsdp": model.hsdp,
        "all_gather_config": sorted(
            {m.config.enable_fsdp_float8_all_gather for m in model.modules() if isinstance(m, Float8Linear)}
        ),
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    fp32, fp8, hsdp = run_cases(
        _case, [(False,), (True,), (True, WORLD)], world=WORLD, tmp_path=tmp_path_factory.mktemp("fp8")
    )
    return {False: fp32, True: fp8, "hsdp": hsdp}


def test_fp8_converts_the_decoder_layer_linears_the_plan_predicts(runs):
    assert runs[True]["fp8"] and not runs[False]["fp8"]
    # the layers' linears core.fp8 calls worth it (here gate and up) are Float8Linear, the small ones (q, k, v, o,
    # down: torchao's tensorwise auto filter) stay nn.Linear; so does the tied output projection
    worth = {name for name, _, _ in fp8_linears(MODEL)}
    assert worth == {"gate_proj", "up_proj"}
    assert runs[True]["converted"] == sorted(
        [name, "Float8Linear" if name in worth else "Linear"]
        for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    )
    assert converts_to_fp8(MODEL.hidden_size, MODEL.vocab_size)  # the head's shape is worth fp8: only the rule keeps it
    assert runs[True]["lm_head"] == "Linear" and {kind for _, kind in runs[False]["converted"]} == {"Linear"}


def test_fp8_all_gathers_in_fp8_where_the_weights_are_sharded_over_several_ranks(runs):
    # 2 ranks, plain FSDP: every weight is split over both, so the all-gather has bytes to halve (auto turns it on)
    assert runs[True]["fp8_all_gather"] and runs[True]["all_gather_config"] == [True]
    assert not runs[False]["fp8_all_gather"]


def test_hsdp_of_one_gpu_a_node_holds_the_model_and_casts_its_fp8_weights_once_a_step(runs):
    # GIVEN HSDP of 2 replicas of one rank each (one GPU a node): each shard group is one rank
    hsdp = runs["hsdp"]
    # THEN the node holds its gathered model and all-gathers the fp8 weights (one cast a step), on the 2-D mesh
    assert hsdp["hsdp"] and hsdp["held"] and hsdp["fp8_all_gather"] and hsdp["all_gather_config"] == [True]
    # and it trains as plain FSDP over both ranks does: the same mean gradient, the same scales
    assert hsdp["losses"] == pytest.approx(runs[True]["losses"], rel=1e-2)


def _one_rank_case(rank: int, hold: bool | None) -> dict:
    from torchao.float8.float8_linear import Float8Linear

    model = parallelize(build_model(MODEL, seed=0, device=CPU), ParallelPlan(fp8=True, hold_gathered=hold))
    optimizer = build_optimizer(model, TrainingSettings(model="tiny", learning_rate=3e-3), CPU)
    data = TokenBatches(vocab_size=1024, seq_len=SEQ, micro_batch=2, seed=0, rank=rank, pool_size=2)
    losses = [
        float(
            train_step(
                model, optimizer, [data.batch(2 * step), data.batch(2 * step + 1)], lr=3e-3, grad_clip=1.0, device=CPU
            ).loss
        )
        for step in range(3)
    ]
    return {
        "losses": losses,
        "held": model.hold_gathered,
        "fp8_all_gather": model.fp8_all_gather,
        "all_gather_config": sorted(
            {m.config.enable_fsdp_float8_all_gather for m in model.modules() if isinstance(m, Float8Linear)}
        ),
    }


def test_one_rank_gathers_in_fp8_only_when_it_holds_the_gathered_model(tmp_path):
    # GIVEN one rank (nothing to gather: each all-gather is a cast and a copy), 3 steps of 2 micro-batches
    held, unheld = run_cases(_one_rank_case, [(None,), (False,)], world=1, tmp_path=tmp_path)
    # THEN holding the model for the step (the default there) casts the fp8 weights once a step, in the all-gather
    # (measured faster on an H100); gathering for every use leaves the cast to each forward (measured faster there)
    assert held["held"] and held["fp8_all_gather"] and held["all_gather_config"] == [True]
    assert not unheld["held"] and not unheld["fp8_all_gather"] and unheld["all_gather_config"] == [False]
    # and both train the same: the weight is cast with the same scale either way (the scales precomputed after each
    # step from the same parameters)
    assert held["losses"] == pytest.approx(unheld["losses"], rel=1e-3)
    assert held["losses"][-1] < held["losses"][0]


def test_fp8_trains_like_fp32_within_fp8_tolerance(runs):
    # GIVEN the same 6 steps with and without fp8 (the fp8 run all-gathers fp8 weights and precomputes their scales)
    fp32, fp8 = runs[False]["losses"], runs[True]["losses"]
    # THEN the first loss (the forward alone) agrees to fp8 rounding, the loss falls in both, and they stay close
    assert fp8[0] == pytest.approx(fp32[0], rel=1e-2)
    assert fp8[-1] < fp8[0] - 0.1 and fp32[-1] < fp32[0] - 0.1
    assert all(a == pytest.approx(b, rel=5e-2) for a, b in zip(fp8, fp32))


def test_the_job_refuses_fp8_on_a_gpu_without_fp8_tensor_cores_naming_precision():
    # the run-time check behind the plan's: compute capability as torch.cuda reports it (V100 7.0, A100 8.0)
    from ray_efa.core.settings import SettingsError
    from ray_efa.training.train import check_fp8_capability

    for capability, name in (((7, 0), "Tesla V100-SXM2-32GB"), ((8, 0), "NVIDIA A100-SXM4-40GB")):
        with pytest.raises(SettingsError) as raised:
            check_fp8_capability(capability, name)
        assert [p.key for p in raised.value.problems] == ["precision"] and name in raised.value.problems[0].message
    for capability in ((8, 9), (9, 0), (10, 0)):  # L4/L40S, H100/H200, B200
        check_fp8_capability(capability, "GPU")
