"""NetworkPolicy semantics, to judge the stack's policies against the pods the real KubeRay operator creates
(tests/cluster/test_network_policy.py reads their labels, and their namespace's, from the API server).

No CNI runs beside the control plane, so nothing enforces a NetworkPolicy here: the API server stores it, and an
upstream engine says what a conforming CNI (the VPC CNI's network policy agent on EKS) would let through: cyclonus
(github.com/mattfenwick/cyclonus, pinned and built by tools/controlplane/build.py), whose `analyze --mode
query-traffic` evaluates every policy's whole spec (policyTypes, ingress and egress rules, peers with pod, namespace
and ipBlock selectors, ports and protocols) for a connection from a source to a destination, each a pod (its labels,
its namespace and the namespace's labels) or an IP outside the cluster. A connection is allowed when both ends let it:
the egress side of the policies selecting the source, and the ingress side of those selecting the destination
(https://kubernetes.io/docs/concepts/services-networking/network-policies/: "for a connection from a source pod to a
destination pod to be allowed, both the egress policy on the source pod and the ingress policy on the destination pod
need to allow the connection").

`selects` (a label selector) stays here: the tests compare it with the API server's own label selector.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.controlplane import build


@dataclass(frozen=True)
class Pod:
    """A pod as the API server has it: its labels, and its namespace's labels (what a namespaceSelector matches; the
    API server sets kubernetes.io/metadata.name on every namespace), and its IP (what an ipBlock matches)."""

    name: str
    namespace: str
    labels: dict[str, str]
    namespace_labels: dict[str, str]
    ip: str = "10.0.255.254"


@dataclass(frozen=True)
class Outside:
    """An address outside the cluster (S3, PyPI, a laptop): only an ipBlock peer matches it."""

    ip: str


Peer = Pod | Outside


@dataclass(frozen=True)
class Connection:
    source: Peer
    destination: Peer
    port: int
    protocol: str = "TCP"


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector: matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist), all ANDed."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _peer(peer: Peer) -> dict[str, Any]:
    if isinstance(peer, Outside):
        return {"Internal": None, "IP": peer.ip}
    return {
        "Internal": {"PodLabels": peer.labels, "NamespaceLabels": peer.namespace_labels, "Namespace": peer.namespace},
        "IP": peer.ip,
    }


_VERDICT = re.compile(r"is allowed\?\s*\|\s*(true|false)\s*\|", re.IGNORECASE)


def allowed(policies: list[dict[str, Any]], connections: list[Connection]) -> list[bool]:
    """For each connection, whether `policies` (as the API server stored them) let it through, by cyclonus."""
    binary = build.bin_dirs()["cyclonus"]
    with tempfile.TemporaryDirectory(prefix="ray-efa-netpol-") as folder:
        policy_file, traffic_file = Path(folder) / "policies.json", Path(folder) / "traffic.json"
        policy_file.write_text(
            json.dumps(
                {
                    "apiVersion": "networking.k8s.io/v1",
                    "kind": "NetworkPolicyList",
                    "items": [
                        {
                            "apiVersion": "networking.k8s.io/v1",
                            "kind": "NetworkPolicy",
                            "metadata": {"name": p["metadata"]["name"], "namespace": p["metadata"]["namespace"]},
                            "spec": p["spec"],
                        }
                        for p in policies
                    ],
                }
            )
        )
        traffic_file.write_text(
            json.dumps(
                [
                    {
                        "Source": _peer(c.source),
                        "Destination": _peer(c.destination),
                        "Protocol": c.protocol,
                        "ResolvedPort": c.port,
                        "ResolvedPortName": "",
                    }
                    for c in connections
                ]
            )
        )
        result = subprocess.run(
            [
                str(binary),
                "analyze",
                "--mode",
                "query-traffic",
                "--policy-path",
                str(policy_file),
                "--traffic-path",
                str(traffic_file),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    if result.returncode != 0:
        raise RuntimeError(f"cyclonus analyze failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}")
    verdicts = [word.lower() == "true" for word in _VERDICT.findall(result.stdout)]
    if len(verdicts) != len(connections):
        raise RuntimeError(f"cyclonus judged {len(verdicts)} of {len(connections)} connections:\n{result.stdout}")
    return verdicts


def admitted(policies: list[dict[str, Any]], source: Peer, target: Peer, port: int, protocol: str = "TCP") -> bool:
    """Whether a connection from `source` to `target`:`port` is allowed by `policies` (both ends' sides)."""
    (verdict,) = allowed(policies, [Connection(source, target, port, protocol)])
    return verdict
