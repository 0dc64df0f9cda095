"""The memory planner: each part follows its documented formula, the levers move the parts they should, refusals
name the settings to change."""

import json
from pathlib import Path

import pytest

from ray_efa.core import catalog, memory, prices
from ray_efa.core.memory import COMPILED_ACTIVATIONS, FRAGMENTATION, OVERHEAD_FIXED_GIB, estimate_for
from ray_efa.core.settings import SettingsError
from ray_efa.core.strategy import AUTO_MEMORY_SHARE, check_fits, estimate, resolve
from tests.core.shapes import fixed_settings, fixed_training

GIB = 2**30
QWEN = fixed_training(model="qwen2.5-1.5b")
P = QWEN.preset.num_parameters


@pytest.mark.parametrize(
    ("world_size", "field", "bytes_per_parameter"),
    [
        (8, "parameters_gib", 4),
        (8, "gradients_gib", 4),
        (8, "optimizer_gib", 8),
        (2, "parameters_gib", 4),
        (2, "optimizer_gib", 8),
        (64, "gradients_gib", 4),
    ],
)
def test_sharded_states_are_fp32_bytes_per_parameter_over_the_world_size(world_size, field, bytes_per_parameter):
    # GIVEN the 1.5B model sharded over world_size GPUs
    # WHEN it is planned
    plan = estimate_for(QWEN, world_size=world_size, gpu=catalog.GPUS["L4"])
    # THEN the sharded state costs its fp32 bytes per parameter, divided by every GPU of the run
    assert getattr(plan, field) == pytest.approx(bytes_per_parameter * P / world_size / GIB)


@pytest.mark.parametrize(
    ("micro_batch", "seq_len", "chunk", "compiled", "expected_bytes"),
    [
        # unchunked: 12 bytes per logit
        (1, 2048, 0, False, 12 * 151_936 * 2048),
        (4, 4096, 0, True, 12 * 151_936 * 4 * 4096),
        # chunked, eager: one chunk of 8-byte logits, the fp32 weight-gradient accumulator and a bf16 product, grad of
        # hidden
        (4, 4096, 4096, False, 8 * 151_936 * 4096 + 6 * 151_936 * 1536 + 2 * 1536 * 4 * 4096),
        (
            1,
            1024,
            4096,
            False,
            8 * 151_936 * 1024 + 6 * 151_936 * 1536 + 2 * 1536 * 1024,
        ),  # a chunk larger than the batch
        # compiled: 8 bytes per logit up to 1024 tokens, the measured 5.4 beyond (COMPILED_LOSS_BYTES_PER_LOGIT)
        (4, 4096, 4096, True, (8 * 1024 + 5.4 * 3072) * 151_936 + 6 * 151_936 * 1536 + 2 * 1536 * 4 * 4096),
        (4, 4096, 1024, True, 8 * 151_936 * 1024 + 6 * 151_936 * 1536 + 2 * 1536 * 4 * 4096),
    ],
)
def test_logits_follow_the_documented_formula(micro_batch, seq_len, chunk, compiled, expected_bytes):
    # GIVEN micro_batch x seq_len tokens per GPU, the loss chunked by `chunk` tokens (0: not at all)
    t = fixed_training(
        model="qwen2.5-1.5b", micro_batch=micro_batch, seq_len=seq_len, loss_chunk_size=chunk, compile=compiled
    )
    # WHEN it is planned
    plan = estimate_for(t, world_size=8, gpu=catalog.GPUS["H200"])
    # THEN the logits part is the formula's bytes
    assert plan.logits_gib == pytest.approx(expected_bytes / GIB)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_activations_follow_the_documented_formula(checkpointing, compiled):
    # GIVEN Qwen2.5-1.5B (d 1536, kv 256, MLP 8960, 28 layers) at 2 x 2048 tokens, eager or compiled
    t = fixed_training(
        model="qwen2.5-1.5b", micro_batch=2, seq_len=2048, activation_checkpointing=checkpointing, compile=compiled
    )
    d, kv, inter, layers, tokens = 1536, 256, 8960, 28, 4096
    per_layer = (22 * d + 4 * kv + 8 * inter) * (COMPILED_ACTIVATIONS if compiled else 1)
    # checkpointed, the one layer recomputed in backward counts only beyond the loss chunk's logits (lossChunkSize
    # 1024: 8 bytes a logit), freed before it
    recomputed = max(0, tokens * per_layer - 8 * 151_936 * 1024) if checkpointing else 0
    expected = tokens * (layers * 2 * d if checkpointing else layers * per_layer) + recomputed + tokens * 10 * d
    # WHEN it is planned
    plan = estimate_for(t, world_size=8, gpu=catalog.GPUS["H200"])
    # THEN the activations are the formula's bytes
    assert plan.activations_gib == pytest.approx(expected / GIB)


