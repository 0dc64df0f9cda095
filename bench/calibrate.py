"""Calibrate the step-time model and the memory plan on one GPU: the project's step at several shapes, one process.

    python bench/calibrate.py --out DIR [--shapes 2x2048,4x4096x2,...] [--steps 6] [--warmup 3] [--loss-chunk 4096]

A shape is MICRO_BATCHxSEQ_LEN[xGRAD_ACCUMULATION]. One model (Qwen2.5-1.5B architecture, random weights, the
project's parallelize(): FSDP2 over a one-rank NCCL group, per-layer torch.compile, chunked loss, fused AdamW) runs
every shape in turn, so compilation happens once per shape and the model is built once. For each shape it records:

- step time (wall clock between synchronizations over `--steps` steps, after `--warmup` steps), and with CUDA events
  the forward+backward time and the optimizer time (clip + AdamW + zero_grad) of each step: what core/perf.py's
  compute term and its fixed per-step term are calibrated against;
- peak allocated and peak reserved memory (the caching allocator's statistics, reset per shape after
  empty_cache()), and the device memory in use that PyTorch's allocator does not hold (CUDA context, cuBLAS and
  NCCL buffers: total - free - reserved): what core/memory.py's reserved-memory calibration is fitted to.

It also times a large bf16 matrix product (the GPU's practical ceiling, METHOD.md) and writes one JSON line per
shape into DIR/calibrate.jsonl, then prints a short table. At world size 1 there is no communication: this
calibrates compute and memory only.
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

from ray_efa.core.models import model_preset
from ray_efa.core.settings import TrainingSettings
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model
from ray_efa.training.parallelize import ParallelPlan, mixed_precision_policy, parallelize
from ray_efa.training.train import build_optimizer

_GIB = 2**30


def matmul_tflops(n: int = 8192, repeats: int = 50) -> float:
    """bf16 n x n x n products on random data, mean over `repeats` after a warm-up: TFLOP/s."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        _ = a @ b
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        _ = a @ b
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / repeats
    del a, b
    return 2 * n**3 / seconds / 1e12


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = [int(x) for x in text.lower().split("x")]
    return (parts[0], parts[1], parts[2] if len(parts) > 2 else 1)


