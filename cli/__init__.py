"""`ray-efa`: the command line of the project.

Each subcommand lives in its own module of this package with two functions, `register(subparsers)` and
`run(args) -> int` (the exit code). Modules are imported only when their subcommand runs, so that
`ray-efa check-transport` needs neither the CDK nor torch.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

__all__ = ["main", "SUBCOMMANDS"]

# subcommand -> module of this package
SUBCOMMANDS: dict[str, str] = {
    "demo": "demo",
    "plan": "plan",
    "manifests": "manifests",
    "train": "train",
    "submit": "submit",
    "follow": "follow",
    "jobs": "jobs",
    "logs": "logs",
    "cancel": "cancel",
    "dashboard": "dashboard",
    "check-transport": "check_transport",
    "compare": "compare",
    "calibrate": "calibrate",
    "report": "report",
    "capacity": "capacity",
    "verify": "verify",
    "whoami": "whoami",
    "deploy-check": "deploy_check",
    "tiny-model": "tiny_model",
}


EXIT_BROKEN_PIPE = 141
"""A reader that went away (`ray-efa plan | head`): 128 + SIGPIPE, what a shell reports for a killed writer."""


def _identity(file: object) -> tuple[int, int] | None:
    """(device, inode) of a stream's descriptor or of a path: which file it is; None for a stream with no descriptor
    (a test's captured stdout)."""
    try:
        info = os.stat(file) if isinstance(file, str) else os.fstat(file.fileno())  # type: ignore[attr-defined]
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return None
    return info.st_dev, info.st_ino


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ray-efa", description=(__doc__ or "").partition("\n")[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in SUBCOMMANDS.items():
        importlib.import_module(f"ray_efa.cli.{module}").register(subparsers.add_parser, name)
    return parser


def main(argv: list[str] | None = None) -> int:
    # jsii (CDK, cdk8s) prints a banner on Node 20, which AWS CDK still supports in this pinned version; the Makefile
    # sets the same switch. An explicit setting of the variable wins.
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    args = build_parser().parse_args(argv)
    stdout = _identity(sys.stdout)
    try:
        return int(args.run(args) or 0)
    except BrokenPipeError:  # `ray-efa plan | head`: the reader is gone, which is not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return EXIT_BROKEN_PIPE
    except SystemExit as stop:
        # rich's Console meets the same closed pipe with its own exit 1 (Console.on_broken_pipe points stdout at
        # /dev/null first): the same quiet end as above, not a failure
        if stop.code == 1 and stdout is not None and stdout != _identity(sys.stdout) == _identity(os.devnull):
            return EXIT_BROKEN_PIPE
        raise
    except KeyboardInterrupt:
        print(f"ray-efa {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # one place for every command: an unreachable cluster or AWS is one line, not a trace
        from ray_efa.cli._common import EXIT_UNREACHABLE, fail, unreachable_message

        message = unreachable_message(error)
        if message is None:
            raise
        return fail(args, args.command, message, code=EXIT_UNREACHABLE)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
