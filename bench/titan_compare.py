"""The side-by-side of bench/titan_side_by_side.sh: torchtitan's arguments from the project's plan, and the table.

    python3 titan_compare.py args PLAN_JSON VARIANT STEPS [MICRO [MODEL]]  torchtitan's command-line arguments, one per line
    python3 titan_compare.py report OUT_DIR                   parse the runs' logs, print the table, write compare.json

VARIANT: fp8 (torchtitan's float8 converter, tensorwise, on every block linear) or bf16; with "-amp" (fp8-amp,
bf16-amp) the script runs torchtitan's own one-GPU path (TITAN_ONE_GPU_FSDP=0) with the same arguments. MICRO 0 or
empty: the plan's micro-batch. MODEL: bench/titan_train.py's spec and flavor, qwen2_5_shape:1.5B (the default) or
llama3_shape:1B (torchtitan's own Llama 3 model, for a plan of bench/configs/llama-3.2-1b-untied/config.json). The batch shape
(micro batch x sequence x accumulation), activation checkpointing and compile come from `ray-efa plan --json`, so
torchtitan runs the shape the project's default job runs.

Throughput is tokens per second per GPU over the steps after the first (the first holds compilation), the project's
own rule (training.metrics.Meter.summary): every step has the same tokens, so that is the harmonic mean of the steps'
rates. MFU is given in both of the project's conventions, for both runs, from the same FLOPs per token
(core.models / core.perf; N = 1,543,714,304 parameters of Qwen2.5-1.5B) and the H200's 989 TFLOP/s dense bf16 peak:
"full" is 6N + 12 L d S (PaLM, attention counted as if not causal), "causal" 6N + 6 L d S. torchtitan's own logged
MFU is kept as "titan_own_mfu_pct": its FLOPs per token leave out the embedding, which with tied weights is also the
output projection (2 x 1536 x 151,936 per token forward), and count attention as full.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")
TITAN_STEP = re.compile(
    r"step:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>[-\d.naninf]+)\s+grad_norm:\s*(?P<grad_norm>[-\d.naninf]+)\s+"
    r"memory:\s*(?P<memory>-?[\d.]+)GiB\(-?[\d.]+%\)\s+tps:\s*(?P<tps>[\d,]+)\s+tflops:\s*(?P<tflops>[\d,.]+)\s+"
    r"mfu:\s*(?P<mfu>[\d.]+)%"
)
PROJECT_STEP = re.compile(
    r"step\s+(?P<step>\d+)/(?P<total>\d+) \| loss (?P<loss>[-\d.naninf]+) \| (?P<ms>[\d.]+) ms/step \| "
    r"(?P<tps>[\d,]+) tok/s \((?P<per_device>[\d,]+)/device\)"
)
MODEL = "qwen2.5-1.5b"
GPU = "H200"


def titan_args(
    plan: dict, variant: str, steps: int, micro: int | None = None, model: str = "qwen2_5_shape:1.5B"
) -> list[str]:
    """torchtitan's command line for the plan's batch shape, compile and checkpointing; `variant` picks the precision.

    micro: torchtitan's micro-batch where the plan's does not fit it (its full logits): the same global batch, more
    micro-batches. The learning-rate schedule is the project's (training.train.learning_rate): linear warm-up over
    min(warmupSteps, steps), then cosine to 10% of the peak at the last step; torchtitan's linear_warmup_stable_decay
    with these arguments gives the same factor at every step."""
    d = plan["deployment"]
    settings = {k: v["value"] for k, v in plan["settings"].items()}
    precision = variant.removesuffix("-amp")
    if precision not in ("fp8", "bf16"):
        raise SystemExit(f"variant must be fp8 or bf16, optionally with -amp, got {variant!r}")
    seq, accumulation = d["seq_len"], d["grad_accumulation"]
    global_sequences = d["micro_batch"] * accumulation * d["world_size"]
    micro = micro or d["micro_batch"]
    if global_sequences % (micro * d["world_size"]):
        raise SystemExit(f"micro {micro} does not divide the plan's global batch of {global_sequences} sequences")
    spec, _, flavor = model.partition(":")
    if spec not in ("qwen2_5_shape", "llama3_shape") or not flavor:
        raise SystemExit(f"model must be qwen2_5_shape:FLAVOR or llama3_shape:FLAVOR, got {model!r}")
    args = [
        "--model.name",
        spec,
        "--model.flavor",
        flavor,
        "--training.local_batch_size",
        str(micro),
        "--training.global_batch_size",
        str(global_sequences),
        "--training.seq_len",
        str(seq),
        "--training.steps",
        str(steps),
        "--training.max_norm",
        str(settings["gradClip"]),
        "--training.mixed_precision_param",
        "bfloat16",
        "--training.mixed_precision_reduce",
        "float32",
        "--optimizer.lr",
        str(settings["learningRate"]),
        "--optimizer.weight_decay",
        str(settings["weightDecay"]),
        "--lr_scheduler.warmup_steps",
        str(min(settings["warmupSteps"], max(steps - 1, 0))),
        "--lr_scheduler.decay_type",
        "cosine",
        "--lr_scheduler.min_lr_factor",
        "0.1",
        *checkpointing_args(d["activation_checkpointing"]),
        "--metrics.log_freq",
        "1",
        "--checkpoint.no-enable",
        "--job.dump_folder",
        f"/tmp/titan-{variant}",
    ]
    if d["world_size"] == 1:
        # One GPU: nothing to shard, and the project's job holds the gathered model for the whole step
        # (training.parallelize, ParallelPlan.hold_gathered). torchtitan's nearest setting, its own: keep each block
        # gathered from forward to backward (one gather a micro-batch; it has none that holds them across micro-batches).
        args += ["--parallelism.fsdp_reshard_after_forward", "never"]
    if settings["compile"]:
        args += ["--compile.enable", "--compile.components", "model,loss"]  # torchtitan: lists comma-separated
    if precision == "fp8":
        args += ["--model.converters", "quantize.linear.float8", "--quantize.linear.float8.filter_fqns", "output"]
    return args


def checkpointing_args(mode: bool | str) -> list[str]:
    """torchtitan's activation checkpointing for the plan's: false/true (a plan of the auto setting: none or full) or
    the setting's mode (none, selective: torchtitan's per-op selective, full)."""
    if mode in (False, "none"):
        return ["--activation_checkpoint.mode", "none"]
    if mode in (True, "full"):
        return ["--activation_checkpoint.mode", "full"]
    if mode == "selective":
        return ["--activation_checkpoint.mode", "selective", "--activation_checkpoint.selective_ac_option", "op"]
    raise SystemExit(f"the plan's activation_checkpointing {mode!r} is not none, selective or full")


def titan_steps(text: str) -> list[dict]:
    """torchtitan's per-step lines: step, loss, tokens/s per GPU, its own MFU, peak reserved memory."""
    rows = []
    for line in ANSI.sub("", text).splitlines():
        m = TITAN_STEP.search(line)
        if m:
            rows.append(
                {
                    "step": int(m["step"]),
                    "loss": float(m["loss"]),
                    "tps": float(m["tps"].replace(",", "")),
                    "own_mfu_pct": float(m["mfu"]),
                    "reserved_gib": float(m["memory"]),
                }
            )
    return rows