def run_shape(
    model, optimizer, preset, micro_batch: int, seq_len: int, accumulation: int, steps: int, warmup: int
) -> dict:
    device = torch.device("cuda")
    data = TokenBatches(vocab_size=preset.vocab_size, seq_len=seq_len, micro_batch=micro_batch, seed=0, rank=0)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    events = []
    losses = []
    wall_start = time.perf_counter()  # reset when the timed steps begin
    loss = torch.zeros((), device=device)  # each step's last micro-batch loss (accumulation >= 1)
    for step in range(1, warmup + steps + 1):
        if step == warmup + 1:
            torch.cuda.synchronize()
            wall_start = time.perf_counter()
        begin, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        begin.record()
        for micro in range(accumulation):
            inputs, labels = data.batch(step * accumulation + micro)
            loss = model(inputs.to(device, non_blocking=True), labels.to(device, non_blocking=True)) / accumulation
            loss.backward()
        mid.record()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        end.record()
        if step > warmup:
            events.append((begin, mid, end))
            losses.append(loss.detach())
    torch.cuda.synchronize()
    wall = (time.perf_counter() - wall_start) / steps
    fwd_bwd = sum(b.elapsed_time(m) for b, m, _ in events) / len(events) / 1e3
    optim = sum(m.elapsed_time(e) for _, m, e in events) / len(events) / 1e3
    free, total = torch.cuda.mem_get_info()
    reserved_now = torch.cuda.memory_reserved()
    tokens = micro_batch * seq_len * accumulation
    flops_12 = preset.flops_per_token(seq_len)
    flops_6 = 6 * preset.num_parameters + 6 * preset.num_hidden_layers * preset.hidden_size * seq_len
    return {
        "micro_batch": micro_batch,
        "seq_len": seq_len,
        "grad_accumulation": accumulation,
        "tokens_per_step": tokens,
        "step_time_s": round(wall, 5),
        "fwd_bwd_s": round(fwd_bwd, 5),
        "optimizer_s": round(optim, 5),
        "tokens_per_s": round(tokens / wall, 1),
        "achieved_tflops_12lds": round(tokens * flops_12 / wall / 1e12, 2),
        "achieved_tflops_6lds": round(tokens * flops_6 / wall / 1e12, 2),
        "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / _GIB, 3),
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / _GIB, 3),
        "outside_allocator_gib": round((total - free - reserved_now) / _GIB, 3),
        "device_total_gib": round(total / _GIB, 3),
        "last_loss": round(float(losses[-1].float().item()) * accumulation, 5),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", default="qwen2.5-1.5b")
    parser.add_argument("--shapes", default="2x2048,2x2048x4,4x2048,8x2048,4x4096,8x4096")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument(
        "--loss-chunk",
        type=int,
        default=4096,
        help="lossChunkSize (4096: the calibration of 2026-12-01; the default is 1024 since)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    # Each shape gets its own static graphs, as a production run of one shape does (no dynamic-shape kernels).
    import torch._dynamo

    torch._dynamo.config.automatic_dynamic_shapes = False
    torch._dynamo.config.cache_size_limit = 64
    torch._dynamo.config.accumulated_cache_size_limit = 512

    # FileStore comes from torch's C extension and is not re-exported as a typed name, although it is public API.
    store = dist.FileStore("/tmp/calibrate-pg-store", 1)  # pyright: ignore[reportPrivateImportUsage]
    dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda", 0))
    torch.cuda.set_device(0)
    preset = model_preset(args.model)
    device = torch.device("cuda")
    header = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "nccl": ".".join(map(str, nccl.version())),
        "cuda": torch.version.cuda,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "model": args.model,
        "compile": not args.no_compile,
        "loss_chunk_size": args.loss_chunk,
        "matmul_bf16_tflops": round(matmul_tflops(), 1),
    }
    try:
        import transformers

        header["transformers"] = transformers.__version__
    except ImportError:
        pass
    print(json.dumps(header), flush=True)
    model = build_model(preset, seed=0, device=device, loss_chunk_size=args.loss_chunk)
    model = parallelize(
        model, ParallelPlan(compile=not args.no_compile, mixed_precision=mixed_precision_policy(device))
    )
    optimizer = build_optimizer(model, TrainingSettings(model=args.model), device)
    model.train()
    rows = []
    with (args.out / "calibrate.jsonl").open("w") as sink:
        sink.write(json.dumps(header) + "\n")
        for shape in args.shapes.split(","):
            mb, seq, acc = parse_shape(shape)
            started = time.time()
            try:
                row = run_shape(model, optimizer, preset, mb, seq, acc, args.steps, args.warmup)
            except torch.OutOfMemoryError as error:
                row = {
                    "micro_batch": mb,
                    "seq_len": seq,
                    "grad_accumulation": acc,
                    "error": f"OutOfMemoryError: {error}"[:300],
                }
                optimizer.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
            row["wall_s"] = round(time.time() - started, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
            sink.write(json.dumps(row) + "\n")
            sink.flush()
    print(
        f"{'shape':>12} {'step s':>8} {'fb s':>7} {'opt s':>6} {'tok/s':>8} {'TF12':>6} {'alloc':>6} {'resv':>6} {'ctx':>5}"
    )
    for r in rows:
        if "error" in r:
            print(f"{r['micro_batch']}x{r['seq_len']}x{r['grad_accumulation']:>3} {r['error'][:60]}")
            continue
        print(
            f"{r['micro_batch']}x{r['seq_len']}x{r['grad_accumulation']:<3} {r['step_time_s']:8.4f} {r['fwd_bwd_s']:7.4f} "
            f"{r['optimizer_s']:6.4f} {r['tokens_per_s']:8.0f} {r['achieved_tflops_12lds']:6.1f} "
            f"{r['peak_allocated_gib']:6.2f} {r['peak_reserved_gib']:6.2f} {r['outside_allocator_gib']:5.2f}"
        )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
