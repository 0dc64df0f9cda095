"""After `cdk deploy`: does the cluster match the plan? Every check runs, each names what it found and what it expected.

- GPU nodes Ready: the nodes labelled like the GPU node group (core.scheduling) that are Ready, against gpuNodeCount;
- GPU node health: no GPU node has a condition of the EKS node monitoring agent (AcceleratedHardwareReady,
  NetworkingReady, KernelReady, ContainerRuntimeReady, StorageReady) False, naming each node and fault;
- GPU and EFA allocatable: every GPU node offers nvidia.com/gpu and vpc.amazonaws.com/efa equal to the instance
  catalog (what the worker pods request). A missing EFA resource means the EFA device plugin is not running there;
- with deviceAllocation dra instead: every GPU node's ResourceSlices hold as many devices of the NVIDIA DRA driver
  (gpu.nvidia.com) and of the EFA DRA driver (dra.net) as the catalog says, and both drivers' node DaemonSets are ready;
- both device-plugin DaemonSets ready == desired > 0. Both charts schedule by node selection (the NVIDIA one by the
  nvidia.com/gpu.present label, the EFA one by its instance-type allowlist) and fail silently with DESIRED 0: the
  DaemonSet exists, is "healthy", and no node ever gets the resource;
- the KubeRay operator Deployment is Available;
- the RayCluster is ready: the long-lived one (k8s.names.RAY_CLUSTER_NAME) when applied, else the one the training
  RayJob created (its status.rayClusterName);
- no init container of that cluster's Ray pods failed (the code fetch, the packages' install): one that did leaves a
  RayJob Initializing until a deadline (KubeRay issue 4637); the check names the pod, the container, its exit code and
  its last log lines, and `--wait` stops at once on it;
- Ray token auth is active on that cluster (its spec asks for it and KubeRay injected RAY_AUTH_MODE=token into the
  head), where the settings' KubeRay supports it;
- network policies are enforced (the VPC CNI's aws-node pods run the policy agent with --enable-network-policy=true)
  and the NetworkPolicy of the live Ray object exists.

The workloads are found by the Helm release names infra installs (core.addons): each chart names its DaemonSet or
Deployment after its release. Reads go through a kubernetes ApiClient passed in; nothing is written to the cluster.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ray_efa.core import catalog
from ray_efa.core.addons import (
    EFA_DEVICE_PLUGIN,
    EFA_DRA_DRIVER,
    KUBERAY_OPERATOR,
    NODE_HEALTH_CONDITIONS,
    NODE_MONITORING_AGENT_ADDON,
    NVIDIA_DEVICE_PLUGIN,
    NVIDIA_DRA_DRIVER,
    HelmRelease,
)
from ray_efa.core.scheduling import label_selector
from ray_efa.core.settings import Settings
from ray_efa.k8s.names import RAY_CLUSTER_NAME, ray_job_of
from ray_efa.k8s.security import AUTH_MODE_ENV, network_policy_name, token_auth
from ray_efa.ops._status import Status, quiet
from ray_efa.ops.init_failures import (
    InitContainerFailure,
    describe_failures,
    init_container_failures,
    job_pods_selector,
)

if TYPE_CHECKING:
    from rich.console import Console

# The kubernetes client ships no type annotations: its models (V1Node, V1Pod, V1DaemonSet, V1Deployment) and its
# ApiClient (whose inferred sanitize_for_serialization type is not the dict it returns here) are typed Any; custom
# objects and sanitized objects are JSON dicts (dict[str, Any]).

__all__ = [
    "GPU_RESOURCE",
    "EFA_RESOURCE",
    "Expectations",
    "Check",
    "VerifyReport",
    "verify_cluster",
    "verify_until",
    "render_verify",
    "check_init_containers",
    "INIT_CONTAINERS_CHECK",
]

GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
RAY_GROUP, RAY_VERSION = "ray.io", "v1"
VPC_CNI_DAEMON_SET, POLICY_AGENT_CONTAINER = ("kube-system", "aws-node"), "aws-eks-nodeagent"
"""Where the VPC CNI runs its network policy agent (EKS user guide, cni-network-policy-configure)."""
POLICY_AGENT_FLAG = "--enable-network-policy=true"

DRA_DRIVER_NAMES = {"gpu": "gpu.nvidia.com", "efa": "dra.net"}
"""The `spec.driver` of the ResourceSlices each DRA driver publishes (EKS User Guide: DRANET's driver is dra.net; the
NVIDIA DRA driver publishes GPUs as gpu.nvidia.com, its DeviceClass's name)."""
DRA_DAEMON_SETS = {
    NVIDIA_DRA_DRIVER.release: f"{NVIDIA_DRA_DRIVER.chart}-kubelet-plugin",
    EFA_DRA_DRIVER.release: EFA_DRA_DRIVER.release,
}
"""The node DaemonSet of each DRA driver's chart (dra-driver-nvidia-gpu templates/kubeletplugin.yaml names it
<chart>-kubelet-plugin; aws-dranet names it after the release)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Expectations:
    """What a healthy deployment of the settings looks like, from the settings and the instance catalog."""

    gpu_nodes: int
    instance_type: str
    gpus_per_node: int
    efa_per_node: int
    gpu_node_selector: str
    """Label selector of the GPU node group, e.g. role=gpu-worker."""
    device_plugins: tuple[HelmRelease, ...]
    operator: HelmRelease
    namespace: str
    ray_cluster: str
    ray_job: str
    token_auth: bool = True
    """Whether the Ray cluster should require a token (k8s.security.token_auth of the settings)."""
    token_auth_reason: str = ""
    device_allocation: str = "device-plugin"
    """device-plugin (extended resources) or dra (ResourceSlices of the DRA drivers)."""

    @property
    def daemon_set_names(self) -> dict[str, str]:
        """Release -> the name of the node DaemonSet it runs."""
        return {
            release.release: DRA_DAEMON_SETS.get(release.release, release.release) for release in self.device_plugins
        }

    @property
    def scaled_to_zero(self) -> bool:
        """gpuNodeCount 0: no GPU node, device-plugin pod or Ray cluster is expected; only the cluster side is."""
        return self.gpu_nodes == 0

    @classmethod
    def from_settings(cls, settings: Settings) -> Expectations:
        instance = settings.nodes.gpu_instance
        auth = token_auth(settings)
        return cls(
            gpu_nodes=settings.nodes.gpu_node_count,
            instance_type=instance.name,
            gpus_per_node=instance.gpus,
            efa_per_node=catalog.worker_pod_resources(instance).efa,
            gpu_node_selector=label_selector(settings.nodes.gpu_node_selector),
            device_plugins=(
                (NVIDIA_DRA_DRIVER, EFA_DRA_DRIVER)
                if settings.addons.device_allocation == "dra"
                else (NVIDIA_DEVICE_PLUGIN, EFA_DEVICE_PLUGIN)
            ),
            device_allocation=settings.addons.device_allocation,
            operator=KUBERAY_OPERATOR,
            namespace=settings.workload.namespace,
            ray_cluster=RAY_CLUSTER_NAME,
            ray_job=ray_job_of(settings),
            token_auth=auth.enabled,
            token_auth_reason=auth.reason,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Check:
    """One verified property of the cluster."""

    id: str
    """Stable identifier (gpu-nodes, gpu-allocatable, efa-allocatable, the release names, raycluster)."""
    name: str
    ok: bool
    detail: str
    """What was found, and on failure what was expected and where to look."""


@dataclass(frozen=True, kw_only=True, slots=True)
class VerifyReport:
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.ok)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "failed": [c.id for c in self.failed],
            "checks": [{"id": c.id, "name": c.name, "ok": c.ok, "detail": c.detail} for c in self.checks],
        }


# -- the checks (pure functions of API objects) ---------------------------------------------------------------------


def _is_ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


def _allocatable(node: Any, resource: str) -> int | None:
    value = (node.status.allocatable or {}).get(resource)
    return None if value is None else int(value)  # extended resources are whole numbers


def check_gpu_nodes(nodes: list[Any], expected: Expectations) -> Check:
    ready = [n.metadata.name for n in nodes if _is_ready(n)]
    not_ready = [n.metadata.name for n in nodes if not _is_ready(n)]
    ok = len(ready) == expected.gpu_nodes
    detail = (
        f"{len(ready)} Ready of {len(nodes)} nodes labelled {expected.gpu_node_selector}, expected {expected.gpu_nodes}"
    )
    if not_ready:
        detail += f"; not Ready: {', '.join(not_ready)}"
    if not nodes:
        detail += " (is the GPU stack deployed, and did its nodes join?)"
    return Check(id="gpu-nodes", name="GPU nodes Ready", ok=ok, detail=detail)


def check_node_health(nodes: list[Any]) -> Check:
    """The GPU nodes' health as the EKS node monitoring agent reports it: a condition of NODE_HEALTH_CONDITIONS that
    is False is a fault (a GPU's XID error, a network interface down, ...) that node auto repair reboots or replaces
    the node for, after 10 (GPU) or 30 minutes; the job's pods on it fail until then."""
    name = "GPU node health (EKS node monitoring agent)"
    faults = []
    reported = 0
    for node in nodes:
        conditions = {c.type: c for c in (node.status.conditions or []) if c.type in NODE_HEALTH_CONDITIONS}
        reported += bool(conditions)
        for kind in NODE_HEALTH_CONDITIONS:
            condition = conditions.get(kind)
            if condition is not None and condition.status == "False":
                why = " ".join(x for x in (condition.reason or "", condition.message or "") if x)
                faults.append(f"{node.metadata.name} {kind}=False" + (f" ({why[:200]})" if why else ""))
    if faults:
        return Check(
            id="node-health",
            name=name,
            ok=False,
            detail=(
                "unhealthy: "
                + "; ".join(faults)
                + ". With nodeRepair on, EKS reboots or replaces the node (GPU faults "
                "after 10 min, others after 30); the job restarts from its last checkpoint on the new node "
                "(docs/node-health.md)"
            ),
        )
    if not nodes:
        return Check(id="node-health", name=name, ok=True, detail="no GPU node to check")
    if not reported:
        return Check(
            id="node-health",
            name=name,
            ok=True,
            detail=(
                f"no condition of the agent on {len(nodes)} GPU nodes: is the {NODE_MONITORING_AGENT_ADDON} add-on "
                "installed (nodeMonitoringAgent)?"
            ),
        )
    return Check(
        id="node-health",
        name=name,
        ok=True,
        detail=f"{len(nodes)} GPU nodes healthy ({', '.join(NODE_HEALTH_CONDITIONS)} not False)",
    )


_SCALED_TO_ZERO = "gpuNodeCount is 0 (the GPU node group scaled to zero)"


def check_allocatable(
    nodes: list[Any], *, resource: str, want: int, check_id: str, provider: str, scaled_to_zero: bool = False
) -> Check:
    name = f"allocatable {resource}"
    if not nodes and scaled_to_zero:
        return Check(id=check_id, name=name, ok=True, detail=f"no GPU node to check: {_SCALED_TO_ZERO}")
    if not nodes:
        return Check(id=check_id, name=name, ok=False, detail="no GPU nodes to check")
    wrong = {n.metadata.name: _allocatable(n, resource) for n in nodes if _allocatable(n, resource) != want}
    if not wrong:
        return Check(id=check_id, name=name, ok=True, detail=f"{want} on each of {len(nodes)} GPU nodes")
    found = ", ".join(f"{node}: {'missing' if have is None else have}" for node, have in sorted(wrong.items()))
    return Check(
        id=check_id,
        name=name,
        ok=False,
        detail=f"expected {want} per node; {found} (is the {provider} DaemonSet running on that node?)",
    )


def check_resource_slices(
    nodes: list[Any],
    slices: list[dict[str, Any]],
    *,
    kind: str,
    want: int,
    check_id: str,
    provider: str,
    scaled_to_zero: bool = False,
) -> Check:
    """deviceAllocation dra: every GPU node has `want` devices of the DRA driver of `kind` (gpu, efa) in its
    ResourceSlices (resource.k8s.io/v1, spec.nodeName and spec.devices), where the device plugins' nodes would have
    allocatable extended resources."""
    driver = DRA_DRIVER_NAMES[kind]
    name = f"DRA devices {driver}"
    if not nodes:
        return Check(
            id=check_id,
            name=name,
            ok=scaled_to_zero,
            detail=f"no GPU node to check: {_SCALED_TO_ZERO}" if scaled_to_zero else "no GPU nodes to check",
        )
    counts: dict[str, int] = {}
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("driver") == driver and spec.get("nodeName"):
            counts[spec["nodeName"]] = counts.get(spec["nodeName"], 0) + len(spec.get("devices") or [])
    wrong = {n.metadata.name: counts.get(n.metadata.name, 0) for n in nodes if counts.get(n.metadata.name, 0) != want}
    if not wrong:
        return Check(id=check_id, name=name, ok=True, detail=f"{want} on each of {len(nodes)} GPU nodes")
    found = ", ".join(f"{node}: {have}" for node, have in sorted(wrong.items()))
    return Check(
        id=check_id,
        name=name,
        ok=False,
        detail=(
            f"expected {want} per node in ResourceSlices of driver {driver}; {found} (is the {provider} DaemonSet running "
            f"on that node? kubectl get resourceslices --field-selector spec.driver={driver})"
        ),
    )


_ZERO_DESIRED_HINT = {
    NVIDIA_DEVICE_PLUGIN.release: "its affinity needs the node label nvidia.com/gpu.present=true and a toleration of the GPU taint",
    EFA_DEVICE_PLUGIN.release: "its chart schedules only on the instance types in supportedInstanceLabels.values "
    "and tolerates only CriticalAddonsOnly unless tolerations are set",
    NVIDIA_DRA_DRIVER.release: "its kubelet plugin's affinity needs the node label nvidia.com/gpu.present=true and its "
    "nodeSelector the GPU nodes' labels",
    EFA_DRA_DRIVER.release: "its chart schedules only on the instance types in supportedInstanceLabels.values and "
    "tolerates only CriticalAddonsOnly unless tolerations are set",
}


def check_daemon_set(
    daemon_set: Any, release: HelmRelease, *, scaled_to_zero: bool = False, name: str | None = None
) -> Check:
    daemon_set_name = name or DRA_DAEMON_SETS.get(release.release, release.release)
    name = f"DaemonSet {release.namespace}/{daemon_set_name}"
    if daemon_set is None:
        return Check(
            id=release.release,
            name=name,
            ok=False,
            detail=f"not found: is the Helm release {release.release} installed in {release.namespace}?",
        )
    s = daemon_set.status
    desired, ready = s.desired_number_scheduled or 0, s.number_ready or 0
    if desired == 0 and scaled_to_zero:
        return Check(id=release.release, name=name, ok=True, detail=f"desired 0, as planned: {_SCALED_TO_ZERO}")
    if desired == 0:
        hint = _ZERO_DESIRED_HINT.get(release.release, "check its nodeSelector, affinity and tolerations")
        return Check(
            id=release.release,
            name=name,
            ok=False,
            detail=(
                "desired 0: the DaemonSet schedules on no node, the silent failure (no error anywhere, and no node gets "
                f"the device resource); {hint}"
            ),
        )
    if ready != desired:
        return Check(
            id=release.release,
            name=name,
            ok=False,
            detail=f"{ready} of {desired} pods ready (kubectl -n {release.namespace} describe ds {daemon_set_name})",
        )
    return Check(id=release.release, name=name, ok=True, detail=f"{ready} of {desired} pods ready")


def check_deployment_available(deployment: Any, release: HelmRelease) -> Check:
    name = f"Deployment {release.namespace}/{release.release}"
    if deployment is None:
        return Check(
            id=release.release,
            name=name,
            ok=False,
            detail=f"not found: is the Helm release {release.release} installed in {release.namespace}?",
        )
    available = next((c for c in (deployment.status.conditions or []) if c.type == "Available"), None)
    replicas = f"{deployment.status.available_replicas or 0} of {deployment.spec.replicas} replicas available"
    if available is None or available.status != "True":
        why = f": {available.reason}, {available.message}" if available is not None else ": no Available condition yet"
        return Check(id=release.release, name=name, ok=False, detail=f"not Available{why} ({replicas})")
    return Check(id=release.release, name=name, ok=True, detail=f"Available ({replicas})")


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c.get("type"): c.get("status") for c in obj.get("status", {}).get("conditions", []) or []}


def ray_cluster_ready(cluster: dict[str, Any]) -> tuple[bool, str]:
    """(ready, description) of a RayCluster custom object.

    KubeRay sets status.state "ready" once the head and every worker are running; newer operators also set the
    conditions HeadPodReady and RayClusterProvisioned, and some stop updating state. Either form counts.
    """
    status = cluster.get("status", {}) or {}
    state = status.get("state")
    conditions = _conditions(cluster)
    ready = state == "ready" or (
        conditions.get("HeadPodReady") == "True" and conditions.get("RayClusterProvisioned") == "True"
    )
    desired = status.get("desiredWorkerReplicas")
    # KubeRay omits a zero count (its status fields are omitempty): no readyWorkerReplicas beside a desired count is 0
    workers = status.get("readyWorkerReplicas", 0 if desired is not None else None)
    if workers is not None and desired is not None and workers < desired:
        ready = False
    parts = [f"state {state or 'unset'}"]
    if conditions:
        parts.append(", ".join(f"{k}={v}" for k, v in sorted(conditions.items())))
    if desired is not None:
        parts.append(f"{workers or 0} of {desired} workers ready")
    return ready, "; ".join(parts)


def check_ray_cluster(cluster: dict[str, Any] | None, job: dict[str, Any] | None, expected: Expectations) -> Check:
    where = expected.namespace
    if cluster is None and expected.scaled_to_zero:
        return Check(
            id="raycluster",
            name=f"RayCluster in {where}",
            ok=True,
            detail=f"none, as planned: {_SCALED_TO_ZERO}, so no job is applied",
        )
    if cluster is None:
        if job is None:
            detail = (
                f"no RayCluster {where}/{expected.ray_cluster} and no RayJob {where}/{expected.ray_job}: "
                "nothing runs Ray (was the workload applied?)"
            )
        else:
            js = job.get("status", {}) or {}
            detail = (
                f"RayJob {where}/{expected.ray_job} has no live RayCluster (jobDeploymentStatus "
                f"{js.get('jobDeploymentStatus', 'unset')}, jobStatus {js.get('jobStatus', 'unset')}); a finished "
                "job deletes its cluster after jobTtlSecondsAfterFinished"
            )
        return Check(id="raycluster", name=f"RayCluster in {where}", ok=False, detail=detail)
    name = cluster["metadata"]["name"]
    ready, description = ray_cluster_ready(cluster)
    owner = f" (of RayJob {expected.ray_job})" if name != expected.ray_cluster else ""
    return Check(
        id="raycluster",
        name=f"RayCluster {where}/{name}{owner}",
        ok=ready,
        detail=description if ready else f"not ready: {description}",
    )


INIT_CONTAINERS_CHECK = "ray-init-containers"


def check_init_containers(failures: list[InitContainerFailure], owner: str, namespace: str) -> Check:
    """No init container of the Ray pods of `owner` (the RayCluster or RayJob) failed: the code fetch, the packages'
    install. One that did leaves the RayJob Initializing until a deadline (KubeRay issue 4637)."""
    name = f"init containers of {owner}'s Ray pods"
    if not failures:
        return Check(id=INIT_CONTAINERS_CHECK, name=name, ok=True, detail="none failed")
    return Check(
        id=INIT_CONTAINERS_CHECK,
        name=name,
        ok=False,
        detail=(
            f"{describe_failures(failures)}\nthe Ray cluster cannot start until this is fixed (kubectl -n {namespace} "
            f"get pods -l {job_pods_selector(owner)})"
        ),
    )


def check_token_auth(cluster: dict[str, Any] | None, head_pods: list[Any], expected: Expectations) -> Check:
    """Token auth asked for in the RayCluster's spec and applied by KubeRay to the head's Ray container."""
    name = "Ray token authentication"
    if not expected.token_auth:
        return Check(id="ray-token-auth", name=name, ok=True, detail=f"off, as planned: {expected.token_auth_reason}")
    if cluster is None and expected.scaled_to_zero:
        return Check(id="ray-token-auth", name=name, ok=True, detail=f"no Ray cluster to check: {_SCALED_TO_ZERO}")
    if cluster is None:
        return Check(id="ray-token-auth", name=name, ok=False, detail="no live RayCluster to check (see raycluster)")
    cluster_name = cluster["metadata"]["name"]
    mode = ((cluster.get("spec") or {}).get("authOptions") or {}).get("mode")
    if mode != "token":
        return Check(
            id="ray-token-auth",
            name=name,
            ok=False,
            detail=(
                f"RayCluster {cluster_name} has authOptions.mode {mode or 'unset'}, expected token (an operator whose CRD "
                "lacks authOptions prunes it: is the kuberay-operator chart the kuberayVersion of the settings?)"
            ),
        )
    if not head_pods:
        return Check(
            id="ray-token-auth",
            name=name,
            ok=False,
            detail=f"RayCluster {cluster_name} asks for a token, but its head pod was not found",
        )
    head = head_pods[0]
    ray_container = head.spec.containers[0]
    env = {e.name: e.value for e in (ray_container.env or [])}
    if env.get(AUTH_MODE_ENV) != "token":
        return Check(
            id="ray-token-auth",
            name=name,
            ok=False,
            detail=(
                f"head pod {head.metadata.name} runs without {AUTH_MODE_ENV}=token: the operator did not inject the "
                "token (was the pod created before the operator supported authOptions?)"
            ),
        )
    return Check(
        id="ray-token-auth",
        name=name,
        ok=True,
        detail=(
            f"RayCluster {cluster_name}: authOptions.mode token, head pod {head.metadata.name} has {AUTH_MODE_ENV}=token"
        ),
    )


def check_policy_enforcement(daemon_set: Any) -> Check:
    """The VPC CNI's aws-node pods run the network policy agent with enforcement on."""
    namespace, release = VPC_CNI_DAEMON_SET
    name = "network policies enforced"
    if daemon_set is None:
        return Check(
            id="network-policy-enforcement",
            name=name,
            ok=False,
            detail=f"DaemonSet {namespace}/{release} not found: this cluster does not run the VPC CNI",
        )
    agents = [c for c in daemon_set.spec.template.spec.containers if c.name == POLICY_AGENT_CONTAINER]
    if not agents or POLICY_AGENT_FLAG not in (agents[0].args or []):
        found = "no such container" if not agents else f"args {' '.join(agents[0].args or []) or '(none)'}"
        return Check(
            id="network-policy-enforcement",
            name=name,
            ok=False,
            detail=(
                f"{namespace}/{release} container {POLICY_AGENT_CONTAINER}: {found}, expected {POLICY_AGENT_FLAG}; "
                "NetworkPolicies are stored but not enforced (is the vpc-cni add-on configured with enableNetworkPolicy?)"
            ),
        )
    return Check(
        id="network-policy-enforcement",
        name=name,
        ok=True,
        detail=f"{namespace}/{release} runs {POLICY_AGENT_CONTAINER} with {POLICY_AGENT_FLAG}",
    )


def check_network_policy(
    policy: dict[str, Any] | None, policy_name: str, namespace: str, *, scaled_to_zero: bool = False
) -> Check:
    name = f"NetworkPolicy {namespace}/{policy_name}"
    if policy is None and scaled_to_zero:
        return Check(id="network-policy", name=name, ok=True, detail=f"none: no Ray pod to guard ({_SCALED_TO_ZERO})")
    if policy is None:
        return Check(
            id="network-policy",
            name=name,
            ok=False,
            detail=("not found: any pod in the cluster can reach the Ray pods (apply the manifests' NetworkPolicy)"),
        )
    peers = sum(len(rule.get("from") or []) for rule in (policy.get("spec") or {}).get("ingress") or [])
    return Check(
        id="network-policy", name=name, ok=True, detail=f"present: ingress to the Ray pods from {peers} peers only"
    )


# -- reading the cluster --------------------------------------------------------------------------------------------


def _api_failure(check_id: str, name: str, error: Exception) -> Check:
    status = getattr(error, "status", None)
    reason = getattr(error, "reason", None)
    text = (
        f"API error {status} {reason}"
        if status
        else f"cannot reach the Kubernetes API ({type(error).__name__}: {error})"
    )
    return Check(id=check_id, name=name, ok=False, detail=text)


def _read_or_none(read: Callable[[], Any]) -> Any:
    """The object, or None when the API answers 404."""
    from kubernetes.client.exceptions import ApiException

    try:
        return read()
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def verify_cluster(api_client: Any, expected: Expectations, *, status: Status = quiet) -> VerifyReport:
    """Run every check once. API errors fail the checks that needed the call; the others still run. An API server
    that cannot be reached, or refuses our credentials, on the first read raises that error (urllib3's, or an
    ApiException 401/403): a report of every check failing for one reason would hide the reason."""
    from kubernetes.client.exceptions import ApiException

    failures = (ApiException, OSError, _urllib3_error())
    checks = _node_checks(api_client, expected, failures, status)
    checks += _release_checks(api_client, expected, failures, status)
    ray_checks, cluster, cluster_error = _ray_cluster_checks(api_client, expected, failures, status)
    checks += ray_checks
    checks.extend(_security_checks(api_client, expected, cluster, cluster_error, failures, status))
    return VerifyReport(checks=tuple(checks))


def _node_checks(
    api_client: Any, expected: Expectations, failures: tuple[type[Exception], ...], status: Status
) -> list[Check]:
    """The GPU nodes: Ready, and their allocatable GPUs and EFA devices (device plugins' resources or DRA slices).
    The first read: an API server that cannot be reached raises."""
    from kubernetes import client

    checks: list[Check] = []
    status("reading the GPU nodes")
    try:
        # The generated API methods are typed as returning the object, or (object, status, headers) with
        # _return_http_data_only=False, or a thread with async_req=True; called plainly they return the object: the
        # cast says which.
        nodes = (
            cast(
                client.V1NodeList, client.CoreV1Api(api_client).list_node(label_selector=expected.gpu_node_selector)
            ).items
            or []
        )
        checks.append(check_gpu_nodes(nodes, expected))
        checks.append(check_node_health(nodes))
        if expected.device_allocation == "dra":
            slices = api_client.sanitize_for_serialization(client.ResourceV1Api(api_client).list_resource_slice()).get(
                "items", []
            )
            checks.append(
                check_resource_slices(
                    nodes,
                    slices,
                    kind="gpu",
                    want=expected.gpus_per_node,
                    check_id="gpu-allocatable",
                    provider=NVIDIA_DRA_DRIVER.release,
                    scaled_to_zero=expected.scaled_to_zero,
                )
            )
            checks.append(
                check_resource_slices(
                    nodes,
                    slices,
                    kind="efa",
                    want=expected.efa_per_node,
                    check_id="efa-allocatable",
                    provider=EFA_DRA_DRIVER.release,
                    scaled_to_zero=expected.scaled_to_zero,
                )
            )
        else:
            checks.append(
                check_allocatable(
                    nodes,
                    resource=GPU_RESOURCE,
                    want=expected.gpus_per_node,
                    check_id="gpu-allocatable",
                    provider=NVIDIA_DEVICE_PLUGIN.release,
                    scaled_to_zero=expected.scaled_to_zero,
                )
            )
            checks.append(
                check_allocatable(
                    nodes,
                    resource=EFA_RESOURCE,
                    want=expected.efa_per_node,
                    check_id="efa-allocatable",
                    provider=EFA_DEVICE_PLUGIN.release,
                    scaled_to_zero=expected.scaled_to_zero,
                )
            )
    except failures as error:
        if _unreachable(error):  # the first read: nothing else can be read either (the CLI says what to check)
            raise
        for check_id, name in (
            ("gpu-nodes", "GPU nodes Ready"),
            ("node-health", "GPU node health"),
            ("gpu-allocatable", f"allocatable {GPU_RESOURCE}"),
            ("efa-allocatable", f"allocatable {EFA_RESOURCE}"),
        ):
            checks.append(_api_failure(check_id, name, error))
    return checks


def _release_checks(
    api_client: Any, expected: Expectations, failures: tuple[type[Exception], ...], status: Status
) -> list[Check]:
    """The device plugins' (or DRA drivers') DaemonSets and the KubeRay operator's Deployment."""
    from kubernetes import client

    apps_v1 = client.AppsV1Api(api_client)

    def check_release(
        kind: str, release: HelmRelease, read: Callable[[str, str], Any], judge, name: str | None = None
    ) -> Check:
        """Read the workload a Helm release made (named after the release unless `name`) and judge it; an API error is
        a failure."""
        name = name or release.release
        where = f"{kind} {release.namespace}/{name}"
        status(f"reading {where}")
        try:
            return judge(_read_or_none(lambda: read(name, release.namespace)), release)
        except failures as error:
            return _api_failure(release.release, where, error)

    def judge_daemon_set(daemon_set, release: HelmRelease) -> Check:
        return check_daemon_set(daemon_set, release, scaled_to_zero=expected.scaled_to_zero)

    checks = [
        check_release(
            "DaemonSet",
            release,
            apps_v1.read_namespaced_daemon_set,
            judge_daemon_set,
            name=expected.daemon_set_names[release.release],
        )
        for release in expected.device_plugins
    ]
    checks.append(
        check_release("Deployment", expected.operator, apps_v1.read_namespaced_deployment, check_deployment_available)
    )
    return checks


def _ray_cluster_checks(
    api_client: Any,
    expected: Expectations,
    failures: tuple[type[Exception], ...],
    status: Status,
) -> tuple[list[Check], dict[str, Any] | None, Exception | None]:
    """The RayCluster (or the RayJob's) and its Ray pods' init containers; with the RayCluster read, and why it could
    not be, if it could not."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)
    checks: list[Check] = []
    status(f"reading the RayCluster in {expected.namespace}")
    cluster, cluster_error = None, None
    try:

        def get(plural: str, name: str) -> dict[str, Any] | None:
            return _read_or_none(
                lambda: custom.get_namespaced_custom_object(RAY_GROUP, RAY_VERSION, expected.namespace, plural, name)
            )

        cluster = get("rayclusters", expected.ray_cluster)
        job = None
        if cluster is None:
            job = get("rayjobs", expected.ray_job)
            job_cluster = ((job or {}).get("status") or {}).get("rayClusterName")
            cluster = get("rayclusters", job_cluster) if job_cluster else None
        checks.append(check_ray_cluster(cluster, job, expected))
    except failures as error:
        cluster_error = error
        checks.append(_api_failure("raycluster", f"RayCluster in {expected.namespace}", error))
    if cluster is not None and not expected.scaled_to_zero:
        owner = _ray_owner(cluster, expected)
        status(f"reading the init containers of {owner}'s Ray pods")
        try:
            checks.append(
                check_init_containers(
                    init_container_failures(api_client, expected.namespace, job_pods_selector(owner)),
                    owner,
                    expected.namespace,
                )
            )
        except failures as error:
            checks.append(_api_failure(INIT_CONTAINERS_CHECK, f"init containers of {owner}'s Ray pods", error))
    return checks, cluster, cluster_error


def _security_checks(
    api_client,
    expected: Expectations,
    cluster: dict[str, Any] | None,
    cluster_error: Exception | None,
    failures,
    status: Status,
) -> list[Check]:
    """Token auth on the live Ray cluster, network-policy enforcement, and the Ray object's NetworkPolicy.
    `cluster_error`: why the RayCluster could not be read, if it could not."""
    from kubernetes import client

    core_v1, apps_v1 = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    networking = client.NetworkingV1Api(api_client)
    checks: list[Check] = []
    status("reading the Ray head pod")
    try:
        if cluster_error is not None and expected.token_auth:
            raise cluster_error
        head_pods = []
        if cluster is not None and expected.token_auth:
            selector = f"ray.io/cluster={cluster['metadata']['name']},ray.io/node-type=head"
            head_pods = (
                cast(client.V1PodList, core_v1.list_namespaced_pod(expected.namespace, label_selector=selector)).items
                or []
            )
        checks.append(check_token_auth(cluster, head_pods, expected))
    except failures as error:
        checks.append(_api_failure("ray-token-auth", "Ray token authentication", error))

    namespace, release = VPC_CNI_DAEMON_SET
    status(f"reading DaemonSet {namespace}/{release}")
    try:
        daemon_set = _read_or_none(lambda: apps_v1.read_namespaced_daemon_set(release, namespace))
        checks.append(check_policy_enforcement(daemon_set))
    except failures as error:
        checks.append(_api_failure("network-policy-enforcement", "network policies enforced", error))

    # The policy of the live Ray object: the long-lived RayCluster's, else the training RayJob's.
    policy_name = network_policy_name(_ray_owner(cluster, expected))
    status(f"reading NetworkPolicy {expected.namespace}/{policy_name}")
    try:
        policy = _read_or_none(lambda: networking.read_namespaced_network_policy(policy_name, expected.namespace))
        policy = api_client.sanitize_for_serialization(policy) if policy is not None else None
        checks.append(
            check_network_policy(policy, policy_name, expected.namespace, scaled_to_zero=expected.scaled_to_zero)
        )
    except failures as error:
        checks.append(_api_failure("network-policy", f"NetworkPolicy {expected.namespace}/{policy_name}", error))
    return checks


def _ray_owner(cluster: dict[str, Any] | None, expected: Expectations) -> str:
    """The RayCluster or RayJob whose pods these are: the RayJob that created `cluster`, else `cluster` itself (the
    long-lived one), else the training RayJob."""
    labels = ((cluster or {}).get("metadata") or {}).get("labels") or {}
    return (
        labels.get("ray.io/originated-from-cr-name")
        or (cluster or {}).get("metadata", {}).get("name")
        or expected.ray_job
    )


def _unreachable(error: Exception) -> bool:
    """Whether `error` says the API server cannot be talked to at all: no connection (refused, DNS, TLS, timeout) or
    our credentials refused (401/403), rather than one object's read failing."""
    return not hasattr(error, "status") or getattr(error, "status", None) in (401, 403)


def _urllib3_error() -> type[Exception]:
    import urllib3

    return urllib3.exceptions.HTTPError


def verify_until(
    api_client: Any,
    expected: Expectations,
    *,
    timeout_s: float,
    interval_s: float = 10.0,
    status: Status = quiet,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> VerifyReport:
    """Repeat verify_cluster until every check passes or timeout_s has passed; the last report is returned."""
    deadline = clock() + timeout_s
    while True:
        report = verify_cluster(api_client, expected, status=status)
        left = deadline - clock()
        # A failed init container does not heal by waiting (the pip install or the fetch fails the same way again).
        if report.ok or left <= 0 or any(c.id == INIT_CONTAINERS_CHECK for c in report.failed):
            return report
        status(f"waiting ({left:.0f} s left): failing {', '.join(c.id for c in report.failed)}")
        sleep(min(interval_s, left))


def render_verify(report: VerifyReport, console: Console) -> None:
    """A table of every check, then the failing ones named."""
    from rich.table import Table

    table = Table(title="ray-efa verify")
    for column in ("check", "result", "detail"):
        table.add_column(column, overflow="fold")  # wrap, never cut with an ellipsis (80-column logs)
    for c in report.checks:
        table.add_row(c.name, "[green]pass[/]" if c.ok else "[red]FAIL[/]", c.detail)
    console.print(table)
    if report.ok:
        console.print("[green]All checks passed.[/]")
    else:
        console.print(f"[red]Failed: {', '.join(c.id for c in report.failed)}[/]")