@pytest.mark.parametrize(
    ("lever", "changed", "unchanged"),
    [
        ({"activationCheckpointing": True}, "activations_gib", ("logits_gib", "parameters_gib", "optimizer_gib")),
        ({"lossChunkSize": 512}, "logits_gib", ("activations_gib", "parameters_gib", "optimizer_gib")),
        ({"gpuNodeCount": 4}, "optimizer_gib", ("activations_gib", "logits_gib", "gathered_gib")),
    ],
)
def test_each_lever_lowers_its_own_part_only(lever, changed, unchanged):
    # GIVEN the default run at 2 x 4096 tokens, and the same run with one lever pulled (sharding pinned: under auto a
    # lever can also switch the strategy, which moves the sharded parts)
    base = fixed_settings({"microBatch": 2, "seqLen": 4096, "sharding": "fsdp"})
    before, after = estimate(base), estimate(base.replace(**lever))
    # THEN the lever's part shrinks, the others stay, and so does the total
    assert getattr(after, changed) < getattr(before, changed)
    assert all(getattr(after, name) == getattr(before, name) for name in unchanged)
    assert after.total_gib < before.total_gib


def test_total_is_the_parts_plus_overhead_and_fits_compares_with_the_catalog_gpu():
    # GIVEN the default settings (Qwen2.5-1.5B, 2 x 2048 tokens, compiled, chunked loss, 2 x g6.12xlarge = 8 L4)
    plan = estimate(fixed_settings())
    parts = [gib for name, gib in plan.breakdown() if name not in ("overhead", "total")]
    # THEN the overhead is the fixed part plus fragmentation, the total adds up, and the capacity is the L4's
    assert plan.overhead_gib == pytest.approx(OVERHEAD_FIXED_GIB + FRAGMENTATION * sum(parts))
    assert plan.total_gib == pytest.approx(sum(parts) + plan.overhead_gib)
    assert (plan.gpu, plan.capacity_gib, plan.world_size) == ("L4", catalog.GPUS["L4"].memory_gib, 8)
    # and the default deployment's own plan fits its GPUs
    assert plan.fits and plan.headroom_gib > 0


def test_plan_is_an_upper_bound_close_to_the_h200_measurement():
    # GIVEN the run measured on 2 x H200 on 2026-11-29 (the maintainers' reference notes, outside the repository;
    # docs/BENCHMARKS.md lists its cells): 1.5B, 4 x 4096 tokens, unchunked loss, 81 GiB peak
    plan = estimate_for(
        fixed_training(model="qwen2.5-1.5b", micro_batch=4, seq_len=4096, compile=False, loss_chunk_size=0),
        world_size=2,
        gpu=catalog.GPUS["H200"],
    )
    allocated = plan.total_gib - plan.overhead_gib
    # THEN the allocator's share of the plan is above the measurement, by less than 10%
    assert 81 <= allocated <= 81 * 1.10


# Peaks measured on 2 x H200 by bench/throughput.py (docs/BENCHMARKS.md, bench/results/): (context, GiB allocated).
H200_MEASUREMENTS = [
    ({"microBatch": 8, "compile": True, "lossChunkSize": 4096}, 76.73),
    ({"microBatch": 4, "compile": True, "lossChunkSize": 4096}, 47.51),
    ({"microBatch": 8, "activationCheckpointing": True, "compile": False, "lossChunkSize": 0}, 67.86),
]


