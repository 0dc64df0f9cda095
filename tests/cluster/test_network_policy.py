"""The NetworkPolicy in front of each Ray cluster, against the pods the real KubeRay operator creates from the manifests.

The default manifests' RayCluster and both RayJobs (k8s.objects: the objects the charts wrap), each with its
NetworkPolicy, are applied to the real control plane; the operator makes each cluster's head and workers, and each
RayJob's submitter Job once its head is ready (the Job controller makes the pod). Every pod's labels, and its namespace's, are read back from the API server, so the labels
are the ones the operator, the Job controller and the API server really put there, not a copy of KubeRay's code.

No CNI runs beside the control plane, so nothing enforces a policy here: the API server stores each one, and
cyclonus (tests/cluster/netpol.py: an upstream engine, pinned and built from its Go module as the control plane is)
says what a conforming CNI (on EKS the VPC CNI's network policy agent) lets through, ingress and egress, from the
policies as the API server stored them. A selector that missed a Ray pod (the job would hang), matched a stranger (the
guard would be open) or a policy that closed the pods' egress (the workers never reach the GCS, S3 or PyPI) fails.

The nodes are shaped only for the pods' own nodeSelectors and the GPU taint their workers tolerate: where the pods
land is tests/cluster/test_workload.py's subject, here only that they are made, Running, and labelled.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.api_client import ApiClient

from ray_efa.core import catalog
from ray_efa.core.addons import KUBERAY_OPERATOR
from tests.cluster.conftest import Nodes, served_kuberay
from tests.cluster.controlplane import ControlPlane
from tests.cluster.deployment import ray_job_cluster, stack_service_account
from tests.cluster.netpol import Connection, Outside, Pod, admitted, allowed, selects
from tests.cluster.workload import apply_in_order, pending_reasons, wait_for_pods
from tests.k8s.conftest import BASE, synthesize

SETTINGS = BASE.replace(kuberayVersion=served_kuberay())  # what the served CRDs take (conftest.served_kuberay)
NS = SETTINGS.workload.namespace
GCS, DASHBOARD, CLIENT, RAYLET = 6379, 8265, 10001, 43127  # the last: a port Ray picks at run time
OBJECT_MANAGER, NCCL = 8076, 51234  # Ray's default object manager port; a port NCCL's TCP transport picks
S3, PYPI = Outside("52.219.100.12"), Outside("151.101.0.223")  # addresses of an S3 endpoint and of PyPI
POD_IDENTITY_AGENT = Outside("169.254.170.23")  # the EKS Pod Identity agent's link-local address (port 80)
LAPTOP = Outside("203.0.113.7")  # a machine outside the cluster (TEST-NET-3)

# The operator pod's labels as the kuberay-operator chart 1.7.0 templates them (templates/deployment.yaml, chart name
# and release kuberay-operator). Helm does not run here and the operator runs as a process beside the API server, so a
# Deployment with the chart's pod labels stands in for it (the Deployment controller adds pod-template-hash).
OPERATOR_CHART_LABELS = {
    "app.kubernetes.io/name": "kuberay-operator",
    "app.kubernetes.io/instance": "kuberay-operator",
    "app.kubernetes.io/component": "kuberay-operator",
}
PAUSE = [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]


@dataclass(frozen=True)
class RayPods:
    """One Ray cluster's pods as the operator made them."""

    cluster: str
    head: Pod
    workers: list[Pod]
    submitter: Pod | None = None


@dataclass(frozen=True)
class Reconciled:
    policies: list[dict[str, Any]]
    """The NetworkPolicies as the API server stored them (defaults filled in)."""
    raycluster: RayPods
    jobs: dict[str, RayPods]
    operator: Pod
    strangers: dict[str, Pod]
    dns: Pod
    """A CoreDNS pod in kube-system, labelled as EKS's CoreDNS add-on labels it."""
    namespace_pods: list[Pod]
    """Every pod in the Ray namespace."""


def observed(core: client.CoreV1Api, pod: Any) -> Pod:
    """`pod` (a V1Pod) with its labels and its namespace's, as the API server has them now."""
    namespace: Any = core.read_namespace(pod.metadata.namespace)
    return Pod(
        pod.metadata.name,
        pod.metadata.namespace,
        dict(pod.metadata.labels or {}),
        dict(namespace.metadata.labels or {}),
        ip=(pod.status and pod.status.pod_ip) or "10.0.255.254",
    )


def _placed(
    api: ApiClient, selector: str, count: int, what: str, phase: str | None = "Running", namespace: str = NS
) -> list[client.V1Pod]:
    try:
        return wait_for_pods(api, namespace, selector, count, what=what, phase=phase, timeout_s=180)
    except pytest.fail.Exception as error:
        raise AssertionError(f"{error}; the scheduler says: {pending_reasons(api, namespace)}") from None


