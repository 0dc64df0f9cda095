"""Refit core.catalog.gpu_constants' published constants (core.evidence.fit_family) and validate them by source.

    PYTHONPATH=. python tools/fit_constants.py

Prints, per GPU family with fit rows, the eager share (from same-machine compile pairs), the compute efficiency (bf16
rows) and the fp8 efficiency (same-machine fp8 pairs, else fp8 rows) that core.evidence.fit_family gives, then the
held-out verdict, then validation by source (core.evidence.leave_one_source_out: each source predicted with
constants fitted without it) with each family's observed spread. Writes nothing: copy the values into
the GPU's family record (`constants`, core/catalog/families.py) by hand, with the rows they rest on.
"""

from __future__ import annotations

from ray_efa.core import evidence


def main() -> None:
    for gpu in sorted({r.gpu for r in evidence.runs() if r.split == "fit" and r.role == "comparable"}):
        rows = [r for r in evidence.runs() if r.split == "fit" and r.role == "comparable"]
        fitted = evidence.fit_family(gpu, rows)
        print(f"{gpu}: " + ", ".join(f"{k} {v:.3f}" for k, v in fitted.items()))
        for lever in evidence.LEVERS:
            published = evidence.ratio(lever, gpu, predicted=False)
            if published is not None:
                print(
                    f"  {lever} gain: published {published:.3f}, planned {evidence.ratio(lever, gpu, predicted=True):.3f}"
                )
    verdict = evidence.judge("heldout")
    print(
        f"held out: {verdict.within} of {verdict.comparable} within +-{evidence.TOLERANCE:.0%}; medians "
        + ", ".join(f"{gpu} {m:+.1%}" for gpu, m in verdict.medians.items())
        + f"; ceilings exceeded: {len(verdict.ceilings_exceeded)}"
    )
    check = evidence.leave_one_source_out()
    print(
        f"by source (each source left out of the fit): {check.within} of {len(check.errors)} within "
        f"+-{evidence.TOLERANCE:.0%}; {len(check.uncovered)} runs of a family no other source has; ceilings "
        f"exceeded: {len(check.ceilings_exceeded)}"
    )
    for source in sorted({evidence.source_of(r) for r, _ in check.errors}):
        errors = [e for r, e in check.errors if evidence.source_of(r) == source]
        print(
            f"  {source}: {sum(abs(e) <= evidence.TOLERANCE for e in errors)} of {len(errors)}, "
            + " ".join(f"{e:+.0%}" for e in errors)
        )
    for gpu in sorted({r.gpu for r, _ in check.errors}):
        band = check.band(gpu)
        print(f"  {gpu}: 90% of its held-out runs within +-{band:.0%}" if band is not None else f"  {gpu}: -")


if __name__ == "__main__":
    main()
