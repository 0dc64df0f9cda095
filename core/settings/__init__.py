"""The one settings object: every value the stack, the manifests and the training job read.

Settings come from CDK context (`-c key=value`, cdk.json's "context", cdk.context.json, ~/.cdk.json: see
core.context) under camelCase keys, the CDK convention. Each field names its key, its default and what it allows; `Settings.from_context` parses
strings (`-c` gives strings), rejects unknown keys (a typo would otherwise be ignored silently) and reports every
problem at once, each naming the key, the bad value and what is allowed. Nothing is synthesized or written before
this succeeds.

The sections are pydantic v2 models in strict mode: the Python API takes the field's own type
(`NodeSettings(gpu_node_count=2.5)`, `True` or `'4'` is a SettingsError naming the setting, never a TypeError), and
only `from_context` parses the strings of `-c` leniently. Checks that read several fields (a zone of the region,
a placement group with a reservation) are rules run beside the field checks, so one error lists everything.
`context_json_schema()` is the JSON Schema of the context (docs/settings.schema.json, for editors of cdk.json).

Pure Python with pydantic alone on purpose: the training job imports this module inside the container, which has
no CDK but has pydantic (Ray depends on it).

The settings are this package: its __init__ (this module) on top, which re-exports what the others declare; import
them from here:

    core.settings.checks    the checks of one value (`_*_problem`), their patterns and closed sets
                            (KUBERNETES_VERSIONS, LOG_RETENTION_DAYS, ...) and the Annotated types built on them
    core.settings.sections  the sections: ClusterSettings, NodeSettings, AddonSettings, WorkloadSettings,
                            TrainingSettings, with every field
    core.settings.rules     the rules across settings (`@_rule(...)` functions), registered when the sections load
    core.settings           (this module) Settings, the introspection (setting_keys, setting_choices) and context_json_schema

Adding a setting: one annotated field in its section (core.settings.sections),

    system_root_volume_gib: int = setting(100, "systemRootVolumeGib", "Root volume of each system node, GiB.", ge=20, le=16384)

with `Literal[...]` for a closed set of values, pydantic constraints (ge, le, gt, pattern) for the rest and
`message=` where the generic "must be between 20 and 16384" needs the setting's own words; a check that pydantic
cannot express is an Annotated type with `_check(...)` in core.settings.checks (see Cidr); one that reads two settings
is a `@_rule(...)` function in core.settings.rules. Then `python tools/settings_table.py --write` and
`python tools/settings_schema.py --write`. The machinery behind `setting`, `_check` and `_rule` is
core.settings.framework; Problem and SettingsError are core.problems' (re-exported here).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from ray_efa.core import regions
from ray_efa.core.problems import Problem, SettingsError
from ray_efa.core.settings.checks import (
    DEFAULT_JOB_NAME,
    DEFAULT_TRAIN_FUNCTION,
    KNOWN_IMAGE_RAY_VERSIONS,
    KUBERAY_VERSIONS,
    KUBERNETES_VERSIONS,
    LOG_RETENTION_DAYS,
    MAX_JOB_NAME_LENGTH,
    TRAIN_CONFIG_RESERVED,
    admin_arn_problem,
    capacity_reservation_problem,
    cidr_problem,
    described_gpu_instances,
    job_name_problem,
)

# The framework, under the names the declarations below use (private here: core.settings.framework exports them).
from ray_efa.core.settings.framework import RULES as _RULES
from ray_efa.core.settings.framework import Model as _Model
from ray_efa.core.settings.framework import Rule as _Rule
from ray_efa.core.settings.framework import choices_of as _choices_of
from ray_efa.core.settings.framework import parse_context_value as _parse
from ray_efa.core.settings.framework import rule_problems as _rule_problems
from ray_efa.core.settings.framework import setting
from ray_efa.core.settings.rules import dra_kubernetes_problem, shared_storage_problem
from ray_efa.core.settings.sections import (
    SECTIONS,
    AddonSettings,
    ClusterSettings,
    NodeSettings,
    TrainingSettings,
    WorkloadSettings,
)

__all__ = [
    "SettingsError",
    "Problem",
    "SettingInfo",
    "ClusterSettings",
    "NodeSettings",
    "AddonSettings",
    "WorkloadSettings",
    "TrainingSettings",
    "Settings",
    "KUBERNETES_VERSIONS",
    "KUBERAY_VERSIONS",
    "KNOWN_IMAGE_RAY_VERSIONS",
    "LOG_RETENTION_DAYS",
    "DEFAULT_TRAIN_FUNCTION",
    "DEFAULT_JOB_NAME",
    "MAX_JOB_NAME_LENGTH",
    "TRAIN_CONFIG_RESERVED",
    "described_gpu_instances",
    "dra_kubernetes_problem",
    "shared_storage_problem",
    "cidr_problem",
    "admin_arn_problem",
    "capacity_reservation_problem",
    "job_name_problem",
    "setting",
    "setting_keys",
    "setting_choices",
    "context_json_schema",
]


# -- the settings object ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SettingInfo:
    """One setting as the docs, the README table and the JSON Schema describe it."""

    section: str
    name: str
    key: str
    doc: str
    default: Any
    choices: tuple[Any, ...] | None

    @property
    def metadata(self) -> dict[str, Any]:
        """The dataclass-era view ({"key", "doc", "choices"}), kept for code written against it."""
        return {"key": self.key, "doc": self.doc, "choices": self.choices}


def setting_keys() -> dict[str, tuple[str, SettingInfo]]:
    """Every context key -> (section name, what the setting is), in declaration order."""
    out: dict[str, tuple[str, SettingInfo]] = {}
    for section, cls in SECTIONS.items():
        for name, info in cls.model_fields.items():
            key = info.alias or name  # setting() always gives an alias; a field without one is keyed by its name
            out[key] = (
                section,
                SettingInfo(section, name, key, info.description or "", info.default, _choices_of(info.annotation)),
            )
    return out


def setting_choices(key: str) -> tuple[str, ...]:
    """The values a closed setting (a Literal of strings, such as `network`) allows; ValueError for any other."""
    choices = setting_keys()[key][1].choices
    if choices is None:
        raise ValueError(f"setting {key} is not a closed set of values")
    return tuple(str(choice) for choice in choices)


def _is_foreign_key(key: str) -> bool:
    """Context keys that belong to the CDK itself (feature flags, lookups, CLI switches), not to us."""
    return key.startswith(("@", "cdk", "aws-cdk")) or ":" in key


_FOREIGN_KEY_PATTERN = "^@|:|^cdk|^aws-cdk"  # the same test as _is_foreign_key, for the JSON Schema


class Settings(_Model):
    """All settings, in sections. Build with `Settings.from_context(...)` or `Settings()` for the defaults."""

    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    nodes: NodeSettings = Field(default_factory=NodeSettings)
    addons: AddonSettings = Field(default_factory=AddonSettings)
    workload: WorkloadSettings = Field(default_factory=WorkloadSettings)
    training: TrainingSettings = Field(default_factory=TrainingSettings)

    @classmethod
    def _rules(cls) -> list[_Rule]:
        """The rules that read settings of more than one section (each section runs its own)."""
        inside = [rule for section in SECTIONS.values() for rule in section._rules()]
        return [rule for rule in _RULES if rule not in inside]

    @classmethod
    def _values_by_key(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for section, section_cls in SECTIONS.items():
            given = data.get(section)
            if isinstance(given, section_cls):
                values.update(given._flat())
            else:  # a mapping of the section's values, or nothing (its defaults)
                values.update(section_cls._values_by_key(given if isinstance(given, Mapping) else {}))
        return values

    def _flat(self) -> dict[str, Any]:
        return {key: value for section in SECTIONS for key, value in getattr(self, section)._flat().items()}

    # -- derived values every layer shares ------------------------------------------------------------------

    @property
    def gpu_availability_zone(self) -> str:
        """The GPU AZ, resolved: the setting, else the region's first AZ (of the VPC's, for a region not recorded)."""
        if self.nodes.gpu_availability_zone:
            return self.nodes.gpu_availability_zone
        recorded = regions.AVAILABILITY_ZONES.get(self.cluster.region) or self.cluster.availability_zones
        return recorded[0]

    @property
    def vpc_availability_zones(self) -> tuple[str, ...]:
        """AZs of a created VPC: vpcAvailabilityZones, else the region's first three recorded AZs in name order.

        Independent of gpuAvailabilityZone on purpose: the VPC's subnets (and with them the NAT gateway, the EKS
        cluster's subnets and the system node group) are created per AZ, in this order, so a list that followed the
        GPU AZ would replace them all when capacity moves. Moving the GPU AZ changes only the GPU stack.
        """
        if self.cluster.availability_zones:
            return self.cluster.availability_zones
        return tuple(sorted(regions.AVAILABILITY_ZONES.get(self.cluster.region, ()))[:3])

    @property
    def world_size(self) -> int:
        return self.nodes.total_gpus

    @property
    def cluster_stack_name(self) -> str:
        """The stack with the VPC, the EKS cluster, the system nodes and the charts."""
        return f"{self.cluster.cluster_name}-cluster"

    @property
    def gpu_stack_name(self) -> str:
        """The stack with the GPU node group alone: destroy it first, and alone, to stop paying for GPUs."""
        return f"{self.cluster.cluster_name}-gpu"

    @property
    def teardown_commands(self) -> tuple[str, ...]:
        return (f"npx cdk destroy {self.gpu_stack_name}", f"npx cdk destroy {self.cluster_stack_name}")

    @property
    def scale_commands(self) -> tuple[str, str]:
        """(scale the GPU nodes to zero, come back): the GPU stack alone, both stacks kept."""
        back = self.nodes.gpu_node_count or NodeSettings.model_fields["gpu_node_count"].default
        return (
            f"npx cdk deploy {self.gpu_stack_name} -c gpuNodeCount=0",
            f"npx cdk deploy {self.gpu_stack_name} -c gpuNodeCount={back}",
        )

    def scaled_to_zero_problem(self) -> Problem:
        """What to say where a training plan or a job needs GPUs and gpuNodeCount is 0."""
        return Problem(
            "gpuNodeCount",
            0,
            (
                "is 0: the GPU node group is scaled to zero and no job runs, so there is no GPU to plan or run the job "
                f"on; set it to 1 or more to train (`{self.scale_commands[1]}`)"
            ),
        )

    # -- construction ---------------------------------------------------------------------------------------

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> Settings:
        """Settings from CDK context values (strings from `-c`, JSON values from cdk.json); raises SettingsError."""
        keys = setting_keys()
        problems: list[Problem] = []
        values: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
        for key, raw in context.items():
            if key not in keys:
                if not _is_foreign_key(key):
                    close = difflib.get_close_matches(key, keys, n=1)
                    hint = f"did you mean {close[0]}?" if close else f"known settings: {', '.join(sorted(keys))}"
                    problems.append(Problem(key, raw, f"unknown setting ({hint})"))
                continue
            section, info = keys[key]
            try:
                values[section][key] = _parse(raw, SECTIONS[section].model_fields[info.name].annotation)
            except ValueError as error:
                problems.append(Problem(key, raw, str(error)))
        sections: dict[str, Any] = {}  # section name -> its model, one type per name (ClusterSettings, ...)
        for section, section_cls in SECTIONS.items():
            try:
                sections[section] = section_cls(**values[section])
            except SettingsError as error:
                problems.extend(error.problems)
        if not problems:
            return cls(**sections)
        # Some settings are bad: still run the rules across sections on the good ones, so that one error says all.
        flat = {info.key: info.default for _, info in keys.values()}
        for section_values in values.values():
            flat.update(section_values)
        problems += _rule_problems(cls._rules(), flat, {p.key for p in problems})
        raise SettingsError(problems)

    def to_context(self) -> dict[str, Any]:
        """Every setting as JSON-ready context values (the form the RayJob ships to the training driver)."""
        return {
            key: list(value)
            if isinstance(value, tuple)
            else json.loads(json.dumps(value))
            if isinstance(value, dict)
            else value
            for key, value in self._flat().items()
        }

    def to_json(self) -> str:
        return json.dumps(self.to_context(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Settings:
        return cls.from_context(json.loads(text))

    @property
    def given_keys(self) -> frozenset[str]:
        """The context keys these settings were given (by from_context, a section's keyword or replace), as opposed
        to left at their defaults: what a construct that takes a value from elsewhere must not contradict."""
        return frozenset(
            info.alias
            for section in SECTIONS
            for name, info in type(getattr(self, section)).model_fields.items()
            if name in getattr(self, section).model_fields_set
        )

    def replace(self, **context: Any) -> Settings:
        """A copy with some settings changed, by context key: `settings.replace(steps=5, model="tiny")`. The keys
        left at their defaults stay so (given_keys)."""
        current = self.to_context()
        return Settings.from_context({**{key: current[key] for key in self.given_keys}, **context})


# -- JSON Schema ----------------------------------------------------------------------------------------------------


def context_json_schema() -> dict[str, Any]:
    """The JSON Schema of a cdk.json whose "context" holds these settings (docs/settings.schema.json).

    It describes the typed JSON form (numbers as numbers); `-c` strings are parsed before these checks apply.
    The CDK's own context keys (feature flags "@aws-cdk/...", lookups "x:y") are allowed as anything.
    """
    properties: dict[str, Any] = {}
    for section, cls in SECTIONS.items():
        schema = cls.model_json_schema(by_alias=True, mode="validation")
        for key, prop in schema["properties"].items():
            prop.pop("title", None)
            prop["description"] = f"[{section}] {prop.get('description', '')}"
            properties[key] = prop
    context = {
        "type": "object",
        "description": "CDK context: the ray-efa settings (README, Settings) and the CDK's own keys.",
        "properties": properties,
        "patternProperties": {_FOREIGN_KEY_PATTERN: {}},
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "cdk.json of a ray-efa-stack app",
        "description": "Generated by tools/settings_schema.py from ray_efa.core.settings; do not edit by hand.",
        "type": "object",
        "properties": {
            "$schema": {"type": "string"},
            "app": {"type": "string"},
            "context": {"$ref": "#/$defs/context"},
        },
        "$defs": {"context": context},
    }
