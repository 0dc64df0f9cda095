"""Throughput and memory of the transport classifier on a multi-GB NCCL log, generated on the fly.

    python bench/transport_throughput.py [--gb 2] [--file-mb 400] [--tracemalloc-mb 50] [--out FILE]

Three measurements, each on the log of a 2-node x 8-GPU EFA job (16 processes; NCCL 2.29 / aws-ofi-nccl lines
wrapped the way Ray's driver prints them, with colours and "[repeated Nx across cluster]"):
  stream   --gb of lines streamed from memory into classify(), twice: every line an NCCL line (the worst case:
           each goes through the whole parser) and 10% NCCL lines (a training log). Resident memory (RSS) is sampled
           at every tenth of the stream: flat samples show the classifier keeps no lines.
  file     a --file-mb temporary file read by classify_paths() (the CLI's path: bounded readline, UTF-8 decoding).
  heap     --tracemalloc-mb of the NCCL-only stream under tracemalloc: the classifier's peak Python allocations.
Prints a table and one JSON line (also written to --out). The verdict of every run must be PASS (checked).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ray_efa.training.transport import classify, classify_paths  # noqa: E402

NODES, GPUS = 2, 8


def _nccl_pool() -> list[str]:
    """A 16-process EFA job's NCCL lines as Ray's driver shows them, one init + ring connections per process."""
    lines = []
    world = NODES * GPUS
    for rank in range(world):
        node, dev = divmod(rank, GPUS)
        pid = 4100 + 100 * node + dev
        ray = f"\x1b[36m(RayTrainWorker pid={pid}, ip=10.0.1.{11 + node})\x1b[0m "
        p = f"{ray}ip-10-0-1-{11 + node}:{pid}:{pid + 1} [{dev}] NCCL INFO "
        lines += [
            p + f"Bootstrap: Using eth0:10.0.1.{11 + node}<0>",
            p + "NET/Plugin: Loaded net plugin Libfabric (v10)",
            p + "NET/OFI Initializing aws-ofi-nccl 1.20.0",
            p + "NET/OFI Selected provider is efa, fabric is efa (found 1 nics)",
            p + "Initialized NET plugin Libfabric",
            p + "Assigned NET plugin Libfabric to comm",
            p + "Using network Libfabric",
            p
            + f"comm 0x55d{rank:03d}a1c0 rank {rank} nRanks {world} nNodes {NODES} localRanks {GPUS} localRank {dev} MNNVL 0",
            p + f"Trees [0] {rank + 1}/-1/-1->{rank}->{rank - 1} [1] -1/-1/-1->{rank}->{rank + 1}",
            p + "threadThresholds 8/8/64 | 128/8/64 | 512 | 512",
        ]
        for channel in range(8):
            nxt = (rank + 1) % world
            if nxt // GPUS == node:
                lines.append(p + f"Channel {channel:02d}/0 : {rank}[{dev}] -> {nxt}[{nxt % GPUS}] via P2P/CUMEM/read")
            else:
                lines.append(
                    p + f"Channel {channel:02d}/0 : {rank}[{dev}] -> {nxt}[{nxt % GPUS}] [send] via NET/Libfabric/0"
                )
        lines.append(p + "Connected all rings, use ring PXN 0 GDR 0\x1b[2m [repeated 3x across cluster]\x1b[0m")
    return lines


def _noise_pool(n: int) -> list[str]:
    return [
        f"\x1b[36m(RayTrainWorker pid=4100, ip=10.0.1.11)\x1b[0m step {i} loss {10 - i / n:.4f} "
        f"tokens/s/gpu 34278 mfu 39.4% mem 81.2GiB eta 00:{i % 60:02d}:00"
        for i in range(n)
    ]


def _pool(nccl_fraction: float) -> list[str]:
    nccl = _nccl_pool()
    noise_per_nccl = round((1 - nccl_fraction) / nccl_fraction) if nccl_fraction < 1 else 0
    noise = iter(itertools.cycle(_noise_pool(997)))
    out = []
    for line in nccl:
        out.append(line)
        out += [next(noise) for _ in range(noise_per_nccl)]
    return [line + "\n" for line in out]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def _rss_mib() -> float:
    """Current resident set size (not the peak), from /proc/self/statm."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def bench_stream(gb: float, nccl_fraction: float) -> dict:
    pool = _pool(nccl_fraction)
    pool_bytes = sum(len(line.encode()) for line in pool)
    n_lines = int(gb * 1e9 / (pool_bytes / len(pool)))
    samples: list[tuple[float, float]] = []

    def stream():
        source = itertools.cycle(pool)
        per = n_lines // 10
        for tenth in range(10):
            yield from itertools.islice(source, per if tenth < 9 else n_lines - 9 * per)
            samples.append((round(gb * (tenth + 1) / 10, 2), round(_rss_mib(), 1)))

    rss_before = _rss_mib()
    start = time.perf_counter()
    report = classify(stream())
    seconds = time.perf_counter() - start
    verdict = report.verdict("efa")
    assert verdict.exit_code == 0, verdict.summary
    return {
        "run": f"stream {nccl_fraction:.0%} NCCL",
        "gb": gb,
        "lines": report.lines,
        "ncclLines": report.nccl_lines,
        "seconds": round(seconds, 2),
        "linesPerSecond": round(report.lines / seconds),
        "mbPerSecond": round(gb * 1e3 / seconds, 1),
        "rssBeforeMiB": round(rss_before, 1),
        "rssSamples": samples,
        "peakRssMiB": round(_peak_rss_mib(), 1),
        "processes": len(report.processes),
    }


