"""Plain FSDP against HSDP and gradient accumulation on 2 GPUs, measured next to core.perf's prediction.

    torchrun --standalone --nproc_per_node=2 bench/sharding_proof.py --out DIR --link nvlink \\
        [--cells fsdp:1:fp32,hsdp:4:bf16] [--micro-batch 4] [--seq-len 4096] [--warmup 2] [--steps 3] [--cpu]

Each cell is STRATEGY:GRAD_ACCUMULATION:REDUCE_DTYPE. hsdp replicates over the 2 ranks ("2 nodes of one GPU") and
shards over 1, so only the gradient all-reduce crosses the link; fsdp shards over both. Run it once with NCCL's
defaults (NVLink) and once with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 (NCCL over sockets, --link socket). It first
measures the link (all-reduce bus bandwidth of a 512 MiB bf16 tensor) and predicts every cell with core.perf on that
link; then runs each cell (the project's model, parallelize() with per-layer compile, chunked loss, fused AdamW,
train_step()) and times `--steps` optimizer steps after `--warmup`. Rank 0 writes DIR/proof-LINK.jsonl and prints a
table. --cpu: the tiny model on gloo, to check the plumbing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.cuda import nccl  # not imported by `import torch`

from ray_efa.core import catalog, perf
from ray_efa.core.settings import TrainingSettings
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model
from ray_efa.training.parallelize import ParallelPlan, gradient_precision, parallelize
from ray_efa.training.train import build_optimizer, train_step

_GIB = 2**30


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def link_busbw_gb_s(device: torch.device, mib: int = 512, iters: int = 3) -> float:
    """All-reduce bus bandwidth (nccl-tests' convention: algbw x 2(n-1)/n) of a bf16 tensor of `mib` MiB, GB/s."""
    x = torch.ones(mib * 2**20 // 2, dtype=torch.bfloat16, device=device)
    dist.all_reduce(x)
    _sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    _sync(device)
    seconds = (time.perf_counter() - start) / iters
    n = dist.get_world_size()
    return x.numel() * 2 / seconds * 2 * (n - 1) / n / 1e9


def run_cell(t: TrainingSettings, strategy: str, device: torch.device, warmup: int, steps: int, compile_: bool) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build_model(t.preset, seed=0, device=device, loss_chunk_size=t.loss_chunk)
    policy, bf16_wire = gradient_precision(device, t.grad_reduce_dtype, t.accumulation_steps)  # as train_func runs it
    plan = ParallelPlan(
        compile=compile_, mixed_precision=policy, bf16_wire=bf16_wire, replicas=world if strategy == "hsdp" else 1
    )
    model = parallelize(model, plan)
    optimizer = build_optimizer(model, t, device)
    data = TokenBatches(
        vocab_size=t.preset.vocab_size, seq_len=t.seq_len, micro_batch=t.micro_batch_size, seed=0, rank=rank
    )
    k = t.accumulation_steps
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    losses = []
    start = time.perf_counter()  # reset when the timed steps begin
    for step in range(1, warmup + steps + 1):
        if step == warmup + 1:
            _sync(device)
            dist.barrier()
            start = time.perf_counter()
        batches = [data.batch((step - 1) * k + i + 1) for i in range(k)]
        loss, _ = train_step(model, optimizer, batches, lr=1e-4, grad_clip=1.0, device=device)
        losses.append(loss)
    _sync(device)
    step_time = (time.perf_counter() - start) / steps
    row = {
        "strategy": strategy,
        "grad_accumulation": k,
        "grad_reduce_dtype": t.grad_reduce_dtype,
        "micro_batch": t.micro_batch_size,
        "seq_len": t.seq_len,
        "step_time_s": round(step_time, 4),
        "tokens_per_s_per_gpu": round(t.micro_batch_size * t.seq_len * k / step_time, 1),
        "first_loss": round(float(losses[0]), 5),
        "hsdp": bool(model.hsdp),
    }
    if device.type == "cuda":
        row["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated(device) / _GIB, 2)
        row["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved(device) / _GIB, 2)
    del model, optimizer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--link", required=True, help="a name for the link: nvlink or socket")
    parser.add_argument("--cells", default="fsdp:1:fp32,hsdp:1:fp32,fsdp:4:fp32,hsdp:4:fp32,hsdp:4:bf16")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--loss-chunk", type=int, default=4096)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args()

    import torch._dynamo

    torch._dynamo.config.cache_size_limit = (
        64  # one model per cell: compiled graphs are rebuilt (from inductor's cache)
    )
    gpu = not args.cpu
    dist.init_process_group("nccl" if gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    model_name = "qwen2.5-1.5b" if gpu else "tiny"
    seq = args.seq_len if gpu else 64
    busbw = link_busbw_gb_s(device, mib=512 if gpu else 8)
    link = perf.Link(name=args.link, gb_s=busbw)
    header = {
        "link": args.link,
        "measured_allreduce_busbw_gb_s": round(busbw, 2),
        "world_size": world,
        "torch": torch.__version__,
        "nccl": ".".join(map(str, nccl.version())) if gpu else None,
        "device": torch.cuda.get_device_name(device) if gpu else "cpu",
        "NCCL_P2P_DISABLE": os.environ.get("NCCL_P2P_DISABLE"),
        "NCCL_SHM_DISABLE": os.environ.get("NCCL_SHM_DISABLE"),
    }
    rows = [header]
    if rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        print(json.dumps(header), flush=True)
    for cell in args.cells.split(","):
        strategy, k, reduce = cell.split(":")
        t = TrainingSettings(
            model=model_name,
            micro_batch=args.micro_batch,
            seq_len=seq,
            grad_accumulation=int(k),
            grad_reduce_dtype=reduce,
            compile=gpu,
            loss_chunk_size=args.loss_chunk if gpu else 32,
        )
        predicted = perf.predict(
            t,
            instance=catalog.gpu_instance("p5en.48xlarge"),
            nodes=world,
            gpus_per_node=1,
            network="efa",
            strategy=strategy,
            links=(link, link),
        )
        started = time.time()
        try:
            row = run_cell(t, strategy, device, args.warmup, args.steps, compile_=gpu)
        except torch.OutOfMemoryError as error:
            row = {"strategy": strategy, "grad_accumulation": int(k), "error": str(error)[:200]}
        row.update(
            {
                "cell": cell,
                "link": args.link,
                "wall_s": round(time.time() - started, 1),
                "predicted_step_time_s": round(predicted.step_time_s, 4),
                "predicted_tokens_per_s_per_gpu": round(predicted.tokens_per_s_per_gpu, 1),
                "predicted_compute_s": round(predicted.compute_s, 4),
                "predicted_network_s": round(predicted.network_s, 4),
                "predicted_bottleneck": predicted.bottleneck,
            }
        )
        if "step_time_s" in row:
            row["predicted_over_measured"] = round(predicted.step_time_s / row["step_time_s"], 3)
        rows.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)
            with (args.out / f"proof-{args.link}.jsonl").open("w") as sink:
                sink.write("".join(json.dumps(r) + "\n" for r in rows))
    if rank == 0:
        print(f"{'link':>7} {'cell':>12} {'step s':>7} {'pred s':>7} {'p/m':>5} {'tok/s/GPU':>10} {'pred tok/s':>10}")
        for r in rows[1:]:
            print(
                f"{r['link']:>7} {r['cell']:>12} {r.get('step_time_s', float('nan')):7.3f} {r['predicted_step_time_s']:7.3f} "
                f"{r.get('predicted_over_measured', float('nan')):5.2f} {r.get('tokens_per_s_per_gpu', 0):10.0f} "
                f"{r['predicted_tokens_per_s_per_gpu']:10.0f}"
            )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
