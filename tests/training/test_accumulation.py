"""Gradient accumulation gives the gradient of the whole batch, and bf16 on the wire keeps fp32 accumulation: real
FSDP2 on 2 gloo ranks, and HSDP on 4 (2 "nodes" of a shard group of 2), comparing the gradients themselves.

AdamW normalizes a gradient by its own running scale and clipping rescales it, so a loss curve cannot see a constant
factor on the gradient (removing train_step's 1/k scaling broke no test before this one). Here the optimizer is SGD
with lr 1 and no clipping, so each parameter's change in one step IS its (mean over ranks) gradient, and the runs are
compared parameter by parameter.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy
from torch.distributed.tensor import DTensor

from ray_efa.core.models import model_preset
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model
from ray_efa.training.parallelize import (
    Bf16WireReduceScatter,
    ParallelPlan,
    gradient_precision,
    parallelize,
    set_gradient_sync,
)
from ray_efa.training.train import train_step
from tests.training.gloo_ranks import run_cases

SEQ = 32
CPU = torch.device("cpu")
pytestmark = pytest.mark.xdist_group("gloo-spawn")


class _SpyWire(Bf16WireReduceScatter):
    """The bf16-wire reduce-scatter, recording what it was handed and what it sent."""

    calls: list[tuple[str, str, int]] = []

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        _SpyWire.calls.append((str(input_tensor.dtype), str(output_tensor.dtype), dist.get_world_size(group)))
        return super().__call__(output_tensor, input_tensor, group, op, async_op)


def _full(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    full = {}
    for name, p in model.named_parameters():
        assert isinstance(p, DTensor)  # fully_shard made every parameter a DTensor
        full[name] = p.full_tensor().detach().clone()
    return full


def _case(rank: int, mode: str, world: int) -> dict:
    # "k1": one micro-batch; "-k2" / "-k4": that many accumulated; "-s4": 4 sequences per rank and step (else 2)
    accumulation = 4 if mode.endswith("-k4") else 1 if mode.startswith("k1") else 2
    sequences = 4 if accumulation == 4 or mode.endswith("-s4") else 2
    wire = "bf16wire" in mode
    # HSDP: 2 replicas of a shard group of world / 2 ranks (at world 4, a reduce-scatter over 2 ranks inside each
    # "node", then the all-reduce across the 2 "nodes")
    replicas = 2 if mode.startswith("hsdp") else 1
    # what gradient_precision gives a GPU with bf16 reduction and accumulation: fp32 policy, bf16 wire
    policy = MixedPrecisionPolicy(reduce_dtype=torch.float32) if wire else None
    model = parallelize(
        build_model(model_preset("tiny"), seed=0, device=CPU),
        ParallelPlan(replicas=replicas, mixed_precision=policy, bf16_wire=wire),
    )
    all_reduces: list[tuple[str, int]] = []
    real_all_reduce = dist.all_reduce

    def counted_all_reduce(tensor, *args, group=None, **kwargs):
        all_reduces.append((str(tensor.dtype), dist.get_world_size(group)))
        return real_all_reduce(tensor, *args, group=group, **kwargs)

    dist.all_reduce = counted_all_reduce  # the gradients' all-reduces across replicas, if any (this process only)
    _SpyWire.calls = []
    if wire:
        spy = _SpyWire()
        for module in (*model.layers, model):
            assert isinstance(module, FSDPModule)
            module.set_custom_reduce_scatter(spy)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    data = TokenBatches(vocab_size=1024, seq_len=SEQ, micro_batch=sequences, seed=0, rank=rank)
    inputs, labels = data.batch(1)
    batches = list(zip(inputs.chunk(accumulation), labels.chunk(accumulation)))
    if mode.endswith("-copied"):  # the .grad no longer views the held shard (as if FSDP2 copied it): refused
        return {"raised": _copied_grad_step(model, batches)}
    before = _full(model)
    train_step(
        model,
        optimizer,
        batches if accumulation > 1 else batches[0],
        lr=1.0,
        grad_clip=0.0,
        device=CPU,
        sync_every_micro_batch="sync" in mode,
    )
    after = _full(model)
    gradients = {name: (before[name] - after[name]).flatten().tolist() for name in before}
    return {"gradients": gradients, "wire": _SpyWire.calls, "all_reduces": all_reduces}


def _copied_grad_step(model, batches) -> str | None:
    """Two accumulated micro-batches, with the first decoder layer's .grad replaced by a copy in between; what the
    last micro-batch's backward raised (None: nothing)."""
    (first_inputs, first_labels), (last_inputs, last_labels) = batches
    set_gradient_sync(model, False)
    model(first_inputs, first_labels).backward()
    owner = model.replica_all_reduce[0].owner  # the hook's parameter of the first decoder layer
    owner.grad = owner.grad.clone()  # the same values in other storage: the held sum is no longer the .grads'
    set_gradient_sync(model, True)
    try:
        model(last_inputs, last_labels).backward()
    except RuntimeError as error:
        return str(error)
    return None


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("accumulation")
    # (mode, world size): at world 2 plain FSDP; at world 4 HSDP with a shard group of 2, each against its own
    # one-micro-batch reference (the mean gradient over 4 ranks' data is not the one over 2). One rank set per world
    # size runs its cases in turn; the refused one last, as its backward raised part way.
    cases = {
        2: ("k1", "fsdp-k2", "bf16wire-k2", "fsdp-sync-k2"),
        4: ("k1", "hsdp-k2", "hsdp-bf16wire-k2", "k1-s4", "hsdp-k4", "hsdp-bf16wire-k4", "hsdp-bf16wire-copied"),
    }
    results = {}
    for world, modes in cases.items():
        outcomes = run_cases(_case, [(mode, world) for mode in modes], world=world, tmp_path=tmp)
        for mode, result in zip(modes, outcomes):
            if "gradients" in result:
                result["gradients"] = {k: torch.tensor(v) for k, v in result["gradients"].items()}
            results[(mode, world)] = result
    return results


