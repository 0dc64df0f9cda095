"""The memory plan against the allocator's reserved peak of every recorded GPU run of the current train path: for
each run's settings the plan of the code as it is now lies within 5% over what the run reserved: never under it (the
plan counts what lies outside the allocator too), and never so far over that a shape that fits is refused.

The runs are read from bench/results as recorded (their settings and torch.cuda.max_memory_reserved). Runs of an
older train path are left out by name, with why: before 2026-12-06 09:39 (training.parallelize: hold_gathered) a
rank alone in its shard group did not hold the gathered model for the step, 2.36 GiB less than today's job. Runs
before 2026-12-08 ran FSDP2's own post-backward on their one rank, not training.one_rank's: the plan plans them as
that path (core.memory's one_rank_gradients=False), which still runs where training.one_rank is not proven."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_efa.core import memory
from ray_efa.core.settings import Settings

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
LLAMA_UNTIED = Path(__file__).resolve().parents[2] / "bench" / "configs" / "llama-3.2-1b-untied" / "config.json"
TOLERANCE = 0.05

RECORDED = {
    # file: (the model's settings, whether its one rank ran training.one_rank's post-backward)
    "2026-12-07-h100x1-llama3-side-by-side.jsonl": ({"modelConfig": str(LLAMA_UNTIED)}, False),
    "2026-12-07-h100x1-qwen-side-by-side.jsonl": ({}, False),
    "2026-12-06-h100x1-side-by-side-tuned.jsonl": ({}, False),
    "2026-12-07-h100x1-qwen-side-by-side-rerun.jsonl": ({}, False),
    "2026-12-08-h100x1-llama3-side-by-side.jsonl": ({"modelConfig": str(LLAMA_UNTIED)}, True),
}
"""The recorded one-H100 runs of `ray-efa train` on the p5.4xlarge row (seq 2048, compile, the lean layer) since
the gathered model is held; the Qwen2.5-1.5B default model where no modelConfig is named."""

SELECTIVE_RUNS = {("2026-12-07-h100x1-llama3-side-by-side.jsonl", "b16")}
"""Runs whose record says activation_checkpointing true where the summary.json beside it (the -raw.tar.gz) says
selective: the plan chose it (the record keeps a bool)."""

CUT_SHORT = {("2026-12-07-h100x1-qwen-side-by-side.jsonl", "qb16"): ("bf16", 8, 4, False, 4096, 68.6171875)}
"""A run whose summary the call's time limit cut: its record keeps no settings; they and its reserved peak are those
of its last metrics line (qb16.metrics.jsonl in the -raw.tar.gz: memory/peak_reserved_gib 68.617) and of the
project:qb16:precision=bf16 spec, the Qwen job at 8 x 2048 x 4."""


OVER_PLANNED = {
    ("2026-12-07-h100x1-qwen-side-by-side-rerun.jsonl", "qfull"): (
        "issue 57, open: full checkpointing is planned 39.48 GiB, 7.5% over the 36.74 reserved (fp8 8 x 2048 x 4, "
        "Qwen2.5-1.5B). Its allocated peak, 30.66 GiB, leaves about 3.2 GiB beside the held model, states and layer "
        "inputs where the plan counts 4.86 for the loss (4 bytes a logit and the fp32 accumulator would be 3.19), but "
        "the chunk's 5.35 bytes a logit were measured directly without checkpointing (tests/core/test_loss_chunk.py); "
        "a refit that moves bytes from the logits to COMPILED_ACTIVATIONS fits every run here and contradicts that "
        "measurement. A memory snapshot of a checkpointed run is what would settle it."
    ),
}
"""Runs the plan errs on by more than TOLERANCE, each with what is known: strict xfails, so a fix turns them red."""

_ONE_RANK_LLAMA = (
    "issue 57, open: on training.one_rank's path the Llama 3.2 1B dims job (fp8 16 x 2048 x 2) is planned 58.14 GiB, "
    "5.8% over the 54.96 reserved. The allocator's gap is gone (54.63 allocated: ONE_RANK_FRAGMENTATION plans 1%), "
    "so the excess is the parts' own: they plan 56.08 GiB against the 54.63 allocated (+1.45), of which about 0.4 is "
    "the held fp8 linears planned at the bf16 figure (core.memory's gathered term; measured 0.49 GiB less on the Qwen "
    "job), and 1.5 GiB lie outside the allocator. A memory snapshot of this path at its peak is what would settle it "
    "(bench/step_profile.py variants --memory; the 2026-12-08 call ran out of time before it)."
)
for _run in ("p1", "p2", "p3", "p4"):
    OVER_PLANNED[("2026-12-08-h100x1-llama3-side-by-side.jsonl", _run)] = _ONE_RANK_LLAMA


def _runs() -> list[tuple[str, str, dict[str, object], float, bool]]:
    runs: list[tuple[str, str, dict[str, object], float, bool]] = []
    for name, (model, one_rank) in RECORDED.items():
        for line in (RESULTS / name).read_text().splitlines():
            record = json.loads(line)
            if record.get("record") != "run" or record.get("kind") != "project":
                continue
            key = (name, record["name"])
            if key in CUT_SHORT:
                precision, micro, accumulation, checkpointing, chunk, reserved = CUT_SHORT[key]
            else:
                precision, micro, accumulation = record["precision"], record["micro_batch"], record["grad_accumulation"]
                checkpointing, chunk = record["activation_checkpointing"], record["loss_chunk_size"]
                reserved = record["peak_reserved_gib"]
            assert record.get("compile") in (True, None) and record.get("decoder_block") in ("lean", None), key
            mode = "selective" if key in SELECTIVE_RUNS else ("full" if checkpointing else "none")
            context = {
                "gpuInstanceType": "p5.4xlarge",
                "gpuNodeCount": 1,
                "steps": 21,
                "microBatch": micro,
                "gradAccumulation": accumulation,
                "precision": precision,
                "activationCheckpointing": mode,
                "lossChunkSize": chunk,
                **model,
            }
            runs.append((name, record["name"], context, float(reserved), one_rank))
    return runs


RUNS = _runs()


def test_the_recorded_runs_cover_two_families_and_three_shapes():
    # GIVEN the recorded runs
    # THEN the validation spans what the issue asks: two model families and at least three shapes
    families = {bool(context.get("modelConfig")) for _, _, context, _, _ in RUNS}
    shapes = {
        (context["microBatch"], context["gradAccumulation"], context["precision"], context["activationCheckpointing"])
        for _, _, context, _, _ in RUNS
    }
    assert families == {True, False}
    assert len(shapes) >= 3
    assert {context["precision"] for _, _, context, _, _ in RUNS} == {"bf16", "fp8"}
    # and both post-backward paths a rank alone in its shard group can run
    assert {one_rank for *_, one_rank in RUNS} == {True, False}


def _params() -> list:
    return [
        pytest.param(
            *run,
            id=f"{run[0][:10]}-{run[1]}",
            marks=[pytest.mark.xfail(strict=True, reason=OVER_PLANNED[run[:2]])] if run[:2] in OVER_PLANNED else [],
        )
        for run in RUNS
    ]


@pytest.mark.parametrize(("name", "run", "context", "reserved", "one_rank"), _params())
def test_the_plan_is_within_five_percent_of_the_measured_reserved_peak(name, run, context, reserved, one_rank):
    # GIVEN a run recorded on one H100 with its settings, its post-backward path and its allocator's reserved peak
    settings = Settings.from_context(context)
    # WHEN the current code plans those settings on that path
    plan = memory.estimate(settings, "fsdp", one_rank_gradients=one_rank)
    # THEN the plan's memory is within 5% over what the run reserved, never under it: the plan also counts what lies
    # outside the allocator (1.5 GiB), so a plan under the reserved peak would pass a shape that runs out
    error = (plan.total_gib - reserved) / reserved
    assert 0 <= error <= TOLERANCE, (
        f"{name} {run}: plan {plan.total_gib:.2f} GiB, reserved {reserved:.2f} ({error:+.1%})"
    )
