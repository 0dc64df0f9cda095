"""The side-by-side table of bench/titan_rounds.sh runs, here, from their unpacked raw/ folders.

    python bench/titan_rounds_report.py [--model-config CONFIG_JSON] OUT.jsonl RAW_DIR [RAW_DIR ...]

--model-config: the config.json both sides trained (the rounds' MODEL_CONFIG, e.g.
bench/configs/llama-3.2-1b-untied/config.json): its FLOPs per token, and the result line names torchtitan's llama3;
without it, Qwen2.5-1.5B.

Each run's tokens/s per GPU is over its steps after the first (the first compiles), the harmonic mean of the steps'
rates (equal tokens per step): the project's from its per-step progress lines, torchtitan's from its own step lines.
A side's number is the median of its runs at the rounds' shape; a project run with settings of its own (a lever,
`project:NAME:key=value`) is in the table but in neither side. The spread is min-max. MFU of the H100's 989 TFLOP/s dense bf16 peak, causal
convention (6N + 6 L d S, core.perf.flops_per_token_causal). Writes one JSON line per run, one per side, one for
the ratio, one with both sides' mean loss per step (the loss curves), one per folder with its card and versions
(gpu.txt) and one with the plan both sides ran (plan.json), and prints the table. Each project run's row also has
what `ray-efa plan` predicts for its memory per GPU, from the rounds' settings and the run's own, beside the
allocator's reserved peak it recorded (issue 57: the plan within 5% of it, never under it by more).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from titan_compare import project_steps, steady_tps, titan_steps  # noqa: E402

PEAK_FLOPS = 989e12  # H100 SXM dense bf16 (core.catalog)


def _causal_flops(seq_len: int, model_config: Path | None = None) -> float:
    from ray_efa.core import models, perf

    if model_config is None:
        return perf.flops_per_token_causal(models.model_preset("qwen2.5-1.5b"), seq_len)
    preset = models.preset_from_config(model_config.parent.name, json.loads(model_config.read_text()))
    return perf.flops_per_token_causal(preset, seq_len)


def is_lever(run: dict) -> bool:
    """A project run with settings of its own (`project:NAME:key=value,...`): not the rounds' shape."""
    return run["kind"] == "project" and run["spec"].count(":") >= 2