def _relative_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    num = sum(float((a[k] - b[k]).pow(2).sum()) for k in a)
    den = sum(float(b[k].pow(2).sum()) for k in b)
    return (num / den) ** 0.5


@pytest.mark.parametrize(("mode", "world"), [("fsdp-k2", 2), ("hsdp-k2", 4), ("fsdp-sync-k2", 2)])
def test_two_accumulated_micro_batches_give_the_gradient_of_one_batch_of_both(runs, mode, world):
    # GIVEN each rank's 2 sequences as one micro-batch, and as 2 accumulated micro-batches of 1 (FSDP over 2 ranks,
    # HSDP: 2 replicas of a shard group of 2, and FSDP reduce-scattering after every micro-batch:
    # gradSyncEveryMicroBatch)
    one, two = runs[("k1", world)]["gradients"], runs[(mode, world)]["gradients"]
    # THEN every parameter's gradient is the same (fp32: only summation order differs) - not twice it
    assert _relative_difference(two, one) < 1e-5
    assert sum(float(g.abs().sum()) for g in one.values()) > 0  # and there was a gradient to compare


@pytest.mark.parametrize(("mode", "world", "shard_group"), [("bf16wire-k2", 2, 2), ("hsdp-bf16wire-k2", 4, 2)])
def test_bf16_on_the_wire_rounds_only_the_wire_and_reduces_once_per_step(runs, mode, world, shard_group):
    # GIVEN the same accumulated step with the reduce-scatter cast to bf16 for the wire (Bf16WireReduceScatter),
    # under FSDP over 2 ranks and under HSDP, where it runs inside each shard group of 2
    one, wire = runs[("k1", world)]["gradients"], runs[(mode, world)]
    # THEN the gradient is the fp32 one within bf16 rounding, and not exactly it (the wire really was bf16)
    difference = _relative_difference(wire["gradients"], one)
    assert 0 < difference < 1e-2
    # and FSDP2 handed the comm fp32 gradients over the shard group, once per FSDP unit (the layers and the root):
    # under FSDP the fp32 sum of both micro-batches, once per step; under HSDP, which keeps reducing inside the node
    # and holds back only the all-reduce across nodes, once per micro-batch, each fp32 shard added to the held one.
    # Either way accumulation stayed fp32; only the sent copy was bf16
    units = model_preset("tiny").num_hidden_layers + 1
    per_step = 2 if mode.startswith("hsdp") else 1
    assert wire["wire"] == [["torch.float32", "torch.float32", shard_group]] * units * per_step
    # and under HSDP the all-reduce across the 2 replicas ("nodes") went in bf16, once per unit and step: the fp32
    # partial sums of both micro-batches, added before the one send (FSDP2's native HSDP would send them in fp32)
    replicas = world // shard_group
    assert wire["all_reduces"] == ([["torch.bfloat16", replicas]] * units if replicas > 1 else [])


