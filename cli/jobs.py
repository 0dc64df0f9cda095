"""`ray-efa jobs`: every RayJob of the workload namespace you may read: its state and age, its GPUs, the train
function that made it, the last step and tokens/s its driver reported, and the transport gate's verdict once done.

Read through the Kubernetes API with the kubeconfig's credentials (the stack's researcher Role allows it); it changes
nothing. The namespace is the settings' (`-c namespace=...`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ray_efa.cli._common import (
    KubeconfigError,
    add_context_option,
    add_json_option,
    add_kube_options,
    fail,
    kube_api_client,
    print_json,
    resolve_or_exit,
)


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="list the RayJobs of the workload namespace: state, age, GPUs, step, tokens/s, gate",
        description=__doc__,
    )
    add_kube_options(p)
    add_context_option(p)  # the namespace comes from the settings
    add_json_option(p)
    p.set_defaults(run=run)


def age_text(seconds: float | None) -> str:
    """kubectl's way: 45s, 12m, 3h, 2d."""
    if seconds is None:
        return "?"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(int(seconds), 0)}s"


def run(args: argparse.Namespace) -> int:
    namespace = resolve_or_exit(args).settings.workload.namespace
    from ray_efa.ops.jobs import list_jobs
    from ray_efa.ops.submit import SubmitError

    try:
        api_client = kube_api_client(args)
    except KubeconfigError as error:
        return fail(args, "jobs", str(error))
    try:
        rows = list_jobs(api_client, namespace)
    except SubmitError as error:
        return fail(args, "jobs", str(error), code=1)
    if args.json:
        print_json({"namespace": namespace, "jobs": [row.to_json() for row in rows]})
        return 0
    if not rows:
        print(f"no RayJobs in namespace {namespace}")
        return 0
    table = [("NAME", "STATE", "AGE", "GPUS", "STEP", "TOKENS/S", "FUNCTION", "MADE BY", "GATE")]
    for row in rows:
        state = row.state + (f" ({row.ray_status})" if row.ray_status else "")
        step = "" if row.step is None else f"{row.step}" + (f"/{row.total_steps}" if row.total_steps else "")
        tokens = "" if row.tokens_per_s is None else f"{row.tokens_per_s:,.0f}"
        gate = row.gate.removeprefix("transport gate: ").split(":", 1)[0] if row.gate else ""
        table.append(
            (
                row.name,
                state,
                age_text(row.age_s),
                "" if row.gpus is None else str(row.gpus),
                step,
                tokens,
                row.function,
                row.made_by,
                gate,
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
    return 0
