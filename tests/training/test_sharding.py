"""Sharding strategies and gradient accumulation keep the loss's meaning: real torch.distributed, 4 gloo ranks on CPU.

The same effective batch (8 sequences per step over 4 ranks) trains to the same losses whether it runs as plain FSDP
or as HSDP on a 2 x 2 DeviceMesh ("2 nodes of 2 GPUs"), in one micro-batch of 2 sequences or in 2 accumulated
micro-batches of 1. fp32 on CPU: only summation order differs. The collectives each rank issues are counted (the real
ones run): with accumulation, what crosses "nodes" is sent once per optimizer step, not once per micro-batch.
"""

from __future__ import annotations

import collections

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy
from torch.distributed.tensor import DTensor, Partial

from ray_efa.core.models import model_preset
from ray_efa.core.settings import TrainingSettings
from ray_efa.training.data import TokenBatches
from ray_efa.training.metrics import Meter, Throughput
from ray_efa.training.model import build_model
from ray_efa.training.parallelize import ParallelPlan, parallelize
from ray_efa.training.reporting import Reporter
from ray_efa.training.train import build_optimizer, train_step
from tests.training.gloo_ranks import run_cases

WORLD, STEPS, SEQ = 4, 3, 32
CPU = torch.device("cpu")
pytestmark = pytest.mark.xdist_group("gloo-spawn")


def _count_collectives(counts: collections.Counter) -> None:
    """Wrap the two gradient collectives FSDP2 calls so each call is counted by (name, group size); they still run."""
    for name, kind in (
        ("reduce_scatter_single", "reduce_scatter"),
        ("reduce_scatter_tensor", "reduce_scatter"),
        ("all_reduce", "all_reduce"),
    ):
        real = getattr(dist, name, None)
        if real is None:
            continue

        def counted(*args, _real=real, _kind=kind, **kwargs):
            counts[f"{_kind}/{dist.get_world_size(kwargs.get('group'))}"] += 1
            return _real(*args, **kwargs)

        setattr(dist, name, counted)


def _case(rank: int, replicas: int, accumulation: int, wire: bool, checkpoint: str) -> dict:
    # wire: bf16 on the wire with fp32 accumulation, as a GPU runs gradReduceDtype bf16 with accumulation (under HSDP
    # each node's FSDP is 1-D and the all-reduce across nodes is Bf16WireReplicaAllReduce)
    policy = MixedPrecisionPolicy(reduce_dtype=torch.float32) if wire else None
    model = parallelize(
        build_model(model_preset("tiny"), seed=0, device=CPU),
        ParallelPlan(replicas=replicas, mixed_precision=policy, bf16_wire=wire),
    )
    optimizer = build_optimizer(model, TrainingSettings(model="tiny", learning_rate=3e-3), CPU)
    # Each rank's 2 sequences of a step, split into `accumulation` micro-batches of equal size.
    # A small pool of sequences the model can memorize, so that the loss falls within a few steps.
    data = TokenBatches(vocab_size=1024, seq_len=SEQ, micro_batch=2, seed=0, rank=rank, pool_size=2)
    real_all_reduce = dist.all_reduce
    counts: collections.Counter = collections.Counter()
    _count_collectives(counts)
    losses, steps = [], []
    for step in range(1, STEPS + 1):
        inputs, labels = data.batch(step)
        batches = list(zip(inputs.chunk(accumulation), labels.chunk(accumulation)))
        loss, norm = train_step(
            model, optimizer, batches if accumulation > 1 else batches[0], lr=3e-3, grad_clip=1.0, device=CPU
        )
        steps.append((loss, norm))
        mean = loss.detach().clone()
        torch.distributed.all_reduce(mean)
        counts["all_reduce/4"] -= 1  # the loss average above is ours, not FSDP2's
        losses.append(mean.item() / WORLD)
    result = {
        "losses": losses,
        "counts": dict(counts),
        "hsdp": model.hsdp,
        **_reported_grad_norms(rank, steps, real_all_reduce),
    }
    if wire:  # its DCP checkpoint (1-D shards, replicated across the "nodes") loads into plain FSDP over all 4
        result["restored_max_difference"] = _checkpoint_round_trip(model, optimizer, checkpoint)
    return result


def _reported_grad_norms(rank: int, steps: list, all_reduce) -> dict:
    """The gradient norms training.reporting reports for these steps, and each step's whole norm (the DTensor's)."""
    meter = Meter(
        throughput=Throughput(
            tokens_per_step_per_device=1, world_size=WORLD, flops_per_token=1.0, peak_flops_per_s=None
        ),
        total_steps=STEPS,
        start_step=0,
        device=CPU,
    )
    reporter = Reporter(
        meter=meter,
        report_every=STEPS,
        rank=rank,
        world_size=WORLD,
        device=CPU,
        min_interval_s=0.0,
        reduce=lambda values: (all_reduce(values), values)[1],
        report=lambda metrics: None,
    )
    for step, (loss, norm) in enumerate(steps, 1):
        reporter.record(step, loss, 3e-3, grad_norm=norm)
    reporter.measure(STEPS, save=False)
    whole = [float(norm.full_tensor()) if isinstance(norm, DTensor) else float(norm) for _, norm in steps]
    # torch 2.13's clip_grad_norm_ returns the norm replicated; a norm left Partial (as earlier FSDP2 releases
    # returned it, each rank holding its shards' part) must be reduced before it is read: here rank r holds r + 1
    partial = DTensor.from_local(torch.tensor(float(rank + 1)), init_device_mesh("cpu", (WORLD,)), [Partial()])
    meter = Meter(throughput=meter.throughput, total_steps=1, start_step=0, device=CPU)
    reporter_of_partial = Reporter(
        meter=meter,
        report_every=1,
        rank=rank,
        world_size=WORLD,
        device=CPU,
        min_interval_s=0.0,
        reduce=lambda values: (all_reduce(values), values)[1],
        report=lambda metrics: None,
    )
    reporter_of_partial.record(1, torch.tensor(1.0), 3e-3, grad_norm=partial)
    reporter_of_partial.measure(1, save=False)
    return {
        "reported_grad_norms": [entry["grad_norm"] for entry in reporter.history],
        "grad_norms": whole,
        "reported_partial_norm": reporter_of_partial.history[0]["grad_norm"],
    }


