"""A deployed ray-efa cluster as real objects on the control plane, for the cluster-facing commands (verify,
deploy-check, submit, follow) to read: what the recordings of tests/ops once held, now made by the real controllers.

- Nodes: one system node and the GPU node group, shaped as recorded EKS nodes (tests/cluster/conftest.py's Nodes),
  labelled and tainted as core.scheduling says the node groups are.
- kube-system: the device-plugin DaemonSets named after their Helm releases (core.addons), selecting the GPU nodes as
  the charts do, plus the NVIDIA chart's MPS control daemon (desired 0 by design), and the VPC CNI's aws-node with the
  network-policy agent's args; kuberay-system: the operator's Deployment. Their pods are pause containers: the real
  DaemonSet and Deployment controllers create them, the scheduler places them, KWOK reports them Ready, and the
  controllers count them into the status that verify reads.
- The training RayJob of the settings (k8s.objects.ray_job_objects: the objects the stacks' chart wraps, built
  without cdk8s), which the real KubeRay operator reconciles into a RayCluster and pods.

What the operator binary here (v1.5.0, the newest the Go proxy serves) cannot do for the deployed chart's 1.7.0:
inject Ray token auth. `token_auth=True` puts on the head's template the env a 1.7.0 operator puts on the head pod
(RAY_AUTH_MODE=token, common/pod.go SetContainerTokenAuthEnvVars) and sets the RayCluster's spec.authOptions, which a
1.7.0 operator copies from the RayJob (v1.5.0's types drop the field). In a clone alone, where the API server serves
v1.5.0's CRDs, that schema prunes spec.authOptions: the head's env stays (what `ray-efa dashboard` reads), and
verify's token check of a kuberayVersion 1.4.0 deployment (conftest.served_kuberay) says "off, as planned".
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from ray_efa.core import catalog
from ray_efa.core.scheduling import GPU_TAINT, SYSTEM_NODE_LABELS, gpu_node_labels
from ray_efa.core.settings import Settings
from ray_efa.k8s.objects import ray_job_objects
from tests.cluster.conftest import Nodes, wait_for
from tests.cluster.controlplane import ControlPlane
from tests.cluster.objects import meta_of, name_of, namespace_of, status_of

PAUSE = "registry.k8s.io/pause:3.10"
POLICY_AGENT_ARGS = [
    "--enable-ipv6=false",
    "--enable-network-policy=true",
    "--enable-cloudwatch-logs=false",
    "--enable-policy-event-logs=false",
    "--metrics-bind-addr=:8162",
    "--health-probe-bind-addr=:8163",
]
"""The aws-eks-nodeagent container's args as the vpc-cni add-on sets them with enableNetworkPolicy on."""


def _pod_spec(containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"containers": containers, "terminationGracePeriodSeconds": 0, **spec}


def _container(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": PAUSE, **extra}


def daemon_set(
    name: str,
    namespace: str,
    *,
    node_selector: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A DaemonSet as a chart makes it: tolerating every taint (the plugins tolerate the GPU taint)."""
    match = {"app.kubernetes.io/name": name, **(labels or {})}
    spec = _pod_spec(
        containers or [_container(name)],
        tolerations=[{"operator": "Exists"}],
        **({"nodeSelector": node_selector} if node_selector else {}),
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": match},
        "spec": {"selector": {"matchLabels": match}, "template": {"metadata": {"labels": match}, "spec": spec}},
    }


def cluster_addons(settings: Settings) -> list[dict[str, Any]]:
    """The device plugins, the VPC CNI's aws-node and the KubeRay operator, as the cluster stack installs them."""
    gpu = gpu_node_labels(settings.nodes.gpu_node_selector)
    shared = {"app.kubernetes.io/instance": "nvidia-device-plugin"}  # the NVIDIA chart labels both alike
    return [
        daemon_set(
            "nvidia-device-plugin",
            "kube-system",
            labels=shared,
            node_selector={"nvidia.com/gpu.present": gpu["nvidia.com/gpu.present"]},
        ),
        # the chart's MPS control daemon: selects nodes labelled for MPS, of which there are none (desired 0)
        daemon_set(
            "nvidia-device-plugin-mps-control-daemon",
            "kube-system",
            labels=shared,
            node_selector={"nvidia.com/mps.capable": "true"},
        ),
        # the EFA chart selects by its instance-type allowlist
        daemon_set(
            "aws-efa-k8s-device-plugin",
            "kube-system",
            node_selector={"node.kubernetes.io/instance-type": settings.nodes.gpu_instance.name},
        ),
        daemon_set(
            "aws-node",
            "kube-system",
            containers=[_container("aws-node"), _container("aws-eks-nodeagent", args=list(POLICY_AGENT_ARGS))],
        ),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kuberay-system"}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "kuberay-operator", "namespace": "kuberay-system"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app.kubernetes.io/name": "kuberay-operator"}},
                "template": {
                    "metadata": {"labels": {"app.kubernetes.io/name": "kuberay-operator"}},
                    "spec": _pod_spec(
                        [_container("kuberay-operator")], nodeSelector=dict(settings.nodes.system_node_selector)
                    ),
                },
            },
        },
    ]


