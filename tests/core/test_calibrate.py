"""core.calibrate and `ray-efa calibrate`: a finished run's summary against the model, and the constants fitted to it."""

from __future__ import annotations

import json

import pytest

from ray_efa.core import catalog, perf
from ray_efa.core.calibrate import CalibrationError, compare_run
from ray_efa.core.settings import Settings
from tests.core.shapes import fixed_training
from tests.ops.cli_helpers import run_cli

# One H200, 8 x 4096 tokens (docs/BENCHMARKS.md, bench/results/2026-12-01-h200x1-calibrate-expandable.jsonl): 0.632 s
# per step, 51,828 tokens/s, written as the summary a run of that shape prints. One GPU: compute-bound.
H200_RUN = {
    "name": "h200-8x4096",
    "network": "efa",
    "instance_type": "p5en.48xlarge",
    "hosts": 1,
    "devices": 1,
    "device": "NVIDIA H200",
    "time/step_s": 0.632,
    "throughput/tokens_per_s_per_device": 51828.0,
    "model": "qwen2.5-1.5b",
    "micro_batch": 8,
    "seq_len": 4096,
    "grad_accumulation": 1,
    "compile": True,
    "loss_chunk_size": 4096,
    "activation_checkpointing": False,
    "sharding": "fsdp",
    "grad_reduce_dtype": "fp32",
    "precision": "bf16",
    "preflight_busbw_gb_s": None,
}
# The train function through Ray at 2 x 2048 x 4 on one H200 (the ga4 run there): launch-bound, 0.613 s per step.
LAUNCH_BOUND_RUN = {
    **H200_RUN,
    "name": "ga4",
    "time/step_s": 0.613,
    "throughput/tokens_per_s_per_device": 26746.0,
    "micro_batch": 2,
    "seq_len": 2048,
    "grad_accumulation": 4,
    "grad_reduce_dtype": "bf16",
}
# A network-bound 2-node run (made up: what an L4 pair might show), its probe below the host-staged 3 GB/s the model
# gives a pair without GPUDirect RDMA (core.catalog.network).
L4_RUN = {
    "name": "train-efa",
    "network": "efa",
    "instance_type": "g6.12xlarge",
    "hosts": 2,
    "devices": 8,
    "time/step_s": 1.5,
    "throughput/tokens_per_s_per_device": 2730.0,
    "micro_batch": 2,
    "seq_len": 2048,
    "sharding": "hsdp",
    "grad_reduce_dtype": "bf16",
    "preflight_busbw_gb_s": 2.6,
}


def test_a_compute_bound_run_fits_the_compute_efficiency_that_reproduces_its_step():
    comparison = compare_run(Settings(), H200_RUN)
    # the model's own prediction is within 5% (0.663 s: the H200's constant is fitted to this run and two slower
    # measurements of the same shapes, 48,930-51,828 tokens/s, core/data/published_runs.csv), and the fitted
    # constant reproduces the measured step
    assert comparison.predicted.step_time_s == pytest.approx(0.632, rel=0.05)
    assert comparison.calibrated.step_time_s == pytest.approx(0.632, rel=0.002)
    assert comparison.compute_observable and comparison.calibration.inter_node_gb_s is None
    assert comparison.calibration.compute_efficiency == pytest.approx(perf.COMPUTE_EFFICIENCY, rel=0.06)
    # the run's own shape was predicted (8 x 4096 on one GPU), not the settings' defaults (2 x 2048 on 8)
    assert comparison.nodes == 1 and comparison.predicted.tokens_per_s_per_gpu > 40_000


def test_a_launch_bound_run_says_its_compute_efficiency_is_not_observable():
    comparison = compare_run(Settings(), LAUNCH_BOUND_RUN)
    assert not comparison.compute_observable and comparison.calibration.compute_efficiency is None
    assert comparison.predicted.step_time_s == pytest.approx(0.613, rel=0.05)


