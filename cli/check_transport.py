"""`ray-efa check-transport`: prove from NCCL logs and EFA counters which transport carried the traffic between nodes.

    ray-efa check-transport [--expect efa|ib|socket] [--hosts N] [--counters PATH]... [--json] LOG...

LOG: NCCL_DEBUG=INFO logs ("-" is stdin; *.gz is read too); files named efa-counters-*.json among them, and every
--counters file or folder, are EFA hardware counter snapshots (training.efa_counters: the driver collects them beside
the logs; `python -m ray_efa.training.efa_counters snapshot` takes them on any platform).

Prints one row per process (host:pid), one row per node of EFA bytes sent and received next to the predicted bytes,
and a one-line verdict. Exit codes: 0 the expected transport is proven (every process whose traffic crossed nodes used
it, or every node's EFA counters moved as predicted) and nothing contradicts it; 1 some process used another transport,
or the counters contradict (far fewer bytes than predicted, no EFA device, EFA busy in a TCP run); 3 nothing proves
either way (or the counters cannot be trusted: partial, reset, of another node); 2 usage errors: bad arguments, or a
log or snapshot that cannot be read (missing, a directory, no permission, a truncated .gz, not a snapshot).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable

from ray_efa.cli._common import add_json_option, fail, print_json

__all__ = ["register", "run", "main"]

# Kept equal to training.transport.EXPECTS (a test checks it); not imported here so that building the whole CLI
# parser imports nothing from training/.
EXPECTS = ("efa", "ib", "socket")


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="prove from NCCL logs that collectives crossed nodes over EFA (exit 0), or not (1), or nothing (3)",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument(
        "--expect", choices=EXPECTS, default="efa", help="transport the logs must show between nodes (default: efa)"
    )
    p.add_argument(
        "--hosts",
        type=_host_count,
        metavar="N",
        help="how many hosts the job ran on, if you know it: 1 makes a chosen network prove nothing; 2 or more "
        "lets a network every process chose contradict --expect (it never makes a pass)",
    )
    p.add_argument(
        "--counters",
        action="append",
        default=[],
        metavar="PATH",
        help="EFA counter snapshots: a file, or a folder of efa-counters-*.json (such as the driver's "
        "--logs-dir); may be given more than once",
    )
    p.add_argument(
        "--predicted-bytes",
        type=_byte_count,
        metavar="BYTES",
        help="bytes each node should have sent (and received) between nodes during training, where the "
        "snapshots carry no prediction (a train function the step-time model does not know)",
    )
    add_json_option(p)
    p.add_argument(
        "logs",
        nargs="*",
        metavar="LOG",
        help="NCCL_DEBUG=INFO log files of one job (worker logs, driver output); '-' reads stdin",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ray_efa.training import efa_counters
    from ray_efa.training.transport import classify_paths, gate

    logs = [p for p in args.logs if p == "-" or not efa_counters.is_counter_file(p)]
    counter_paths = [p for p in args.logs if p not in logs] + list(args.counters)
    if not logs and not counter_paths:
        return _usage_error(args, "give at least one NCCL log (LOG, '-' for stdin) or --counters PATH")
    problem = _unreadable(logs) or _unreadable(counter_paths, folders=True)
    if problem:
        return _usage_error(args, problem)
    try:
        report = classify_paths(logs)
    except OSError as error:  # a truncated .gz (LogReadError), or a file that vanished since the check
        return _usage_error(args, f"cannot read {error.filename or ', '.join(logs)}: {error.strerror or error}")
    try:
        snapshots = efa_counters.load_snapshots(counter_paths) if counter_paths else None
    except efa_counters.CounterFileError as error:
        return _usage_error(args, f"cannot use EFA counter snapshot {error}")
    verdict = gate(report, args.expect, hosts=args.hosts, counters=snapshots, predicted_bytes=args.predicted_bytes)
    if args.json:
        print_json({**verdict.to_json(), "logs": logs, "counter_files": counter_paths})
    else:
        print(verdict.render_table(width=_width()))
        print()
        print(verdict.summary)
    return verdict.exit_code


def _byte_count(text: str) -> float:
    """--predicted-bytes: a number >= 0 (1e11 and 100000000000 alike)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of bytes >= 0, got {text!r}")
    return value


def _host_count(text: str) -> int:
    """--hosts: a whole number >= 1 (argparse turns the error into exit 2 naming the value)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def _width() -> int | None:
    """The width to fit the table in: $COLUMNS, else the terminal's; None (the whole table) for a file or a pipe."""
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def _unreadable(paths: list[str], *, folders: bool = False) -> str | None:
    """The first reason a LOG (or, with `folders`, a --counters) argument cannot be read, before anything is printed."""
    if paths.count("-") > 1:
        return "'-' (stdin) can be given only once"
    for path in paths:
        if path == "-":
            if folders:
                return "--counters cannot read stdin ('-'): give a snapshot file or folder"
            continue
        if not os.path.exists(path):
            return f"cannot read {path}: no such file"
        if os.path.isdir(path):
            if folders:
                if not os.access(path, os.R_OK | os.X_OK):
                    return f"cannot read {path}: permission denied"
                continue
            return (
                f"cannot read {path}: it is a directory (give the log files in it; --counters {path} reads the "
                "EFA counter snapshots in it)"
            )
        if not os.access(path, os.R_OK):
            return f"cannot read {path}: permission denied"
        try:  # some files open but fail on read (I/O errors, /proc entries): find out before printing anything
            with open(path, "rb") as log:
                log.read(1)
        except OSError as error:
            return f"cannot read {path}: {error.strerror or error}"
    return None


def _usage_error(args: argparse.Namespace, message: str) -> int:
    return fail(args, "check-transport", message)


def main(argv: list[str] | None = None) -> int:
    """This subcommand alone (`python -m ray_efa.cli.check_transport LOG...`), without building the whole CLI."""
    parser = argparse.ArgumentParser(prog="ray-efa")
    register(parser.add_subparsers(dest="command", required=True).add_parser, "check-transport")
    args = parser.parse_args(["check-transport", *(sys.argv[1:] if argv is None else argv)])
    return args.run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