def plan_memory_gib(plan: dict, spec: str) -> float | None:
    """What `ray-efa plan` predicts for the memory per GPU of a project run: the settings the rounds gave every run
    (those of plan.json not at their default) and the run's own (`project:NAME:key=value,...`)."""
    if "settings" not in plan:  # a plan.json that `ray-efa plan --json` did not write
        return None
    given = {key: s["value"] for key, s in plan["settings"].items() if s["source"] != "default"}
    own = spec.split(":", 2)[2] if spec.count(":") >= 2 else ""
    for pair in filter(None, own.split(",")):
        key, _, value = pair.partition("=")
        given[key] = value
    args = [arg for key, value in given.items() for arg in ("-c", f"{key}={value}")]
    done = subprocess.run(
        [sys.executable, "-m", "ray_efa.cli", "plan", "--json", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return None
    memory = json.loads(done.stdout).get("memory_per_gpu") or {}
    return memory.get("total_gib")


def runs(raw: Path) -> list[dict]:
    out = []
    for line in (raw / "runs.txt").read_text().splitlines():
        if ": exit" not in line:  # a spec not run, or titan_rounds.sh's note of a run again at a smaller micro-batch
            continue
        spec = line.split(": exit")[0]
        kind, name = spec.split(":")[:2]
        log = (raw / f"{name}.log").read_text(errors="replace")
        rows = project_steps(log) if kind == "project" else titan_steps(log)
        tps, n = steady_tps(rows)
        run = {
            "kind": kind,
            "name": name,
            "spec": spec,
            "folder": raw.parent.name,
            "tokens_per_s_per_gpu": tps,
            "steady_steps": n,
            "losses": [[r["step"], r["loss"]] for r in sorted(rows, key=lambda r: r["step"])],
        }
        if kind == "project":
            summary_path = raw / f"{name}.summary.json"
            summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
            run.update(
                {
                    k: summary.get(k)
                    for k in (
                        "loss_chunk_size",
                        "decoder_block",
                        "precision",
                        "micro_batch",
                        "grad_accumulation",
                        "activation_checkpointing",
                        "compile",
                    )
                }
            )
            run["peak_reserved_gib"] = summary.get("memory/peak_reserved_gib")
            run["peak_allocated_gib"] = summary.get("memory/peak_allocated_gib")
            run["plan_memory_gib"] = plan_memory_gib(json.loads((raw / "plan.json").read_text()), spec)
        else:
            run["peak_reserved_gib"] = max((r["reserved_gib"] for r in rows), default=None)
            run["titan_own_mfu_pct"] = statistics.mean(r["own_mfu_pct"] for r in rows[1:]) if len(rows) > 1 else None
        out.append(run)
    return out


def main(argv: list[str]) -> None:
    model_config = None
    if argv[:1] == ["--model-config"]:
        model_config, argv = Path(argv[1]), argv[2:]
    target, folders = Path(argv[0]), [Path(a) for a in argv[1:]]
    plan = json.loads((folders[0] / "plan.json").read_text())
    seq = plan["deployment"]["seq_len"]
    causal = _causal_flops(seq, model_config)
    name = "llama3 fp8" if model_config is not None else "fp8"
    all_runs = [run for folder in folders for run in runs(folder)]
    for run in all_runs:
        t = run["tokens_per_s_per_gpu"]
        run["mfu_causal_pct"] = 100 * t * causal / PEAK_FLOPS if t else None
    sides = {}
    for kind in ("project", "titan"):
        rates = [
            r["tokens_per_s_per_gpu"]
            for r in all_runs
            if r["kind"] == kind and not is_lever(r) and r["tokens_per_s_per_gpu"] and r["steady_steps"] >= 20
        ]
        if rates:
            sides[kind] = {
                "runs": len(rates),
                "median": statistics.median(rates),
                "min": min(rates),
                "max": max(rates),
                "min_steady_steps": min(
                    r["steady_steps"]
                    for r in all_runs
                    if r["kind"] == kind and not is_lever(r) and r["steady_steps"] >= 20
                ),
                "median_mfu_causal_pct": 100 * statistics.median(rates) * causal / PEAK_FLOPS,
            }
    ratio = sides["project"]["median"] / sides["titan"]["median"] if len(sides) == 2 else None
    curves = {}
    for kind in ("project", "titan"):
        steps: dict[int, list[float]] = {}
        for run in all_runs:
            if run["kind"] == kind and not is_lever(run):
                for step, loss in run["losses"]:
                    steps.setdefault(step, []).append(loss)
        curves[kind] = {step: statistics.mean(v) for step, v in sorted(steps.items())}
    with target.open("w") as f:
        for run in all_runs:
            f.write(json.dumps({"record": "run", **run}) + "\n")
        for kind, side in sides.items():
            f.write(json.dumps({"record": "side", "side": kind, **side}) + "\n")
        f.write(
            json.dumps(
                {
                    "record": "ratio",
                    "project_over_titan_fp8": ratio,
                    "causal_flops_per_token": causal,
                    "line": line(ratio, sides, name),
                }
            )
            + "\n"
        )
        f.write(json.dumps({"record": "loss_curves", **curves}) + "\n")
        for folder in folders:  # what ran, and where: each call's card and versions, and the shape both sides ran
            machine = (folder / "gpu.txt").read_text().splitlines() if (folder / "gpu.txt").exists() else []
            f.write(
                json.dumps({"record": "machine", "folder": folder.parent.name, "lines": list(dict.fromkeys(machine))})
                + "\n"
            )
        f.write(json.dumps({"record": "plan", "deployment": plan["deployment"]}) + "\n")
    print(
        "| run | tokens/s per GPU | MFU causal | steady steps | peak reserved GiB | plan GiB (error) | first / last loss |"
    )
    print("|---|---|---|---|---|---|---|")
    for run in all_runs:
        t = run["tokens_per_s_per_gpu"]
        losses = run["losses"]
        first_last = f"{losses[0][1]:.4f} / {losses[-1][1]:.4f}" if losses else "-"
        label = f"{run['folder']}/{run['name']}" + (f" ({run['spec'].split(':', 2)[2]})" if is_lever(run) else "")
        print(
            f"| {label} | {t:,.0f} | {run['mfu_causal_pct']:.1f}% | {run['steady_steps']} "
            f"| {run['peak_reserved_gib'] or 0:.1f} | {_plan_cell(run)} | {first_last} |"
            if t
            else f"| {label} | - |"
        )
    for kind, side in sides.items():
        print(
            f"{kind}: median {side['median']:,.0f} tokens/s (min {side['min']:,.0f}, max {side['max']:,.0f}), "
            f"{side['runs']} runs, MFU causal {side['median_mfu_causal_pct']:.1f}%"
        )
    print(line(ratio, sides, name))
    both = sorted(set(curves["project"]) & set(curves["titan"]))
    print(
        "loss per step (mean over runs), project / torchtitan: "
        + ", ".join(f"{s}: {curves['project'][s]:.4f}/{curves['titan'][s]:.4f}" for s in both)
    )


def _plan_cell(run: dict) -> str:
    plan, measured = run.get("plan_memory_gib"), run.get("peak_reserved_gib")
    if not plan or not measured:
        return "-"
    return f"{plan:.1f} ({100 * (plan - measured) / measured:+.1f}%)"


def line(ratio: float | None, sides: dict, name: str = "fp8") -> str:
    if ratio is None:
        return f"project / torchtitan {name}: - (a side has no run of 20 steady steps)"
    n = min(side["runs"] for side in sides.values())
    m = min(side["min_steady_steps"] for side in sides.values())
    return f"project / torchtitan {name}: {ratio:.2f}x (median of {n} runs a side, {m} steady steps each)"


if __name__ == "__main__":
    main(sys.argv[1:])
