"""Node labels and taints: set on the node groups by infra/, selected and tolerated by the charts and k8s/ pods."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Taint", "SYSTEM_NODE_LABELS", "GPU_NODE_LABELS", "GPU_TAINT", "gpu_tolerations", "node_selector"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # Kubernetes spelling: NoSchedule, PreferNoSchedule, NoExecute

    def toleration(self) -> dict[str, str]:
        """A pod toleration for this taint (operator Exists: any value)."""
        return {"key": self.key, "operator": "Exists", "effect": self.effect}


SYSTEM_NODE_LABELS = {"role": "system"}
"""The KubeRay operator and the GPU-less Ray head run on these nodes."""

GPU_NODE_LABELS = {"role": "gpu-worker", "nvidia.com/gpu.present": "true"}
"""nvidia.com/gpu.present=true is what the NVIDIA device plugin's default affinity needs without NFD."""

GPU_TAINT = Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule")
"""Keeps everything but GPU work (and the plugins that tolerate it) off the GPU nodes."""


def node_selector(labels: dict[str, str]) -> dict[str, str]:
    """The nodeSelector that picks a node group by its role label alone."""
    return {"role": labels["role"]}


def gpu_tolerations() -> list[dict[str, str]]:
    return [GPU_TAINT.toleration()]
