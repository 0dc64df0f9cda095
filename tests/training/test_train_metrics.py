"""Step metrics: step time between reports, tokens/s, MFU against the catalog peak, the progress line and table."""

import dataclasses

import pytest
import torch

from ray_efa.training.metrics import Meter, Throughput, format_line, format_summary, peak_flops_per_s


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _meter(peak=None, start_step=0, total=100):
    clock = Clock()
    throughput = Throughput(
        tokens_per_step_per_device=4 * 4096, world_size=8, flops_per_token=1e10, peak_flops_per_s=peak
    )
    return Meter(
        throughput=throughput, total_steps=total, start_step=start_step, device=torch.device("cpu"), clock=clock
    ), clock


def test_step_time_is_the_wall_time_between_reports_over_the_steps_in_between():
    # GIVEN a meter; step 1 reported after 5 s (warm-up), step 11 after 2 s more
    meter, clock = _meter()
    clock.now += 5.0
    first = meter.measure(1, 7.0)
    clock.now += 2.0
    later = meter.measure(11, 5.0)
    # THEN the step times are 5 s and 0.2 s, with tokens/s per device and in total, and the ETA of the 89 left
    assert first["time/step_s"] == pytest.approx(5.0)
    assert later["time/step_s"] == pytest.approx(0.2)
    assert later["throughput/tokens_per_s_per_device"] == pytest.approx(4 * 4096 / 0.2)
    assert later["throughput/tokens_per_s"] == pytest.approx(8 * 4 * 4096 / 0.2)
    assert later["time/eta_s"] == pytest.approx(89 * 0.2)
    assert later["loss"] == 5.0 and later["step"] == 11


def test_mfu_is_achieved_flops_over_the_peak_and_absent_without_one():
    # GIVEN a device with a 989 TFLOP/s peak, and one without a known peak
    with_peak, clock = _meter(peak=989e12)
    clock.now += 0.5
    metrics = with_peak.measure(1, 1.0)
    without, clock2 = _meter(peak=None)
    clock2.now += 0.5
    # THEN MFU = tokens/s per device x FLOPs per token / peak, in percent; and no MFU key without a peak
    assert metrics["throughput/mfu_pct"] == pytest.approx(100 * (4 * 4096 / 0.5) * 1e10 / 989e12)
    assert "throughput/mfu_pct" not in without.measure(1, 1.0)


def test_cpu_has_no_peak_and_reports_resident_memory():
    assert peak_flops_per_s(torch.device("cpu")) is None
    meter, clock = _meter()
    clock.now += 1.0
    metrics = meter.measure(1, 1.0)
    assert metrics["memory/peak_rss_gib"] > 0 and "memory/peak_allocated_gib" not in metrics


def test_summary_leaves_out_the_warm_up_interval_and_a_checkpoint_pause():
    # GIVEN a slow first interval, a checkpoint save between reports, then two 1 s steps
    meter, clock = _meter(total=3)
    clock.now += 30.0
    meter.measure(1, 6.0)
    clock.now += 50.0  # the checkpoint save
    meter.restart_clock()
    clock.now += 2.0
    meter.measure(3, 4.0)
    summary = meter.summary()
    # THEN the steady state is 1 s per step, and the losses are the first and last reported
    assert summary["time/step_s"] == pytest.approx(1.0)
    assert (summary["first_step"], summary["first_loss"], summary["final_loss"]) == (1, 6.0, 4.0)
    assert meter.history == [(1, 6.0), (3, 4.0)]


def test_progress_line_and_table_show_what_was_measured():
    meter, clock = _meter(peak=989e12, start_step=20, total=100)
    clock.now += 4.0
    metrics = meter.measure(30, 2.5)
    line = format_line(metrics, 100)
    assert line.startswith("step  30/100 | loss 2.5000 | 400 ms/step")
    assert "MFU" in line and "rss" in line and "ETA 28s" in line
    table = format_summary(meter.summary(), title="t")
    assert "resumed after step 20" in table and "2.5000" in table and "MFU" in table


def test_mfu_is_also_given_under_the_causal_convention():
    # GIVEN FLOPs per token under both conventions (12 L d S attention, and causal 6 L d S)
    throughput = Throughput(
        tokens_per_step_per_device=1000,
        world_size=1,
        flops_per_token=1e10,
        peak_flops_per_s=989e12,
        flops_per_token_causal=0.9e10,
    )
    clock = Clock()
    meter = Meter(throughput=throughput, total_steps=10, start_step=0, device=torch.device("cpu"), clock=clock)
    clock.now += 0.5
    metrics = meter.measure(1, 1.0)
    # THEN both MFUs are reported, in the metrics, the progress line and the final table
    assert metrics["throughput/mfu_causal_pct"] == pytest.approx(0.9 * metrics["throughput/mfu_pct"])
    assert "(causal " in format_line(metrics, 10)
    assert "causal (6N + 6 L d S)" in format_summary(meter.summary())


