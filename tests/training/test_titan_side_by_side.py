"""bench/titan_compare.py, the parser and argument builder of bench/titan_side_by_side.sh: that it reads the project's
progress lines as training.metrics writes them, torchtitan 0.2.2's step lines as they came out of a real run, and
builds torchtitan's batch shape from a real `plan`. The GPU run itself is bench/titan_side_by_side.sh's."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pyarrow.fs
import pytest

from ray_efa.core.context import resolve_settings
from ray_efa.ops.plan import build_plan
from ray_efa.training.history import History
from ray_efa.training.metrics import format_line
from ray_efa.training.run_folder import METRICS_FILE, RunFolder

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("titan_compare", ROOT / "bench" / "titan_compare.py")
assert _spec and _spec.loader
titan_compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(titan_compare)

# Two step lines of torchtitan 0.2.2 (torchtitan.components.metrics), colours and all, from a CPU run of
# bench/titan_train.py (tiny flavor); the second with the GPU's positive memory figures put in.
TITAN_LOG = (
    "[titan] 2026-12-03 17:44:55,165 - root - INFO - \x1b[31mstep:  1  \x1b[32mloss: 11.01288  "
    "\x1b[38;2;180;60;0mgrad_norm:  2.0040  \x1b[38;2;54;234;195mmemory: -0.00GiB(-0.00%)  \x1b[34mtps: 47  "
    "\x1b[36mtflops: 0.00  \x1b[35mmfu: 0.00%\x1b[39m\n"
    "[titan] 2026-12-03 17:44:55,165 - root - INFO - Synchronizing and adjusting timeout for all ProcessGroups\n"
    "[titan] 2026-12-03 17:44:58,991 - root - INFO - \x1b[31mstep: 12  \x1b[32mloss: 11.07458  "
    "\x1b[38;2;180;60;0mgrad_norm:  1.9436  \x1b[38;2;54;234;195mmemory: 91.25GiB(65.27%)  \x1b[34mtps: 61,234  "
    "\x1b[36mtflops: 556.81  \x1b[35mmfu: 56.30%\x1b[39m\n"
)


def _project_line(step: int, step_s: float, tokens_per_s: float) -> str:
    metrics = {
        "step": step,
        "loss": 12.2,
        "time/step_s": step_s,
        "time/eta_s": 10.0,
        "throughput/tokens_per_s": tokens_per_s,
        "throughput/tokens_per_s_per_device": tokens_per_s,
        "throughput/mfu_pct": 60.0,
        "throughput/mfu_causal_pct": 57.0,
        "memory/peak_allocated_gib": 68.2,
        "memory/peak_reserved_gib": 80.4,
    }
    return format_line(metrics, total_steps=6)


def _options(args: list[str]) -> dict[str, str | None]:
    """torchtitan's command line as {option: value}, None for a flag."""
    options: dict[str, str | None] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            following = args[i + 1] if i + 1 < len(args) else "--"
            options[arg] = None if following.startswith("--") else following
    return options


def test_the_project_progress_lines_are_read_as_training_metrics_writes_them():
    # GIVEN the driver's log with two steps, the second repeated as Ray's log deduplication can print it
    log = "\n".join(
        [
            "(RayTrainWorker pid=1) " + _project_line(1, 30.0, 17_476.0),
            "(RayTrainWorker pid=1) " + _project_line(2, 8.4, 62_415.0),
            "(RayTrainWorker pid=1) " + _project_line(2, 8.4, 62_415.0),
        ]
    )
    # THEN one row per step, with its tokens/s per device
    rows = titan_compare.project_steps(log)
    assert [(r["step"], r["tps"]) for r in rows] == [(1, 17_476.0), (2, 62_415.0)]


def test_the_project_metrics_history_is_read_as_training_history_writes_it(tmp_path):
    # GIVEN a run's metrics.jsonl with three reports, its last line cut by a kill
    history = History(RunFolder(pyarrow.fs.LocalFileSystem(), str(tmp_path)))
    for step, rate in ((1, 17_476.0), (2, 62_415.0), (3, 62_300.0)):
        history.log({"loss": 12.2, "throughput/tokens_per_s_per_device": rate}, step)
    history.close()
    text = (tmp_path / METRICS_FILE).read_text()
    rows = titan_compare.project_metrics(text[: text.rindex("}")])
    # THEN the whole reports, their steps and rates
    assert [(r["step"], r["tps"]) for r in rows] == [(1, 17_476.0), (2, 62_415.0)]
    assert titan_compare.median_tps(titan_compare.project_metrics(text)) == pytest.approx((62_415.0 + 62_300.0) / 2)


