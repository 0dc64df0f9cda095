"""Run one `ray-efa` subcommand the way cli.main does, without importing the other subcommands' modules."""

from __future__ import annotations

import argparse
import importlib


def run_cli(command: str, *argv: str) -> int:
    """The exit code the process would have (resolve_or_exit raises SystemExit for bad settings)."""
    module = importlib.import_module(f"ray_efa.cli.{command}")
    parser = argparse.ArgumentParser(prog="ray-efa")
    module.register(parser.add_subparsers(dest="command", required=True).add_parser, command)
    try:
        args = parser.parse_args([command, *argv])
        return int(args.run(args) or 0)
    except SystemExit as exit_:
        return int(exit_.code or 0)
