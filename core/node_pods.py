"""The pods that share a node with the Ray pods: EKS's and the stack's DaemonSets per node kind, and the Deployments and
the RayJob submitter that run on the system nodes, each with its containers' requests and where they come from.

Plain data for core.catalog (the room a node has left for the Ray head or a worker) and for tests that create these
as real DaemonSet objects and check that the scheduler agrees. Requests as the manifests set them: a container with
limits but no requests gets requests equal to its limits (Kubernetes defaulting), one with neither requests nothing.
Pure Python: the training job imports core.catalog inside the container.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ContainerRequests",
    "NodePod",
    "NodeKind",
    "DeviceAllocation",
    "node_daemonsets",
    "system_node_pods",
    "pod_requests",
]

NodeKind = Literal["system", "gpu"]
DeviceAllocation = Literal["device-plugin", "dra"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ContainerRequests:
    """One container's requests: millicores and MiB (0: none set)."""

    name: str
    cpu_m: int = 0
    memory_mib: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class NodePod:
    """A workload with pods on a node of some kind: its name and namespace as the cluster shows them, its containers'
    requests, how many of its pods one node may hold, and where the requests come from."""

    name: str
    namespace: str
    kind: Literal["DaemonSet", "Deployment", "Job"]
    containers: tuple[ContainerRequests, ...]
    source: str
    pods_per_node: int = 1
    """Pods of it one node may run: 1 for a DaemonSet; a Deployment's replicas when nothing spreads them (CoreDNS)."""

    @property
    def cpu_m(self) -> int:
        """Millicores all its pods on one node request."""
        return self.pods_per_node * sum(c.cpu_m for c in self.containers)

    @property
    def memory_mib(self) -> int:
        """MiB all its pods on one node request."""
        return self.pods_per_node * sum(c.memory_mib for c in self.containers)


