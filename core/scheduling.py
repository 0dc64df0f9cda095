"""Node labels, selectors and taints: set on the node groups by infra/, selected and tolerated by the charts and pods.

Which nodes the system side (KubeRay operator, Ray head, RayJob submitter) and the GPU side (Ray workers, device
plugins) run on is a pair of node selectors, settings `systemNodeSelector` and `gpuNodeSelector` (props of the
constructs). The node groups the stack creates carry exactly those labels, so a platform that brings its own nodes
only has to name its own labels.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "Taint",
    "DEFAULT_SYSTEM_NODE_SELECTOR",
    "DEFAULT_GPU_NODE_SELECTOR",
    "GPU_PRESENT_LABEL",
    "SYSTEM_NODE_LABELS",
    "GPU_NODE_LABELS",
    "GPU_TAINT",
    "gpu_node_labels",
    "gpu_tolerations",
    "parse_taint",
    "taints_problem",
    "taint_text",
    "DEFAULT_GPU_TAINTS",
    "TAINT_EFFECTS",
    "label_selector",
    "node_selector_problem",
    "parse_node_selector",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # Kubernetes spelling: NoSchedule, PreferNoSchedule, NoExecute

    def toleration(self) -> dict[str, str]:
        """A pod toleration for this taint (operator Exists: any value)."""
        return {"key": self.key, "operator": "Exists", "effect": self.effect}


DEFAULT_SYSTEM_NODE_SELECTOR = {"role": "system"}
"""Where the KubeRay operator, the GPU-less Ray head and the RayJob submitter run (`systemNodeSelector`)."""

DEFAULT_GPU_NODE_SELECTOR = {"role": "gpu-worker"}
"""Where the Ray workers and the device plugins run (`gpuNodeSelector`)."""

GPU_PRESENT_LABEL = {"nvidia.com/gpu.present": "true"}
"""What the NVIDIA device plugin's default affinity needs without Node Feature Discovery; every GPU node gets it."""

SYSTEM_NODE_LABELS = dict(DEFAULT_SYSTEM_NODE_SELECTOR)
"""The labels of the system node group with the default settings."""

GPU_TAINT = Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule")
"""Keeps everything but GPU work (and the plugins that tolerate it) off the GPU nodes."""


def gpu_node_labels(selector: Mapping[str, str]) -> dict[str, str]:
    """The labels of a GPU node group: its selector's labels and nvidia.com/gpu.present=true."""
    return {**selector, **GPU_PRESENT_LABEL}


GPU_NODE_LABELS = gpu_node_labels(DEFAULT_GPU_NODE_SELECTOR)
"""The labels of the GPU node group with the default settings."""


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def parse_taint(text: str) -> Taint:
    """`key=value:Effect` or `key:Effect` (kubectl's spelling) as a Taint; ValueError saying what is wrong."""
    head, _, effect = text.rpartition(":")
    key, _, value = head.partition("=")
    if not head or effect not in TAINT_EFFECTS:
        raise ValueError(
            f"taint {text!r} must be key=value:Effect or key:Effect, Effect one of {', '.join(TAINT_EFFECTS)}"
        )
    if (problem := _key_problem(key)) is not None:
        raise ValueError(f"taint {text!r}: {problem}")
    if value and not _NAME.match(value):
        raise ValueError(f"taint {text!r}: its value must be empty or {_NAME_RULE}")
    return Taint(key=key, value=value, effect=effect)


def taints_problem(taints: tuple[str, ...]) -> str | None:
    """What is wrong with a list of taints ("must ..."), or None."""
    for text in taints:
        try:
            parse_taint(text)
        except ValueError as error:
            return str(error)
    return None


def taint_text(taint: Taint) -> str:
    return f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"


DEFAULT_GPU_TAINTS = (taint_text(GPU_TAINT),)
"""The GPU node group's taints by default (`gpuNodeTaints`)."""


def gpu_tolerations(taints: tuple[str, ...] | list[str] = DEFAULT_GPU_TAINTS) -> list[dict[str, str]]:
    """Tolerations of every taint of the GPU nodes (the Ray workers', the device plugins')."""
    return [parse_taint(t).toleration() for t in taints]


def label_selector(selector: Mapping[str, str]) -> str:
    """The selector as kubectl and the Kubernetes API take it: role=gpu-worker,team=ml."""
    return ",".join(f"{key}={value}" for key, value in selector.items())


# Kubernetes label syntax (https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set):
# a key is an optional DNS-subdomain prefix and '/', then a name; a value is empty or a name.
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_RULE = "1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"


def _key_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX.match(prefix)):
        return f"label key {key!r} has a bad prefix: it must be a DNS subdomain like example.com, then '/'"
    if not _NAME.match(name):
        return f"label key {key!r} must be an optional DNS-subdomain prefix and '/', then {_NAME_RULE}"
    return None


def node_selector_problem(selector: Mapping[str, str]) -> str | None:
    """What is wrong with a node selector ("must ..."), or None: at least one label, each key and value valid."""
    if not selector:
        return "must name at least one node label, like role=system"
    for key, value in selector.items():
        if not isinstance(key, str) or not isinstance(value, str):
            return "must map label keys to string values"
        if (problem := _key_problem(key)) is not None:
            return problem
        if value and not _NAME.match(value):
            return f"label value {value!r} of {key} must be empty or {_NAME_RULE}"
    return None


def parse_node_selector(text: str) -> dict[str, str]:
    """A selector from `-c`: a JSON object ({"role": "system"}) or `key=value,key2=value2`; raises ValueError."""
    text = text.strip()
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError("must be a JSON object of labels or key=value,key2=value2") from None
        if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
            raise ValueError("must be a JSON object of string labels or key=value,key2=value2")
        return parsed
    selector: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, equals, value = item.partition("=")
        if not equals:
            raise ValueError(f"must be key=value pairs separated by commas (or a JSON object); {item!r} has no '='")
        selector[key.strip()] = value.strip()
    return selector
