"""Bf16WireReplicaAllReduce on a GPU: HSDP's own bf16 all-reduce across 2 "nodes", checked against fp32.

    python bench/replica_all_reduce_gpu.py --out DIR [--model qwen2.5-0.5b] [--accumulation 4] [--micro-batch 2]
        [--seq-len 1024] [--fp8] [--compile] [--steps 3]

Two processes on ONE GPU (what the device lends). Each is a "node" with a shard group of one rank (a 1-rank NCCL
group: NCCL refuses two ranks of one communicator on one GPU); the replicate group is gloo, which all-reduces CUDA
tensors through host copies. What runs is the job's: the model, parallelize() (bf16 parameters, fp32 reduction, the
hook on FSDP2's all-reduce stream, per-layer compile, torchao fp8), set_gradient_sync, train_step; only the link
between the "nodes" differs from a cluster, so this checks the hook's streams and FSDP2's gradient storage on CUDA,
not its speed.

Each process runs one accumulated backward twice from the same weights and data:
  wire:      parallelize(ParallelPlan(replicas=2, bf16_wire=True)): the cross-replica all-reduce is the hook's, bf16
  reference: the same 1-D FSDP without the hook, its gradients all-reduced across the replicas in fp32 afterwards
Rank 0 writes DIR/replica-all-reduce.json: the relative difference of the two gradients (bf16 rounding of the wire:
0 < d < 1e-2), that of two reference runs (the step's own run-to-run noise), whether every hook call ran off the
default stream, and the losses of `--steps` train_step()s of the
wire model (the held sums start over each step; clipping and AdamW over the sharded gradients).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor

from ray_efa.core.models import model_preset
from ray_efa.core.settings import TrainingSettings
from ray_efa.training import parallelize as par
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model
from ray_efa.training.train import build_optimizer, train_step

WORLD = 2


class ReplicaMesh:
    """What parallelize() asks of HSDP's 2-D mesh here: the shard mesh (1 rank) and the replicate group."""

    def __init__(self, shard, replicate) -> None:
        self.shard, self.replicate = shard, replicate

    def __getitem__(self, name: str):
        assert name == "shard", name
        return self.shard

    def get_group(self, name: str):
        assert name == "replicate", name
        return self.replicate


def _local(grad: torch.Tensor | None) -> torch.Tensor:
    """This rank's part of a sharded gradient (a DTensor on the 1-rank shard mesh: the whole gradient)."""
    assert isinstance(grad, DTensor), type(grad)
    return grad.to_local()


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: _local(p.grad).float().clone() for n, p in model.named_parameters() if p.grad is not None}


def _backward(model, batches) -> None:
    k = len(batches)
    for index, (inputs, labels) in enumerate(batches):
        par.set_gradient_sync(model, index == k - 1)  # as train_step does
        (model(inputs, labels) / k).backward()
    torch.cuda.synchronize()