def bench_file(mb: int) -> dict:
    pool = _pool(1.0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nccl.log"
        written = 0
        with path.open("w", encoding="utf-8") as f:
            for line in itertools.cycle(pool):
                f.write(line)
                written += len(line)
                if written >= mb * 1e6:
                    break
        size = path.stat().st_size
        rss_before = _rss_mib()
        start = time.perf_counter()
        report = classify_paths([path])
        seconds = time.perf_counter() - start
    assert report.verdict("efa").exit_code == 0
    return {
        "run": "file 100% NCCL",
        "gb": round(size / 1e9, 3),
        "lines": report.lines,
        "ncclLines": report.nccl_lines,
        "seconds": round(seconds, 2),
        "linesPerSecond": round(report.lines / seconds),
        "mbPerSecond": round(size / 1e6 / seconds, 1),
        "rssBeforeMiB": round(rss_before, 1),
        "rssAfterMiB": round(_rss_mib(), 1),
        "peakRssMiB": round(_peak_rss_mib(), 1),
    }


def bench_heap(mb: int) -> dict:
    pool = _pool(1.0)
    n_lines = int(mb * 1e6 / (sum(len(line) for line in pool) / len(pool)))
    tracemalloc.start()
    try:
        report = classify(itertools.islice(itertools.cycle(pool), n_lines))
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return {
        "run": "heap (tracemalloc) 100% NCCL",
        "gb": mb / 1e3,
        "lines": report.lines,
        "tracedPeakKiB": round(peak / 1024, 1),
        "tracedAfterKiB": round(current / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--gb", type=float, default=2.0, help="GB of log per stream run (default 2)")
    parser.add_argument("--file-mb", type=int, default=400, help="MB of the temporary log file (default 400)")
    parser.add_argument("--tracemalloc-mb", type=int, default=50, help="MB streamed under tracemalloc (default 50)")
    parser.add_argument("--out", type=Path, help="also write the JSON line here")
    args = parser.parse_args(argv)
    for name in ("gb", "file_mb", "tracemalloc_mb"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")

    runs = [
        bench_stream(args.gb, 1.0),
        bench_stream(args.gb, 0.1),
        bench_file(args.file_mb),
        bench_heap(args.tracemalloc_mb),
    ]
    machine = {
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "loadavgAtEnd": [round(x, 2) for x in os.getloadavg()],
    }
    print(f"{'run':<30} {'GB':>6} {'lines':>12} {'s':>8} {'lines/s':>10} {'MB/s':>7}  memory")
    for r in runs:
        if "seconds" in r:
            memory = (
                f"RSS {r['rssBeforeMiB']} MiB before; per tenth {[s[1] for s in r['rssSamples']]}"
                if "rssSamples" in r
                else f"RSS {r['rssBeforeMiB']} -> {r['rssAfterMiB']} MiB"
            )
            print(
                f"{r['run']:<30} {r['gb']:>6} {r['lines']:>12,} {r['seconds']:>8} {r['linesPerSecond']:>10,} "
                f"{r['mbPerSecond']:>7}  {memory}"
            )
        else:
            print(
                f"{r['run']:<30} {r['gb']:>6} {r['lines']:>12,} {'':>8} {'':>10} {'':>7}  "
                f"traced peak {r['tracedPeakKiB']} KiB, {r['tracedAfterKiB']} KiB left"
            )
    print(f"peak RSS of the whole benchmark: {_peak_rss_mib():.1f} MiB")
    line = json.dumps({"bench": "transport_throughput", "machine": machine, "runs": runs})
    print(line)
    if args.out:
        args.out.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
