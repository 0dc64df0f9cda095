"""The NetworkPolicy in front of one Ray cluster's pods: who may open a connection to the head and the workers."""

from __future__ import annotations

from typing import Any

from kubernetes.client import (
    V1LabelSelector,
    V1NetworkPolicyIngressRule,
    V1NetworkPolicyPeer,
    V1NetworkPolicyPort,
    V1NetworkPolicySpec,
)

from ray_efa.core.addons import KUBERAY_OPERATOR
from ray_efa.k8s._private import api_object, labels
from ray_efa.k8s.ray_types import to_json
from ray_efa.k8s.security import (
    DASHBOARD_PORT,
    OPERATOR_POD_LABELS,
    RAY_NODE_COMPONENT,
    SUBMITTER_COMPONENT,
    network_policy_name,
    pod_labels,
)

__all__ = ["ray_network_policy", "NAMESPACE_NAME_LABEL", "DEFAULT_DENY_NAME", "default_deny_ingress"]

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Set by the API server on every namespace (Kubernetes 1.22+): selects a namespace by its name."""


DEFAULT_DENY_NAME = "default-deny-ingress"


def default_deny_ingress(namespace: str) -> dict[str, Any]:
    """A NetworkPolicy that selects every pod of `namespace` and admits no ingress: a pod that no ray_network_policy
    admits anything to (one that is not a Ray pod) is reached by nobody. NetworkPolicies add up (a connection is
    admitted when any policy selecting the pod admits it), so each Ray cluster's own policy still admits what it
    lists; egress stays open (the submitter reaches the head, the pods S3, PyPI and DNS)."""
    spec = V1NetworkPolicySpec(pod_selector=V1LabelSelector(), policy_types=["Ingress"])
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": DEFAULT_DENY_NAME,
            "namespace": namespace,
            "labels": labels(DEFAULT_DENY_NAME, "network-policy"),
        },
        "spec": to_json(spec),
    }


def ray_network_policy(owner: str, namespace: str, *, submitter: bool) -> dict[str, Any]:
    """The NetworkPolicy (k8s.security.network_policy_name of `owner`) admitting ingress to the Ray pods (head and
    workers) of `owner`, a RayCluster or RayJob, and nothing else:

    - from the same Ray cluster's pods, every port: GCS, raylets, object managers, Ray workers and NCCL (the TCP
      run's sockets, every run's bootstrap) use ports Ray picks at run time;
    - from the RayJob's submitter pod (`submitter`: RayJobs in K8sJobMode), the dashboard port: `ray job submit` and
      the log tail;
    - from the KubeRay operator's pod in its namespace, the dashboard port: it polls the job's status there.

    Egress stays open: the pods reach S3 for checkpoints, PyPI for the packages their init container installs
    (k8s.pip_packages), DNS and Pod Identity's agent.
    Traffic from the node itself (kubelet probes) is always allowed by the VPC CNI's policy agent; EFA's SRD traffic
    goes through the EFA device, not the pod's IP interface, and the EFA security group governs it.
    """
    name = network_policy_name(owner)
    ray_pods = V1LabelSelector(match_labels=pod_labels(owner, RAY_NODE_COMPONENT))
    dashboard = [V1NetworkPolicyPort(protocol="TCP", port=DASHBOARD_PORT)]
    ingress = [V1NetworkPolicyIngressRule(_from=[V1NetworkPolicyPeer(pod_selector=ray_pods)])]
    if submitter:
        submitter_pod = V1LabelSelector(match_labels=pod_labels(owner, SUBMITTER_COMPONENT))
        ingress.append(
            V1NetworkPolicyIngressRule(_from=[V1NetworkPolicyPeer(pod_selector=submitter_pod)], ports=dashboard)
        )
    operator = V1NetworkPolicyPeer(
        namespace_selector=V1LabelSelector(match_labels={NAMESPACE_NAME_LABEL: KUBERAY_OPERATOR.namespace}),
        pod_selector=V1LabelSelector(match_labels=dict(OPERATOR_POD_LABELS)),
    )
    ingress.append(V1NetworkPolicyIngressRule(_from=[operator], ports=dashboard))
    spec = V1NetworkPolicySpec(pod_selector=ray_pods, policy_types=["Ingress"], ingress=ingress)
    return api_object(
        api_version="networking.k8s.io/v1",
        kind="NetworkPolicy",
        name=name,
        namespace=namespace,
        object_labels=labels(name, "network-policy"),
        body={"spec": to_json(spec)},
    )
