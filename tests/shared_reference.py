"""The reference data some tests validate against, read from ../shared beside the checkout (never copied here).

KubeRay's CRDs and the pinned charts' default values are published upstream, but not on the package registries this
project installs from, so `make test` cannot fetch them. Where a test has a source of its own (the control plane
serves the CRDs of the operator it runs, from its Go module: tools/controlplane/build.py), a clone without ../shared
uses that (`reference_path` answers None); a test with no other source skips, saying where the files come from. CI
(CI=true) has ../shared: there a missing reference file fails the test instead of skipping it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ray_efa.core.context import PROJECT_ROOT

SHARED = PROJECT_ROOT.parent / "shared"

HOW_TO_GET = {
    "kuberay-crds": "copy ray-operator/config/crd/bases/ray.io_rayclusters.yaml and ray.io_rayjobs.yaml of "
    "github.com/ray-project/kuberay at tag v<version> into ../shared/kuberay-crds/v<version>/",
    "helm-values": "write each chart's defaults with `helm show values <repo>/<chart> --version <version>` into "
    "../shared/helm-values/<chart>-<version>/values.yaml (docs/development.md names the repositories)",
}


def in_ci() -> bool:
    """Whether this is CI's run (CI=true), where ../shared is always beside the clone."""
    return os.environ.get("CI", "").lower() in ("true", "1")


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


def shared_path(*parts: str) -> Path:
    """A file or folder under ../shared, for a test with no other source: skips the calling test, saying how to get
    it, when it is not there (a clone without ../shared); fails it in CI."""
    path = reference_path(*parts)
    if path is None:
        pytest.skip(f"{_missing(SHARED.joinpath(*parts), parts)} (a clone without ../shared)")
    return path
