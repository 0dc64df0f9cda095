"""Run one `ray-efa` subcommand the way cli.main does, without importing the other subcommands' modules."""

from __future__ import annotations

import argparse
import importlib


def run_cli(command: str, *argv: str) -> int:
    module = importlib.import_module(f"cli.{command}")
    parser = argparse.ArgumentParser(prog="ray-efa")
    module.register(parser.add_subparsers(dest="command", required=True).add_parser, command)
    args = parser.parse_args([command, *argv])
    return int(args.run(args) or 0)