@pytest.mark.parametrize("context, measured", H200_MEASUREMENTS)
def test_plan_bounds_the_benchmark_peaks_from_above_within_a_fifth(context, measured):
    t = fixed_settings({"model": "qwen2.5-1.5b", "seqLen": 4096, **context}).training
    plan = estimate_for(t, world_size=2, gpu=catalog.GPUS["H200"])
    allocated = plan.total_gib - plan.overhead_gib
    assert measured <= allocated <= measured * 1.2, (allocated, measured)


def test_check_fits_returns_the_plan_when_it_fits():
    settings = fixed_settings()
    assert check_fits(settings) == estimate(settings)


SMALLEST_BIGGER_GPU_THAT_FITS = "gpuInstanceType=<the smallest bigger GPU that fits>"
"""A mention the test derives from the catalog (smallest_bigger_gpu_that_fits), so that a new GPU row needs no edit."""


def smallest_bigger_gpu_that_fits(settings) -> str:
    """`gpuInstanceType=<name>` of the GPU type a refusal should name: of the EFA types that can be launched (the EFA
    plugin's chart lists it, the region offers it) whose GPU has more memory in a node of as many GPUs or more, the
    one of least GPU memory (then price) whose plan fits."""
    current = settings.nodes.gpu_instance
    bigger = sorted(
        (
            row
            for row in catalog.GPU_INSTANCES.values()
            if row.efa_capable
            and row.gpu.memory_gib > current.gpu.memory_gib
            and row.gpus >= current.gpus
            and catalog.efa_plugin_supports(row.name, settings.addons.efa_device_plugin_version)
            and prices.offering_problem(row.name, settings.cluster.region) is None
        ),
        key=lambda row: (row.gpu.memory_gib, row.usd_per_hour),
    )
    fits = [row.name for row in bigger if estimate(settings.replace(gpuInstanceType=row.name)).fits]
    assert fits, "no bigger GPU fits: the case needs another shape"
    return f"gpuInstanceType={fits[0]}"


@pytest.mark.parametrize(
    ("context", "key", "mentions"),
    [
        # 44 GiB on a 22.5 GiB L4: activation checkpointing alone fits, and so does the next bigger GPU
        (
            {"microBatch": 2, "seqLen": 4096},
            "activationCheckpointing",
            ("activationCheckpointing=true", SMALLEST_BIGGER_GPU_THAT_FITS, "22.5 GiB"),
        ),
        # nothing single fits (not even the largest GPU, p6-b200's B200): the combination of every lever is offered
        (
            {"microBatch": 32, "seqLen": 4096},
            "microBatch",
            (
                "no single change fits",
                "lossChunkSize=1024",
                "activationCheckpointing=true",
                "microBatch=16",
                "seqLen=2048",
            ),
        ),
        # micro batch 1 already: the sequence is the setting to name, and its default fits
        ({"microBatch": 1, "seqLen": 32768}, "seqLen", ("seqLen=2048, its default",)),
        # the sequence 8 times its default: the default is named first; of the GPUs with more memory, the smallest
        # that fits alone
        ({"microBatch": 1, "seqLen": 16384}, "seqLen", ("seqLen=2048, its default", SMALLEST_BIGGER_GPU_THAT_FITS)),
    ],
)
def test_check_fits_refuses_naming_the_settings_to_change(context, key, mentions):
    # GIVEN settings whose plan is larger than the GPU (the eager, unchunked step these cases were written for)
    settings = fixed_settings({"compile": False, "lossChunkSize": 0, **context})
    assert not estimate(settings).fits
    mentions = tuple(
        smallest_bigger_gpu_that_fits(settings) if text is SMALLEST_BIGGER_GPU_THAT_FITS else text for text in mentions
    )
    # WHEN they are checked
    with pytest.raises(SettingsError) as raised:
        check_fits(settings)
    # THEN one problem names the first setting to change, and the message the alternatives with their GiB
    (problem,) = raised.value.problems
    assert problem.key == key
    assert "GiB per GPU" in problem.message
    assert all(text in problem.message for text in mentions), problem.message


