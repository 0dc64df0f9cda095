"""Where one training step's GPU time goes, by kind of kernel: the project's step and torchtitan's, from their traces.

    python3 bench/step_profile.py project --out DIR [--micro-batch 8] [--accumulation 4] [--loss-chunk 4096]
    python3 bench/step_profile.py summarize TRACE.json [TRACE.json ...] --out FILE.jsonl
    python3 bench/step_profile.py hold --out DIR [--steps 8]     # the step without hold_gathered, with it, without
    python3 bench/step_profile.py variants hold+nofp8ag hold+fp8ag hold+fp8ag+cdt --out DIR [--steps 8] [--profile]

`project` runs the default job's step without Ray as `ray-efa train` builds it on the p5.4xlarge row (Qwen2.5-1.5B, one
rank of FSDP2, bf16 parameters, fp32 reduction, the lean decoder layer compiled per layer, fp8 decoder linears, no
activation checkpointing, the chunked loss, fused AdamW, train_step over --accumulation micro-batches), 3 steps to
warm up, then profiles one step (torch.profiler, CUDA kernels) into DIR/project_trace.json and summarizes it.
torchtitan writes its own trace (`--profiling.enable_profiling`, bench/titan_train.py); `summarize` reads either.

`variants` times the same step built each way named, in order (interleave them: A B A B), each a '+'-joined set of
`hold` / `nohold` (ParallelPlan.hold_gathered on / off; neither: the plan's default), `fp8ag` / `nofp8ag`
(ParallelPlan.fp8_all_gather on / off; neither: the default) and `cdt` (ParallelPlan.tune_kernels: inductor's
coordinate-descent tuning of the compiled layers and loss; without it, off), and the words parse_variant lists;
`--profile` adds each one's kernel time by kind, and by the operator that launched it, from one more, profiled step;
`--memory` what was allocated at the measured steps' peak, by where (peak_breakdown). `hold` is `variants
nohold+nofp8ag hold+nofp8ag nohold+nofp8ag`.

The summary (one JSON line per trace, and a table): the kernels' time by kind (matrix products, fp8 and bf16 alike,
attention, compiled Triton kernels, eager elementwise and reductions, the optimizer, copies, collectives), the GPU's
busy time and the span from the step's first kernel to its last (span - busy: the GPU idle, waiting on the host).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

KINDS = (
    ("attention", re.compile(r"flash|fmha|attn|sdpa", re.I)),
    ("optimizer", re.compile(r"multi_tensor|fused_adam|adam", re.I)),
    ("collectives", re.compile(r"nccl", re.I)),
    # fp8 and bf16 alike: cuBLAS's nvjet kernels do not name their input type
    ("matrix products", re.compile(r"gemm|cutlass|nvjet|xmma|sm90_|sm80_|cublas|e4m3|scaled_mm", re.I)),
    ("triton (compiled)", re.compile(r"^triton_", re.I)),
    (
        "elementwise / reduce (eager)",
        re.compile(
            r"elementwise|reduce_kernel|vectorized|unrolled|index|scatter|gather|"
            r"cat_|fill|copy",
            re.I,
        ),
    ),
)


def kind_of(name: str) -> str:
    return next((kind for kind, pattern in KINDS if pattern.search(name)), "other")


def summarize(trace: Path) -> dict:
    """Kernel time by kind, busy time and span of the GPU events in a Chrome trace (torch.profiler's export)."""
    events = json.loads(trace.read_text()).get("traceEvents", [])
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    by_kind: dict[str, float] = {}
    top: dict[str, float] = {}
    for e in gpu:
        kind = "copies" if e["cat"] != "kernel" else kind_of(e.get("name", ""))
        by_kind[kind] = by_kind.get(kind, 0.0) + e["dur"] / 1e3
        top[e.get("name", "")[:90]] = top.get(e.get("name", "")[:90], 0.0) + e["dur"] / 1e3
    span = (max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)) / 1e3 if gpu else 0.0
    busy = sum(by_kind.values())
    return {
        "trace": str(trace),
        "kernels": len(gpu),
        "span_ms": round(span, 2),
        "busy_ms": round(busy, 2),
        "ms_by_kind": {k: round(v, 2) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top_kernels_ms": {k: round(v, 2) for k, v in sorted(top.items(), key=lambda kv: -kv[1])[:60]},
    }


def table(rows: list[dict]) -> str:
    kinds = sorted(
        {k for r in rows for k in r["ms_by_kind"]}, key=lambda k: -max(r["ms_by_kind"].get(k, 0) for r in rows)
    )
    lines = [
        "| kind | " + " | ".join(Path(r["trace"]).parent.name or r["trace"] for r in rows) + " |",
        "|---|" + "---|" * len(rows),
    ]
    for k in kinds:
        lines.append(f"| {k} | " + " | ".join(f"{r['ms_by_kind'].get(k, 0):.1f} ms" for r in rows) + " |")
    lines.append("| GPU busy | " + " | ".join(f"{r['busy_ms']:.1f} ms" for r in rows) + " |")
    lines.append("| first to last kernel | " + " | ".join(f"{r['span_ms']:.1f} ms" for r in rows) + " |")
    return "\n".join(lines)


VARIANT_WORDS = (
    "hold",
    "nohold",
    "fp8ag",
    "nofp8ag",
    "cdt",
    "fp8all",
    "mat",
    "mulclip",
    "mulscale",
    "r1g",
    "nor1g",
    "full",
    "sel",
    "chunkN",
)


def parse_variant(name: str) -> dict:
    """'hold+fp8ag' -> the overrides _project_step takes; an unknown word is an error naming the allowed ones.
    `fp8all`: every decoder linear in fp8 (the k/v projections too); `mat`: inductor's max-autotune of the compiled
    layers' matrix products; `mulclip`: the gradient clip as clip_grad_norm_'s in-place multiply, not folded into fused
    AdamW (training.train.clip_and_step); `mulscale`: the chunked loss's backward scale as `mul_` by the 0-dim tensor
    (training.loss.scale_gradients before it took `_foreach_mul_`); `r1g` / `nor1g`: ParallelPlan.one_rank_gradients on / off (training.one_rank;
    neither: the default); `full` / `sel`: full or selective activation checkpointing (neither: none); `chunkN`:
    lossChunkSize N instead of --loss-chunk."""
    words = name.split("+")
    chunks = [w for w in words if re.fullmatch(r"chunk\d+", w)]
    unknown = [w for w in words if w not in VARIANT_WORDS and w not in chunks]
    if unknown:
        raise SystemExit(
            f"variant {name!r}: unknown {', '.join(unknown)}; allowed, joined by '+': {', '.join(VARIANT_WORDS)}"
        )
    return {
        "hold_gathered": True if "hold" in words else False if "nohold" in words else None,
        "fp8_all_gather": True if "fp8ag" in words else False if "nofp8ag" in words else None,
        "coordinate_descent": "cdt" in words,
        "fp8_everywhere": "fp8all" in words,
        "max_autotune": "mat" in words,
        "multiply_clip": "mulclip" in words,
        "multiply_scale": "mulscale" in words,
        "one_rank_gradients": True if "r1g" in words else False if "nor1g" in words else None,
        "checkpointing": "full" if "full" in words else "selective" if "sel" in words else "none",
        "loss_chunk_override": int(chunks[-1][5:]) if chunks else None,
    }


def _project_step(
    micro_batch: int,
    accumulation: int,
    loss_chunk: int,
    hold_gathered: bool | None = None,
    fp8_all_gather: bool | None = None,
    coordinate_descent: bool = False,
    fp8_everywhere: bool = False,
    max_autotune: bool = False,
    multiply_clip: bool = False,
    multiply_scale: bool = False,
    one_rank_gradients: bool | None = None,
    checkpointing: str = "none",
    loss_chunk_override: int | None = None,
    model_config: Path | None = None,
):
    """The default job's step as train_func builds it on one GPU, without Ray: a function of the step's index.
    `model_config`: a config.json's architecture instead of the default Qwen2.5-1.5B."""
    import torch
    import torch._inductor.config as inductor

    from ray_efa.core.models import model_preset, preset_from_config
    from ray_efa.core.settings import TrainingSettings
    from ray_efa.training import loss as loss_module
    from ray_efa.training import parallelize as par
    from ray_efa.training import train as train_module
    from ray_efa.training.data import TokenBatches
    from ray_efa.training.model import build_model
    from ray_efa.training.train import build_optimizer, train_step

    device = torch.device("cuda", 0)
    preset = (
        preset_from_config(model_config.parent.name, json.loads(model_config.read_text()))
        if model_config
        else model_preset("qwen2.5-1.5b")
    )
    loss_chunk = loss_chunk_override or loss_chunk
    inductor.max_autotune = max_autotune
    par.converts_to_fp8 = (lambda _in, _out: True) if fp8_everywhere else _CONVERTS_TO_FP8  # type: ignore[assignment]
    train_module.clip_and_step = _multiply_clip if multiply_clip else _CLIP_AND_STEP  # type: ignore[assignment]
    loss_module.scale_gradients = _multiply_scale if multiply_scale else _SCALE_GRADIENTS  # type: ignore[assignment]
    t = TrainingSettings(model="qwen2.5-1.5b", learning_rate=3e-4)
    model = build_model(preset, seed=0, device=device, loss_chunk_size=loss_chunk, decoder="lean")
    model = par.parallelize(
        model,
        par.ParallelPlan(
            compile=True,
            fp8=True,
            hold_gathered=hold_gathered,
            fp8_all_gather=fp8_all_gather,
            tune_kernels=coordinate_descent,
            mixed_precision=par.mixed_precision_policy(device),
            activation_checkpointing=checkpointing,  # type: ignore[arg-type]
            **({} if one_rank_gradients is None else {"one_rank_gradients": one_rank_gradients}),
        ),
    )
    optimizer = build_optimizer(model, t, device)
    data = TokenBatches(vocab_size=preset.vocab_size, seq_len=2048, micro_batch=micro_batch, seed=0, rank=0)

    def step(n: int) -> float:
        batches = [tuple(x.to(device) for x in data.batch(n * accumulation + i)) for i in range(accumulation)]
        result = train_step(model, optimizer, batches, lr=3e-4, grad_clip=1.0, device=device)  # type: ignore[arg-type]
        return float(result.loss)

    return step


def top_ops(prof, n: int = 40) -> list[list]:
    """The operators (with the first frames of the Python stack that called them) whose own kernels took the most
    GPU time in a profiled step: [name, stack, ms, calls]; what tells an eager copy from an add."""
    rows = []
    for event in prof.key_averages(group_by_stack_n=4):
        ms = getattr(event, "self_device_time_total", 0) / 1000
        if ms >= 0.2:
            stack = [frame for frame in event.stack if "torch/" not in frame or "fsdp" in frame][:3]
            rows.append([event.key, stack, round(ms, 2), event.count])
    return sorted(rows, key=lambda r: -r[2])[:n]


def peak_breakdown(snapshot: dict, allocated_before: int = 0, n: int = 25) -> dict:
    """Replays the allocator's history (torch.cuda.memory._snapshot, _record_memory_history turned on when
    `allocated_before` bytes were allocated): the allocated peak, and the blocks live at it grouped by where they were
    allocated: the first project frame (ray_efa/...) and the innermost frame outside torch's own helpers; what was
    allocated before the recording (the model's states, the held gathered model) is one group of its own, less what of
    it was freed before the peak. GiB each, largest first."""
    events = snapshot["device_traces"][0]
    live: dict[int, tuple[int, list]] = {}
    freed_before: set[int] = set()
    before = total = peak = allocated_before
    peak_at = -1
    peak_live: dict[int, tuple[int, list]] = {}
    peak_before = before
    for index, event in enumerate(events):
        action, addr = event["action"], event["addr"]
        if action == "alloc":
            live[addr] = (event["size"], event.get("frames", []))
            total += event["size"]
        elif action in ("free_requested", "free_completed"):  # the allocated stat drops at the first of the two
            if addr in live:
                total -= live.pop(addr)[0]
            elif addr not in freed_before:  # a block allocated before the recording
                freed_before.add(addr)
                before -= event["size"]
                total -= event["size"]
        if total > peak:
            peak, peak_at, peak_live, peak_before = total, index, dict(live), before

    def frame_name(frame: dict) -> str:
        return f"{frame['filename'].rsplit('/', 2)[-1]}:{frame['line']} {frame['name']}"

    def grouped(key) -> list[list]:
        sums: dict[str, int] = {"(allocated before the recording)": peak_before}
        for size, frames in peak_live.values():
            sums[key(frames)] = sums.get(key(frames), 0) + size
        return [[k, round(v / 2**30, 3)] for k, v in sorted(sums.items(), key=lambda kv: -kv[1])[:n]]

    def project_frame(frames: list) -> str:
        own = [f for f in frames if "ray_efa/" in f["filename"] or "/bench/" in f["filename"]]
        return frame_name(own[0]) if own else "(no project frame)"

    def inner_frame(frames: list) -> str:
        skip = ("torch/utils/", "torch/_ops.py", "torch/_tensor.py", "torch/autograd/", "contextlib.py", "<frozen")
        kept = [f for f in frames if not any(s in f["filename"] for s in skip) and f["filename"] != "??"]
        return frame_name(kept[0]) if kept else "(no Python frame)"

    return {
        "peak_gib": round(peak / 2**30, 3),
        "peak_event": peak_at,
        "events": len(events),
        "blocks": len(peak_live),
        "by_project_frame": grouped(project_frame),
        "by_inner_frame": grouped(inner_frame),
    }


def _multiply_clip(model, optimizer, grad_clip: float):
    """train_step's clip and step before clip_and_step: clip_grad_norm_ (its in-place multiply), then the step."""
    import torch

    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip) if grad_clip else None
    optimizer.step()
    return norm


