"""The chunked output projection + cross-entropy on one GPU: time and memory of one micro-batch's loss, forward and
backward, for each chunk size and each way of summing the weight's gradient, against torchtitan's form (full logits,
compiled cross-entropy).

    python3 bench/loss_chunk.py --out DIR [--tokens 32768] [--chunks 1024,2048,4096,8192] [--repeats 7]

Shapes: Qwen2.5-1.5B's output projection (151,936 x 1536, bf16) over --tokens tokens (the default job's micro-batch,
16 x 2048). Cells:
  addmm  training.loss as shipped: each chunk's weight gradient summed in the fp32 accumulator by the matrix
         product's epilogue (cuBLAS, beta = 1, fp32 output)
  add    the bf16 product of each chunk built, then widened into the accumulator (training.loss before issue 51)
  full   all logits at once, the cross-entropy compiled (torchtitan's loss), chunk 0
Every cell's loss and gradients are compared with the first `add` cell's (max relative error), so a wrong sum shows.
DIR/loss-chunk.jsonl: one line per cell, median ms of --repeats after two warm-ups, peak memory above the inputs.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from ray_efa.training import loss as loss_module

VOCAB, HIDDEN = 151_936, 1536


def _add_product(acc: torch.Tensor, grad_logits: torch.Tensor, h: torch.Tensor) -> None:
    acc.add_(grad_logits.T @ h)


def _full_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(F.linear(hidden, weight).float(), labels)


def _one(hidden, weight, labels, chunk, full_loss):
    if chunk == 0:
        loss = full_loss(hidden, weight, labels)
    else:
        loss = loss_module.causal_lm_loss(hidden, weight, labels, chunk_size=chunk, compiled=True)
    return (loss, *torch.autograd.grad(loss, (hidden, weight)))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--chunks", default="1024,2048,4096,8192")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    hidden = (torch.randn(args.tokens, HIDDEN, device=device) * 0.5).bfloat16().requires_grad_()
    weight = (torch.randn(VOCAB, HIDDEN, device=device) * 0.02).bfloat16().requires_grad_()
    labels = torch.randint(0, VOCAB, (args.tokens,), device=device)
    full_loss = torch.compile(_full_loss)
    shipped = loss_module._accumulate_product
    cells = [("add", c) for c in map(int, args.chunks.split(","))] + [
        ("addmm", c) for c in map(int, args.chunks.split(","))
    ]
    cells.append(("full", 0))
    args.out.mkdir(parents=True, exist_ok=True)
    reference = None
    with (args.out / "loss-chunk.jsonl").open("w") as f:
        f.write(
            json.dumps(
                {
                    "torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name(0),
                    "tokens": args.tokens,
                    "vocab": VOCAB,
                    "hidden": HIDDEN,
                }
            )
            + "\n"
        )
        for form, chunk in cells:
            loss_module._accumulate_product = _add_product if form == "add" else shipped
            try:
                for _ in range(2):
                    out = _one(hidden, weight, labels, chunk, full_loss)
                torch.cuda.synchronize()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                times = []
                for _ in range(args.repeats):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    out = _one(hidden, weight, labels, chunk, full_loss)
                    end.record()
                    torch.cuda.synchronize()
                    times.append(start.elapsed_time(end))
                    del out
                peak = (torch.cuda.max_memory_allocated() - base) / 2**30
                out = _one(hidden, weight, labels, chunk, full_loss)
                reference = reference or [t.detach().clone() for t in out]
                row = {
                    "form": form,
                    "chunk": chunk,
                    "ms": statistics.median(times),
                    "ms_min": min(times),
                    "peak_above_inputs_gib": round(peak, 3),
                    "loss": float(out[0]),
                    "rel_err": {
                        k: _rel(o, r) for k, o, r in zip(("loss", "grad_hidden", "grad_weight"), out, reference)
                    },
                }
                del out
            except torch.OutOfMemoryError as e:
                row = {"form": form, "chunk": chunk, "error": str(e).splitlines()[0]}
            torch.cuda.empty_cache()
            print(json.dumps(row), flush=True)
            f.write(json.dumps(row) + "\n")
    loss_module._accumulate_product = shipped


if __name__ == "__main__":
    main()