def test_a_one_node_plan_that_does_not_fit_is_offered_more_nodes():
    # GIVEN the defaults on one GPU node (4 GPUs share the model state instead of 8) with a micro batch of 3: the
    # default micro batch fits one node since the loss chunk is 1024, three do not
    settings = fixed_settings({"gpuNodeCount": 1, "microBatch": 3})
    assert not estimate(settings).fits and estimate(settings.replace(gpuNodeCount=2)).fits
    # WHEN it is checked
    with pytest.raises(SettingsError) as raised:
        check_fits(settings)
    # THEN the first setting changed from its default that fits alone is blamed (activationCheckpointing false: at
    # auto it would be on here), and every lever is offered: more nodes, and the training settings
    (problem,) = raised.value.problems
    assert (problem.key, problem.value) == ("activationCheckpointing", False)
    for lever in (
        "activationCheckpointing=auto, its default",
        "gpuNodeCount=2",
        "microBatch=1",
        "seqLen=1024",
        "gpuInstanceType=",
    ):
        assert lever in problem.message, (lever, problem.message)


def test_more_gpu_nodes_is_offered_when_they_fit():
    # GIVEN a plan whose sharded state is what overflows: the unchunked loss on one node
    settings = fixed_settings({"gpuNodeCount": 1, "microBatch": 1, "lossChunkSize": 0, "compile": False})
    if estimate(settings).fits:
        settings = settings.replace(microBatch=2)
    assert not estimate(settings).fits
    # WHEN it is checked
    with pytest.raises(SettingsError) as raised:
        check_fits(settings)
    # THEN the smallest node count that fits is named with its GiB, and it does fit
    message = raised.value.problems[0].message
    counts = [
        int(word.split("=")[1])
        for word in message.replace(",", " ").replace(";", " ").split()
        if word.startswith("gpuNodeCount=")
    ]
    assert counts, message
    assert estimate(settings.replace(gpuNodeCount=counts[0])).fits
    assert not estimate(settings.replace(gpuNodeCount=counts[0] - 1)).fits


def test_a_setting_changed_from_its_default_is_named_when_its_default_fits():
    # GIVEN the defaults with a micro batch 32 times larger
    settings = fixed_settings({"microBatch": 64})
    # WHEN it is checked
    with pytest.raises(SettingsError) as raised:
        check_fits(settings)
    # THEN microBatch is blamed, and its default is the fix offered
    (problem,) = raised.value.problems
    assert (problem.key, problem.value) == ("microBatch", 64)
    assert "microBatch=auto, its default" in problem.message


RESERVED = Path(__file__).resolve().parents[2] / "bench" / "results" / "2026-12-01-h200x1-calibrate-expandable.jsonl"


def _reserved_rows():
    rows = [json.loads(line) for line in RESERVED.read_text().splitlines()]
    return [r for r in rows if "peak_reserved_gib" in r]


@pytest.mark.parametrize(
    "row", _reserved_rows(), ids=lambda r: f"{r['micro_batch']}x{r['seq_len']}x{r['grad_accumulation']}"
)
def test_plan_covers_reserved_memory_plus_context_on_the_real_allocator(row):
    # GIVEN a shape measured on one H200 with expandable segments (bench/calibrate.py): peak *reserved* memory and what
    # was in use outside the allocator (CUDA context, NCCL), which is what runs out
    t = fixed_training(
        model="qwen2.5-1.5b",
        micro_batch=row["micro_batch"],
        seq_len=row["seq_len"],
        grad_accumulation=row["grad_accumulation"],
    )
    measured = row["peak_reserved_gib"] + row["outside_allocator_gib"]
    # WHEN the planner plans it at the same world size (1), on its path then (FSDP2's own one-rank post-backward)
    plan = estimate_for(t, world_size=1, gpu=catalog.GPUS["H200"], one_rank_gradients=False)
    # THEN the plan is above the measurement, and within 20% of it
    assert measured <= plan.total_gib <= 1.2 * measured
    # and the allocator's own share (without the part outside it) also covers the reserved peak
    assert row["peak_reserved_gib"] <= plan.total_gib - OVERHEAD_FIXED_GIB


