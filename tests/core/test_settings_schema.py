"""docs/settings.schema.json: generated from the settings, current, and what cdk.json is checked against."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jsonschema
import pytest

from ray_efa.core.settings import Settings, context_json_schema, setting_keys

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "docs" / "settings.schema.json"


def _tool():
    spec = importlib.util.spec_from_file_location("settings_schema", ROOT / "tools" / "settings_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _errors(document: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.validator}" for e in validator.iter_errors(document))


def test_schema_file_is_current():
    # Compared as data: pydantic releases differ in how they print a bound (0 or 0.0), not in what it means.
    assert json.loads(SCHEMA_PATH.read_text()) == json.loads(_tool().render()), (
        "docs/settings.schema.json is stale: run `python tools/settings_schema.py --write`"
    )
    jsonschema.Draft202012Validator.check_schema(context_json_schema())


def test_schema_lists_every_setting_with_its_default_and_description():
    properties = context_json_schema()["$defs"]["context"]["properties"]
    assert list(properties) == list(setting_keys())
    defaults = Settings().to_context()
    for key, prop in properties.items():
        assert prop["default"] == defaults[key], key
        assert setting_keys()[key][1].doc in prop["description"], key


def test_project_cdk_json_names_the_schema_and_passes_it():
    # The CDK CLI ignores the top-level "$schema" key (tests/infra/test_app.py runs `npx cdk synth` on this cdk.json).
    cdk_json = json.loads((ROOT / "cdk.json").read_text())
    assert cdk_json["$schema"] == "./docs/settings.schema.json"
    assert _errors(cdk_json) == []


@pytest.mark.parametrize(
    "context, expected",
    [
        ({"gpuNodeCount": -1}, ["context/gpuNodeCount: minimum"]),
        ({"gpuNodeCont": 2}, ["context: additionalProperties"]),
        ({"placementGroup": "sometimes"}, ["context/placementGroup: enum"]),
        # any EC2 type name (extraGpuInstanceTypes may describe it); the settings check the rest
        ({"gpuInstanceType": "G6 12XL"}, ["context/gpuInstanceType: pattern"]),
        (
            {"extraGpuInstanceTypes": [{"name": "p6-b300.48xlarge", "gpus": 8}]},
            ["context/extraGpuInstanceTypes/0: required"] * 6,
        ),
        ({"publicAccessCidrs": ["10.0.0.0"]}, ["context/publicAccessCidrs/0: pattern"]),
        ({"storagePath": "bucket/prefix"}, ["context/storagePath: anyOf"]),
        ({"learningRate": "fast"}, ["context/learningRate: type"]),
        ({"@aws-cdk/core:newStyleStackSynthesis": True, "availability-zones:account=1:region=us-east-2": ["a"]}, []),
    ],
)
def test_editors_flag_what_the_settings_reject(context, expected):
    assert _errors({"app": "python app.py", "context": context}) == expected