def _ray_pods(api: ApiClient, cluster: str, workers: int, job: str | None = None) -> RayPods:
    core = client.CoreV1Api(api)
    (head,) = _placed(api, f"ray.io/cluster={cluster},ray.io/node-type=head", 1, f"{cluster} head")
    found = _placed(api, f"ray.io/cluster={cluster},ray.io/node-type=worker", workers, f"{cluster} worker")
    submitter = None
    if job is not None:  # the operator creates the submitter Job once the head is ready
        (pod,) = _placed(api, f"batch.kubernetes.io/job-name={job}", 1, f"{job} submitter", phase=None)
        submitter = observed(core, pod)
    return RayPods(cluster, observed(core, head), [observed(core, w) for w in found], submitter)


def _stranger(core: client.CoreV1Api, name: str, namespace: str, labels: dict[str, str]) -> Pod:
    # a manifest dict as the body: the client takes one (the kubernetes stubs name only the model)
    core.create_namespaced_pod(
        namespace,
        {  # pyright: ignore[reportArgumentType]
            "metadata": {"name": name, "labels": labels},
            "spec": {"containers": PAUSE},
        },
    )
    return observed(core, core.read_namespaced_pod(name, namespace))


def _operator(api: ApiClient) -> Pod:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    namespace = KUBERAY_OPERATOR.namespace
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    # a manifest dict as the body: the client takes one (the kubernetes stubs name only the model)
    apps.create_namespaced_deployment(
        namespace,
        {  # pyright: ignore[reportArgumentType]
            "metadata": {"name": "kuberay-operator"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": OPERATOR_CHART_LABELS},
                "template": {"metadata": {"labels": OPERATOR_CHART_LABELS}, "spec": {"containers": PAUSE}},
            },
        },
    )
    (pod,) = _placed(api, "app.kubernetes.io/name=kuberay-operator", 1, "operator", phase=None, namespace=namespace)
    return observed(core, pod)


def _deploy(control_plane: ControlPlane, api: ApiClient, nodes: Nodes) -> Reconciled:
    synth = synthesize(SETTINGS)
    core = client.CoreV1Api(api)
    spec = synth.ray_cluster["spec"]
    head, (group,) = spec["headGroupSpec"]["template"]["spec"], spec["workerGroupSpecs"]
    workers = group["replicas"]
    # one system node per head and one for the submitters; one GPU node per worker of the three clusters
    nodes.add(catalog.SYSTEM_INSTANCES[SETTINGS.nodes.system_instance_type], 4, labels=head["nodeSelector"])
    worker = group["template"]["spec"]
    nodes.add(
        catalog.GPU_INSTANCES[SETTINGS.nodes.gpu_instance_type],
        3 * workers,
        labels=worker["nodeSelector"],
        taints=[{"key": t["key"], "effect": t["effect"]} for t in worker["tolerations"]],
    )
    # the pods' service account as the cluster stack applies it
    apply_in_order(control_plane, [stack_service_account(SETTINGS), *synth.objects()])
    raycluster = _ray_pods(api, synth.ray_cluster["metadata"]["name"], workers)
    jobs = {
        network: _ray_pods(
            api, ray_job_cluster(api, NS, f"train-{network}", timeout_s=120), workers, job=f"train-{network}"
        )
        for network in ("efa", "tcp")
    }
    efa_submitter = jobs["efa"].submitter
    assert efa_submitter is not None
    strangers = {
        "a pod in another namespace": _stranger(core, "curl", "default", {"app": "curl"}),
        "a pod in another namespace labelled like the submitter": _stranger(
            core, "mimic", "default", efa_submitter.labels
        ),
        "an unlabelled pod in the Ray namespace": _stranger(core, "debug", NS, {"run": "debug"}),
    }
    dns = _stranger(core, "coredns", "kube-system", {"k8s-app": "kube-dns", "eks.amazonaws.com/component": "coredns"})
    operator = _operator(api)
    strangers["another pod in the operator's namespace"] = _stranger(
        core, "webhook", operator.namespace, {"app": "webhook"}
    )
    networking = client.NetworkingV1Api(api)
    stored: Any = networking.list_namespaced_network_policy(NS)
    policies = [cast("dict[str, Any]", api.sanitize_for_serialization(p)) for p in stored.items]
    listed: Any = core.list_namespaced_pod(NS)
    namespace_pods = [observed(core, p) for p in listed.items]
    return Reconciled(policies, raycluster, jobs, operator, strangers, dns, namespace_pods)


@pytest.fixture(scope="module")
def reconciled(control_plane: ControlPlane, api: ApiClient) -> Iterator[Reconciled]:
    nodes = Nodes(api)
    try:
        yield _deploy(control_plane, api, nodes)
    finally:
        nodes.remove_all()


def _policy(reconciled: Reconciled, owner: str) -> dict[str, Any]:
    (policy,) = [p for p in reconciled.policies if p["metadata"]["name"] == f"{owner}-ray-ingress"]
    return policy


def _label_selector(selector: dict[str, Any]) -> str:
    assert not selector.get("matchExpressions"), selector  # (the policies select by matchLabels alone)
    return ",".join(f"{k}={v}" for k, v in selector["matchLabels"].items())


