"""Strict validators for the k8s tests: KubeRay CRD schemas with unknown fields rejected, and kubernetes-validate.

The CRDs are read from ../shared/kuberay-crds/<version>/ where it is there (never copied into this repository; CI has
it, and there a missing file fails the test: tests/shared_reference.py); in a clone alone, from the Go module cache
(crd_folder says which). CRD schemas accept
unknown fields unless told otherwise, so `strict()` adds additionalProperties: false wherever a schema object lists
properties and does not say x-kubernetes-preserve-unknown-fields, which is how the API server prunes them.
"""

from __future__ import annotations

import atexit
import copy
import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from tests.shared_reference import HOW_TO_GET, reference_path
from tools.controlplane import build

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


RECORDED_FIELDS = Path(__file__).parents[1] / "recorded" / "kuberay-1.7.0-fields.json"
"""The fields of the 1.7.0 CRDs that the manifests use and the operator's own (1.5.0) lack, as published."""


def crd_folder(kuberay_version: str) -> Path:
    """A folder with the RayCluster and RayJob CRDs of KubeRay `kuberay_version`: ../shared/kuberay-crds/v<version>/
    where ../shared has it (CI: a missing one fails the test); else, in a clone alone, the published files from the
    Go module cache (v1.4.0 and the operator's v1.5.0: tools/controlplane/build.py published_crds); for 1.7.0, which
    the Go module proxy does not serve, the operator's own with the recorded fields added (RECORDED_FIELDS)."""
    shared = reference_path("kuberay-crds", f"v{kuberay_version}")
    return shared if shared is not None else _clone_alone_crds(kuberay_version)


@functools.cache
def _clone_alone_crds(kuberay_version: str) -> Path:
    """The CRDs of crd_folder in a clone alone, written to a temporary folder of this process (removed at its exit)."""
    folder = Path(tempfile.mkdtemp(prefix=f"ray-efa-kuberay-crds-v{kuberay_version}-"))
    atexit.register(shutil.rmtree, folder, True)
    published = build.published_crds(kuberay_version)
    recorded = json.loads(RECORDED_FIELDS.read_text())
    if not published and recorded["version"] != kuberay_version:
        raise LookupError(f"no CRDs of KubeRay {kuberay_version} here: {HOW_TO_GET['kuberay-crds']}")
    for path in published or build.published_crds(recorded["base"]):
        crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        if not published:
            (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
            for dotted, field in recorded["fields"][path.name].items():
                *parents, name = dotted.split(".")
                node = version["schema"]["openAPIV3Schema"]
                for parent in parents:
                    node = node["properties"][parent]
                node["properties"][name] = field
        (folder / path.name).write_text(json.dumps(crd))  # (JSON is YAML)
    return folder


def crd_file(kuberay_version: str, name: str) -> Path:
    """One CRD file (ray.io_rayclusters.yaml or ray.io_rayjobs.yaml) of crd_folder."""
    return crd_folder(kuberay_version) / name


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