def project_steps(text: str) -> list[dict]:
    """The project's progress lines (training.metrics.format_line): step, loss, tokens/s per GPU."""
    rows = []
    for line in ANSI.sub("", text).splitlines():
        m = PROJECT_STEP.search(line)
        if m:
            rows.append(
                {"step": int(m["step"]), "loss": float(m["loss"]), "tps": float(m["per_device"].replace(",", ""))}
            )
    # Ray repeats a worker's lines in the driver's log at times: one row per step, the last seen.
    return list({row["step"]: row for row in rows}.values())


def project_metrics(text: str) -> list[dict]:
    """The project's metrics.jsonl (training.history): one row per report; a cut last line is skipped."""
    rows = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "throughput/tokens_per_s_per_device" in record:
            rows.append(
                {
                    "step": int(record["step"]),
                    "loss": record.get("loss"),
                    "tps": float(record["throughput/tokens_per_s_per_device"]),
                }
            )
    return rows


def median_tps(rows: list[dict]) -> float | None:
    """The median of the steps' rates after the first: a check on steady_tps against one slow step."""
    rates = sorted(r["tps"] for r in rows if r["step"] > 1 and r["tps"] > 0)
    if not rates:
        return None
    middle = len(rates) // 2
    return rates[middle] if len(rates) % 2 else (rates[middle - 1] + rates[middle]) / 2


def steady_tps(rows: list[dict]) -> tuple[float | None, int]:
    """Tokens/s over the steps after the first: equal tokens per step, so the harmonic mean of the steps' rates."""
    steady = [r for r in rows if r["step"] > 1 and r["tps"] > 0]
    if not steady:
        return None, 0
    return len(steady) / sum(1.0 / r["tps"] for r in steady), len(steady)