def _worker(rank: int, args: argparse.Namespace, store: str) -> None:
    torch.cuda.set_device(0)
    device = torch.device("cuda", 0)
    # FileStore comes from torch's C extension and is not re-exported as a typed name, although it is public API.
    file_store = dist.FileStore(store, WORLD)  # pyright: ignore[reportPrivateImportUsage]
    dist.init_process_group("gloo", store=file_store, rank=rank, world_size=WORLD)
    own = [dist.new_group([r], backend="nccl") for r in range(WORLD)][rank]  # every rank creates every group
    replicate = dist.new_group(list(range(WORLD)), backend="gloo")
    assert isinstance(own, dist.ProcessGroup) and isinstance(replicate, dist.ProcessGroup)
    shard_mesh = DeviceMesh.from_group(own, "cuda", mesh_dim_names=("shard",))
    preset = model_preset(args.model)
    policy, _ = par.gradient_precision(device, "bf16", args.accumulation)  # fp32 policy, bf16 wire: the job's
    data = TokenBatches(
        vocab_size=preset.vocab_size,
        seq_len=args.seq_len,
        micro_batch=args.micro_batch * args.accumulation,
        seed=0,
        rank=rank,
    )
    inputs, labels = data.batch(1)
    batches = list(zip(inputs.to(device).chunk(args.accumulation), labels.to(device).chunk(args.accumulation)))

    on_side_stream: list[bool] = []
    real_call = par.Bf16WireReplicaAllReduce.__call__

    def spy(self, reduce_output):
        on_side_stream.append(torch.cuda.current_stream() != torch.cuda.default_stream())
        return real_call(self, reduce_output)

    par.Bf16WireReplicaAllReduce.__call__ = spy

    # The device synchronized after each of the hook's all-reduces (default; --no-sync-fix leaves it out). It was added
    # against deviations first put down to gloo's copy-back stream; the cause was the hook's own stream race (FSDP2's
    # reduce_output reused by the next layer's reduce-scatter), fixed by keep_for_current_stream and proven by
    # bench/replica_all_reduce_race.py. With the fix the unsynchronized run is within the step's noise
    # (docs/BENCHMARKS.md).
    real_all_reduce = dist.all_reduce

    def all_reduce_then_sync(tensor, *a, **kw):
        work = real_all_reduce(tensor, *a, **kw)
        if not args.no_sync_fix:
            torch.cuda.synchronize()
        return work

    dist.all_reduce = all_reduce_then_sync

    def build(wire: bool):
        par._mesh = lambda model, replicas: ReplicaMesh(shard_mesh, replicate) if wire else shard_mesh
        plan = par.ParallelPlan(
            replicas=WORLD, mixed_precision=policy, bf16_wire=wire, compile=args.compile, fp8=args.fp8
        )
        return par.parallelize(build_model(preset, seed=0, device=device, loss_chunk_size=1024), plan)

    wire = build(True)
    _backward(wire, batches)
    wire_grads = _grads(wire)
    calls_first_step = len(on_side_stream)

    def reference_grads() -> dict[str, torch.Tensor]:
        reference = build(False)
        _backward(reference, batches)
        for p in reference.parameters():  # the fp32 all-reduce across the replicas, after backward
            local = _local(p.grad)
            dist.all_reduce(local, group=replicate)
            local.div_(WORLD)
        return _grads(reference)

    def difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
        num = sum(float((a[n] - b[n]).pow(2).sum()) for n in b)
        return (num / sum(float(b[n].pow(2).sum()) for n in b)) ** 0.5

    # Twice: how far two fp32-wire runs of the same step already differ (fp8's and compile's own noise), beside
    # how far the bf16 wire moves it
    first, second = reference_grads(), reference_grads()

    wire.zero_grad(set_to_none=True)
    t = TrainingSettings(model=args.model, learning_rate=1e-4)
    optimizer = build_optimizer(wire, t, device)
    losses = []
    for step in range(1, args.steps + 1):
        step_batches = list(zip(*(x.to(device).chunk(args.accumulation) for x in data.batch(step + 1))))
        result = train_step(wire, optimizer, step_batches, lr=1e-4, grad_clip=1.0, device=device)
        losses.append(float(result[0]))
    if rank == 0:
        out = {
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0),
            "model": args.model,
            "accumulation": args.accumulation,
            "micro_batch": args.micro_batch,
            "seq_len": args.seq_len,
            "fp8": args.fp8,
            "compile": args.compile,
            "gloo_sync_fix": not args.no_sync_fix,
            "relative_difference": difference(wire_grads, first),
            "reference_vs_reference": difference(second, first),
            "parameters_compared": len(first),
            "hook_calls_first_step": calls_first_step,
            "hook_calls": len(on_side_stream),
            "units": len(wire.replica_all_reduce),
            "all_on_side_stream": all(on_side_stream),
            "train_step_losses": losses,
        }
        Path(args.out).mkdir(parents=True, exist_ok=True)
        path = Path(args.out) / "replica-all-reduce.json"
        path.write_text(json.dumps(out, indent=1))
        print(json.dumps(out, indent=1))
        print(f"wrote {path}")
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # see tests/training/gloo_ranks.py: no interpreter finalization racing gloo's threads


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--accumulation", type=int, default=4)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--fp8", action="store_true")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--no-sync-fix", action="store_true", help="leave gloo's CUDA all-reduce unsynchronized")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(args, str(Path(tmp) / "store")), nprocs=WORLD, join=True)  # pyright: ignore[reportPrivateImportUsage]


if __name__ == "__main__":
    main()
