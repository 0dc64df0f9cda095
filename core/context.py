"""Where settings come from: defaults, cdk.json, cdk.context.json and `-c key=value`, with each value's source.

The CDK app gets its context merged by the CDK CLI; `ray-efa plan` and `ray-efa train` read the same files here,
in the same precedence (lowest first): defaults, cdk.json "context", cdk.context.json, `-c` overrides.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from ray_efa.core.settings import Settings, SettingsError, Problem, setting_keys

__all__ = ["ResolvedSettings", "parse_overrides", "read_context", "resolve_settings", "PROJECT_ROOT"]

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class ResolvedSettings:
    settings: Settings
    sources: dict[str, str]
    """Context key -> "default", "cdk.json", "cdk.context.json", "-c" or another named layer."""


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


def read_context(root: Path = PROJECT_ROOT) -> list[tuple[str, dict[str, Any]]]:
    """The context layers stored in the project: cdk.json's "context", then cdk.context.json."""
    layers = []
    cdk_json = root / "cdk.json"
    if cdk_json.exists():
        layers.append(("cdk.json", json.loads(cdk_json.read_text()).get("context", {})))
    context_file = root / "cdk.context.json"
    if context_file.exists():
        layers.append(("cdk.context.json", json.loads(context_file.read_text())))
    return layers


def resolve_settings(
    overrides: Mapping[str, Any] | None = None,
    *,
    root: Path = PROJECT_ROOT,
    extra_layers: Iterable[tuple[str, Mapping[str, Any]]] = (),
) -> ResolvedSettings:
    """Settings from the project's context files, extra named layers (e.g. the local preset), then `-c` overrides."""
    keys = setting_keys()
    merged: dict[str, Any] = {}
    sources = {key: "default" for key in keys}
    layers = [*read_context(root), *extra_layers, ("-c", dict(overrides or {}))]
    for name, values in layers:
        for key, value in values.items():
            merged[key] = value
            if key in keys:
                sources[key] = name
    return ResolvedSettings(Settings.from_context(merged), sources)
