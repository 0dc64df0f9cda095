"""Refit core.gpu_constants' published constants to the `fit` rows of core/data/published_runs.csv (core.evidence).

    PYTHONPATH=. python tools/fit_constants.py

Prints, per GPU family with fit rows, the compute efficiency (bf16 rows) and the fp8 efficiency (fp8 rows) that make
the geometric mean of predicted / published 1, then the held-out verdict with them. Writes nothing: copy the values
into core/gpu_constants.py by hand, with the rows they rest on.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from ray_efa.core import evidence, gpu_constants


def _log_error(gpu: str, precision: str) -> float | None:
    rows = [r for r in evidence.runs() if r.split == "fit" and r.role == "comparable" and r.gpu == gpu
            and r.precision == precision]
    if not rows:
        return None
    return statistics.fmean(math.log(evidence.predict(r) / r.tokens_per_s_per_gpu) for r in rows)


def _solve(gpu: str, field: str, precision: str) -> float | None:
    if _log_error(gpu, precision) is None:
        return None
    low, high = 0.05, 1.0
    for _ in range(40):  # predicted tokens/s rise with the efficiency: bisect the log error to zero
        mid = (low + high) / 2
        gpu_constants.GPU_CONSTANTS[gpu] = dataclasses.replace(gpu_constants.GPU_CONSTANTS[gpu], **{field: mid})
        error = _log_error(gpu, precision)
        assert error is not None
        low, high = (mid, high) if error < 0 else (low, mid)
    return round((low + high) / 2, 3)


def main() -> None:
    for gpu in sorted({r.gpu for r in evidence.runs() if r.split == "fit" and r.role == "comparable"}):
        compute = _solve(gpu, "compute_efficiency", "bf16")
        fp8 = _solve(gpu, "fp8_compute_efficiency", "fp8")
        print(f"{gpu}: compute_efficiency {compute}, fp8_compute_efficiency {fp8}")
    verdict = evidence.judge("heldout")
    print(f"held out: {verdict.within} of {verdict.comparable} within +-{evidence.TOLERANCE:.0%}; medians "
          + ", ".join(f"{gpu} {m:+.1%}" for gpu, m in verdict.medians.items())
          + f"; ceilings exceeded: {len(verdict.ceilings_exceeded)}")


if __name__ == "__main__":
    main()