def training_job(settings: Settings, *, token_auth: bool = True, driver_runs: bool = True) -> list[dict[str, Any]]:
    """The settings' training RayJob with its NetworkPolicy and ConfigMaps, as the stacks apply them.

    `driver_runs`: the submitter's pod keeps running (stages.yaml, pod-keeps-running), as it does while the driver
    trains; else KWOK completes it at once and the operator, which finds no Ray job behind it, fails the RayJob 30 s
    later ("the ray job did not reach terminal state within 30s").

    The objects are k8s.objects.ray_job_objects', which the chart the stacks apply wraps unchanged
    (tests/k8s/test_charts.py): no cdk8s synth here."""
    objects = copy.deepcopy(ray_job_objects(settings))
    if driver_runs:
        job = next(o for o in objects if o["kind"] == "RayJob")
        job["spec"]["submitterPodTemplate"]["metadata"]["labels"]["ray-efa.test/keeps-running"] = "true"
    if token_auth:
        job = next(o for o in objects if o["kind"] == "RayJob")
        head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        head["env"] = [*head.get("env", []), {"name": "RAY_AUTH_MODE", "value": "token"}]
    return objects


def ray_job_cluster(api: ApiClient, namespace: str, job: str, *, timeout_s: float = 60) -> str:
    """The RayCluster the operator made for RayJob `job`, once it exists. The operator names it in the RayJob's
    status.rayClusterName one reconcile before it creates it (v1.5.0 rayjob_controller.go: initRayJobStatusIfNeed in
    state New, getOrCreateRayClusterInstance in Initializing), so a read or patch of the named RayCluster can be a 404
    for a moment."""
    objects = client.CustomObjectsApi(api)
    name = wait_for(
        lambda: (
            objects.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", job).get("status") or {}
        ).get("rayClusterName"),
        f"RayJob {namespace}/{job}'s RayCluster",
        timeout_s=timeout_s,
    )
    wait_for(
        lambda: exists(lambda: objects.get_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", name)),
        f"RayCluster {namespace}/{name} created",
        timeout_s=timeout_s,
    )
    return name


def ray_cluster_ready(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The RayCluster once ready as verify judges it (ops.verify.ray_cluster_ready); else fails with its status and
    its pods' phases and conditions."""
    from ray_efa.ops.verify import ray_cluster_ready as judged

    objects = client.CustomObjectsApi(api)

    def ready() -> dict[str, Any] | None:
        cluster = objects.get_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", name)
        return cluster if judged(cluster)[0] else None

    try:
        return wait_for(ready, f"RayCluster {namespace}/{name} ready", timeout_s=90)
    except pytest.fail.Exception as error:
        cluster = objects.get_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", name)
        pods = {
            name_of(p): (status_of(p).phase, [(c.type, c.status, c.message) for c in status_of(p).conditions or []])
            for p in client.CoreV1Api(api).list_namespaced_pod(namespace).items
        }
        raise AssertionError(f"{error}\nstatus: {cluster.get('status')}\npods: {pods}") from None


def set_auth_options(api: ApiClient, namespace: str, cluster: str) -> None:
    """What a 1.7.0 operator copies from the RayJob into the RayCluster it creates (see the module docstring)."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        "ray.io", "v1", namespace, "rayclusters", cluster, {"spec": {"authOptions": {"mode": "token"}}}
    )


def daemon_set_settled(
    api: ApiClient, name: str, namespace: str = "kube-system", desired: int | None = None
) -> client.V1DaemonSet:
    """The DaemonSet once its controller has counted every pod it wants as ready (and wants `desired`, if given)."""
    apps = client.AppsV1Api(api)

    def settled() -> client.V1DaemonSet | None:
        ds = apps.read_namespaced_daemon_set(name, namespace)
        s = status_of(ds)
        if (s.observed_generation or 0) < (meta_of(ds).generation or 0):
            return None
        if desired is not None and (s.desired_number_scheduled or 0) != desired:
            return None
        return ds if (s.number_ready or 0) == (s.desired_number_scheduled or 0) else None

    return wait_for(settled, f"DaemonSet {namespace}/{name} settled", timeout_s=60)


def set_pod_ready(api: ApiClient, pod: client.V1Pod, ready: bool) -> None:
    """The kubelet's readiness report for one pod (its Ready and ContainersReady conditions), as a failing readiness
    probe makes it; the controllers that own the pod count it again."""
    status = "True" if ready else "False"
    conditions = [
        {"type": c.type, "status": status if c.type in ("Ready", "ContainersReady") else c.status}
        for c in status_of(pod).conditions or []
    ]
    statuses = [
        {
            "name": c.name,
            "ready": ready,
            "image": c.image,
            "imageID": c.image_id or "",
            "restartCount": c.restart_count,
            "state": {"running": {"startedAt": _started_at(c)}},
        }
        for c in status_of(pod).container_statuses or []
    ]
    body: dict[str, Any] = {"status": {"conditions": conditions}}
    if statuses:
        body["status"]["containerStatuses"] = statuses
    client.CoreV1Api(api).patch_namespaced_pod_status(name_of(pod), namespace_of(pod), body)


def _started_at(container: client.V1ContainerStatus) -> datetime:
    """When the running container started (set_pod_ready's pods run)."""
    running = container.state.running if container.state else None
    assert running is not None and running.started_at is not None, f"container {container.name} is not running"
    return running.started_at


@dataclass
class Deployment:
    """The nodes, the add-ons and the training job of `settings` on the control plane; `remove()` takes them away."""

    plane: ControlPlane
    api: ApiClient
    settings: Settings
    nodes: Nodes
    system_nodes: list[str] = field(default_factory=list)
    gpu_nodes: list[str] = field(default_factory=list)
    ray_cluster: str = ""
    undo: list[Callable[[], None]] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return self.settings.workload.namespace

    @classmethod
    def up(
        cls, plane: ControlPlane, api: ApiClient, settings: Settings, *, job: bool = True, token_auth: bool = True
    ) -> Deployment:
        made = cls(plane, api, settings, Nodes(api))
        made.system_nodes = made.nodes.add(
            settings.nodes.system_instance, 1, labels=dict(SYSTEM_NODE_LABELS), prefix="sys-", nodegroup="systemnodes"
        )
        made.gpu_nodes = made.nodes.add(
            settings.nodes.gpu_instance,
            settings.nodes.gpu_node_count,
            labels=gpu_node_labels(settings.nodes.gpu_node_selector),
            taints=[{"key": GPU_TAINT.key, "value": GPU_TAINT.value, "effect": GPU_TAINT.effect}],
            prefix="gpu-",
            nodegroup="gpunodes",
        )
        plane.apply(cluster_addons(settings))
        for name in ("nvidia-device-plugin", "aws-efa-k8s-device-plugin", "aws-node"):
            daemon_set_settled(api, name)
        operator = client.AppsV1Api(api).read_namespaced_deployment
        wait_for(
            lambda: (status_of(operator("kuberay-operator", "kuberay-system")).available_replicas or 0) >= 1,
            "Deployment kuberay-system/kuberay-operator Available",
        )
        if job:
            made.run_job(token_auth=token_auth)
        return made

    def run_job(self, *, token_auth: bool = True) -> None:
        core = client.CoreV1Api(self.api)
        wait_for(
            lambda: not exists(lambda: core.read_namespace(self.namespace)),
            f"namespace {self.namespace} gone (an earlier test's)",
            timeout_s=90,
        )
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace)))
        # the Ray pods' service account as the cluster stack creates it (for Pod Identity) before any job: a job that
        # names another one gets no pods (the API server's ServiceAccount admission refuses them)
        self.plane.apply([stack_service_account(self.settings)])
        job = ray_job_name(self.settings)
        objects = training_job(self.settings, token_auth=token_auth)
        self.plane.apply([o for o in objects if o["kind"] != "RayJob"])
        self.plane.apply([o for o in objects if o["kind"] == "RayJob"])
        self.ray_cluster = ray_job_cluster(self.api, self.namespace, job)
        if token_auth:
            set_auth_options(self.api, self.namespace, self.ray_cluster)
        ray_cluster_ready(self.api, self.namespace, self.ray_cluster)

    def pods(self, selector: str, namespace: str | None = None) -> list[client.V1Pod]:
        return (
            client.CoreV1Api(self.api).list_namespaced_pod(namespace or self.namespace, label_selector=selector).items
        )

    def remove(self) -> None:
        core = client.CoreV1Api(self.api)
        apps = client.AppsV1Api(self.api)
        if exists(lambda: core.read_namespace(self.namespace)):
            core.delete_namespace(self.namespace)
        for obj in cluster_addons(self.settings):
            if obj["kind"] == "DaemonSet":
                _delete(lambda o=obj: apps.delete_namespaced_daemon_set(o["metadata"]["name"], "kube-system"))
        _delete(lambda: apps.delete_namespaced_deployment("kuberay-operator", "kuberay-system"))
        self.nodes.remove_all()


