"""The step-time model: compute calibrated on a real GPU, the bytes of each collective, the links, the choice of auto."""

import json
from pathlib import Path

import pytest

from ray_efa.core import catalog, perf
from ray_efa.core.settings import Settings, TrainingSettings

CALIBRATION = Path(__file__).resolve().parents[2] / "bench" / "results" / "2026-12-01-h200x1-calibrate-expandable.jsonl"
P = Settings().training.preset.num_parameters


def _rows():
    return [r for r in map(json.loads, CALIBRATION.read_text().splitlines()) if "step_time_s" in r]


@pytest.mark.parametrize("row", _rows(), ids=lambda r: f"{r['micro_batch']}x{r['seq_len']}x{r['grad_accumulation']}")
def test_one_gpu_step_is_predicted_within_20_percent_of_the_h200_measurement(row):
    # GIVEN a step measured on one H200 (bench/calibrate.py: no communication at world size 1)
    t = TrainingSettings(micro_batch=row["micro_batch"], seq_len=row["seq_len"], grad_accumulation=row["grad_accumulation"])
    # WHEN the model predicts it on one GPU of an H200 instance
    p = perf.predict(t, instance=catalog.gpu_instance("p5en.48xlarge"), nodes=1, gpus_per_node=1, network="efa",
                     strategy="fsdp")
    # THEN it is within 20% of the measured step time, and nothing was sent
    assert p.step_time_s == pytest.approx(row["step_time_s"], rel=0.2)
    assert p.network_s == 0 and p.collectives == () and p.bottleneck == "compute"


def test_default_fsdp_step_moves_seven_eighths_of_each_collective_over_the_one_efa_link():
    # GIVEN the defaults: 2 x g6.12xlarge (4 L4 each, PCIe, one 40 Gbit/s EFA), 2 x 2048 tokens, fp32 gradient reduction
    p = perf.predict_settings(Settings(), network="efa", strategy="fsdp")
    inter = [c for c in p.collectives if c.link == "inter"]
    # THEN two bf16 all-gathers (the root and last layer are not gathered again in backward) and an fp32
    # reduce-scatter each send 7/8 of their size through each node's interface
    assert [c.size_gb for c in inter][0] == pytest.approx(2 * P / 1e9)
    assert inter[2].size_gb == pytest.approx(4 * P / 1e9)
    assert sum(c.wire_gb for c in inter) == pytest.approx(7 / 8 * sum(c.size_gb for c in inter))
    # and at 5 GB/s x 0.8 that is seconds of network against under a second of compute: network-bound
    assert p.bottleneck == "network" and p.network_s > 2 * p.compute_s
    assert p.network_s == pytest.approx(sum(c.wire_gb for c in inter) / (40 / 8 * perf.NETWORK_SHARE["efa"]))


def test_hsdp_sends_only_the_gradient_all_reduce_between_nodes_and_bf16_halves_it():
    s = Settings()
    fp32 = perf.predict_settings(s, network="efa", strategy="hsdp")
    bf16 = perf.predict_settings(s.replace(gradReduceDtype="bf16"), network="efa", strategy="hsdp")
    (inter,) = [c for c in fp32.collectives if c.link == "inter"]
    assert inter.wire_gb == pytest.approx(4 * P / 1e9)  # 2 (N-1)/N x 4P with N = 2 nodes
    assert [c.wire_gb for c in bf16.collectives if c.link == "inter"] == [pytest.approx(2 * P / 1e9)]
    assert fp32.network_s < perf.predict_settings(s, network="efa", strategy="fsdp").network_s


def test_accumulation_spreads_the_network_over_more_compute():
    s = Settings.from_context({"gradAccumulation": 4, "lossChunkSize": 2048})
    one, four = perf.predict_settings(s.replace(gradAccumulation=1), strategy="hsdp"), perf.predict_settings(s, strategy="hsdp")
    assert four.network_s == pytest.approx(one.network_s)  # the all-reduce runs once per optimizer step
    assert four.compute_s == pytest.approx(4 * one.compute_s)
    assert four.tokens_per_s_per_gpu > 2 * one.tokens_per_s_per_gpu


def test_tcp_is_slower_than_efa_where_the_network_binds():
    s = Settings()
    efa, tcp = perf.predict_settings(s, network="efa"), perf.predict_settings(s, network="tcp")
    assert tcp.step_time_s > 1.5 * efa.step_time_s


def test_auto_takes_the_fastest_strategy_that_fits_memory():
    # GIVEN the defaults, where hsdp is faster but its less-sharded state does not fit an L4
    s = Settings()
    fsdp, hsdp = (perf.predict_settings(s, strategy=x) for x in ("fsdp", "hsdp"))
    assert hsdp.step_time_s < fsdp.step_time_s and not hsdp.fits and fsdp.fits
    # THEN auto runs fsdp, and the plan's advice names the change that lets hsdp fit
    assert perf.resolve_sharding(s) == "fsdp"
    assert "lossChunkSize=2048" in perf.performance(s)["efa"]["advice"]
    # and with that change auto runs hsdp
    assert perf.resolve_sharding(s.replace(lossChunkSize=2048)) == "hsdp"
    # one node has nothing to replicate across; an explicit setting is kept
    assert perf.resolve_sharding(s.replace(gpuNodeCount=1)) == "fsdp"
    assert perf.resolve_sharding(s.replace(sharding="hsdp")) == "hsdp"


@pytest.mark.parametrize("name", sorted(n for n, row in catalog.GPU_INSTANCES.items() if row.efa_capable))
def test_every_efa_instance_type_gets_a_prediction_for_both_networks(name):
    s = Settings.from_context({"gpuInstanceType": name})
    out = perf.performance(s)
    for net in ("efa", "tcp"):
        row = out[net]
        assert row["strategy"] in ("fsdp", "hsdp")
        assert row["step_time_s"] >= max(row["compute_s"], row["network_s"]) > 0
        assert 0 < row["mfu"] < 1 and row["tokens_per_s_per_gpu"] > 0
        assert row["bottleneck"] in ("compute", "network", "intra-node link")


@pytest.mark.parametrize(
    ("link_gb_s", "compile_", "measured"),
    [(3.1, False, 8_522), (325.0, False, 34_278), (325.0, True, 37_465)],
    ids=["socket-eager", "nvlink-eager", "nvlink-compiled"],
)
def test_two_gpu_fsdp_cells_measured_before_are_predicted_within_20_percent(link_gb_s, compile_, measured):
    # GIVEN 2 x H200 runs of 2026-11-29 (docs/BENCHMARKS.md, issue 12 table): FSDP2, 4 x 4096, unchunked loss, over NVLink
    # (325 GB/s all-reduce bus bandwidth) or NCCL forced onto sockets (3.1 GB/s), tokens/s per GPU
    t = TrainingSettings(micro_batch=4, seq_len=4096, compile=compile_, loss_chunk_size=0)
    link = perf.Link(name="measured", gb_s=link_gb_s)
    # WHEN the model predicts the same run as 2 "nodes" of one GPU joined by that link
    p = perf.predict(t, instance=catalog.gpu_instance("p5en.48xlarge"), nodes=2, gpus_per_node=1, network="efa",
                     strategy="fsdp", links=(link, link))
    # THEN it is within 20%
    assert p.tokens_per_s_per_gpu == pytest.approx(measured, rel=0.2)