def test_gpu_gradient_precision_keeps_fp32_accumulation_under_bf16_reduction():
    gpu = torch.device("cuda", 0)
    policy, wire = gradient_precision(gpu, "bf16", grad_accumulation=1)
    assert (
        policy is not None and policy.reduce_dtype == torch.bfloat16 and not wire
    )  # one micro-batch: reduce in bf16 directly
    policy, wire = gradient_precision(gpu, "bf16", grad_accumulation=4)
    assert (
        policy is not None and policy.reduce_dtype == torch.float32 and wire
    )  # accumulate in fp32, bf16 only on the wire
    policy, wire = gradient_precision(gpu, "fp32", grad_accumulation=4)
    assert policy is not None and policy.reduce_dtype == torch.float32 and not wire
    assert gradient_precision(CPU, "bf16", grad_accumulation=4) == (None, False)  # CPU stays fp32 throughout


def test_four_accumulated_micro_batches_under_hsdp_with_a_bf16_wire_give_the_gradient_of_one_batch(runs):
    # GIVEN each rank's 4 sequences as one micro-batch, and as 4 accumulated micro-batches of 1 under HSDP (2 replicas
    # of a shard group of 2): in fp32, and with the bf16 wire (the hook holds the first micro-batch's shard, FSDP2
    # adds the 2nd and 3rd into it, the 4th is added and sent once)
    one = runs[("k1-s4", 4)]["gradients"]
    fp32, wire = runs[("hsdp-k4", 4)], runs[("hsdp-bf16wire-k4", 4)]
    # THEN fp32 gives the same gradient, the bf16 wire the same within bf16 rounding (not 4 times it, not the last
    # micro-batch's alone)
    assert _relative_difference(fp32["gradients"], one) < 1e-5
    assert 0 < _relative_difference(wire["gradients"], one) < 1e-2
    # and the all-reduce across the 2 "nodes" went once per unit and step, in bf16
    units = model_preset("tiny").num_hidden_layers + 1
    assert wire["all_reduces"] == [["torch.bfloat16", 2]] * units


def test_the_bf16_wire_hook_refuses_a_grad_that_no_longer_views_its_held_sum(runs):
    # GIVEN HSDP with the bf16 wire, and the first layer's .grad replaced by a copy between two micro-batches (what
    # a torch whose FSDP2 copied the reduce-scatter output would do: the held sum would be sent, the .grad not zeroed)
    # THEN the last micro-batch's backward raises, naming the way out
    raised = runs[("hsdp-bf16wire-copied", 4)]["raised"]
    assert raised is not None and "FSDP2 no longer keeps the sharded gradients in the reduce-scatter's output" in raised
    assert "gradReduceDtype fp32 or sharding fsdp" in raised
