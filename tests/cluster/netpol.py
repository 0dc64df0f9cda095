"""NetworkPolicy semantics, to evaluate a policy against the pods the real KubeRay operator creates
(tests/cluster/test_network_policy.py reads their labels, and their namespace's, from the API server).

No CNI runs beside the control plane, so nothing enforces a NetworkPolicy here: the API server stores it, and
`admitted` says what a conforming CNI (the VPC CNI's network policy agent on EKS) would let through. It follows the
networking.k8s.io/v1 rules (https://kubernetes.io/docs/concepts/services-networking/network-policies/): a pod
selected by no policy with Ingress accepts everything; a selected pod accepts a connection when any ingress rule has a
peer matching the source (podSelector alone: same namespace; namespaceSelector with podSelector: both must match) and,
when the rule lists ports, the port. An empty selector matches everything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Pod:
    """A pod as the API server has it: its labels, and its namespace's labels (what a namespaceSelector matches; the
    API server sets kubernetes.io/metadata.name on every namespace)."""

    name: str
    namespace: str
    labels: dict[str, str]
    namespace_labels: dict[str, str]


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector: matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist), all ANDed."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def _peer_matches(peer: dict[str, Any], source: Pod, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        return False  # pod-to-pod only here
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], source.namespace_labels):
            return False
    elif source.namespace != policy_namespace:
        return False
    return selects(peer.get("podSelector"), source.labels)


def admitted(policies: list[dict[str, Any]], source: Pod, target: Pod, port: int, protocol: str = "TCP") -> bool:
    """Whether a connection from `source` to `target`:`port` is allowed by the ingress side of `policies`."""
    selecting = [p for p in policies
                 if p["metadata"]["namespace"] == target.namespace
                 and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
                 and selects(p["spec"]["podSelector"], target.labels)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from")
            if peers and not any(_peer_matches(peer, source, policy["metadata"]["namespace"]) for peer in peers):
                continue
            ports = rule.get("ports")
            if ports and not any(p.get("port") == port and p.get("protocol", "TCP") == protocol for p in ports):
                continue
            return True
    return False

