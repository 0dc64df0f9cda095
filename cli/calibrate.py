"""`ray-efa calibrate LOG`: a finished run's measured step against the step-time model, and the constants fitted to it.

LOG is the driver's output of the run (`kubectl -n ray logs job/<submitter>`, `ray job logs`, a file) holding its
RAY_EFA_RUN_SUMMARY line (the last one counts), or that line's JSON alone. The run's hardware and shape come from the
summary, the rest from the settings (-c). Prints measured, predicted and calibrated step, compute and network time,
tokens/s and MFU (both FLOP conventions) and, from a run across nodes, the preflight floor its probe measured
(preflightMinBusbwGbps); `ray-efa plan --calibration LOG` then predicts with the fitted constants.
Exit 0; 2 when the log holds no usable summary.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray_efa.cli._common import add_context_option, add_json_option, fail, print_json, resolve_or_exit


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="compare a finished run's step with the model's prediction and fit its constants",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument("log", type=Path, metavar="LOG", help="the run's driver log (or its summary JSON)")
    add_context_option(p)
    add_json_option(p)
    p.set_defaults(run=run)


def read_summary(path: Path) -> dict[str, Any]:
    """The last RAY_EFA_RUN_SUMMARY of a log, or the JSON object a file holds; ValueError when there is none."""
    from ray_efa.training.run_summary import find_summaries

    text = path.read_text()
    found = find_summaries(text.splitlines())
    if found:
        return found[-1]
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        record = None
    if isinstance(record, dict):
        return record
    raise ValueError(f"{path} holds no RAY_EFA_RUN_SUMMARY line and is no summary JSON")


def run(args: argparse.Namespace) -> int:
    from ray_efa.core.calibrate import CalibrationError, compare_run

    resolved = resolve_or_exit(args)
    try:
        comparison = compare_run(resolved.settings, read_summary(args.log))
    except OSError as error:
        return fail(args, "calibrate", f"cannot read {args.log}: {error.strerror or error}")
    except (ValueError, CalibrationError) as error:
        return fail(args, "calibrate", str(error))
    if args.json:
        print_json(comparison.as_dict())
        return 0
    from rich.console import Console
    from rich.table import Table

    data = comparison.as_dict()
    m, p, c = data["measured"], data["predicted"], data["calibrated"]
    table = Table(
        title=f"Run {data['name']}: {data['nodes']} x {data['instance_type']}",
        caption="predicted: the model's constants; calibrated: the run's link (preflight busbw) and compute "
        "efficiency. MFU % with 6N + 12 L d S / causal 6N + 6 L d S FLOPs per token",
    )
    for column in ("", "measured", "predicted", "calibrated"):
        table.add_column(column, justify="left" if not column else "right", overflow="fold")
    table.add_row("step s", f"{m['step_time_s']:.3f}", f"{p['step_time_s']:.3f}", f"{c['step_time_s']:.3f}")
    table.add_row("compute s", "-", f"{p['compute_s']:.3f}", f"{c['compute_s']:.3f}")
    table.add_row("network s", "-", f"{p['network_s']:.3f}", f"{c['network_s']:.3f}")
    table.add_row(
        "tok/s per GPU",
        f"{m['tokens_per_s_per_gpu']:,.0f}",
        f"{p['tokens_per_s_per_gpu']:,.0f}",
        f"{c['tokens_per_s_per_gpu']:,.0f}",
    )
    table.add_row(
        "MFU %",
        "",
        f"{100 * p['mfu']:.1f}/{100 * p['mfu_causal']:.1f}",
        f"{100 * c['mfu']:.1f}/{100 * c['mfu_causal']:.1f}",
    )
    table.add_row("bound", "", p["bottleneck"], c["bottleneck"])
    console = Console()
    console.print(table)
    cal = data["calibration"]
    efficiency = (
        f"compute at {cal['compute_efficiency']:.3f} of the bf16 peak (model: {cal['model_compute_efficiency']})"
        if cal["compute_observable"]
        else "compute not observable (the step is network-bound): model's kept"
    )
    link = (
        f"link {cal['inter_node_gb_s']:.2f} GB/s (preflight)"
        if cal["inter_node_gb_s"]
        else "no inter-node link measured"
    )
    console.print(
        f"predicted / measured step: {data['predicted_over_measured']:.2f}; fitted: {efficiency}; {link}. "
        f"Use them: ray-efa plan --calibration {args.log}",
        highlight=False,
    )
    floor = data["preflight"]
    if floor:
        console.print(
            f"preflight floor from this run ({floor['network']}): {floor['floor_gb_s']:g} GB/s "
            f"({floor['margin']:g} of the probe's {floor['measured_busbw_gb_s']:g}); run {floor['network']} "
            f"jobs with it: -c network={floor['network']} -c {floor['setting']}",
            highlight=False,
        )
    return 0