POD_ROLE_ARN = "arn:aws:iam::123456789012:role/ray-efa-pods"
"""The stand-in for the ARN of the checkpoint bucket's role, which the stack's ServiceAccount names (a deploy-time
token in the template)."""


def stack_service_account(settings: Settings) -> dict[str, Any]:
    """The Ray pods' ServiceAccount as the cluster stack applies it for `settings` (infra.checkpoints'
    add_service_account: aws_eks_v2's manifest, its name, namespace, name label and role annotation), built here
    without a CDK synth of both stacks (about 20 s a settings on 2 cores). tests/cluster/test_workload.py proves it is
    the synthesized stack's, less the label aws_eks_v2's kubectl handler prunes by."""
    name = settings.workload.service_account
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": name,
            "namespace": settings.workload.namespace,
            "labels": {"app.kubernetes.io/name": name},
            "annotations": {"eks.amazonaws.com/role-arn": POD_ROLE_ARN},
        },
    }


def service_account(settings: Settings) -> str:
    job = next(o for o in training_job(settings, token_auth=False) if o["kind"] == "RayJob")
    return job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"]


def ray_job_name(settings: Settings) -> str:
    from ray_efa.k8s.names import ray_job_of

    return ray_job_of(settings)


def exists(read: Callable[[], Any]) -> bool:
    """Whether `read()` finds its object (a 404 says it is gone; any other refusal is raised)."""
    try:
        read()
        return True
    except ApiException as error:
        if error.status == 404:
            return False
        raise


def _delete(call: Callable[[], Any]) -> None:
    try:
        call()
    except ApiException as error:
        if error.status != 404:
            raise


def kubeconfig_with_context(plane: ControlPlane, folder: Path, context: str = "research") -> Path:
    """The plane's admin kubeconfig with its context named `context` and the current context pointing nowhere, so
    only `--kube-context context` reaches the API server (as a user with several clusters has it)."""
    import json

    document = json.loads(plane.kubeconfig.read_text())
    document["clusters"].append({"name": "none", "cluster": {"server": "https://127.0.0.1:9"}})
    document["contexts"] = [
        {"name": context, "context": {"cluster": "test", "user": "admin"}},
        {"name": "elsewhere", "context": {"cluster": "none", "user": "admin"}},
    ]
    document["current-context"] = "elsewhere"
    path = folder / "kubeconfig"
    path.write_text(json.dumps(document))
    return path


def instance(name: str) -> catalog.InstanceType:
    return catalog.GPU_INSTANCES.get(name) or catalog.SYSTEM_INSTANCES[name]
