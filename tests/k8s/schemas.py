"""Strict validators for the k8s tests: KubeRay CRD schemas with unknown fields rejected, and kubernetes-validate.

The CRDs are read from ../shared/kuberay-crds/<version>/ (never copied into this repository; without it the tests
that need them skip, tests/shared_reference.py). CRD schemas accept
unknown fields unless told otherwise, so `strict()` adds additionalProperties: false wherever a schema object lists
properties and does not say x-kubernetes-preserve-unknown-fields, which is how the API server prunes them.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from tests.shared_reference import shared_path

CRD_FILES = {"RayCluster": "ray.io_rayclusters.yaml", "RayJob": "ray.io_rayjobs.yaml"}


def strict(schema: Any) -> Any:
    """A copy of an OpenAPI v3 schema where objects with properties reject any other property."""
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def crd_file(kuberay_version: str, name: str) -> Path:
    """One published CRD file (ray.io_rayclusters.yaml or ray.io_rayjobs.yaml); the test skips without ../shared."""
    return shared_path("kuberay-crds", f"v{kuberay_version}", name)


@functools.cache
def crd_schema(kuberay_version: str, kind: str) -> dict:
    """The served v1 openAPIV3Schema of a KubeRay CRD, as published (not strict)."""
    path = crd_file(kuberay_version, CRD_FILES[kind])
    with path.open() as f:
        crd = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


@functools.cache
def crd_validator(kuberay_version: str, kind: str, *, strict_schema: bool = True) -> jsonschema.Draft7Validator:
    schema = crd_schema(kuberay_version, kind)
    return jsonschema.Draft7Validator(strict(schema) if strict_schema else schema)


def crd_errors(obj: dict, kuberay_version: str, *, strict_schema: bool = True) -> list[str]:
    """Every schema violation of a RayCluster or RayJob, as 'path: message' lines (empty when valid)."""
    validator = crd_validator(kuberay_version, obj["kind"], strict_schema=strict_schema)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)]


def k8s_validate(obj: dict, kubernetes_version: str) -> str:
    """Validate a core object with kubernetes-validate (strict: unknown fields rejected); return the schema version
    used, raise kubernetes_validate.ValidationError when invalid."""
    return kubernetes_validate.validate(obj, kubernetes_version, strict=True)


def pod_template_object(template: dict) -> dict:
    """A pod template embedded in a Ray object, as a v1 PodTemplate that kubernetes-validate knows."""
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "embedded"}, "template": template}
