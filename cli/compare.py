"""`ray-efa compare EFA_LOG TCP_LOG`: the throughput ratio of the same job run over EFA and over TCP.

Feed it the driver output of both RayJobs (`kubectl -n ray logs job/<submitter of train-efa>` and of train-tcp, or
`ray job logs`); it finds each run's RAY_EFA_RUN_SUMMARY line. Exit 0 with the ratio, 2 when a run is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ray_efa.cli._common import EXIT_USAGE, add_json_option


def register(add_parser, name: str) -> None:
    p = add_parser(name, help="EFA-versus-TCP throughput ratio from the two training runs' logs",
                   description=__doc__.splitlines()[0])
    p.add_argument("logs", nargs="+", type=Path, metavar="LOG", help="driver logs holding both runs' summaries")
    add_json_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ray_efa.ops.compare import CompareError, compare_logs

    try:
        comparison = compare_logs(args.logs)
    except (CompareError, OSError) as error:
        print(f"ray-efa compare: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(comparison.as_dict(), indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="EFA versus TCP, same job")
    for column in ("", "EFA", "TCP"):
        table.add_column(column)
    for row in comparison.rows():
        table.add_row(*row)
    console = Console()
    console.print(table)
    console.print(f"EFA runs the job [bold]{comparison.ratio:.2f}x[/bold] as fast as TCP")
    return 0
