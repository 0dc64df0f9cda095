"""Options and helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from typing import Any, Iterable, Mapping

from ray_efa.core.context import ResolvedSettings, parse_overrides, resolve_settings
from ray_efa.core.settings import SettingsError

EXIT_USAGE = 2
EXIT_NOT_INSTALLED = 4
"""A command that needs an extra that is not installed (`ray-efa train` without torch)."""

TRAIN_EXTRA_MODULES = ("torch", "ray", "transformers")
"""What `pip install 'ray-efa-stack[train]'` adds to the base install (which has the constructs, manifests and CLI)."""


def add_context_option(parser: argparse.ArgumentParser) -> None:
    """`-c key=value`, repeatable: the same overrides `cdk -c` takes."""
    parser.add_argument(
        "-c", "--context", action="append", default=[], metavar="KEY=VALUE",
        help="override a setting, as with `cdk -c` (repeatable)",
    )


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of tables")


def resolve_or_exit(
    args: argparse.Namespace, extra_layers: Iterable[tuple[str, Mapping[str, Any]]] = ()
) -> ResolvedSettings:
    """Resolve settings from the project's context and `-c`; on bad settings print every problem and exit 2."""
    try:
        return resolve_settings(parse_overrides(args.context), extra_layers=extra_layers)
    except SettingsError as error:
        if getattr(args, "json", False):
            print(json.dumps({"error": "invalid settings", "problems": [
                {"key": p.key, "value": p.value, "message": p.message} for p in error.problems]}, default=str))
        else:
            print(f"ray-efa: {error}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def missing_train_extra(command: str) -> int | None:
    """None when torch, Ray and transformers import; else say how to install them and return EXIT_NOT_INSTALLED."""
    missing = [name for name in TRAIN_EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    print(f"ray-efa {command}: training needs {', '.join(missing)}, which this install lacks (the base install has the "
          "CDK constructs, manifests and CLI only): pip install 'ray-efa-stack[train]'", file=sys.stderr)
    return EXIT_NOT_INSTALLED
