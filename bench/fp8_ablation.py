"""Why torchtitan's fp8 step is faster than the job's on one H200: the job's step (no Ray) in fp8, with one lever changed
per cell, and dynamo's graph breaks counted.

    python3 bench/fp8_ablation.py --out DIR [--micro-batch 16] [--seq-len 2048] [--steps 6]

Cells (all: Qwen2.5-1.5B, one rank of FSDP2, bf16 parameters, per-layer compile, the chunked loss, fused AdamW,
train_step with one micro-batch a step):
  shipped      fp8 as the job runs it: core.fp8.converts_to_fp8 leaves the small k/v projections in bf16
  all-linears  every decoder linear converted, as torchtitan 0.2.2 does (its filter only skips the output layer)
  bf16         no fp8, for scale
DIR/fp8-ablation.jsonl: one line per cell with tokens/s, MFU under both FLOP conventions (full 6N+12LdS, causal
6N+6LdS, of 989 TFLOP/s), peak memory and the graph breaks dynamo counted while compiling the layers.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch._dynamo
import torch.distributed as dist
from torch._dynamo.utils import counters

from ray_efa.core import perf
from ray_efa.core.fp8 import converts_to_fp8
from ray_efa.core.models import model_preset
from ray_efa.training import parallelize as par
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model
from ray_efa.training.train import build_optimizer, train_step

PEAK_FLOPS = 989e12


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    from ray_efa.core.settings import TrainingSettings

    torch._dynamo.config.cache_size_limit = 64
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29617", rank=0, world_size=1, device_id=device)
    preset = model_preset("qwen2.5-1.5b")
    t = TrainingSettings(model="qwen2.5-1.5b", learning_rate=3e-4)
    causal = perf.flops_per_token_causal(preset, args.seq_len)
    full = causal + 6 * preset.num_hidden_layers * preset.hidden_size * args.seq_len  # 6N + 12 L d S
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "fp8-ablation.jsonl"
    with out.open("w") as f:
        f.write(
            json.dumps(
                {
                    "torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name(0),
                    "micro_batch": args.micro_batch,
                    "seq_len": args.seq_len,
                }
            )
            + "\n"
        )
        for cell in ("shipped", "all-linears", "bf16"):
            torch._dynamo.reset()
            counters.clear()
            # parallelize's module filter asks training.parallelize.converts_to_fp8 (core.fp8's rule)
            rule = (lambda k, n: k % 16 == 0 and n % 16 == 0) if cell == "all-linears" else converts_to_fp8
            setattr(par, "converts_to_fp8", rule)  # noqa: B010
            model = build_model(preset, seed=0, device=device, loss_chunk_size=1024)
            model = par.parallelize(
                model,
                par.ParallelPlan(compile=True, fp8=cell != "bf16", mixed_precision=par.mixed_precision_policy(device)),
            )
            converted = sum(type(m).__name__ == "Float8Linear" for m in model.modules())
            optimizer = build_optimizer(model, t, device)
            data = TokenBatches(
                vocab_size=preset.vocab_size, seq_len=args.seq_len, micro_batch=args.micro_batch, seed=0, rank=0
            )
            torch.cuda.reset_peak_memory_stats(device)
            warmup = 3
            start = time.perf_counter()
            for step in range(1, warmup + args.steps + 1):
                if step == warmup + 1:
                    torch.cuda.synchronize(device)
                    start = time.perf_counter()
                inputs, labels = data.batch(step)
                train_step(
                    model, optimizer, (inputs.to(device), labels.to(device)), lr=3e-4, grad_clip=1.0, device=device
                )
            torch.cuda.synchronize(device)
            step_s = (time.perf_counter() - start) / args.steps
            tokens_per_s = args.micro_batch * args.seq_len / step_s
            row = {
                "cell": cell,
                "float8_linears": converted,
                "step_s": round(step_s, 4),
                "tokens_per_s": round(tokens_per_s),
                "mfu_full_pct": round(100 * tokens_per_s * full / PEAK_FLOPS, 2),
                "mfu_causal_pct": round(100 * tokens_per_s * causal / PEAK_FLOPS, 2),
                "graph_breaks": dict(counters["graph_break"]),
                "graph_break_count": sum(counters["graph_break"].values()),
                "unique_graphs": counters["stats"]["unique_graphs"],
                "peak_reserved_gib": round(torch.cuda.max_memory_reserved(device) / 2**30, 2),
            }
            print(json.dumps(row), flush=True)
            f.write(json.dumps(row) + "\n")
            del model, optimizer
            torch.cuda.empty_cache()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