def _checkpoint_round_trip(model, optimizer, directory: str) -> float:
    """Save model and AdamW state as training.checkpoint does, load them into a fresh plain-FSDP model; the largest
    parameter difference."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load
    from torch.distributed.checkpoint.state_dict_saver import save

    model_state, optimizer_state = get_state_dict(model, optimizer)
    save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=directory)
    fresh = parallelize(build_model(model_preset("tiny"), seed=1, device=CPU), ParallelPlan())
    fresh_optimizer = build_optimizer(fresh, TrainingSettings(model="tiny", learning_rate=3e-3), CPU)
    model_state, optimizer_state = get_state_dict(fresh, fresh_optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    load(state, checkpoint_id=directory)
    set_state_dict(fresh, fresh_optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    saved = dict(model.named_parameters())
    differences = []
    for name, p in fresh.named_parameters():
        before = saved[name]
        assert isinstance(p, DTensor) and isinstance(before, DTensor)  # fully_shard made every parameter a DTensor
        differences.append(float((p.full_tensor() - before.full_tensor()).abs().max()))
    return max(differences)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sharding")
    keys = [(1, 1), (1, 2), (2, 1), (2, 2), (2, 2, "wire")]  # (replicas, accumulation[, bf16 wire])
    cases = [(key[0], key[1], len(key) > 2, str(tmp / "wire.ckpt")) for key in keys]
    return dict(zip(keys, run_cases(_case, cases, world=WORLD, tmp_path=tmp)))


def test_fsdp_hsdp_and_accumulation_train_to_the_same_losses(runs):
    # GIVEN plain FSDP over 4 ranks, one micro-batch of 2 sequences per rank and step
    reference = runs[(1, 1)]["losses"]
    assert reference[-1] < reference[0]  # it trains
    # THEN HSDP on a 2 x 2 mesh, and each with 2 accumulated micro-batches of 1, give the same loss at every step
    for key in ((1, 2), (2, 1), (2, 2)):
        assert runs[key]["losses"] == pytest.approx(reference, rel=1e-5), key
    assert runs[(2, 1)]["hsdp"] and not runs[(1, 1)]["hsdp"]


def test_hsdp_with_a_bf16_wire_trains_to_the_same_losses_within_bf16_rounding(runs):
    # GIVEN HSDP on the 2 x 2 mesh with 2 accumulated micro-batches, bf16 on the wire inside and across the "nodes"
    # (fp32 partial sums; clipping and AdamW over the 1-D sharded gradients, 3 steps)
    reference, wire = runs[(1, 1)]["losses"], runs[(2, 2, "wire")]
    # THEN it trains to the fp32 run's losses within bf16 rounding, across steps (the held sums start over each step)
    assert wire["losses"] == pytest.approx(reference, rel=1e-3)
    assert wire["hsdp"]
    # with the all-reduce across the 2 "nodes" once per unit and optimizer step (ours: FSDP2's is not called)
    assert wire["counts"].get("all_reduce/2") == 3 * STEPS
    # and its checkpoint (each "node" holding the same 1-D shards) loads into plain FSDP over all 4 ranks, exactly
    assert wire["restored_max_difference"] == 0.0


def test_the_reported_gradient_norm_is_the_whole_models_not_a_ranks_shard(runs):
    # GIVEN each step's clip_grad_norm_ result: a DTensor over the ranks' shards (FSDP2), whose whole norm the test
    # takes itself (full_tensor)
    for key, run in runs.items():
        # THEN the reporter's grad_norm is that whole norm, the same for FSDP, HSDP and accumulation
        assert run["reported_grad_norms"] == pytest.approx(run["grad_norms"], rel=1e-6), key
        assert run["grad_norms"] == pytest.approx(runs[(1, 1)]["grad_norms"], rel=1e-3 if len(key) > 2 else 1e-5), key
        # and a norm still Partial over the ranks is reported whole: 1 + 2 + 3 + 4 (not one rank's part)
        assert run["reported_partial_norm"] == pytest.approx(10.0), key


def test_accumulation_sends_gradients_across_nodes_once_per_optimizer_step(runs):
    units = 3  # FSDP units of the tiny model: 2 decoder layers + the root
    # plain FSDP: one reduce-scatter over all 4 ranks per unit and optimizer step, with or without accumulation
    assert runs[(1, 1)]["counts"].get("reduce_scatter/4") == units * STEPS
    assert runs[(1, 2)]["counts"].get("reduce_scatter/4") == units * STEPS
    # HSDP: the reduce-scatter stays inside the "node" (2 ranks) at every micro-batch; the all-reduce across the
    # 2 "nodes" runs once per unit and optimizer step
    assert runs[(2, 2)]["counts"].get("reduce_scatter/2") == units * STEPS * 2
    assert runs[(2, 2)]["counts"].get("all_reduce/2") == units * STEPS
    assert runs[(2, 1)]["counts"].get("all_reduce/2") == units * STEPS
    assert not runs[(2, 2)]["counts"].get("reduce_scatter/4")
