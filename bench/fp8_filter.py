"""Which decoder-layer linears pay for float8 on Qwen2.5-1.5B: the project's step on one GPU, bf16 against fp8 with
several module filters, at one shape.

    python3 bench/fp8_filter.py --out DIR [--batch 12] [--seq-len 4096]

Filters: `all` (every decoder-layer linear: what precision fp8 converts), `no-kv` (all but k_proj and v_proj, whose
256 outputs make small GEMMs that may not repay their casts), `mlp` (gate/up/down only), and torchao's own
`auto` (`_auto_filter_for_recipe("tensorwise")`, thresholds measured on H100). One rank, so no fp8 all-gather (see
training.parallelize). Writes DIR/fp8-filter.jsonl, one line per cell; MFU against 989 TFLOP/s under 12LdS and causal.
Run it from outside the repository root, with torchao 0.18.0 installed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed import NAMESPACE, _mfu  # noqa: E402, F401  (NAMESPACE: makes ray_efa importable)

from ray_efa.core.settings import Settings  # noqa: E402

FILTERS = {
    "all": lambda module, fqn: True,
    "no-kv": lambda module, fqn: not fqn.endswith(("k_proj", "v_proj")),
    "mlp": lambda module, fqn: fqn.endswith(("gate_proj", "up_proj", "down_proj")),
}


def run_cell(precision: str, name: str, batch: int, seq_len: int, device) -> dict:
    import torch
    import torch._dynamo
    from torchao.float8 import Float8LinearConfig, _auto_filter_for_recipe, convert_to_float8_training

    from ray_efa.training.data import TokenBatches
    from ray_efa.training.model import build_model
    from ray_efa.training.parallelize import ParallelPlan, mixed_precision_policy, parallelize
    from ray_efa.training.train import build_optimizer, train_step

    settings = Settings.from_context(
        {
            "model": "qwen2.5-1.5b",
            "seqLen": seq_len,
            "microBatch": batch,
            "gpuInstanceType": "p5en.48xlarge",
            "gpuNodeCount": 1,
        }
    )
    t = settings.training
    torch._dynamo.reset()  # each cell compiles as a fresh job would (static shapes; see bench/speed.py)
    model = build_model(t.preset, seed=0, device=device, loss_chunk_size=t.loss_chunk)
    converted = 0
    if precision == "fp8":
        keep = _auto_filter_for_recipe("tensorwise", filter_fqns=[]) if name == "auto" else FILTERS[name]
        linear = torch.nn.Linear
        convert_to_float8_training(
            model.hf.model.layers,
            config=Float8LinearConfig(enable_fsdp_float8_all_gather=False),
            module_filter_fn=lambda m, fqn: isinstance(m, linear) and keep(m, fqn),
        )
        converted = sum(type(m).__name__ == "Float8Linear" for m in model.modules())
    model = parallelize(model, ParallelPlan(compile=True, mixed_precision=mixed_precision_policy(device)))
    optimizer = build_optimizer(model, t, device)
    data = TokenBatches(vocab_size=t.preset.vocab_size, seq_len=seq_len, micro_batch=batch, seed=0, rank=0)
    warmup, timed = 3, 8
    losses = []
    start = time.perf_counter()
    for step in range(1, warmup + timed + 1):
        if step == warmup + 1:
            torch.cuda.synchronize(device)
            start = time.perf_counter()
        result = train_step(model, optimizer, data.batch(step), lr=3e-4, grad_clip=1.0, device=device)
        losses.append(result.loss)
    torch.cuda.synchronize(device)
    step_time = (time.perf_counter() - start) / timed
    per_gpu = batch * seq_len / step_time
    row = {
        "precision": precision,
        "filter": name if precision == "fp8" else None,
        "float8_linears": converted,
        "batch": batch,
        "seq_len": seq_len,
        "step_time_s": round(step_time, 4),
        "tokens_per_s_per_gpu": round(per_gpu, 1),
        **_mfu(settings, per_gpu),
        "losses": [round(float(x), 5) for x in losses],
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved(device) / 2**30, 2),
    }
    del model, optimizer
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--cells", default="bf16,fp8:all,fp8:no-kv,fp8:mlp,fp8:auto")
    args = parser.parse_args()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    os.chdir(args.out)
    import torch
    import torch._dynamo
    import torch.distributed as dist

    torch._dynamo.config.cache_size_limit = 64  # one model per cell
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29614", rank=0, world_size=1)
    rows: list[dict] = [
        {
            "versions": {
                "torch": torch.__version__,
                "device": torch.cuda.get_device_name(0),
                "torchao": __import__("torchao").__version__,
            }
        }
    ]
    print(json.dumps(rows[0]), flush=True)
    for cell in args.cells.split(","):
        precision, _, name = cell.partition(":")
        try:
            rows.append(run_cell(precision, name or "all", args.batch, args.seq_len, device))
        except Exception as error:  # one failed cell must not hide the others' numbers
            rows.append({"precision": precision, "filter": name, "error": f"{type(error).__name__}: {error}"[:1000]})
        print(json.dumps(rows[-1]), flush=True)
    dist.destroy_process_group()
    (args.out / "fp8-filter.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {args.out / 'fp8-filter.jsonl'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