def flops(seq_len: int) -> tuple[float, float, float]:
    """FLOPs per token (full 12LdS, causal 6LdS) of the project's model and the H200's dense bf16 peak, from core."""
    from ray_efa.core import catalog, models, perf

    preset = models.model_preset(MODEL)
    peak = catalog.GPUS[GPU].peak_bf16_tflops * 1e12
    return preset.flops_per_token(seq_len), perf.flops_per_token_causal(preset, seq_len), peak


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def report(out: Path) -> dict:
    plan = json.loads(_read(out / "plan.json") or "{}")
    d = plan.get("deployment", {})
    seq = d.get("seq_len", 2048)
    full, causal, peak = flops(seq)
    runs: dict[str, dict] = {}

    summary = json.loads(_read(out / "project" / "summary.json") or "{}")
    rows = project_metrics(_read(out / "project" / "metrics.jsonl")) or project_steps(_read(out / "project.log"))
    tps, n = steady_tps(rows)
    source = "per-step rates (metrics.jsonl or the CLI's progress lines)"
    if summary.get("throughput/tokens_per_s_per_device"):
        tps, source = summary["throughput/tokens_per_s_per_device"], "summary.json (the job's steady rate)"
    runs["project"] = {
        "what": f"ray-efa train, plan defaults ({d.get('precision')}, FSDP2, per-layer compile, chunked fused loss)",
        "tokens_per_s_per_gpu": tps,
        "steady_steps": n,
        "source": source,
        "median_step_tps": median_tps(rows),
        "peak_reserved_gib": summary.get("memory/peak_reserved_gib"),
        "peak_allocated_gib": summary.get("memory/peak_allocated_gib"),
        "losses": [[r["step"], r["loss"]] for r in rows],
    }
    for log in sorted(out.glob("titan-*.log")):
        variant = log.stem.removeprefix("titan-")
        rows = titan_steps(_read(log))
        tps, n = steady_tps(rows)
        steady = [r for r in rows if r["step"] > 1]
        runs[f"torchtitan {variant}"] = {
            "what": f"torchtitan trainer, Qwen3 model code in the Qwen2.5-1.5B shape, {variant}",
            "tokens_per_s_per_gpu": tps,
            "steady_steps": n,
            "source": log.name,
            "median_step_tps": median_tps(rows),
            "titan_own_mfu_pct": (sum(r["own_mfu_pct"] for r in steady) / len(steady)) if steady else None,
            "peak_reserved_gib": max((r["reserved_gib"] for r in rows), default=None),
            "losses": [[r["step"], r["loss"]] for r in rows],
            "error": None if rows else _last_error(_read(log)),
        }
    base = runs["project"]["tokens_per_s_per_gpu"]
    for run in runs.values():
        t = run["tokens_per_s_per_gpu"]
        run["mfu_full_pct"] = 100 * t * full / peak if t else None
        run["mfu_causal_pct"] = 100 * t * causal / peak if t else None
        run["project_over_this"] = base / t if (t and base) else None
    result = {
        "gpu": GPU,
        "model": MODEL,
        "seq_len": seq,
        "micro_batch": d.get("micro_batch"),
        "grad_accumulation": d.get("grad_accumulation"),
        "global_batch_tokens": d.get("global_batch_tokens"),
        "flops_per_token_full": full,
        "flops_per_token_causal": causal,
        "peak_flops": peak,
        "versions": _versions(),
        "runs": runs,
    }
    (out / "compare.json").write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return result


def _last_error(text: str) -> str | None:
    lines = [line for line in ANSI.sub("", text).splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or lines or [None])[-1]


def _versions() -> dict:
    from importlib import metadata

    found = {}
    for name in ("torch", "torchtitan", "torchao", "ray", "ray-efa-stack"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def table(result: dict) -> str:
    def num(value, fmt, unit=""):
        return format(value, fmt) + unit if value is not None else "-"

    lines = [
        f"{result['model']} shape, micro {result['micro_batch']} x {result['seq_len']}, accumulation "
        f"{result['grad_accumulation']} ({result['global_batch_tokens']:,} tokens/step), one {result['gpu']}; "
        f"MFU of the {result['peak_flops'] / 1e12:.0f} TFLOP/s bf16 peak",
        "| run | tokens/s per GPU | MFU 6N+12LdS (full) | MFU 6N+6LdS (causal) | torchtitan's own MFU "
        "| steady steps | median step tokens/s | peak reserved GiB | project / this |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, run in result["runs"].items():
        lines.append(
            f"| {name} | {num(run['tokens_per_s_per_gpu'], ',.0f')} | {num(run['mfu_full_pct'], '.1f', '%')} "
            f"| {num(run['mfu_causal_pct'], '.1f', '%')} | {num(run.get('titan_own_mfu_pct'), '.1f', '%')} "
            f"| {run['steady_steps']} | {num(run['median_step_tps'], ',.0f')} | {num(run['peak_reserved_gib'], '.1f')} "
            f"| {num(run['project_over_this'], '.3f')} |"
        )
        if run.get("error"):
            lines.append(f"  {name}: no step lines; last error line: {run['error']}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if len(argv) in (4, 5, 6) and argv[0] == "args":
        plan = json.loads(Path(argv[1]).read_text())
        micro = int(argv[4]) if len(argv) >= 5 and argv[4] not in ("", "0") else None
        model = argv[5] if len(argv) == 6 and argv[5] else "qwen2_5_shape:1.5B"
        print("\n".join(titan_args(plan, argv[2], int(argv[3]), micro, model)))
    elif len(argv) == 2 and argv[0] == "report":
        report(Path(argv[1]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
