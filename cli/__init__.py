"""`ray-efa`: the command line of the project.

Each subcommand lives in its own module of this package with two functions, `register(subparsers)` and
`run(args) -> int` (the exit code). Modules are imported only when their subcommand runs, so that
`ray-efa check-transport` needs neither the CDK nor torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["main", "SUBCOMMANDS"]

# subcommand -> module of this package
SUBCOMMANDS: dict[str, str] = {
    "demo": "demo",
    "plan": "plan",
    "manifests": "manifests",
    "train": "train",
    "check-transport": "check_transport",
    "capacity": "capacity",
    "verify": "verify",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ray-efa", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in SUBCOMMANDS.items():
        importlib.import_module(f"cli.{module}").register(subparsers.add_parser, name)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