def test_torchtitan_step_lines_are_read_with_their_colours_and_signs():
    rows = titan_compare.titan_steps(TITAN_LOG)
    assert [(r["step"], r["tps"], r["own_mfu_pct"], r["reserved_gib"]) for r in rows] == [
        (1, 47.0, 0.0, -0.0),
        (12, 61_234.0, 56.3, 91.25),
    ]


def test_the_steady_rate_leaves_out_the_first_step_and_weighs_each_step_by_its_time():
    rows = [{"step": 1, "tps": 1_000.0}, {"step": 2, "tps": 60_000.0}, {"step": 3, "tps": 40_000.0}]
    rate, steps = titan_compare.steady_tps(rows)
    # equal tokens per step: 2 steps over 1/60k + 1/40k seconds per token, 48,000, not the mean 50,000
    assert steps == 2 and rate == pytest.approx(48_000.0)
    assert titan_compare.steady_tps(rows[:1]) == (None, 0)


def test_torchtitan_runs_the_batch_shape_precision_and_compile_the_plan_decides(tmp_path):
    # GIVEN the plan of the default job's one-GPU row, as `ray-efa plan --json` writes it
    (tmp_path / "cdk.json").write_text(json.dumps({"app": "true", "context": {}}))
    plan = json.loads(
        json.dumps(
            build_plan(
                resolve_settings({"gpuInstanceType": "p5.4xlarge", "gpuNodeCount": "1", "steps": "6"}, root=tmp_path)
            ).as_dict(),
            default=str,
        )
    )
    d = plan["deployment"]
    # WHEN torchtitan's arguments are built from it
    args = titan_compare.titan_args(plan, "fp8", 6)
    given = _options(args)
    # THEN the same tokens per micro-batch and per optimizer step, and the float8 converter off the tied output
    assert int(given["--training.local_batch_size"] or "") == d["micro_batch"]
    assert int(given["--training.seq_len"] or "") == d["seq_len"]
    global_tokens = int(given["--training.global_batch_size"] or "") * d["seq_len"]
    assert global_tokens == d["achieved_global_batch_tokens"]
    assert given["--activation_checkpoint.mode"] == ("full" if d["activation_checkpointing"] else "none")
    assert given["--model.converters"] == "quantize.linear.float8"
    assert given["--quantize.linear.float8.filter_fqns"] == "output"
    assert ("--compile.enable" in given) == plan["settings"]["compile"]["value"]
    assert given.get("--compile.components") in (None, "model,loss")  # torchtitan splits lists at commas
    assert "--checkpoint.no-enable" in given and given["--training.steps"] == "6"
    # and on one GPU, where the job holds the gathered model for the step, torchtitan's own nearest setting
    assert d["world_size"] == 1 and given["--parallelism.fsdp_reshard_after_forward"] == "never"
    assert "quantize.linear.float8" not in titan_compare.titan_args(plan, "bf16", 6)
    with pytest.raises(SystemExit, match="fp8 or bf16"):
        titan_compare.titan_args(plan, "fp16", 6)


def test_the_report_compares_per_gpu_rates_in_both_flop_conventions(tmp_path, capsys):
    # GIVEN a project summary at the 2026-12-02 measurement and a torchtitan log
    (tmp_path / "plan.json").write_text(
        json.dumps(
            {
                "deployment": {
                    "seq_len": 2048,
                    "micro_batch": 16,
                    "grad_accumulation": 16,
                    "global_batch_tokens": 524_288,
                }
            }
        )
    )
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "summary.json").write_text(
        json.dumps(
            {
                "throughput/tokens_per_s_per_device": 62_355.75,
                "throughput/mfu_pct": 65.06214429358414,
                "throughput/mfu_causal_pct": 61.730100736154,
            }
        )
    )
    (tmp_path / "titan-fp8.log").write_text(TITAN_LOG)
    (tmp_path / "titan-bf16.log").write_text("Traceback (most recent call last):\nRuntimeError: CUDA out of memory\n")
    result = titan_compare.report(tmp_path)
    runs = result["runs"]
    # THEN the project's MFU is the job's own (same FLOPs per token and peak), in both conventions
    assert runs["project"]["mfu_full_pct"] == pytest.approx(65.062, abs=0.01)
    assert runs["project"]["mfu_causal_pct"] == pytest.approx(61.730, abs=0.01)
    # the torchtitan run's rate is its steady step, and the ratio is the project's over it
    assert runs["torchtitan fp8"]["tokens_per_s_per_gpu"] == 61_234.0
    assert runs["torchtitan fp8"]["project_over_this"] == pytest.approx(62_355.75 / 61_234.0)
    # a run that never stepped says why, and the table still prints
    assert runs["torchtitan bf16"]["tokens_per_s_per_gpu"] is None
    assert "out of memory" in runs["torchtitan bf16"]["error"]
    assert json.loads((tmp_path / "compare.json").read_text())["runs"].keys() == runs.keys()
    assert "| torchtitan fp8 | 61,234 |" in capsys.readouterr().out


