"""Bf16WireReplicaAllReduce against a deliberately slow all-reduce, on CUDA with NCCL, WITHOUT synchronizing.

    python bench/replica_all_reduce_race.py --out DIR [--model qwen2.5-0.5b] [--accumulation 4] [--micro-batch 2]
        [--seq-len 1024] [--delays-ms 0,1,4,25]

What it proves: FSDP2 allocates each unit's `reduce_output` on its reduce-scatter stream and hands it to the all-reduce
hook on its all-reduce stream; unless the hook ties the buffer to that stream (training.parallelize
`keep_for_current_stream`, a `record_stream`), the caching allocator can give the same block to the next decoder
layer's reduce-scatter while the cross-node all-reduce still reads or writes it. On a real cluster the cross-node
all-reduce of a layer (~94 MB of bf16 at ~3 GB/s on g6) is ~3x a layer's backward, so the all-reduce stream falls
behind at every layer. Here the link is emulated: after the hook's real NCCL all-reduce, `torch.cuda._sleep` holds
the all-reduce stream for the given delay, exactly where a slow link would.

One process on ONE GPU: the job's model and parallelize() (bf16 parameters, fp32 reduction with a bf16 wire, the hook
on every FSDP2 unit), 1-D FSDP2 over a 1-rank NCCL shard group, and the hook's replicate group a second 1-rank NCCL
communicator (a real NCCL all-reduce on the hook's stream; its sum over one rank is the identity, so every run's
gradients must be bitwise equal whatever the delay; attention runs its deterministic math kernel, the rest under
torch.use_deterministic_algorithms). Each run builds the model from the same seed and runs one
accumulated backward (set_gradient_sync as train_step does, no synchronization until the gradients are read):

  fixed:    the project's hook as shipped (keep_for_current_stream ties reduce_output to the all-reduce stream)
  unfixed:  the same hook with keep_for_current_stream replaced by a no-op (the code before the fix)

for every delay. The reference is the fixed hook at delay 0; a second fixed delay-0 run shows the step is
deterministic. DIR/replica-all-reduce-race.json holds, per run, the relative L2 difference of all gradients from the
reference, the largest per-parameter relative difference, how many parameters differ, and whether it is bitwise
equal. Exit status 0 when every fixed run is bitwise equal and (with a delay > 0) some unfixed run differs, else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from ray_efa.core.models import model_preset
from ray_efa.training import parallelize as par
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replica_all_reduce_gpu import ReplicaMesh  # noqa: E402  (HSDP's mesh as parallelize() asks for it)


def _cycles_per_ms() -> float:
    """torch.cuda._sleep's spin cycles per millisecond on this GPU, measured."""
    cycles = 20_000_000
    torch.cuda._sleep(1_000_000)  # warm-up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / start.elapsed_time(end)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--accumulation", type=int, default=4)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--delays-ms", default="0,1,4,25")
    args = parser.parse_args()
    delays = [float(d) for d in args.delays_ms.split(",")]

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.cuda.set_device(0)
    device = torch.device("cuda", 0)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("nccl", init_method=f"file://{tmp}/store", rank=0, world_size=1, device_id=device)
        shard_mesh = init_device_mesh("cuda", (1,), mesh_dim_names=("shard",))
        replicate = dist.new_group([0], backend="nccl")  # a communicator of its own: the hook's all-reduce is real NCCL
        assert isinstance(replicate, dist.ProcessGroup)
        result = _run(args, delays, device, shard_mesh, replicate)
        dist.destroy_process_group()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / "replica-all-reduce-race.json"
    path.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    print(f"wrote {path}")
    sys.exit(0 if result["verdict"] == "pass" else 1)


