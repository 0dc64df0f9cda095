"""The reference data some tests validate against, read from ../shared beside the checkout (never copied here).

KubeRay's CRDs and the pinned charts' default values are published upstream, but not on the package registries this
project installs from, so `make test` cannot fetch them. A clone without ../shared skips the tests that need them,
each with one line saying where the files come from; CI has ../shared and runs them all.
"""

from __future__ import annotations

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


def shared_path(*parts: str) -> Path:
    """A file or folder under ../shared; skips the calling test, saying how to get it, when it is not there."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is not here (a clone without ../shared): {HOW_TO_GET.get(parts[0], 'see tests/shared_reference.py')}")
    return path