def _multiply_scale(grad_hidden, grad_weight, grad_output, weight_dtype):
    """training.loss.scale_gradients before 2026-12-08: `mul_` by the 0-dim tensor (torch's strided kernel on CUDA)."""
    return grad_hidden.mul_(grad_output.to(grad_hidden.dtype)), grad_weight.mul_(grad_output).to(weight_dtype)


def _converts_to_fp8_default():
    from ray_efa.core.fp8 import converts_to_fp8

    return converts_to_fp8


_CONVERTS_TO_FP8 = None
_CLIP_AND_STEP = None
_SCALE_GRADIENTS = None


def _init(port: int):
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1, device_id=device)
    return device


def profile_project(out: Path, micro_batch: int, accumulation: int, loss_chunk: int) -> Path:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    device = _init(29619)
    step = _project_step(micro_batch, accumulation, loss_chunk)
    for n in range(3):
        step(n)
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step(3)
        torch.cuda.synchronize(device)
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "project_trace.json"
    prof.export_chrome_trace(str(trace))
    dist.destroy_process_group()
    return trace


def time_variants(
    out: Path,
    variants: list[str],
    micro_batch: int,
    accumulation: int,
    loss_chunk: int,
    steps: int,
    profile: bool = False,
    model_config: Path | None = None,
    memory: bool = False,
) -> list[dict]:
    """Each variant's step (parse_variant): the losses of the same batches, the step time (3 steps to warm up, then
    `steps`, synchronized at both ends), peak memory, and with `profile` one more step's kernel time by kind and by
    the operator that launched it; with `memory`, what was allocated at the measured steps' peak (peak_breakdown)."""
    import gc
    import time

    import torch
    import torch._dynamo
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    overrides = [parse_variant(v) for v in variants]  # every name checked before the first model is built
    global _CONVERTS_TO_FP8, _CLIP_AND_STEP, _SCALE_GRADIENTS
    from ray_efa.training.loss import scale_gradients
    from ray_efa.training.train import clip_and_step

    _CONVERTS_TO_FP8, _CLIP_AND_STEP, _SCALE_GRADIENTS = _converts_to_fp8_default(), clip_and_step, scale_gradients
    device = _init(29621)
    out.mkdir(parents=True, exist_ok=True)
    target = out / "variants.jsonl"
    with target.open("w") as f:
        f.write(
            json.dumps(
                {
                    "torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name(0),
                    "micro_batch": micro_batch,
                    "accumulation": accumulation,
                    "loss_chunk": loss_chunk,
                    "steps": steps,
                    "model_config": str(model_config) if model_config else "qwen2.5-1.5b",
                }
            )
            + "\n"
        )
    rows = []
    for name, override in zip(variants, overrides):
        torch._dynamo.reset()
        built = time.perf_counter()
        step = _project_step(micro_batch, accumulation, loss_chunk, **override, model_config=model_config)
        losses = [step(n) for n in range(3)]
        torch.cuda.synchronize(device)
        warm_s = time.perf_counter() - built
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        if memory:  # the measured steps only: recording Python stacks through the compile took minutes (2026-12-08)
            torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
        start = time.perf_counter()
        losses += [step(n) for n in range(3, 3 + steps)]
        torch.cuda.synchronize(device)
        step_s = (time.perf_counter() - start) / steps
        row = {
            "variant": name,
            **override,
            "step_s": round(step_s, 4),
            "tokens_per_s": round(micro_batch * accumulation * 2048 / step_s),
            "losses": losses,
            "peak_allocated_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2),
            "peak_reserved_gib": round(torch.cuda.max_memory_reserved(device) / 2**30, 2),
            "build_and_warm_s": round(warm_s, 1),
        }
        if memory:
            snapshot = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            row["memory_at_peak"] = peak_breakdown(dict(snapshot), allocated_before=before)
            del snapshot
        if profile:
            with profiler(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True) as prof:
                step(3 + steps)
                torch.cuda.synchronize(device)
            trace = out / f"{name}_trace.json"
            prof.export_chrome_trace(str(trace))
            summary = summarize(trace)
            trace.unlink()  # ~100 MB each; the summary is what is kept
            row["profile"] = {k: summary[k] for k in ("kernels", "span_ms", "busy_ms", "ms_by_kind", "top_kernels_ms")}
            row["profile"]["top_ops_ms"] = top_ops(prof)
        rows.append(row)
        with target.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps({k: v for k, v in row.items() if k not in ("losses", "profile")}), flush=True)
        if profile:
            print(
                f"  {name}: busy {row['profile']['busy_ms']} ms of {row['profile']['span_ms']}, "
                f"{row['profile']['kernels']} kernels, {row['profile']['ms_by_kind']}",
                flush=True,
            )
        del step
        gc.collect()  # the compiled layers hold references in cycles: free the model before the next is built
        torch.cuda.empty_cache()
    dist.destroy_process_group()
    print(f"variants: {target}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    step = argparse.ArgumentParser(add_help=False)  # the step's shape, shared by the commands that build it
    step.add_argument("--out", type=Path, required=True)
    step.add_argument("--micro-batch", type=int, default=8)
    step.add_argument("--accumulation", type=int, default=4)
    step.add_argument("--loss-chunk", type=int, default=4096)
    step.add_argument("--model-config", type=Path, help="a config.json's architecture (default: Qwen2.5-1.5B)")
    sub.add_parser("project", parents=[step])
    sub.add_parser("hold", parents=[step]).add_argument("--steps", type=int, default=8)
    v = sub.add_parser("variants", parents=[step])
    v.add_argument("variants", nargs="+", help="each a '+'-joined set of " + ", ".join(VARIANT_WORDS))
    v.add_argument("--steps", type=int, default=8)
    v.add_argument("--profile", action="store_true")
    v.add_argument("--memory", action="store_true", help="what is allocated at the peak (peak_breakdown)")
    s = sub.add_parser("summarize")
    s.add_argument("traces", type=Path, nargs="+")
    s.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.command in ("hold", "variants"):
        names = ["nohold+nofp8ag", "hold+nofp8ag", "nohold+nofp8ag"] if args.command == "hold" else args.variants
        time_variants(
            args.out,
            names,
            args.micro_batch,
            args.accumulation,
            args.loss_chunk,
            args.steps,
            profile=getattr(args, "profile", False),
            model_config=args.model_config,
            memory=getattr(args, "memory", False),
        )
        return
    if args.command == "project":
        trace = profile_project(args.out, args.micro_batch, args.accumulation, args.loss_chunk)
        rows, target = [summarize(trace)], args.out / "project_summary.jsonl"
    else:
        rows, target = [summarize(t) for t in args.traces], args.out
    with target.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(table(rows))
    print(f"summary: {target}")


if __name__ == "__main__":
    main()