def _run(args, delays, device, shard_mesh, replicate) -> dict:
    preset = model_preset(args.model)
    policy, wire = par.gradient_precision(device, "bf16", args.accumulation)  # the job's: fp32 policy, bf16 wire
    assert wire
    data = TokenBatches(
        vocab_size=preset.vocab_size,
        seq_len=args.seq_len,
        micro_batch=args.micro_batch * args.accumulation,
        seed=0,
        rank=0,
    )
    inputs, labels = (x.to(device) for x in data.batch(1))
    batches = list(zip(inputs.chunk(args.accumulation), labels.chunk(args.accumulation)))
    cycles_per_ms = _cycles_per_ms()

    delay_cycles = 0
    hook_streams: list[bool] = []
    real_all_reduce = dist.all_reduce

    def slow_all_reduce(tensor, *a, **kw):
        work = real_all_reduce(tensor, *a, **kw)  # synchronous: the current (all-reduce) stream waits for NCCL's
        hook_streams.append(torch.cuda.current_stream() != torch.cuda.default_stream())
        if delay_cycles:
            torch.cuda._sleep(delay_cycles)  # the slow link: the all-reduce stream is held after the collective
        return work

    dist.all_reduce = slow_all_reduce  # the hook looks it up at call time
    par._mesh = lambda model, replicas: ReplicaMesh(shard_mesh, replicate)  # pyright: ignore[reportAttributeAccessIssue]
    shipped_keep = par.keep_for_current_stream

    def gradients(fixed: bool, delay_ms: float) -> dict[str, torch.Tensor]:
        nonlocal delay_cycles
        par.keep_for_current_stream = shipped_keep if fixed else (lambda tensor: None)  # pyright: ignore[reportAttributeAccessIssue]
        plan = par.ParallelPlan(replicas=2, mixed_precision=policy, bf16_wire=True)
        model = par.parallelize(build_model(preset, seed=0, device=device, loss_chunk_size=1024), plan)
        assert len(model.replica_all_reduce) == len(model.layers) + 1
        torch.cuda.synchronize()
        delay_cycles = int(delay_ms * cycles_per_ms)
        k = len(batches)
        # The math attention kernel: flash / memory-efficient attention's backward is not deterministic, and the
        # comparison is bitwise
        with sdpa_kernel(SDPBackend.MATH):
            for index, (x, y) in enumerate(batches):  # as train_step: no synchronization between micro-batches
                par.set_gradient_sync(model, index == k - 1)
                (model(x, y) / k).backward()
        torch.cuda.synchronize()
        delay_cycles = 0
        out = {}
        for name, p in model.named_parameters():
            assert isinstance(p.grad, DTensor), type(p.grad)
            out[name] = p.grad.to_local().detach().float().clone()
        del model
        torch.cuda.empty_cache()
        return out

    def compare(run: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> dict:
        num = sum(float((run[n] - reference[n]).pow(2).sum()) for n in reference)
        den = sum(float(reference[n].pow(2).sum()) for n in reference)
        per_param = {n: float((run[n] - reference[n]).norm() / reference[n].norm().clamp_min(1e-30)) for n in reference}
        worst = max(per_param, key=lambda n: per_param[n])
        return {
            "bitwise_equal": all(torch.equal(run[n], reference[n]) for n in reference),
            "relative_difference": (num / den) ** 0.5,
            "parameters_differing": sum(1 for n in reference if not torch.equal(run[n], reference[n])),
            "worst_parameter": worst,
            "worst_relative_difference": per_param[worst],
        }

    started = time.monotonic()
    reference = gradients(True, 0.0)
    runs = [{"hook": "fixed", "delay_ms": 0.0, "control": True, **compare(gradients(True, 0.0), reference)}]
    for fixed in (True, False):
        for delay_ms in delays:
            runs.append(
                {
                    "hook": "fixed" if fixed else "unfixed",
                    "delay_ms": delay_ms,
                    **compare(gradients(fixed, delay_ms), reference),
                }
            )
            print(
                f"{runs[-1]['hook']:>7} +{delay_ms:g} ms: bitwise equal {runs[-1]['bitwise_equal']}, "
                f"relative difference {runs[-1]['relative_difference']:.3g}",
                flush=True,
            )
    fixed_ok = all(r["bitwise_equal"] for r in runs if r["hook"] == "fixed")
    unfixed_differs = any(not r["bitwise_equal"] for r in runs if r["hook"] == "unfixed" and r["delay_ms"] > 0)
    return {
        "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),  # pyright: ignore[reportAttributeAccessIssue]
        "gpu": torch.cuda.get_device_name(0),
        "model": args.model,
        "accumulation": args.accumulation,
        "micro_batch": args.micro_batch,
        "seq_len": args.seq_len,
        "units": preset.num_hidden_layers + 1,
        "sleep_cycles_per_ms": round(cycles_per_ms),
        "hook_calls_on_side_stream": all(hook_streams),
        "hook_all_reduces": len(hook_streams),
        "seconds": round(time.monotonic() - started, 1),
        "runs": runs,
        "verdict": "pass" if fixed_ok and unfixed_differs else "fail",
    }


if __name__ == "__main__":
    main()