def test_hsdp_shards_within_a_node_and_accumulation_holds_more_gradients():
    s = fixed_settings({"sharding": "fsdp"})  # 2 x g6.12xlarge: 8 GPUs, 4 per node
    fsdp, hsdp = memory.estimate(s, "fsdp"), memory.estimate(s, "hsdp")
    assert hsdp.optimizer_gib == pytest.approx(2 * fsdp.optimizer_gib)  # sharded over 4 instead of 8
    # with accumulation, fsdp holds the unsharded fp32 gradients plus 2 sharded copies (over 8), hsdp 3 (over 4)
    accumulating = memory.estimate(s.replace(gradAccumulation=2), "fsdp")
    params = s.training.preset.num_parameters
    assert accumulating.gradients_gib == pytest.approx(fsdp.gradients_gib + (4 * params + 2 * 4 * params / 8) / GIB)
    hsdp_accumulating = memory.estimate(s.replace(gradAccumulation=2), "hsdp")
    assert hsdp_accumulating.gradients_gib == pytest.approx(hsdp.gradients_gib + 3 * 4 * params / 4 / GIB)


def _two_gpu_rows():
    rows = []
    for name in ("nvlink", "socket", "socket-8x4096"):
        path = RESERVED.parent / f"2026-12-01-h200x2-sharding-proof-{name}.jsonl"
        rows += [r for r in map(json.loads, path.read_text().splitlines()) if "peak_reserved_gib" in r]
    return rows


@pytest.mark.parametrize(
    "row", _two_gpu_rows(), ids=lambda r: f"{r['link']}-{r['micro_batch']}x{r['seq_len']}-{r['cell']}"
)
def test_plan_covers_reserved_memory_of_fsdp_hsdp_and_accumulation_on_two_gpus(row):
    # GIVEN a cell measured on 2 x H200 (bench/sharding_proof.py): hsdp there replicates over 2 and shards over 1
    t = fixed_training(
        model="qwen2.5-1.5b",
        micro_batch=row["micro_batch"],
        seq_len=row["seq_len"],
        grad_accumulation=row["grad_accumulation"],
        grad_reduce_dtype=row["grad_reduce_dtype"],
    )
    shard = 1 if row["strategy"] == "hsdp" else 2
    # WHEN the planner plans it; THEN it covers the reserved peak plus the 1.3 GiB measured outside the allocator
    plan = estimate_for(t, world_size=2, gpu=catalog.GPUS["H200"], shard_size=shard, strategy=row["strategy"])
    measured = row["peak_reserved_gib"] + 1.3
    assert measured <= plan.total_gib <= 1.3 * measured


def test_scaled_to_zero_has_no_plan_and_says_how_to_come_back():
    # GIVEN gpuNodeCount 0: no GPU, so nothing to divide the model state by
    settings = fixed_settings({"gpuNodeCount": 0})
    assert settings.world_size == 0 and settings.nodes.scaled_to_zero
    # THEN the planner refuses by name (what a job would need), never dividing by zero
    for plan in (estimate, check_fits):
        with pytest.raises(SettingsError) as raised:
            plan(settings)
        (problem,) = raised.value.problems
        assert problem.key == "gpuNodeCount" and "scaled to zero" in problem.message
        assert "npx cdk deploy ray-train-gpu -c gpuNodeCount=2" in problem.message


def test_scaled_to_zero_predicts_no_step():
    from ray_efa.core.strategy import performance, resolve_sharding

    settings = fixed_settings({"gpuNodeCount": 0})
    assert performance(settings) == {} and resolve_sharding(settings) == "fsdp"


# The default job as measured on one H200 with the allocator capped at an 80 GB H100's 79.1 GiB (the p5.4xlarge row)
# and as the g6e.8xlarge row (issue 48): (GPU, micro batch, accumulation, precision, GiB reserved at the peak).
CAPPED_RESERVED = [("H100", 16, 16, "fp8", 78.5), ("L40S", 2, 128, "bf16", 39.2)]


@pytest.mark.parametrize("gpu, micro_batch, accumulation, precision, reserved", CAPPED_RESERVED)
def test_the_plan_covers_the_reserved_peak_of_the_default_job_on_one_gpu(
    gpu, micro_batch, accumulation, precision, reserved
):
    t = fixed_training(
        model="qwen2.5-1.5b", micro_batch=micro_batch, seq_len=2048, grad_accumulation=accumulation, precision=precision
    )
    # measured with FSDP2's own one-rank post-backward (before training.one_rank): planned on that path
    plan = estimate_for(t, world_size=1, gpu=catalog.GPUS[gpu], one_rank_gradients=False)
    # the allocator's reserved peak plus the 1.3 GiB measured outside it (it planned 72.6 and 37.6 before)
    assert plan.total_gib >= reserved + 1.3, plan.total_gib
    assert plan.total_gib <= 1.2 * (reserved + 1.3)


