"""The all-reduce preflight probe: the nccl-tests formulas, a real 2-process gloo group on CPU, the floor check."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ray_efa.training.preflight import (
    PreflightError,
    ProbeResult,
    allreduce_probe,
    check_busbw,
    format_probe_table,
)

KiB, MiB = 1 << 10, 1 << 20
SIZES = (4 * KiB, 1 * MiB, 8 * MiB)


def _probe_worker(rank: int, world: int, rendezvous: str, out_dir: str) -> None:
    """One rank of the probe: join a gloo group, probe, write the results (runs in a spawned process)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    try:
        results = allreduce_probe(SIZES, iters=3, warmup=1)
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps([dataclasses.asdict(r) for r in results]))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def gloo_results(tmp_path_factory) -> dict[int, list[ProbeResult]]:
    """Both ranks' results of a real 2-process gloo all-reduce probe on this machine's CPU."""
    from torch.multiprocessing.spawn import start_processes

    tmp = tmp_path_factory.mktemp("probe")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GLOO_SOCKET_IFNAME", "lo")  # talk over loopback only, whatever the machine's NICs
        # spawn, not fork: this pytest worker may hold jsii's or Ray's threads (other tests ran here first), and a
        # fork taken while one of them holds a lock deadlocks the child. Spawning costs seconds, once per module.
        start_processes(
            _probe_worker, args=(2, str(tmp / "rendezvous"), str(tmp)), nprocs=2, join=True, start_method="spawn"
        )
    return {rank: [ProbeResult(**row) for row in json.loads((tmp / f"rank{rank}.json").read_text())] for rank in (0, 1)}


def test_probe_measures_every_size_on_a_real_gloo_group(gloo_results):
    # GIVEN a 2-rank gloo group on CPU
    results = gloo_results[0]
    # THEN each size has a positive time and bandwidth, for 2 ranks, in float32
    assert [r.size_bytes for r in results] == list(SIZES)
    for r in results:
        assert r.seconds > 0 and r.algbw_gbps > 0
        assert (r.world_size, r.dtype) == (2, "float32")


def test_busbw_follows_the_nccl_tests_formula(gloo_results):
    for r in gloo_results[0]:
        assert r.algbw_gbps == pytest.approx(r.size_bytes / r.seconds / 1e9)
        assert r.busbw_gbps == pytest.approx(r.algbw_gbps * 2 * (2 - 1) / 2)


def test_every_rank_gets_the_same_results(gloo_results):
    # THEN both ranks report the slowest rank's time, so they decide pass or fail alike
    assert gloo_results[0] == gloo_results[1]


def test_check_busbw_passes_above_the_floor(gloo_results):
    check_busbw(gloo_results[0], floor_gbps=1e-6, inter_node=True)


def test_check_busbw_fails_below_the_floor_naming_measured_floor_and_cause(gloo_results):
    # GIVEN a floor far above what loopback gloo can do
    # WHEN checked as an inter-node run
    with pytest.raises(PreflightError) as error:
        check_busbw(gloo_results[0], floor_gbps=1e6, inter_node=True)
    # THEN the message gives the measured busbw at the largest size, the floor and the likely cause
    message = str(error.value)
    assert f"{gloo_results[0][-1].busbw_gbps:.2f} GB/s at 8 MiB over 2 ranks" in message
    assert "below the efa floor of 1000000.00 GB/s" in message
    assert "fell back to TCP sockets" in message and "preflightMinBusbwGbps" in message


def test_check_busbw_does_not_judge_a_single_node_run_by_the_network_floor(gloo_results):
    check_busbw(gloo_results[0], floor_gbps=1e6, inter_node=False)


# -- pure parts ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "size, seconds, world, algbw, busbw",
    [
        (10**9, 1.0, 8, 1.0, 1.75),
        (10**9, 0.5, 2, 2.0, 2.0),
        (2 * 10**9, 1.0, 16, 2.0, 3.75),
        (10**9, 1.0, 1, 1.0, 0.0),
    ],
)
def test_from_timing(size, seconds, world, algbw, busbw):
    r = ProbeResult.from_timing(size_bytes=size, seconds=seconds, world_size=world)
    assert (r.algbw_gbps, r.busbw_gbps) == (pytest.approx(algbw), pytest.approx(busbw))


def test_check_busbw_uses_the_largest_size():
    # GIVEN a slow small message and a fast large one
    results = [
        ProbeResult.from_timing(size_bytes=1 << 30, seconds=0.1, world_size=8),
        ProbeResult.from_timing(size_bytes=1 << 20, seconds=0.1, world_size=8),
    ]
    # THEN only the 1 GiB result is judged
    check_busbw(results, floor_gbps=10.0, inter_node=True)
    with pytest.raises(PreflightError, match="at 1 GiB over 8 ranks"):
        check_busbw(results, floor_gbps=20.0, inter_node=True)


@pytest.mark.parametrize(
    "results, floor, message",
    [
        ([], 1.0, "results must hold at least one"),
        ([ProbeResult.from_timing(size_bytes=1, seconds=1.0, world_size=2)], 0.0, "floor_gbps must be > 0, got 0.0"),
    ],
)
def test_check_busbw_rejects_bad_arguments(results, floor, message):
    with pytest.raises(ValueError, match=message):
        check_busbw(results, floor_gbps=floor, inter_node=True)


def test_probe_needs_an_initialized_process_group():
    with pytest.raises(RuntimeError, match="initialized torch.distributed process group"):
        allreduce_probe()


def test_format_probe_table_lists_each_size():
    results = [ProbeResult.from_timing(size_bytes=s, seconds=0.01, world_size=8) for s in (MiB, 1 << 30)]
    table = format_probe_table(results).splitlines()
    assert table[0] == "all_reduce (sum, float32) over 8 ranks"
    assert table[2].split() == ["1", "MiB", "10.000", "0.10", "0.18"]
    assert table[3].split()[:2] == ["1", "GiB"]


def test_the_tcp_floors_error_names_the_sockets_not_a_tcp_fallback():
    results = [ProbeResult.from_timing(size_bytes=1 << 30, seconds=1.0, world_size=8)]
    with pytest.raises(PreflightError) as error:
        check_busbw(results, floor_gbps=5.0, inter_node=True, network="tcp")
    assert "below the tcp floor of 5.00 GB/s" in str(error.value) and "NCCL_SOCKET_NTHREADS" in str(error.value)
    assert "fell back to TCP" not in str(error.value)
    with pytest.raises(ValueError, match="network must be one of efa, tcp, got 'ib'"):
        check_busbw(results, floor_gbps=5.0, inter_node=True, network="ib")
