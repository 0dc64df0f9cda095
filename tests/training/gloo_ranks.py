"""Spawned gloo ranks for the FSDP2 tests: `run_cases` runs a module's cases on one rank set, and `end_rank` is how
a rank that sharded a model with FSDP2 ends: barrier, destroy, then `os._exit(0)`.

Why not just return: `destroy_process_group()` only unregisters the group. DTensor's module-level caches (the sharding
propagator's and `_collective_utils`' `lru_cache`s, the redistribute planner's) keep the DeviceMesh, and its
`_pg_registry` keeps the ProcessGroupGloo, with its `pt_gloo_runloop` and `gloo_tcp_loop` threads, alive after it
(seen in /proc/self/task after destroy and `gc.collect()`, torch 2.13; a plain all-reduce leaves none). They are
torn down during interpreter finalization, where a gloo thread that needs the GIL (a tensor's Python object freed) is
ended by CPython with `pthread_exit`, and that forced unwind through a noexcept C++ frame is `std::terminate`:
"terminate called without an active exception", SIGABRT, mp.spawn's ProcessExitedException, at random (the race
pytorch/pytorch#179291 describes for groups never destroyed; 30 runs in a row here passed, CI's loaded cores did not).
Everything the rank writes is closed before this; `os._exit` skips only the finalization that races the threads.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

import torch
import torch.distributed as dist
from torch.multiprocessing.spawn import spawn


def end_rank() -> NoReturn:
    """Meet the other ranks, destroy the group and leave the process without interpreter finalization."""
    dist.barrier()  # no rank closes its gloo pairs while another still has work
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_cases(case: Callable[..., dict | None], cases: Sequence[tuple], *, world: int, tmp_path: Path) -> list[dict]:
    """Run `case(rank, *args)` for each `args` of `cases` on one set of `world` gloo ranks, spawned once; rank 0's
    results, in order.

    One process set for all cases rather than one per case: a rank's start (importing torch and the model code, ~2 s
    of CPU) costs more than a case's training step on the tiny model. Each case builds its own model and groups; what
    it patches on `torch.distributed` is put back before the next one, and the ranks
    meet at a barrier between cases, so a case sees the state a freshly started rank would.
    """
    out = tmp_path / f"cases-w{world}.json"
    spawn(_rank, args=(case, list(cases), str(tmp_path / f"store-w{world}"), str(out), world), nprocs=world, join=True)
    return json.loads(out.read_text())


def _rank(rank: int, case, cases: list[tuple], store_path: str, out_path: str, world: int) -> NoReturn:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=world)
    results = []
    for args in cases:
        saved = dict(vars(dist))
        try:
            results.append(case(rank, *args))
        finally:
            for name, value in saved.items():
                if getattr(dist, name, None) is not value:
                    setattr(dist, name, value)
        dist.barrier()
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    end_rank()  # rank 0 wrote first
