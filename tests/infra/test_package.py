"""The infra package's import surface: every construct from `ray_efa.infra`, loaded on first use."""

from __future__ import annotations

import pytest

import ray_efa.infra as infra


@pytest.mark.synth  # the constructs' modules load aws_cdk (jsii's node process)
def test_every_exported_name_comes_from_its_module():
    # GIVEN the package's __all__ WHEN a platform's app star-imports it THEN each name is there, the object its own
    # module defines (ray_efa.infra loads them on first use: a typo in its map fails here, not in a user's app)
    namespace: dict[str, object] = {}
    exec("from ray_efa.infra import *", namespace)  # noqa: S102 - the import statement under test
    assert sorted(set(infra.__all__) - namespace.keys()) == []
    for name in infra.__all__:
        assert getattr(namespace[name], "__module__", "").startswith("ray_efa.infra."), name
    with pytest.raises(AttributeError, match="no attribute 'RayEksClusterr'"):
        _ = infra.RayEksClusterr  # type: ignore[attr-defined]
