"""`ray-efa compare RUN...`: the throughput ratio of the same job run over EFA and over TCP; or any two runs.

Feed it the driver output of both RayJobs (`kubectl -n ray logs job/<submitter of train-efa>` and of train-tcp, or
`ray job logs`) or their run folders (summary.json); it finds each run's RAY_EFA_RUN_SUMMARY line. One EFA and one
TCP run of the same job: the transport ratio. Two runs that are not that (two precisions, two instance types), or
--runs: both side by side, what differs, and the throughput ratio, never called a transport's. Exit 0 with the
ratio; 2 when a run is missing, a summary lacks a field or has no throughput, a log cannot be read, the runs of a
transport ratio trained differently or ran on different hardware or host counts (unless
--allow-different-hardware), or the --plot file may not be written; 4 --plot without matplotlib.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ray_efa.cli._common import add_json_option, fail, missing_plots_extra, print_json, write_chart


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="EFA-versus-TCP throughput ratio from the two training runs' logs",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument(
        "logs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="driver logs holding the runs' summaries, or run folders (summary.json)",
    )
    p.add_argument(
        "--runs",
        action="store_true",
        help="two runs side by side (the last of each RUN), whatever differs: not a transport ratio",
    )
    p.add_argument(
        "--allow-different-hardware",
        action="store_true",
        help="compare runs on different instance types, devices or host counts (the ratio is then not "
        "the transport's alone)",
    )
    p.add_argument(
        "--plot",
        type=Path,
        metavar="FILE",
        help="also draw EFA against TCP (tokens/s and step time as bars, with the ratio) into this PNG",
    )
    add_json_option(p)
    p.set_defaults(run=run)


def _unreadable(paths: list[Path]) -> str | None:
    for path in paths:
        if not path.exists():
            return f"cannot read {path}: no such file"
    return None


def run(args: argparse.Namespace) -> int:
    from ray_efa.ops.compare import CompareError, compare_logs, compare_runs

    if args.plot is not None:
        if (code := missing_plots_extra("compare")) is not None:
            return code
        from ray_efa.core.output_dir import OutputDirError, check_output_file
        from ray_efa.ops.plots import is_ray_efa_png

        try:
            check_output_file(args.plot, is_ours=is_ray_efa_png)
        except OutputDirError as error:
            return fail(args, "compare", f"--plot: {error}")
    problem = _unreadable(args.logs)
    if problem:
        return fail(args, "compare", problem)
    if args.runs and len(args.logs) != 2:
        return fail(args, "compare", f"--runs: two runs (RUN RUN), got {len(args.logs)}")
    try:
        if args.runs or (len(args.logs) == 2 and not _one_run_per_network(args.logs)):
            return _two_runs(args, compare_runs(args.logs[0], args.logs[1]))
        comparison = compare_logs(args.logs, allow_different_hardware=args.allow_different_hardware)
    except CompareError as error:
        return fail(args, "compare", str(error))
    except OSError as error:
        return fail(
            args,
            "compare",
            f"cannot read {error.filename or ', '.join(map(str, args.logs))}: {error.strerror or error}",
        )
    if args.json:
        print_json(comparison.as_dict())
        return _plot(args, comparison)
    from rich.console import Console
    from rich.table import Table

    table = Table(title="EFA versus TCP, same job")
    for column in ("", "EFA", "TCP"):
        table.add_column(column, overflow="fold")
    for row in comparison.rows():
        table.add_row(*row)
    console = Console()
    console.print(table)
    if not comparison.same_hardware:
        print(
            "ray-efa compare: warning: the runs used different hardware (--allow-different-hardware); the ratio "
            "is not the transport's alone",
            file=sys.stderr,
        )
    console.print(f"EFA runs the job [bold]{comparison.ratio:.2f}x[/bold] as fast as TCP")
    return _plot(args, comparison)


def _one_run_per_network(paths: list[Path]) -> bool:
    """Whether the two paths hold runs of both networks (a transport comparison), as far as they can be read."""
    from ray_efa.ops.compare import CompareError, read_runs

    networks = set()
    for path in paths:
        try:
            networks |= {run["network"] for run in read_runs(path)}
        except (CompareError, OSError):
            return True  # let the transport comparison say what is wrong, as it always has
    return networks == {"efa", "tcp"}


def _two_runs(args: argparse.Namespace, pair) -> int:
    """Two runs side by side, what differs, and b over a: never a transport ratio."""
    if args.plot is not None:
        return fail(args, "compare", "--plot: only for a transport comparison (one EFA run, one TCP run)")
    if args.json:
        print_json(pair.as_dict())
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Two runs side by side (not a transport ratio)")
    for column in ("", "A", "B"):
        table.add_column(column, overflow="fold")
    for row in pair.rows():
        table.add_row(*row)
    console = Console()
    console.print(table)
    differs = ", ".join(f"{k} ({a} vs {b})" for k, (a, b) in pair.differences.items()) or "nothing recorded"
    console.print(
        f"B runs at [bold]{pair.ratio:.2f}x[/bold] A's tokens/s. They differ in: {differs}; so this is "
        "the ratio of two runs, not a transport ratio."
    )
    return 0


def _plot(args: argparse.Namespace, comparison) -> int:
    """Draw --plot (nothing without it); 0, or 2 when the file cannot be written."""
    if args.plot is None:
        return 0
    from ray_efa.ops.plots import comparison_chart

    return write_chart(args, "compare", comparison_chart(comparison.as_dict()), "comparison chart")
