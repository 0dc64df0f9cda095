"""The project's records of reference data (tests/recorded/), which a clone without ../shared validates against: each
consistent in itself everywhere, and equal to the published files where ../shared has them (CI has: a missing file
fails there, tests/shared_reference.py).
"""

from __future__ import annotations

import json

import yaml

from tests.k8s.schemas import RECORDED_FIELDS
from tests.shared_reference import recorded_charts, reference_path
from tools.controlplane import build


def _v1_schema(text: str) -> dict:
    crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def _field(schema: dict, dotted: str) -> dict | None:
    for name in dotted.split("."):
        schema = schema.get("properties", {}).get(name)
        if schema is None:
            return None
    return schema


def test_the_recorded_kuberay_fields_are_the_published_ones_and_newer_than_the_operator():
    recorded = json.loads(RECORDED_FIELDS.read_text())
    assert f"v{recorded['base']}" == build.operator_version()
    base = {path.name: _v1_schema(path.read_text()) for path in build.published_crds(recorded["base"])}
    published = reference_path("kuberay-crds", f"v{recorded['version']}")
    for name, fields in recorded["fields"].items():
        assert fields, name
        for dotted, field in fields.items():
            # each is a field the operator's own CRDs lack (else it would need no record) ...
            assert _field(base[name], dotted) is None, (name, dotted)
            assert _field(base[name], dotted.rsplit(".", 1)[0]) is not None, (name, dotted)
            # ... and, where the published CRDs are here, the published field as it is
            if published is not None:
                assert _field(_v1_schema((published / name).read_text()), dotted) == field, (name, dotted)


def test_the_recorded_chart_values_are_the_published_ones():
    charts = recorded_charts()
    assert set(charts) == {
        "nvidia-device-plugin-0.20.0",
        "aws-efa-k8s-device-plugin-v0.5.30",
        "kuberay-operator-1.7.0",
        "kuberay-operator-1.4.0",
    }
    provenance = reference_path("helm-values", "PROVENANCE.md")
    for folder, record in charts.items():
        assert set(record["values"]) <= set(record["keys"]), folder
        assert not set(record.get("template_reads", ())) & set(record["keys"]), folder
        path = reference_path("helm-values", folder, "values.yaml")
        if path is not None:
            values = yaml.safe_load(path.read_text())
            assert list(values) == record["keys"], folder
            assert {key: values[key] for key in record["values"]} == record["values"], folder
        if provenance is not None:
            for key in record.get("template_reads", ()):
                assert f"`.Values.{key}`" in provenance.read_text(), (folder, key)
