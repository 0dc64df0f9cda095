"""`ray-efa check-transport`: prove from NCCL logs which transport carried the traffic between nodes.

    ray-efa check-transport [--expect efa|ib|socket] [--hosts N] [--json] LOG...   ("-" is stdin; *.gz is read too)

Prints one row per process (host:pid) and a one-line verdict. Exit codes: 0 every process whose traffic crossed nodes
used the expected transport; 1 some process used another (the row names it and the likely cause); 3 the logs prove
nothing (empty, WARN-only, single-node, no transport lines); 2 usage errors: bad arguments, or a log that cannot be read
(missing, a directory, no permission, a truncated or corrupt .gz). Exit 1 means only "another transport".
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from ray_efa.cli._common import add_json_option, fail, print_json

__all__ = ["register", "run", "main"]

# Kept equal to training.transport.EXPECTS (a test checks it); not imported here so that building the whole CLI
# parser imports nothing from training/.
EXPECTS = ("efa", "ib", "socket")


def register(add_parser, name: str) -> None:
    p = add_parser(
        name,
        help="prove from NCCL logs that collectives crossed nodes over EFA (exit 0), or not (1), or nothing (3)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--expect", choices=EXPECTS, default="efa",
                   help="transport the logs must show between nodes (default: efa)")
    p.add_argument("--hosts", type=_host_count, metavar="N",
                   help="how many hosts the job ran on, if you know it: 1 makes a chosen network prove nothing; 2 or more "
                        "lets a network every process chose contradict --expect (it never makes a pass)")
    add_json_option(p)
    p.add_argument("logs", nargs="+", metavar="LOG",
                   help="NCCL_DEBUG=INFO log files of one job (worker logs, driver output); '-' reads stdin")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ray_efa.training.transport import classify_paths

    problem = _unreadable(args.logs)
    if problem:
        return _usage_error(args, problem)
    try:
        report = classify_paths(args.logs)
    except OSError as error:  # a truncated .gz (LogReadError), or a file that vanished since the check
        return _usage_error(args, f"cannot read {error.filename or ', '.join(args.logs)}: {error.strerror or error}")
    verdict = report.verdict(args.expect, hosts=args.hosts)
    if args.json:
        print_json({**verdict.to_json(), "logs": list(args.logs)})
    else:
        print(verdict.render_table(width=_width()))
        print()
        print(verdict.summary)
    return verdict.exit_code


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


def _unreadable(paths: list[str]) -> str | None:
    """The first reason a LOG argument cannot be read, before anything is printed."""
    if paths.count("-") > 1:
        return "'-' (stdin) can be given only once"
    for path in paths:
        if path == "-":
            continue
        if not os.path.exists(path):
            return f"cannot read {path}: no such file"
        if os.path.isdir(path):
            return f"cannot read {path}: it is a directory (give the log files in it)"
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
