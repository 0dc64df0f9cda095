"""cdk8s charts of the KubeRay workload (Namespace, RayCluster, RayJobs), synthesized from the same Settings as the
CDK stack. See k8s/README.md for the charts, their apply order and the design choices.

    import cdk8s, k8s
    charts = k8s.build_workload(cdk8s.App(), settings)   # [namespace, rayjob-<network>], in apply order

The chart builders load cdk8s (jsii) on first use, so `import k8s.names` stays cheap for ops/ and cli/. The objects
the charts hold are plain data from k8s.objects (no cdk8s): what infra/ and `ray-efa submit` apply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what __getattr__ below imports on first use, visible to type checkers and editors
    from ray_efa.k8s.code_bundle import ManifestError
    from ray_efa.k8s.dist import write_manifests
    from ray_efa.k8s.workload import build_manifests, build_workload

__all__ = ["build_workload", "build_manifests", "write_manifests", "ManifestError"]

_LAZY = {
    "build_workload": "ray_efa.k8s.workload",
    "build_manifests": "ray_efa.k8s.workload",
    "write_manifests": "ray_efa.k8s.dist",
    "ManifestError": "ray_efa.k8s.code_bundle",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'k8s' has no attribute {name!r}")
