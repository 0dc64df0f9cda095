"""NetworkPolicy semantics and the labels of the pods KubeRay creates, for testing the policy against real pod labels.

`admitted` follows the networking.k8s.io/v1 rules (https://kubernetes.io/docs/concepts/services-networking/
network-policies/): a pod selected by no policy with Ingress accepts everything; a selected pod accepts a connection
when any ingress rule has a peer matching the source (podSelector alone: same namespace; namespaceSelector with
podSelector: both must match) and, when the rule lists ports, the port. An empty selector matches everything.

`ray_pod_labels` and `submitter_pod_labels` copy what KubeRay v1.7.0 puts on the pods it creates
(ray-operator/controllers/ray/common/pod.go labelPod, rayjob_controller.go getSubmitterTemplate), plus what the Job
controller adds to a Job's pods; the template's own labels come from the synthesized manifests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Labels KubeRay does not let a pod template override (labelPod).
_PROTECTED = ("ray.io/node-type", "ray.io/group", "ray.io/cluster")


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    labels: dict[str, str]
    namespace_labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The API server labels every namespace with its name.
        self.namespace_labels.setdefault("kubernetes.io/metadata.name", self.namespace)


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


def ray_pod_labels(template: dict[str, Any], *, cluster: str, node_type: str, group: str) -> dict[str, str]:
    """The labels of a head or worker pod that KubeRay creates from `template` for the RayCluster `cluster`."""
    labels = {
        "ray.io/is-ray-node": "yes",
        "ray.io/cluster": cluster,
        "ray.io/node-type": node_type,
        "ray.io/group": group,
        "ray.io/identifier": f"{cluster}-{node_type}",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    for key, value in ((template.get("metadata") or {}).get("labels") or {}).items():
        if key not in _PROTECTED:
            labels[key] = value
    return labels


def submitter_pod_labels(template: dict[str, Any], *, ray_job: str) -> dict[str, str]:
    """The labels of the submitter pod of RayJob `ray_job`: its template's, KubeRay's and the Job controller's."""
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    labels.update({
        "ray.io/originated-from-cr-name": ray_job,
        "ray.io/originated-from-crd": "RayJob",
        "app.kubernetes.io/created-by": "kuberay-operator",
        "job-name": ray_job,
        "batch.kubernetes.io/job-name": ray_job,
        "controller-uid": "5d3f0c8e-0000-4000-8000-000000000001",
    })
    return labels
