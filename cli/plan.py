"""`ray-efa plan`: what `cdk deploy` would build and run, from the settings alone (no AWS, no synthesis)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ray_efa.cli._common import add_context_option, add_json_option, print_json, resolve_or_exit


def register(add_parser, name: str) -> None:
    p = add_parser(
        name,
        help="show what would be deployed: settings and their sources, instances, EFA interfaces, pods, "
        "memory per GPU, predicted step time on EFA and TCP, USD per hour, teardown order",
        description=__doc__ + " Exit 1 when the training run would not fit GPU memory, 2 for invalid settings.",
    )
    add_context_option(p)
    add_json_option(p)
    p.add_argument("--calibration", type=Path, metavar="LOG",
                   help="predict with the constants fitted to a finished run on the same instance type "
                        "(its driver log or summary JSON; see `ray-efa calibrate`)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    resolved = resolve_or_exit(args)  # every settings problem at once, exit 2

    from ray_efa.ops.plan import build_plan, render_plan

    calibration = None
    if args.calibration is not None:
        from ray_efa.cli._common import fail
        from ray_efa.cli.calibrate import read_summary
        from ray_efa.core.calibrate import CalibrationError, compare_run

        try:
            summary = read_summary(args.calibration)
            if summary.get("instance_type") != resolved.settings.nodes.gpu_instance_type:
                raise CalibrationError(f"the run ran on {summary.get('instance_type')!r}, the plan is for "
                                       f"{resolved.settings.nodes.gpu_instance_type}: calibrate with a run of that type")
            calibration = compare_run(resolved.settings, summary).calibration
        except OSError as error:
            return fail(args, "plan", f"--calibration: cannot read {args.calibration}: {error.strerror or error}")
        except (ValueError, CalibrationError) as error:
            return fail(args, "plan", f"--calibration: {error}")
    plan = build_plan(resolved, calibration)
    if args.json:
        print_json(plan.as_dict(), exact=("settings",))  # settings values as given; computed numbers rounded
    else:
        from rich.console import Console

        render_plan(plan, Console())
    return 0 if plan.fits else 1
