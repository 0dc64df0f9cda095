"""Options and helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Iterable, Mapping

from ray_efa.core.context import ResolvedSettings, parse_overrides, resolve_settings
from ray_efa.core.settings import SettingsError

EXIT_USAGE = 2


def add_context_option(parser: argparse.ArgumentParser) -> None:
    """`-c key=value`, repeatable: the same overrides `cdk -c` takes."""
    parser.add_argument(
        "-c", "--context", action="append", default=[], metavar="KEY=VALUE",
        help="override a setting, as with `cdk -c` (repeatable)",
    )


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of tables")


def resolve_or_exit(
    args: argparse.Namespace, extra_layers: Iterable[tuple[str, Mapping[str, Any]]] = (), *, require_fit: bool = False,
) -> ResolvedSettings:
    """Resolve settings from the project's context and `-c`; on bad settings print every problem and exit 2.

    `require_fit`: the command produces a training job, so a memory plan that cannot fit the GPUs is bad settings too
    (core.memory.check_fits names what to change).
    """
    try:
        resolved = resolve_settings(parse_overrides(args.context), extra_layers=extra_layers)
        if require_fit:
            from ray_efa.core.memory import check_fits

            check_fits(resolved.settings)
        return resolved
    except SettingsError as error:
        if getattr(args, "json", False):
            print(json.dumps({"error": "invalid settings", "problems": [
                {"key": p.key, "value": p.value, "message": p.message} for p in error.problems]}, default=str))
        else:
            print(f"ray-efa: {error}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
