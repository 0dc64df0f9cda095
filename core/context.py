"""Where settings come from, exactly as the CDK CLI merges context, with each value's source.

The CDK CLI (aws-cdk-cli, packages/aws-cdk/lib/cli/user-configuration.ts, `loadConfigFiles`) reads context from
these bags, the first holding a key winning (packages/@aws-cdk/toolkit-lib/lib/api/context.ts, `Context.get`):

    1. `-c key=value`           strings, split at the first "="
    2. cdk.json's "context"     the app's own, committed file: the place for values a user chooses
    3. cdk.context.json         the CLI's cache of lookups (`cdk context --clear` empties it)
    4. ~/.cdk.json's "context"  the user's defaults for every app

and hands the app their deep merge (`Context.all`: objects merged key by key, anything else replaced). cdk.json and
cdk.context.json are read from the directory the CLI runs in: the app directory. `ray-efa` resolves the same files,
from the nearest directory holding cdk.json at or above the working directory, so that `ray-efa plan` shows what
`cdk deploy` will get. tests/core/test_context_cdk_cli.py checks this against the real CLI.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_efa.core.settings import Problem, Settings, SettingsError, setting_keys

__all__ = [
    "ResolvedSettings",
    "parse_overrides",
    "find_app_dir",
    "read_context",
    "merge_context",
    "resolve_settings",
    "PROJECT_ROOT",
    "PROJECT_CONFIG",
    "PROJECT_CONTEXT",
    "USER_DEFAULTS",
]

PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The checkout this package runs from (its own cdk.json holds the project's feature flags)."""

PROJECT_CONFIG = "cdk.json"
PROJECT_CONTEXT = "cdk.context.json"
USER_DEFAULTS = "~/.cdk.json"


@dataclass(frozen=True)
class ResolvedSettings:
    settings: Settings
    sources: dict[str, str]
    """Context key -> "default", "~/.cdk.json", "cdk.context.json", "cdk.json", "-c" or another named layer."""
    app_dir: Path | None = None
    """The app directory whose cdk.json and cdk.context.json were read; None when there is none."""


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    """`key=value` strings (the form of `cdk -c`) to a dict; raises SettingsError naming any malformed pair."""
    out: dict[str, str] = {}
    problems = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            problems.append(Problem("-c", pair, "must be key=value"))
            continue
        out[key.strip()] = value
    if problems:
        raise SettingsError(problems)
    return out


def find_app_dir(start: Path | None = None) -> Path | None:
    """The nearest directory holding cdk.json, from `start` (default: the working directory) up; None if none does."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / PROJECT_CONFIG).is_file():
            return directory
    return None


def _read_json(path: Path, label: str) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise SettingsError(
            [Problem(label, str(path), f"is not valid JSON ({error}); the CDK CLI cannot read it either")]
        ) from None
    if not isinstance(value, dict):
        raise SettingsError([Problem(label, str(path), f"must hold a JSON object, found {type(value).__name__}")])
    return value


def _context_of(path: Path, label: str, key: str | None) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = _read_json(path, label)
    if key is None:
        return data
    context = data.get(key, {})
    if not isinstance(context, dict):
        raise SettingsError([Problem(f"{label} {key}", context, "must be a JSON object of context keys")])
    return context


def read_context(root: Path | None, *, home: Path | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The context files the CDK CLI reads for the app in `root`, lowest precedence first:
    ~/.cdk.json's "context", cdk.context.json, cdk.json's "context" (files that do not exist are left out)."""
    home = home if home is not None else Path(os.path.expanduser("~"))
    candidates = [(USER_DEFAULTS, home / ".cdk.json", "context")]
    if root is not None:
        candidates += [
            (PROJECT_CONTEXT, root / PROJECT_CONTEXT, None),
            (PROJECT_CONFIG, root / PROJECT_CONFIG, "context"),
        ]
    layers = []
    for label, path, key in candidates:
        context = _context_of(path, label, key)
        if context is not None:
            layers.append((label, context))
    return layers


def merge_context(layers: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The CDK CLI's deep merge of context bags, lowest precedence first: objects merge key by key, anything else
    (lists included) is replaced; a null replaces too (aws-cdk-cli toolkit-lib util/objects.ts `deepMerge`)."""
    merged: dict[str, Any] = {}

    def merge_one(target: dict[str, Any], source: Mapping[str, Any]) -> None:
        for key, value in source.items():
            if isinstance(value, dict):
                if not isinstance(target.get(key), dict):
                    target[key] = {}
                merge_one(target[key], value)
            else:
                target[key] = value

    for layer in layers:
        merge_one(merged, json.loads(json.dumps(layer)))  # copies: never mutate the caller's layers
    return merged


def resolve_settings(
    overrides: Mapping[str, Any] | None = None,
    *,
    root: Path | None = None,
    home: Path | None = None,
    extra_layers: Iterable[tuple[str, Mapping[str, Any]]] = (),
) -> ResolvedSettings:
    """Settings from the app directory's context files (as `cdk` reads them), extra named layers (e.g. the local
    preset), then `-c` overrides. `root`: the app directory; default: find_app_dir() from the working directory."""
    root = root if root is not None else find_app_dir()
    keys = setting_keys()
    sources = dict.fromkeys(keys, "default")
    layers = [*read_context(root, home=home), *extra_layers, ("-c", dict(overrides or {}))]
    for name, values in layers:
        for key in values:
            if key in keys:
                sources[key] = name
    merged = merge_context(values for _, values in layers)
    return ResolvedSettings(Settings.from_context(merged), sources, root)
