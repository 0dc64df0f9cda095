"""Bf16WireReplicaAllReduce ties FSDP2's buffer to its stream, and runs only on the torch releases it is proven on.

The race itself (a later layer's reduce-scatter reusing the block of a slow all-reduce) needs CUDA streams: it is
proven on a GPU with NCCL by bench/replica_all_reduce_race.py (docs/BENCHMARKS.md). Here, on CPU: that the hook hands
every reduce_output it is given to keep_for_current_stream before it uses it, and that HSDP falls back to FSDP2's
native all-reduce (fp32, guarded upstream) on a torch release the hook is not proven on, saying so.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy
from torch.multiprocessing.spawn import spawn

from ray_efa.core.models import model_preset
from ray_efa.training import parallelize as par
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model
from ray_efa.training.train import train_step
from tests.training.gloo_ranks import end_rank

CPU = torch.device("cpu")


def test_the_hook_ties_every_buffer_it_is_given_to_its_stream_before_using_it(monkeypatch):
    order: list[tuple[str, int]] = []
    monkeypatch.setattr(par, "keep_for_current_stream", lambda tensor: order.append(("keep", id(tensor))))

    def all_reduce(tensor, group=None):  # a 1-rank all-reduce: the sum over one rank is the tensor itself
        order.append(("all_reduce", id(tensor)))

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    owner = torch.nn.Parameter(torch.zeros(4))
    hook = par.Bf16WireReplicaAllReduce(group=None, replicas=2, owner=owner)  # pyright: ignore[reportArgumentType]
    first, second, last = torch.ones(4), torch.full((4,), 2.0), torch.full((4,), 3.0)
    hook.last = False
    hook(first)
    owner.grad = first  # what FSDP2 does with the first micro-batch's shard: the .grads' storage
    hook(second)
    hook.last = True
    hook(last)
    assert [entry for entry in order if entry[0] == "keep"] == [
        ("keep", id(first)),
        ("keep", id(second)),
        ("keep", id(last)),
    ]
    assert order.index(("keep", id(last))) < next(i for i, entry in enumerate(order) if entry[0] == "all_reduce")
    # the held first shard and the last one, sent once and averaged over the 2 replicas
    assert torch.equal(last, torch.full((4,), 2.0))


class _FakeCudaTensor:
    """What keep_for_current_stream touches of a CUDA tensor: is_cuda, device, record_stream (recorded)."""

    is_cuda = True
    device = "cuda:0"

    def __init__(self):
        self.recorded: list[object] = []

    def record_stream(self, stream):
        self.recorded.append(stream)


def test_keep_for_current_stream_ties_the_buffer_to_the_current_stream_not_the_default_one(monkeypatch):
    # GIVEN a current stream (FSDP2's all-reduce stream, where the hook runs) that is not the default stream
    current, default = object(), object()
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current)
    monkeypatch.setattr(torch.cuda, "default_stream", lambda device=None: default)
    tensor = _FakeCudaTensor()
    # WHEN the hook's buffer is kept
    par.keep_for_current_stream(tensor)  # pyright: ignore[reportArgumentType]
    # THEN its block waits for the work queued on the current stream, once (not the default stream's, not nothing)
    assert tensor.recorded == [current]


def test_keep_for_current_stream_leaves_a_cpu_tensor_alone():
    tensor = torch.ones(3)
    par.keep_for_current_stream(tensor)  # CPU tensors have no streams: no record_stream, no error
    assert torch.equal(tensor, torch.ones(3))


@pytest.mark.parametrize(
    ("version", "proven"),
    [
        ("2.13.0", True),
        ("2.13.0+cpu", True),
        ("2.11.0+cu130", True),
        ("2.14.0", False),
        ("2.12.1", False),
        ("3.0.0", False),
    ],
)
def test_the_hook_is_proven_on_named_torch_releases_only(version, proven):
    assert par.all_reduce_hook_proven(version) is proven


def test_the_installed_torch_is_one_the_hook_is_proven_on():
    # the project pins torch 2.13 (the container's): if the pin moves, the hook needs its evidence again
    assert par.all_reduce_hook_proven(), (torch.__version__, sorted(par.BF16_ALL_REDUCE_HOOK_PROVEN))


def _worker(rank: int, store_path: str, out_path: str, proven: bool) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2)
    if not proven:
        par.all_reduce_hook_proven = lambda torch_version=None: False  # as on a torch the hook is not proven on
    all_reduces: list[str] = []
    real_all_reduce = dist.all_reduce

    def counted_all_reduce(tensor, *args, **kwargs):
        all_reduces.append(str(tensor.dtype))
        return real_all_reduce(tensor, *args, **kwargs)

    dist.all_reduce = counted_all_reduce
    # HSDP over 2 "nodes" of one rank, fp32 reduction with a bf16 wire: the plan of the default cluster
    model = par.parallelize(
        build_model(model_preset("tiny"), seed=0, device=CPU),
        par.ParallelPlan(replicas=2, mixed_precision=MixedPrecisionPolicy(reduce_dtype=torch.float32), bf16_wire=True),
    )
    inputs, labels = TokenBatches(vocab_size=1024, seq_len=16, micro_batch=2, seed=0, rank=rank).batch(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = train_step(model, optimizer, list(zip(inputs.chunk(2), labels.chunk(2))), lr=0.1, grad_clip=0.0, device=CPU)
    dist.all_reduce = real_all_reduce
    # the replicas' parameters after the step: each rank trained on its own batch, so only the all-reduce across
    # the replicas makes them equal (each rank holds the whole of each parameter: 1 shard per replica)
    local = torch.cat([getattr(p, "_local_tensor", p).detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(local) for _ in range(2)]
    dist.all_gather(gathered, local)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(
                {
                    "hooks": len(model.replica_all_reduce),
                    "hsdp": model.hsdp,
                    "loss": float(loss.loss),
                    "all_reduce_dtypes": sorted(set(all_reduces)),
                    "all_reduces": len(all_reduces),
                    "units": len(model.layers) + 1,
                    "replica_drift": float((gathered[0] - gathered[1]).abs().max()),
                },
                f,
            )
    end_rank()


@pytest.mark.xdist_group("gloo-spawn")
@pytest.mark.parametrize("proven", [True, False])
def test_hsdp_falls_back_to_the_native_fp32_all_reduce_where_the_hook_is_not_proven(tmp_path, capfd, proven):
    out = tmp_path / "out.json"
    spawn(_worker, args=(str(tmp_path / "store"), str(out), proven), nprocs=2, join=True)
    result = json.loads(out.read_text())
    assert result["hsdp"] is True
    assert torch.isfinite(torch.tensor(result["loss"]))
    said = capfd.readouterr().out
    # either way the gradients crossed between the replicas: one all-reduce per FSDP unit in the step's last
    # micro-batch (none in the first), and both replicas hold the same parameters after the step
    assert result["all_reduces"] == result["units"], result
    assert result["replica_drift"] == 0.0, result
    if proven:  # the hook on every unit, its all-reduce across the replicas in bf16
        assert result["hooks"] == result["units"]
        assert result["all_reduce_dtypes"] == ["torch.bfloat16"]
        assert "proven on torch" not in said
    else:  # no hook: FSDP2's native HSDP all-reduce, fp32, and the log says why
        assert result["hooks"] == 0
        assert "torch.bfloat16" not in result["all_reduce_dtypes"]
        assert "proven on torch 2.11, 2.13 only" in said