@pytest.mark.parametrize("owner", ["ray-efa", "train-efa", "train-tcp"])
def test_each_policy_selects_exactly_its_clusters_head_and_workers(reconciled: Reconciled, api: ApiClient, owner: str):
    pods = reconciled.raycluster if owner == "ray-efa" else reconciled.jobs[owner.removeprefix("train-")]
    selector = _policy(reconciled, owner)["spec"]["podSelector"]
    # THEN of every pod in the namespace (three clusters, two submitters, a stranger) it selects the head and the
    # workers the operator made for `owner`, and nothing else: not the submitter, not another cluster's pods
    selected = {p.name for p in reconciled.namespace_pods if selects(selector, p.labels)}
    assert selected == {pods.head.name, *(w.name for w in pods.workers)}
    # AND the API server's own label selector agrees with netpol.selects
    listed: Any = client.CoreV1Api(api).list_namespaced_pod(NS, label_selector=_label_selector(selector))
    assert {p.metadata.name for p in listed.items} == selected


@pytest.mark.parametrize("network", ["efa", "tcp"])
def test_the_job_runs_its_pods_reach_each_other_on_every_port(reconciled: Reconciled, network: str):
    pods = reconciled.jobs[network]
    # the job's own traffic passes: workers to the GCS, head and workers to each other on any port
    for port in (GCS, DASHBOARD, CLIENT, RAYLET, OBJECT_MANAGER, NCCL):
        for worker in pods.workers:
            assert admitted(reconciled.policies, worker, pods.head, port), (worker.name, port)
            assert admitted(reconciled.policies, pods.head, worker, port), (worker.name, port)
            for other in pods.workers:
                assert admitted(reconciled.policies, worker, other, port), (worker.name, other.name, port)


@pytest.mark.parametrize("network", ["efa", "tcp"])
def test_the_submitter_and_the_operator_reach_only_the_dashboard(reconciled: Reconciled, network: str):
    pods, policies, operator = reconciled.jobs[network], reconciled.policies, reconciled.operator
    assert pods.submitter is not None
    assert admitted(policies, pods.submitter, pods.head, DASHBOARD)
    assert admitted(policies, operator, pods.head, DASHBOARD)
    for port in (GCS, CLIENT, RAYLET):
        assert not admitted(policies, pods.submitter, pods.head, port), port
        assert not admitted(policies, operator, pods.head, port), port


def test_nobody_else_gets_in(reconciled: Reconciled):
    efa, tcp, standing = reconciled.jobs["efa"], reconciled.jobs["tcp"], reconciled.raycluster
    strangers = {
        **reconciled.strangers,
        "the TCP job's head": tcp.head,
        "the TCP job's submitter": tcp.submitter,
        "the standing RayCluster's worker": standing.workers[0],
    }
    for who, source in strangers.items():
        assert source is not None
        for target in (efa.head, *efa.workers):
            for port in (GCS, DASHBOARD, CLIENT, RAYLET):
                assert not admitted(reconciled.policies, source, target, port), (who, target.name, port)


def test_the_standing_raycluster_admits_its_own_pods_and_the_operator_only(reconciled: Reconciled):
    pods, policies = reconciled.raycluster, reconciled.policies
    for worker in pods.workers:
        assert admitted(policies, worker, pods.head, GCS)
    assert admitted(policies, reconciled.operator, pods.head, DASHBOARD)
    # no RayJob submits to it through a submitter pod: a job's submitter is not let in
    efa_submitter = reconciled.jobs["efa"].submitter
    assert efa_submitter is not None
    assert not admitted(policies, efa_submitter, pods.head, DASHBOARD)


@pytest.mark.parametrize("owner", ["ray-efa", "train-efa", "train-tcp"])
def test_the_ray_pods_reach_dns_s3_pypi_and_the_pod_identity_agent(reconciled: Reconciled, owner: str):
    pods = reconciled.raycluster if owner == "ray-efa" else reconciled.jobs[owner.removeprefix("train-")]
    # the Ray pods' own egress: names resolved by CoreDNS, checkpoints to S3, the init container's packages from PyPI,
    # S3 credentials from the Pod Identity agent. A policy that lists Egress in its policyTypes without rules for these
    # (on EKS: every one of them refused) fails here.
    needed = [
        (53, "UDP", reconciled.dns),
        (53, "TCP", reconciled.dns),
        (443, "TCP", S3),
        (443, "TCP", PYPI),
        (80, "TCP", POD_IDENTITY_AGENT),
    ]
    connections = [
        Connection(pod, to, port, protocol) for pod in (pods.head, *pods.workers) for port, protocol, to in needed
    ]
    verdicts = allowed(reconciled.policies, connections)
    refused = [
        (c.source.name, c.destination, c.port, c.protocol)
        for c, ok in zip(connections, verdicts, strict=True)
        if not ok and isinstance(c.source, Pod)
    ]
    assert refused == [], refused


def test_from_outside_the_cluster_nothing_gets_in(reconciled: Reconciled):
    efa = reconciled.jobs["efa"]
    connections = [
        Connection(LAPTOP, target, port)
        for target in (efa.head, *efa.workers)
        for port in (GCS, DASHBOARD, CLIENT, RAYLET, OBJECT_MANAGER)
    ]
    assert not any(allowed(reconciled.policies, connections))