def _rounds_report():
    spec = importlib.util.spec_from_file_location("titan_rounds_report", ROOT / "bench" / "titan_rounds_report.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _titan_line(step: int, tokens_per_s: int) -> str:
    return (
        f"[titan] - root - INFO - step: {step:2d}  loss: 12.1  grad_norm:  1.5  memory: 57.40GiB(72.5%)  "
        f"tps: {tokens_per_s:,}  tflops: 500.1  mfu: 55.1%"
    )


def test_the_rounds_report_reads_the_run_again_after_an_out_of_memory_and_the_llama_flops(tmp_path, capsys):
    # GIVEN titan_rounds.sh's raw folder where torchtitan ran out of memory at the plan's micro-batch and ran again at 8
    # (its note in runs.txt), a project run, a project run with a setting of its own (a lever), and a spec the budget
    # left unrun; the plan.json `ray-efa plan --json` wrote for the rounds' settings
    raw = tmp_path / "raw"
    raw.mkdir()
    config = ROOT / "bench" / "configs" / "llama-3.2-1b-untied" / "config.json"
    given = {"gpuInstanceType": "p5.4xlarge", "gpuNodeCount": 1, "modelConfig": str(config), "microBatch": 16}
    settings = {key: {"value": value, "source": "context"} for key, value in given.items()}
    settings["region"] = {"value": "us-east-2", "source": "default"}
    (raw / "plan.json").write_text(json.dumps({"deployment": {"seq_len": 2048}, "settings": settings}))
    (raw / "runs.txt").write_text(
        "titan:t1:fp8: out of memory at micro 0 (0: the plan's); again at 8\n"
        "titan:t1-m8:fp8:8: exit 0 after 95 s\n"
        "project:p1: exit 1 after 150 s\n"
        "project:m8:microBatch=8: exit 1 after 150 s\n"
        "titan:t2:fp8: not run, 40 s left\n"
    )
    (raw / "t1.log").write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.83 GiB\n")
    (raw / "t1-m8.log").write_text("\n".join(_titan_line(step, 56_000) for step in range(1, 22)))
    (raw / "p1.log").write_text("\n".join(_project_line(step, 1.1, 59_000.0) for step in range(1, 22)))
    (raw / "m8.log").write_text("\n".join(_project_line(step, 0.6, 50_000.0) for step in range(1, 22)))
    # WHEN the report is made with that model's config.json
    _rounds_report().main(["--model-config", str(config), str(tmp_path / "out.jsonl"), str(raw)])
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    # THEN the runs are the two that exited, under their own names and logs
    runs = {r["name"]: r for r in records if r["record"] == "run"}
    assert [(r["kind"], r["name"], r["steady_steps"]) for r in runs.values()] == [
        ("titan", "t1-m8", 20),
        ("project", "p1", 20),
        ("project", "m8", 20),
    ]
    # each project run has the plan's memory for its own settings: half the micro-batch, less memory
    assert 40 < runs["m8"]["plan_memory_gib"] < runs["p1"]["plan_memory_gib"] < 80
    # the lever is in the table, not in the project's side (its median is p1's alone)
    assert next(r for r in records if r["record"] == "side" and r["side"] == "project")["runs"] == 1
    # the FLOPs are the Llama's, causal: 6 x 1,235,814,400 matrix parameters + 6 L d S (16 x 2048 x 2048)
    ratio = next(r for r in records if r["record"] == "ratio")
    assert ratio["causal_flops_per_token"] == 6 * 1_235_814_400 + 6 * 16 * 2048 * 2048
    assert ratio["project_over_titan_fp8"] == pytest.approx(59_000 / 56_000)
    assert "project / torchtitan llama3 fp8: 1.05x (median of 1 runs a side, 20 steady steps each)" in (
        capsys.readouterr().out
    )