def test_the_loops_tokens_and_mfu_of_a_hand_computed_step():
    # GIVEN the loop's throughput constants (training.train.step_throughput) for the tiny model, 2 ranks, each step
    # 4 accumulated micro-batches of 2 x 64 tokens, and a 1 TFLOP/s device
    from ray_efa.training.model import build_model
    from ray_efa.training.train import step_throughput
    from tests.core.shapes import fixed_training

    t = fixed_training(model="tiny", micro_batch=2, grad_accumulation=4, seq_len=64)
    throughput = dataclasses.replace(step_throughput(t, t.preset, 2, torch.device("cpu")), peak_flops_per_s=1e12)
    meter = Meter(
        throughput=throughput, total_steps=10, start_step=0, device=torch.device("cpu"), clock=(clock := Clock())
    )
    # WHEN a step takes 0.5 s
    clock.now += 0.5
    metrics = meter.measure(1, 6.0)
    # THEN by hand: 2 x 64 x 4 = 512 tokens a device a step, 1,024 tokens/s a device, 2,048 in all
    assert metrics["throughput/tokens_per_s_per_device"] == pytest.approx(1024.0)
    assert metrics["throughput/tokens_per_s"] == pytest.approx(2048.0)
    # and FLOPs per token 6N + 12 L d S (causal: 6 L d S) with N counted on the model itself (tied embeddings once)
    n = sum(p.numel() for p in build_model(t.preset, seed=0, device=torch.device("cpu")).parameters())
    full, causal = 6 * n + 12 * 2 * 128 * 64, 6 * n + 6 * 2 * 128 * 64
    assert metrics["throughput/mfu_pct"] == pytest.approx(100 * 1024 * full / 1e12)
    assert metrics["throughput/mfu_causal_pct"] == pytest.approx(100 * 1024 * causal / 1e12)


def test_the_loop_counts_a_step_as_the_plan_and_calibrate_do():
    # GIVEN a run calibrate compares (2 x 2048 x 4 accumulated micro-batches on one H200, compile, as the summary of
    # such a run says) and the plan's prediction of its step
    from ray_efa.core import catalog
    from ray_efa.core.calibrate import compare_run, settings_of_run
    from ray_efa.core.settings import Settings
    from ray_efa.training.train import step_throughput

    summary = {
        "name": "ga4",
        "network": "efa",
        "instance_type": "p5en.48xlarge",
        "hosts": 1,
        "devices": 1,
        "time/step_s": 0.613,
        "throughput/tokens_per_s_per_device": 26746.0,
        "model": "qwen2.5-1.5b",
        "micro_batch": 2,
        "seq_len": 2048,
        "grad_accumulation": 4,
        "compile": True,
        "loss_chunk_size": 4096,
        "activation_checkpointing": False,
        "sharding": "fsdp",
        "grad_reduce_dtype": "bf16",
        "precision": "bf16",
    }
    t = settings_of_run(Settings(), summary).training
    predicted = compare_run(Settings(), summary).predicted
    # WHEN the loop measures a step of the predicted length on that GPU (its peak from the catalog)
    h200 = catalog.gpu_for_device_name("NVIDIA H200")
    assert h200 is not None
    peak = h200.peak_bf16_tflops * 1e12
    throughput = dataclasses.replace(step_throughput(t, t.preset, 1, torch.device("cpu")), peak_flops_per_s=peak)
    meter = Meter(
        throughput=throughput, total_steps=10, start_step=0, device=torch.device("cpu"), clock=(clock := Clock())
    )
    clock.now += predicted.step_time_s
    metrics = meter.measure(1, 6.0)
    # THEN its tokens/s and MFU (both conventions) are the plan's for that step: what calibrate fits and compare
    # judges is counted as the loop counts it (every accumulated micro-batch, 6N + 12 L d S and 6N + 6 L d S)
    assert metrics["throughput/tokens_per_s_per_device"] == pytest.approx(predicted.tokens_per_s_per_gpu, rel=1e-9)
    assert metrics["throughput/mfu_pct"] == pytest.approx(100 * predicted.mfu, rel=1e-9)
    assert metrics["throughput/mfu_causal_pct"] == pytest.approx(100 * predicted.mfu_causal, rel=1e-9)
