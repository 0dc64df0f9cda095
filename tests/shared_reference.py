"""The reference data some tests validate against, read from ../shared beside the checkout (never copied here).

KubeRay's CRDs and the pinned charts' default values are published upstream, but not on the package registries this
project installs from, so `make test` cannot fetch them all. Every test has a source of its own for a clone without
../shared (`reference_path` answers None there), so none skips for want of it: the control plane serves the CRDs of
the operator it runs, from its Go module (tools/controlplane/build.py); the k8s tests read the published CRDs from the
Go module cache, with the 1.7.0 fields the manifests use as recorded (tests/k8s/schemas.py); the chart tests read
what they need of each chart's values as recorded under tests/recorded/ (`chart_values`). Where ../shared is there,
they read it, and tests/test_recorded_reference.py checks the records against it. CI (CI=true) has ../shared: there a
missing reference file fails the test instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ray_efa.core.context import PROJECT_ROOT
from tests.ci import in_ci  # CI (CI=true) has ../shared beside the clone

SHARED = PROJECT_ROOT.parent / "shared"

HOW_TO_GET = {
    "kuberay-crds": "copy ray-operator/config/crd/bases/ray.io_rayclusters.yaml and ray.io_rayjobs.yaml of "
    "github.com/ray-project/kuberay at tag v<version> into ../shared/kuberay-crds/v<version>/",
    "helm-values": "write each chart's defaults with `helm show values <repo>/<chart> --version <version>` into "
    "../shared/helm-values/<chart>-<version>/values.yaml (docs/development.md names the repositories)",
}


def _missing(path: Path, parts: tuple[str, ...]) -> str:
    return f"{path} is not here: {HOW_TO_GET.get(parts[0], 'see tests/shared_reference.py')}"


def reference_path(*parts: str) -> Path | None:
    """A file or folder under ../shared, or None where it is not there (a clone without ../shared: the caller uses a
    source of its own); in CI a missing one fails the calling test."""
    path = SHARED.joinpath(*parts)
    if path.exists():
        return path
    if in_ci():
        pytest.fail(f"{_missing(path, parts)} (CI has ../shared: a missing reference file is a failure)")
    return None


RECORDED = Path(__file__).parent / "recorded"
"""The project's own records of what the tests read of the reference data (tests/test_recorded_reference.py checks
them against ../shared where it is there)."""


def recorded_charts() -> dict[str, dict[str, Any]]:
    """Chart folder -> its record (keys, values, template_reads) in tests/recorded/chart-values.json."""
    return json.loads((RECORDED / "chart-values.json").read_text())["charts"]


def chart_values(folder: str) -> dict[str, Any]:
    """A pinned chart's default values: ../shared/helm-values/<folder>/values.yaml where ../shared has it (CI: a
    missing one fails the test); else, in a clone alone, as recorded: every top-level key, with the value of each key
    the tests read (the others None)."""
    path = reference_path("helm-values", folder, "values.yaml")
    if path is not None:
        return yaml.safe_load(path.read_text())
    record = recorded_charts()[folder]
    return {key: record["values"].get(key) for key in record["keys"]}
