"""`ray-efa plan`: what `cdk deploy` would build and run, from the settings alone (no AWS, no synthesis)."""

from __future__ import annotations

import argparse

from ray_efa.cli._common import add_context_option, add_json_option, print_json, resolve_or_exit


def register(add_parser, name: str) -> None:
    p = add_parser(
        name,
        help="show what would be deployed: settings and their sources, instances, EFA interfaces, pods, "
        "memory per GPU, predicted step time on EFA and TCP, USD per hour, teardown order",
        description=(__doc__ or "") + " Exit 1 when the training run would not fit GPU memory, 2 for invalid settings.",
    )
    add_context_option(p)
    add_json_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    resolved = resolve_or_exit(args, require_model=True)  # every settings problem at once, exit 2

    from ray_efa.ops.plan import build_plan, render_plan

    plan = build_plan(resolved)
    if args.json:
        print_json(plan.as_dict(), exact=("settings",))  # settings values as given; computed numbers rounded
    else:
        from rich.console import Console

        render_plan(plan, Console())
    return 0 if plan.fits else 1
