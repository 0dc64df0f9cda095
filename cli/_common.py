"""Options and helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from ray_efa.core.context import ResolvedSettings, parse_overrides, resolve_settings
from ray_efa.core.settings import SettingsError

EXIT_USAGE = 2
"""Bad usage or unreadable input, everywhere: bad arguments, bad settings, a file that cannot be read or parsed, an
output folder that may not be written. The message names the file, argument or setting; there is no traceback."""

JSON_DIGITS = 6
"""Significant digits of the floats in --json output (settings values keep theirs)."""

EXIT_NOT_INSTALLED = 4
"""A command that needs an extra that is not installed (`ray-efa train` without torch, `ray-efa report` without
matplotlib)."""

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


def rounded(value: Any, digits: int = JSON_DIGITS) -> Any:
    """`value` with every float rounded to `digits` significant digits (14.151399999999999 -> 14.1514)."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value


def print_json(data: Mapping[str, Any], *, exact: Iterable[str] = ()) -> None:
    """Print --json output: snake_case keys (see the README), floats rounded except under the top-level keys `exact`."""
    keep = set(exact)
    print(json.dumps({k: (v if k in keep else rounded(v)) for k, v in data.items()}, indent=2, default=str))


def fail(args: argparse.Namespace, command: str, message: str, *, code: int = EXIT_USAGE,
         problems: list[dict] | None = None) -> int:
    """Report an error the one way every subcommand does; return `code` (2 unless given).

    stderr always gets one line `ray-efa COMMAND: message` (plus one line per problem); with --json, stdout also
    gets `{"error": ..., "exit_code": ..., "problems": [...]}` so that a script reading stdout sees the failure.
    """
    if getattr(args, "json", False):
        print(json.dumps({"error": message, "exit_code": code, "problems": problems or []}, default=str))
    details = "".join(f"\n  - {p['key']}: {p['message']}, got {p['value']!r}" for p in problems or [])
    print(f"ray-efa {command}: {message}{details}", file=sys.stderr)
    return code


def add_kube_context_option(parser: argparse.ArgumentParser) -> None:
    """`--kube-context NAME`: the kubeconfig context (kubectl's --context); -c/--context is for settings only."""
    parser.add_argument("--kube-context", dest="kube_context", metavar="NAME",
                        help="kubeconfig context (default: the current one)")


def resolve_or_exit(
    args: argparse.Namespace, extra_layers: Iterable[tuple[str, Mapping[str, Any]]] = (), *, require_fit: bool = False,
) -> ResolvedSettings:
    """Resolve settings from the project's context and `-c`; on bad settings print every problem and exit 2.

    `require_fit`: the command produces a training job, so a memory plan that cannot fit the GPUs is bad settings too
    (core.strategy.check_fits names what to change).
    """
    try:
        resolved = resolve_settings(parse_overrides(args.context), extra_layers=extra_layers)
        if require_fit:
            from ray_efa.core.strategy import check_fits

            check_fits(resolved.settings)
        return resolved
    except SettingsError as error:
        if getattr(args, "json", False):
            print(json.dumps({"error": "invalid settings", "exit_code": EXIT_USAGE, "problems": [
                {"key": p.key, "value": p.value, "message": p.message} for p in error.problems]}, default=str))
        print(f"ray-efa: {error}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


PLOTS_EXTRA_MODULES = ("matplotlib",)
"""What `pip install 'ray-efa-stack[plots]'` adds: the charts of `report`, `plan --plot` and `compare --plot`."""


def missing_plots_extra(command: str) -> int | None:
    """None when matplotlib imports; else say how to install it and return EXIT_NOT_INSTALLED."""
    missing = []
    for name in PLOTS_EXTRA_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if not missing:
        return None
    print(f"ray-efa {command}: the charts need {', '.join(missing)}, which this install lacks: "
          "pip install 'ray-efa-stack[plots]'", file=sys.stderr)
    return EXIT_NOT_INSTALLED


def missing_train_extra(command: str) -> int | None:
    """None when torch, Ray and transformers import; else say how to install them and return EXIT_NOT_INSTALLED."""
    missing = [name for name in TRAIN_EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    print(f"ray-efa {command}: training needs {', '.join(missing)}, which this install lacks (the base install has the "
          "CDK constructs, manifests and CLI only): pip install 'ray-efa-stack[train]'", file=sys.stderr)
    return EXIT_NOT_INSTALLED
