"""`ray-efa plan`: what `cdk deploy` would build and run, from the settings alone (no AWS, no synthesis)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from ray_efa.cli._common import (
    add_context_option,
    add_json_option,
    fail,
    missing_plots_extra,
    print_json,
    resolve_or_exit,
    write_chart,
)


def _node_count(text: str) -> int:
    from ray_efa.ops.scaling import MAX_NODES

    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_NODES:
        raise argparse.ArgumentTypeError(f"must be a whole number between 1 and {MAX_NODES}, got {text!r}")
    return value


def _token_count(text: str) -> int:
    try:
        value = int(float(text))
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive number of tokens like 1e9, got {text!r}")
    return value


def _top_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of rows >= 1, got {text!r}")
    return value


def _positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="show what would be deployed: settings and their sources, instances, EFA interfaces, pods, "
        "memory per GPU, predicted step time on EFA and TCP, USD per hour, teardown order",
        description=(__doc__ or "")
        + " Exit 1 when the training run would not fit GPU memory, 2 for invalid settings or a "
        "--plot file that may not be written, 4 for --plot without matplotlib.",
    )
    add_context_option(p)
    add_json_option(p)
    p.add_argument(
        "--calibration",
        type=Path,
        metavar="LOG",
        help="predict with the constants fitted to a finished run on the same instance type "
        "(its driver log or summary JSON; see `ray-efa calibrate`)",
    )
    p.add_argument(
        "--plot",
        type=Path,
        metavar="FILE",
        help="also draw the predicted scaling curve (tokens/s and USD per million tokens against node "
        "count, each strategy on EFA and TCP) into this PNG",
    )
    p.add_argument(
        "--max-nodes",
        type=_node_count,
        metavar="N",
        help="the scaling curve's last node count (default: 8, or twice gpuNodeCount)",
    )
    p.add_argument(
        "--recommend",
        action="store_true",
        help="rank every GPU instance type (and extraGpuInstanceTypes) at 1..--max-nodes nodes, each with "
        "its own chosen plan, by predicted USD per million tokens (only plans that fit); --plot draws it",
    )
    p.add_argument(
        "--tokens",
        type=_token_count,
        metavar="N",
        help="with --recommend: the tokens to train, for the hours and USD (default 20 per model "
        "parameter, the compute-optimal budget of Hoffmann et al. 2022)",
    )
    p.add_argument(
        "--top",
        type=_top_count,
        metavar="N",
        default=10,
        help="with --recommend: the table's rows (default 10; --json always has every row)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        dest="all_rows",
        help="with --recommend: every fitting row in the table, not the top 10",
    )
    p.add_argument(
        "--budget",
        type=_positive_number,
        metavar="USD",
        help="with --recommend: only plans whose predicted cost to train the tokens is at most USD",
    )
    p.add_argument(
        "--hours",
        type=_positive_number,
        metavar="H",
        help="with --recommend: only plans predicted to train the tokens within H hours",
    )
    p.add_argument(
        "--capacity",
        choices=("on-demand", "capacity-block", "any"),
        default="any",
        help="with --recommend: only On-Demand plans, only Capacity Blocks (reserved ahead), or any (default)",
    )
    p.add_argument(
        "--settings",
        action="store_true",
        dest="settings_table",
        help="also print the table of every setting and its source (--json always has them)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.plot is not None and (code := missing_plots_extra("plan")) is not None:
        return code
    resolved = resolve_or_exit(args, require_code=True, require_model=True)  # every settings problem at once, exit 2

    from ray_efa.ops.plan import OWN_FUNCTION_NOTE, build_plan, render_plan

    calibration = None
    if args.calibration is not None:
        from ray_efa.cli.calibrate import read_summary
        from ray_efa.core.calibrate import CalibrationError, compare_run

        try:
            summary = read_summary(args.calibration)
            if summary.get("instance_type") != resolved.settings.nodes.gpu_instance_type:
                raise CalibrationError(
                    f"the run ran on {summary.get('instance_type')!r}, the plan is for "
                    f"{resolved.settings.nodes.gpu_instance_type}: calibrate with a run of that type"
                )
            calibration = compare_run(resolved.settings, summary).calibration
        except OSError as error:
            return fail(args, "plan", f"--calibration: cannot read {args.calibration}: {error.strerror or error}")
        except (ValueError, CalibrationError) as error:
            return fail(args, "plan", f"--calibration: {error}")
    if args.plot is not None:
        from ray_efa.core.output_dir import OutputDirError, check_output_file
        from ray_efa.ops.plots import is_ray_efa_png

        try:  # before any work: a refused file costs nothing
            check_output_file(args.plot, is_ours=is_ray_efa_png)
        except OutputDirError as error:
            return fail(args, "plan", f"--plot: {error}")
    if args.plot is not None and not args.recommend and not resolved.settings.training.builtin:
        return fail(
            args,
            "plan",
            f"--plot: no scaling curve for trainFunction {resolved.settings.training.train_function}: "
            f"{OWN_FUNCTION_NOTE}",
        )
    if args.recommend:
        return _recommend(args, resolved.settings)
    if args.tokens is not None:
        return fail(args, "plan", "--tokens: only with --recommend")
    if args.all_rows or args.top != 10:
        return fail(args, "plan", "--top and --all: only with --recommend")
    if args.budget is not None or args.hours is not None or args.capacity != "any":
        return fail(
            args,
            "plan",
            "--budget, --hours and --capacity: only with --recommend (the plan of the settings "
            "is one instance type; -c gpuInstanceType=... picks another)",
        )
    plan = build_plan(resolved, calibration, max_nodes=args.max_nodes)
    if args.json:
        print_json(plan.as_dict(), exact=("settings",))  # settings values as given; computed numbers rounded
    else:
        from rich.console import Console

        render_plan(plan, Console(), settings_table=args.settings_table)
    if args.plot is not None:
        code = _plot(args, plan)
        if code:
            return code
    return 0 if plan.fits else 1


def _plot(args: argparse.Namespace, plan) -> int:
    from ray_efa.ops.plots import scaling_chart

    return write_chart(args, "plan", scaling_chart(plan.scaling), "scaling chart")


def _recommend(args: argparse.Namespace, settings) -> int:
    from ray_efa.ops.recommend import recommend

    ranking = recommend(
        settings,
        tokens=args.tokens,
        max_nodes=args.max_nodes or 8,
        budget_usd=args.budget,
        max_hours=args.hours,
        capacity=args.capacity,
    )
    if args.json:
        print_json(ranking)
    else:
        _print_ranking(ranking, None if args.all_rows else args.top)
    if args.plot is not None:
        from ray_efa.ops.plots import recommendation_chart

        return write_chart(args, "plan", recommendation_chart(ranking), "recommendation chart")
    return 0 if ranking["recommendations"] else 1


def _hours(hours: float) -> str:
    return f"{hours:,.1f}" if hours < 100 else f"{hours:,.0f}"


def _print_ranking(ranking: dict, top: int | None) -> None:
    """The ranking as a table that stays whole at 100 columns: its top rows, the model, tokens and region in the
    title, the price and constants' provenance in the caption and per row."""
    from rich.console import Console
    from rich.table import Table

    rows = ranking["recommendations"]
    shown = rows if top is None else rows[:top]
    region = ranking["region"]
    if not ranking["prices_recorded"]:
        print(
            f"No GPU price is recorded for {region}: nothing is ranked (a price borrowed from another region is "
            f"not one you can buy at). Record {region}'s prices: aws pricing get-products --service-code AmazonEC2 "
            f"--filters Type=TERM_MATCH,Field=regionCode,Value={region} ..., rows in core/data/on_demand_prices.csv "
            "(docs/plan-evidence.md); or rank a recorded region with -c region=us-east-2."
        )
        return
    title = (
        f"Cheapest to train {ranking['model']} ({ranking['model_parameters'] / 1e9:.2f} B parameters) on "
        f"{ranking['tokens'] / 1e9:,.1f} B tokens in {region}"
    )
    caption = [f"{len(shown)} of {len(rows)} fitting plans (--all for every one); each with its own plan; predicted."]
    if ranking.get("tokens_default"):
        caption.append(f"Tokens: {ranking['tokens_default']}; --tokens to change.")
    caption.append(
        f"USD/h: the price recorded for {region}, cluster included; buy: OD On-Demand, CB a Capacity "
        "Block (reserved ahead, for its days). Only types with a recorded price are ranked."
    )
    limits = ranking.get("limits") or {}
    asked = [
        text
        for text, on in (
            (f"at most {limits.get('budget_usd') or 0:,.0f} USD", limits.get("budget_usd")),
            (f"within {limits.get('max_hours') or 0:g} hours", limits.get("max_hours")),
            (f"{limits.get('capacity')} only", limits.get("capacity", "any") != "any"),
        )
        if on
    ]
    if asked:
        caption.append(
            f"Limits: {', '.join(asked)}; {ranking.get('left_out_by_limits', 0)} fitting plans left out by them."
        )
    if ranking.get("skipped"):
        caption.append(f"Left out: {', '.join(ranking['skipped'])} (see --json's skipped).")
    caption.append("Spot: not recorded.")
    caption.append(
        "c: the step model's constants for the GPU family, m measured / p published / a assumed; "
        "+-: the prediction's range by it (10/15/35%)."
    )
    if ranking.get("note"):
        caption.append(f"Note: {ranking['note']}.")
    from rich import box

    table = Table(title=title, caption=" ".join(caption), caption_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("#", "nodes x type", "buy", "$/h", "tok/s", "$/M tok", "hours", "+-", "USD", "c", "plan"):
        table.add_column(
            column,
            justify="left" if column in ("nodes x type", "plan", "c") else "right",
            no_wrap=column != "plan",
            overflow="fold",
        )
    for rank, r in enumerate(shown, start=1):
        spread = round(100 * (r["tokens_per_s_range"][1] / r["tokens_per_s"] - 1))
        table.add_row(
            str(rank),
            f"{r['nodes']} x {r['instance_type']}",
            "CB" if r.get("purchase") == "capacity-block" else "OD",
            f"{r['usd_per_hour']:,.1f}",
            f"{r['tokens_per_s']:,.0f}",
            f"{r['usd_per_million_tokens']:.3f}",
            _hours(r["hours"]),
            f"{spread}%",
            f"{r['usd']:,.0f}",
            r["constants"]["status"][0],
            f"{r['micro_batch']}x{r['grad_accumulation']} {r['precision']}",
        )
    Console(width=100).print(table)
    if not rows and asked:
        print(
            f"No plan within the limits ({', '.join(asked)}): {ranking.get('left_out_by_limits', 0)} fitting plans "
            "are outside them; raise --budget or --hours, fewer --tokens, or --capacity any."
        )
