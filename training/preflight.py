"""The preflight probe: time all-reduce between the ranks before training, and stop early on a slow path.

A job whose NCCL fell back to TCP sockets runs to the end several times slower without an error. Before step 1, every
Ray Train worker calls

    results = allreduce_probe()                               # after torch.distributed is initialized
    print(format_probe_table(results))                        # rank 0
    floor = preflight_floor(settings)                         # core.preflight_floor
    check_busbw(results, floor_gbps=floor.floor_gb_s, inter_node=nodes > 1, network=floor.network)

and the job stops with PreflightError naming the measured and the expected bandwidth. The floor is the network's
(core.preflight_floor, pure, so that `ray-efa plan --json` shows it as `preflight` without torch). Bandwidths follow nccl-tests
(doc/PERFORMANCE.md): algbw = bytes / time, busbw = algbw * 2(n-1)/n for all-reduce, in GB/s (1e9 bytes).
All ranks get identical results (the slowest rank's time), so they all pass or all raise together.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch stays out of import time: the CLI and the manifests import this module's neighbours
    import torch

__all__ = [
    "DEFAULT_SIZES",
    "DEFAULT_ITERS",
    "PreflightError",
    "ProbeResult",
    "allreduce_probe",
    "check_busbw",
    "format_probe_table",
    "record_probe",
    "measured_busbw_gb_s",
]

MiB: int = 1 << 20
GiB: int = 1 << 30
DEFAULT_SIZES: tuple[int, ...] = (1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB)
"""Message sizes in bytes; the largest (1 GiB) is the one checked, where the network, not latency, is the limit."""
DEFAULT_ITERS = 5
"""Timed all-reduces per size (after WARMUP_ITERS untimed ones, which also build NCCL's connections)."""
WARMUP_ITERS = 2


class PreflightError(RuntimeError):
    """The path between ranks is too slow, or all-reduce returned wrong values."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ProbeResult:
    """One message size of the probe."""

    size_bytes: int
    seconds: float
    """Mean time of one all-reduce on the slowest rank."""
    algbw_gbps: float
    """size_bytes / seconds, in GB/s (1e9 bytes per second)."""
    busbw_gbps: float
    """algbw * 2(n-1)/n: the bandwidth each link sustained, comparable across rank counts (nccl-tests)."""
    world_size: int
    dtype: str = "float32"

    @classmethod
    def from_timing(cls, *, size_bytes: int, seconds: float, world_size: int, dtype: str = "float32") -> ProbeResult:
        if seconds <= 0:
            raise ValueError(f"seconds must be > 0, got {seconds!r}")
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size!r}")
        algbw = size_bytes / seconds / 1e9
        return cls(
            size_bytes=size_bytes,
            seconds=seconds,
            algbw_gbps=algbw,
            busbw_gbps=algbw * 2 * (world_size - 1) / world_size,
            world_size=world_size,
            dtype=dtype,
        )


def allreduce_probe(
    sizes_bytes: Sequence[int] = DEFAULT_SIZES,
    iters: int = DEFAULT_ITERS,
    *,
    warmup: int = WARMUP_ITERS,
    device: torch.device | None = None,
) -> list[ProbeResult]:
    """Time SUM all-reduces of each size on the default process group; every rank must call it, with the same sizes.

    NCCL groups use the current CUDA device and bf16 (what training reduces); gloo groups use the CPU and float32.
    Raises PreflightError if an all-reduce returns a wrong sum on any rank.
    """
    import torch
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "allreduce_probe needs an initialized torch.distributed process group (call it in the train function)"
        )
    sizes = list(sizes_bytes)
    if not sizes or any(not isinstance(s, int) or s < 1 for s in sizes):
        raise ValueError(f"sizes_bytes must be positive integers, got {sizes_bytes!r}")
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters!r}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup!r}")
    nccl = dist.get_backend() == "nccl"
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    world = dist.get_world_size()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    results = []
    for size in sizes:
        numel = max(1, size // dtype.itemsize)
        buffer = torch.zeros(numel, dtype=dtype, device=device)  # zeros: sums stay exact and never overflow
        for _ in range(warmup):
            dist.all_reduce(buffer)
        sync()
        dist.all_reduce(torch.zeros(1, device=device))  # line the ranks up so no rank times another's lateness
        sync()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buffer)
        sync()
        elapsed = time.perf_counter() - start
        buffer.fill_(1)
        dist.all_reduce(buffer)
        # bf16 holds integers exactly up to 256; beyond, allow its rounding. One temporary, not allclose's three.
        wrong = buffer.sub_(world).abs_().max().item() > world / 128
        # Every rank takes the slowest rank's time and anyone's wrong sum, so all ranks decide alike.
        verdict = torch.tensor([elapsed, float(wrong)], dtype=torch.float64, device=device)
        dist.all_reduce(verdict, op=dist.ReduceOp.MAX)
        elapsed, wrong = verdict.tolist()
        del buffer
        if wrong:
            raise PreflightError(
                f"all_reduce of {_size(size)} over {world} ranks returned a wrong sum on some rank: "
                "the path between the GPUs corrupts data; do not train on it"
            )
        results.append(
            ProbeResult.from_timing(
                size_bytes=numel * dtype.itemsize,
                seconds=elapsed / iters,
                world_size=world,
                dtype=str(dtype).removeprefix("torch."),
            )
        )
    return results


_LIKELY_CAUSE = {
    "efa": (
        "Likely cause: NCCL fell back to TCP sockets (the OFI plugin or the EFA provider did not load: run "
        "`ray-efa check-transport` on the NCCL log), or the nodes are not in one AZ and placement group."
    ),
    "tcp": (
        "Likely cause: fewer sockets than the job sets (NCCL logs 'NET/Socket: Using N threads and M sockets per "
        "thread'; NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD), or the nodes are not in one placement group "
        "(EC2 holds one flow to 5 Gbit/s outside it)."
    ),
}


def check_busbw(results: Sequence[ProbeResult], floor_gbps: float, inter_node: bool, *, network: str = "efa") -> None:
    """Raise PreflightError when the largest size's bus bandwidth is below `floor_gbps` on an inter-node run.

    The floor describes the network between nodes (core.preflight_floor: a share of what a healthy node reaches on
    `network`, or the preflightMinBusbwGbps setting), so a single-node run (`inter_node=False`) is not judged against
    it. `network` ("efa" or "tcp") picks the likely cause the error names.
    """
    if not results:
        raise ValueError("results must hold at least one ProbeResult (run allreduce_probe first)")
    if not floor_gbps > 0:
        raise ValueError(f"floor_gbps must be > 0, got {floor_gbps!r}")
    if network not in _LIKELY_CAUSE:
        raise ValueError(f"network must be one of {', '.join(_LIKELY_CAUSE)}, got {network!r}")
    largest = max(results, key=lambda r: r.size_bytes)
    if not inter_node or largest.world_size < 2:
        return
    if largest.busbw_gbps < floor_gbps:
        raise PreflightError(
            f"all-reduce bus bandwidth {largest.busbw_gbps:.2f} GB/s at {_size(largest.size_bytes)} over "
            f"{largest.world_size} ranks is below the {network} floor of {floor_gbps:.2f} GB/s "
            f"({largest.busbw_gbps / floor_gbps:.0%} of it). {_LIKELY_CAUSE[network]} Set preflightMinBusbwGbps to "
            "change the floor, or preflight=false to skip the probe."
        )


_measured: list[float] = []  # this worker's probe busbw at the largest size, for the run summary


def record_probe(results: Sequence[ProbeResult]) -> None:
    """Keep this worker's probe result (training.worker)."""
    _measured[:] = [max(results, key=lambda r: r.size_bytes).busbw_gbps] if results else []


def measured_busbw_gb_s() -> float | None:
    """This worker's probe busbw (GB/s) at the largest size; None without a probe."""
    return _measured[0] if _measured else None


def format_probe_table(results: Sequence[ProbeResult]) -> str:
    """The results as nccl-tests prints them: size, time, algbw, busbw."""
    if not results:
        return "all_reduce: no results"
    first = results[0]
    lines = [
        f"all_reduce (sum, {first.dtype}) over {first.world_size} ranks",
        f"{'size':>10}  {'time (ms)':>10}  {'algbw (GB/s)':>12}  {'busbw (GB/s)':>12}",
    ]
    lines += [
        f"{_size(r.size_bytes):>10}  {r.seconds * 1e3:>10.3f}  {r.algbw_gbps:>12.2f}  {r.busbw_gbps:>12.2f}"
        for r in results
    ]
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"
