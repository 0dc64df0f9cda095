"""How a spawned gloo rank that sharded a model with FSDP2 ends: barrier, destroy, then `os._exit(0)`.

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

import os
import sys
from typing import NoReturn

import torch.distributed as dist


def end_rank() -> NoReturn:
    """Meet the other ranks, destroy the group and leave the process without interpreter finalization."""
    dist.barrier()  # no rank closes its gloo pairs while another still has work
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