def test_auto_keeps_real_headroom_on_the_p5_4xlarge_row():
    # GIVEN the default job on one p5.4xlarge, whose 16 x 2048 x 16 reserved 78.5 of 79.1 GiB
    settings = fixed_settings({"gpuInstanceType": "p5.4xlarge", "gpuNodeCount": 1})
    plan = estimate(settings)
    decided = resolve(settings).training
    # THEN auto picks a shape whose planned reserved peak leaves the margin, not the one that had 0.6 GiB left
    assert plan.fits and plan.total_gib <= AUTO_MEMORY_SHARE * plan.capacity_gib
    assert (decided.micro_batch, decided.grad_accumulation) != (16, 16)


def test_grad_sync_every_micro_batch_trades_the_unsharded_gradients_for_nvlink_traffic():
    from ray_efa.core import perf

    # GIVEN one p5.48xlarge (8 GPUs on NVLink) accumulating 4 micro-batches under fsdp
    s = fixed_settings(
        {
            "gpuInstanceType": "p5.48xlarge",
            "gpuNodeCount": 1,
            "microBatch": 2,
            "gradAccumulation": 4,
            "sharding": "fsdp",
            "gradReduceDtype": "fp32",
            "precision": "bf16",
            "activationCheckpointing": False,
        }
    )
    params = s.training.preset.num_parameters
    held, synced = (memory.estimate(s.replace(gradSyncEveryMicroBatch=v), "fsdp") for v in (False, True))
    # THEN reduce-scattering every micro-batch holds 4 bytes a parameter less per GPU
    assert held.gradients_gib - synced.gradients_gib == pytest.approx(4 * params / 2**30)
    # and auto takes it there: one node, one NVLink domain (the k reduce-scatters stay on NVLink)
    assert memory.estimate(s, "fsdp").gradients_gib == pytest.approx(synced.gradients_gib)

    def reduce_scatters(settings):
        t = settings.training
        prediction = perf.predict(
            t,
            instance=settings.nodes.gpu_instance,
            nodes=settings.nodes.gpu_node_count,
            network="efa",
            strategy="fsdp",
            reduce_dtype="fp32",
        )
        (rs,) = [c for c in prediction.collectives if c.name == "reduce-scatter gradients"]
        return rs

    once, every = reduce_scatters(s.replace(gradSyncEveryMicroBatch=False)), reduce_scatters(s)
    assert (once.calls, every.calls) == (1, 4) and every.wire_gb == pytest.approx(4 * once.wire_gb)
    # across nodes (EFA traffic) or over PCIe auto keeps the gradients instead
    for other in ({"gpuNodeCount": 2}, {"gpuInstanceType": "g6.48xlarge"}):
        t = s.replace(**other).training
        n = s.replace(**other).nodes
        link = n.gpu_instance.gpu_link
        assert not memory.grad_sync_every_micro_batch(
            t,
            strategy="fsdp",
            nodes=n.gpu_node_count,
            gpus_per_node=n.gpu_instance.gpus,
            nvlink=link is not None and link.name.startswith("NVLink"),
        )


def test_memory_advice_offers_the_reduce_schedule_where_accumulation_holds_the_gradients():
    # GIVEN 2 x p5.48xlarge (auto keeps the gradients: EFA traffic) with a plan too large for its GPUs
    s = fixed_settings(
        {
            "gpuInstanceType": "p5.48xlarge",
            "gpuNodeCount": 2,
            "model": "qwen2.5-1.5b",
            "seqLen": 2048,
            "microBatch": 17,
            "gradAccumulation": 2,
            "sharding": "fsdp",
            "precision": "bf16",
            "activationCheckpointing": False,
        }
    )
    assert not estimate(s).fits
    with pytest.raises(SettingsError) as raised:
        check_fits(s)
    # THEN the advice names the reduce schedule among the changes, with its GiB
    assert "gradSyncEveryMicroBatch=true" in raised.value.problems[0].message