# -- DaemonSets on every node -----------------------------------------------------------------------------------------
_AWS_NODE = NodePod(
    name="aws-node",
    namespace="kube-system",
    kind="DaemonSet",
    containers=(ContainerRequests(name="aws-node", cpu_m=25), ContainerRequests(name="aws-eks-nodeagent", cpu_m=25)),
    source="VPC CNI (vpc-cni add-on; aws/amazon-vpc-cni-k8s charts/aws-vpc-cni values.yaml resources.requests.cpu "
    "25m and nodeAgent.resources.requests.cpu 25m; the node agent runs in every aws-node pod since VPC CNI "
    "1.14, network policies or not)",
)
_KUBE_PROXY = NodePod(
    name="kube-proxy",
    namespace="kube-system",
    kind="DaemonSet",
    containers=(ContainerRequests(name="kube-proxy", cpu_m=100),),
    source="kube-proxy add-on as EKS installs it (DaemonSet kube-system/kube-proxy: requests cpu 100m, no memory)",
)
_POD_IDENTITY_AGENT = NodePod(
    name="eks-pod-identity-agent",
    namespace="kube-system",
    kind="DaemonSet",
    containers=(ContainerRequests(name="eks-pod-identity-agent"),),
    source="eks-pod-identity-agent add-on (aws/eks-charts stable/eks-pod-identity-agent values.yaml: resources {}; "
    "tolerates every taint, so it runs on the GPU nodes too); RayEksCluster installs it",
)
# -- DaemonSets on the GPU nodes --------------------------------------------------------------------------------------
_NVIDIA_DEVICE_PLUGIN = NodePod(
    name="nvidia-device-plugin",
    namespace="kube-system",
    kind="DaemonSet",
    containers=(ContainerRequests(name="nvidia-device-plugin-ctr"),),
    source="nvidia-device-plugin chart 0.20.0 values.yaml: resources {} (GpuDevicePlugins; GPU nodes only)",
)
_EFA_DEVICE_PLUGIN = NodePod(
    name="aws-efa-k8s-device-plugin",
    namespace="kube-system",
    kind="DaemonSet",
    containers=(ContainerRequests(name="aws-efa-k8s-device-plugin", cpu_m=10, memory_mib=20),),
    source="aws-efa-k8s-device-plugin chart v0.5.30 values.yaml: resources.requests cpu 10m, memory 20Mi "
    "(GpuDevicePlugins; GPU nodes only)",
)
_NVIDIA_DRA_DRIVER = NodePod(
    name="dra-driver-nvidia-gpu-kubelet-plugin",
    namespace="nvidia",
    kind="DaemonSet",
    containers=(ContainerRequests(name="gpus"),),
    source="dra-driver-nvidia-gpu chart values.yaml: kubeletPlugin.containers.*.resources {} (GpuDraDrivers; GPU "
    "nodes only; computeDomains off, so no ComputeDomain container or controller)",
)
_EFA_DRA_DRIVER = NodePod(
    name="aws-dranet",
    namespace="kube-system",
    kind="DaemonSet",
    containers=(ContainerRequests(name="aws-dranet", cpu_m=100, memory_mib=50),),
    source="aws-dranet chart values.yaml (aws/eks-charts stable/aws-dranet): resources.requests cpu 100m, memory "
    "50Mi (GpuDraDrivers; GPU nodes only)",
)
# -- what else the system nodes run -----------------------------------------------------------------------------------
_COREDNS = NodePod(
    name="coredns",
    namespace="kube-system",
    kind="Deployment",
    pods_per_node=2,
    containers=(ContainerRequests(name="coredns", cpu_m=100, memory_mib=70),),
    source="CoreDNS add-on as EKS installs it (2 replicas, requests cpu 100m, memory 70Mi each); both may land on "
    "one system node: the GPU nodes' taint keeps them off the others",
)
_KUBERAY_OPERATOR = NodePod(
    name="kuberay-operator",
    namespace="kuberay-system",
    kind="Deployment",
    containers=(ContainerRequests(name="kuberay-operator", cpu_m=100, memory_mib=512),),
    source="kuberay-operator chart values.yaml (1.4.0 and 1.7.0): resources.limits cpu 100m, memory 512Mi and no "
    "requests, so the requests default to the limits (KubeRayOperator, on the system nodes)",
)
_RAY_JOB_SUBMITTER = NodePod(
    name="ray-job-submitter",
    namespace="(the job's)",
    kind="Job",
    containers=(ContainerRequests(name="ray-job-submitter", cpu_m=500, memory_mib=1024),),
    source="the RayJob's submitter pod (k8s.cluster_spec.submitter_template: 500m, 1Gi, Guaranteed), beside the "
    "head while the job runs",
)


def node_daemonsets(
    node_kind: NodeKind, *, device_allocation: DeviceAllocation = "device-plugin"
) -> tuple[NodePod, ...]:
    """The DaemonSets EKS and the stack run on a node of `node_kind`: on every node the VPC CNI, kube-proxy and the
    Pod Identity agent; on a GPU node also the device plugins (deviceAllocation device-plugin) or the DRA drivers (dra).
    The EBS CSI driver is not here: the stack does not install it (add it if your platform does)."""
    every_node = (_AWS_NODE, _KUBE_PROXY, _POD_IDENTITY_AGENT)
    if node_kind == "system":
        return every_node
    if device_allocation == "dra":
        return (*every_node, _NVIDIA_DRA_DRIVER, _EFA_DRA_DRIVER)
    return (*every_node, _NVIDIA_DEVICE_PLUGIN, _EFA_DEVICE_PLUGIN)


def system_node_pods() -> tuple[NodePod, ...]:
    """Every pod that may share one system node with the Ray head: its DaemonSets, CoreDNS, the KubeRay operator and
    the RayJob's submitter."""
    return (*node_daemonsets("system"), _COREDNS, _KUBERAY_OPERATOR, _RAY_JOB_SUBMITTER)


def pod_requests(pods: tuple[NodePod, ...]) -> tuple[int, int]:
    """(millicores, MiB) that `pods` request on one node together."""
    return sum(pod.cpu_m for pod in pods), sum(pod.memory_mib for pod in pods)
