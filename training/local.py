"""The `--local` preset: what `ray-efa train --local` changes so that a 2-core laptop trains in well under a minute.

It is a settings layer (context keys, as `-c` takes them), applied above the project's context and below `-c`, so
any value here can still be overridden on the command line.

Random tokens carry no signal, so a model trained on fresh ones cannot beat ln(vocab). The preset therefore draws
each rank's batches from a pool of 8 fixed random sequences (dataPoolSize): the tiny model memorizes them and the
loss falls from ln(1024) = 6.9 to about 1 in 60 steps, which proves that gradients, the optimizer, FSDP's
reduce-scatter and the checkpoints all work.
"""

from __future__ import annotations

__all__ = ["LOCAL_PRESET", "LOCAL_WORKERS"]

LOCAL_WORKERS = 2
"""CPU workers of the local run (gloo), one per core of the smallest machine we support."""

LOCAL_PRESET: dict[str, object] = {
    "model": "tiny",
    "compile": False,  # inductor's C++ build on a 2-core CPU would take longer than the whole run
    "steps": 60,
    "seqLen": 128,
    "microBatch": 4,
    "gradAccumulation": 1,  # the local run's global batch is what it is: 2 CPU ranks, not globalBatchTokens
    "learningRate": 5e-3,  # high for a 0.4M-parameter model that must memorize in 60 steps
    "warmupSteps": 5,
    "dataPoolSize": 8,
    "reportEvery": 10,
    "checkpointEvery": 30,
}