def test_a_network_bound_run_takes_the_probed_link_and_keeps_the_model_compute():
    comparison = compare_run(Settings(), L4_RUN)
    assert comparison.calibration.inter_node_gb_s == pytest.approx(2.6)
    assert comparison.calibration.network == "efa"
    assert not comparison.compute_observable and comparison.calibration.compute_efficiency is None
    # with the measured (slower than modelled) link the prediction moves towards the measured step
    assert comparison.predicted.step_time_s < comparison.calibrated.step_time_s
    assert abs(comparison.calibrated.step_time_s - 1.5) < abs(comparison.predicted.step_time_s - 1.5)
    # and the measured link applies to predictions on its own network only
    fixed = fixed_training()  # the run's shape (2 x 2048, bf16), as its summary says
    on_efa = perf.predict(
        fixed,
        instance=Settings().nodes.gpu_instance,
        nodes=2,
        network="efa",
        strategy="hsdp",
        reduce_dtype="bf16",
        calibration=comparison.calibration,
    )
    on_tcp = perf.predict(
        fixed,
        instance=Settings().nodes.gpu_instance,
        nodes=2,
        network="tcp",
        strategy="hsdp",
        reduce_dtype="bf16",
        calibration=comparison.calibration,
    )
    plain_tcp = perf.predict(
        fixed, instance=Settings().nodes.gpu_instance, nodes=2, network="tcp", strategy="hsdp", reduce_dtype="bf16"
    )
    assert on_efa.step_time_s == pytest.approx(comparison.calibrated.step_time_s)
    assert on_tcp.step_time_s == pytest.approx(plain_tcp.step_time_s)


def test_a_local_run_or_a_summary_without_a_step_time_cannot_be_calibrated():
    with pytest.raises(CalibrationError, match="local CPU run"):
        compare_run(Settings(), {**H200_RUN, "instance_type": "local"})
    with pytest.raises(CalibrationError, match="steady-state step time"):
        compare_run(Settings(), {k: v for k, v in H200_RUN.items() if k != "time/step_s"})


def test_command_reads_the_summary_line_of_a_driver_log_and_plan_uses_it(tmp_path, capsys):
    log = tmp_path / "driver.log"
    log.write_text("training summary ...\n(pid=1) RAY_EFA_RUN_SUMMARY " + json.dumps(L4_RUN) + "\n")
    assert run_cli("calibrate", str(log), "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["measured"]["step_time_s"] == 1.5 and out["calibration"]["inter_node_gb_s"] == pytest.approx(2.6)
    assert {"step_time_s", "compute_s", "network_s", "mfu", "mfu_causal"} <= set(out["calibrated"])
    # plan --calibration predicts the EFA step with the measured link
    assert (
        run_cli(
            "plan",
            "--json",
            "--calibration",
            str(log),
            "-c",
            "microBatch=2",
            "-c",
            "gradAccumulation=1",
            "-c",
            "precision=bf16",
            "-c",
            "activationCheckpointing=false",
            "-c",
            "lossChunkSize=1024",
        )
        == 0
    )  # the run's shape
    performance = json.loads(capsys.readouterr().out)["performance"]
    assert performance["efa"]["step_time_s"] == pytest.approx(out["calibrated"]["step_time_s"], rel=1e-3)
    assert performance["efa"]["calibration"].startswith("run train-efa")


def test_a_run_across_nodes_suggests_the_floor_its_probe_measured(tmp_path, capsys):
    # GIVEN the 2-node run whose probe measured 2.6 GB/s over EFA
    floor = compare_run(Settings(), L4_RUN).suggested_floor
    # THEN the floor is the catalog's margin of it, for EFA runs, with the setting that applies it
    assert floor is not None and floor.floor_gb_s == round(2.6 * catalog.FLOOR_MARGIN, 2) and floor.network == "efa"
    assert floor.setting == f"preflightMinBusbwGbps={floor.floor_gb_s:g}"
    assert floor.source.startswith("calibration: run train-efa on 2 x g6.12xlarge")
    # AND a single-node run suggests none
    assert compare_run(Settings(), H200_RUN).suggested_floor is None
    # AND the command says how to use it
    log = tmp_path / "driver.log"
    log.write_text(
        "RAY_EFA_RUN_SUMMARY " + json.dumps({**L4_RUN, "network": "tcp", "preflight_busbw_gb_s": 1.8}) + "\n"
    )
    assert run_cli("calibrate", str(log), "--json") == 0
    suggested = json.loads(capsys.readouterr().out)["preflight"]
    assert suggested.pop("source").startswith("calibration: run train-efa")
    assert suggested == {
        "floor_gb_s": 0.9,
        "network": "tcp",
        "measured_busbw_gb_s": 1.8,
        "margin": 0.5,
        "setting": "preflightMinBusbwGbps=0.9",
    }
    assert run_cli("calibrate", str(log)) == 0
    assert "-c network=tcp -c preflightMinBusbwGbps=0.9" in " ".join(capsys.readouterr().out.split())


def test_command_refuses_a_log_without_a_summary_and_a_run_of_another_type(tmp_path, capsys):
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    assert run_cli("calibrate", str(empty)) == 2
    assert "no RAY_EFA_RUN_SUMMARY" in capsys.readouterr().err
    other = tmp_path / "p5.json"
    other.write_text(json.dumps(H200_RUN))
    assert run_cli("plan", "--calibration", str(other)) == 2
    assert "calibrate with a run of that type" in capsys.readouterr().err
