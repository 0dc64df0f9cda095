"""What tests/cluster puts on the control plane: the node groups a synthesized stack describes, the pods EKS and the
stack run on system nodes, and the manifests `ray-efa manifests` writes, applied as kubectl would."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.api_client import ApiClient

from ray_efa.core import catalog
from tests.cluster.conftest import Nodes, wait_for
from tests.cluster.controlplane import ControlPlane
from tests.cluster.objects import labels_of, name_of, spec_of, status_of

_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


@dataclass(frozen=True)
class NodeGroup:
    """One AWS::EKS::Nodegroup of a synthesized template: what its nodes are labelled and tainted with."""

    logical_id: str
    instance_types: tuple[str, ...]
    desired: int
    labels: dict[str, str]
    taints: tuple[dict[str, str], ...]

    @staticmethod
    def from_template(template: Mapping[str, Any]) -> list[NodeGroup]:
        groups = []
        for logical_id, resource in template.get("Resources", {}).items():
            if resource.get("Type") != "AWS::EKS::Nodegroup":
                continue
            props = resource["Properties"]
            taints = tuple(
                {"key": t["Key"], "value": t.get("Value", ""), "effect": _EFFECTS[t["Effect"]]}
                for t in props.get("Taints") or []
            )
            instance_types = tuple(props.get("InstanceTypes") or ())
            if not instance_types:  # the type is the launch template's (the EFA node group states it there)
                reference = props["LaunchTemplate"]["Id"]["Ref"]
                data = template["Resources"][reference]["Properties"]["LaunchTemplateData"]
                instance_types = (data["InstanceType"],)
            groups.append(
                NodeGroup(
                    logical_id,
                    instance_types,
                    int(props["ScalingConfig"]["DesiredSize"]),
                    dict(props.get("Labels") or {}),
                    taints,
                )
            )
        return groups


def add_node_group(
    nodes: Nodes,
    group: NodeGroup,
    *,
    instance: str | None = None,
    count: int | None = None,
    prefix: str = "",
    **kwargs: Any,
) -> list[str]:
    """The nodes `group` brings up: `count` (its desired size) of `instance` (its first instance type)."""
    name = instance or group.instance_types[0]
    row = catalog.GPU_INSTANCES.get(name) or catalog.SYSTEM_INSTANCES[name]
    return nodes.add(
        row,
        group.desired if count is None else count,
        labels=group.labels,
        taints=list(group.taints),
        prefix=prefix,
        nodegroup=group.logical_id.lower(),
        **kwargs,
    )


def write_manifests(out: Path, *context: str) -> list[Path]:
    """`ray-efa manifests --out OUT -c ...`, the CLI's own entry point (in this process: jsii starts once); the files
    it wrote, in apply order."""
    from ray_efa.cli import main

    argv = ["manifests", "--allow-no-storage", "--out", str(out)]
    for item in context:
        argv += ["-c", item]
    code = main(argv)
    assert code == 0, f"ray-efa {' '.join(argv)}: exit {code}"
    return sorted(out.glob("*.yaml"))


def load(paths: list[Path]) -> list[dict[str, Any]]:
    return [doc for path in paths for doc in yaml.safe_load_all(path.read_text()) if doc]


def pods(api: ApiClient, namespace: str, selector: str = "") -> list[client.V1Pod]:
    return client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items


def wait_for_pods(
    api: ApiClient,
    namespace: str,
    selector: str,
    count: int,
    *,
    what: str,
    timeout_s: float = 90,
    phase: str | None = "Running",
) -> list[client.V1Pod]:
    """`count` pods matching `selector`, each bound to a node (and in `phase`, unless None)."""

    def settled() -> list[client.V1Pod] | None:
        found = pods(api, namespace, selector)
        placed = [p for p in found if spec_of(p).node_name and (phase is None or status_of(p).phase == phase)]
        return placed if len(placed) >= count else None

    return wait_for(settled, f"{count} {what} pods ({selector}) in {namespace}", timeout_s=timeout_s)


def pending_reasons(api: ApiClient, namespace: str) -> dict[str, str]:
    """Pod name -> the scheduler's message, for every pod it could not place."""
    reasons = {}
    for pod in pods(api, namespace):
        for condition in status_of(pod).conditions or []:
            if condition.type == "PodScheduled" and condition.status == "False":
                reasons[name_of(pod)] = condition.message or condition.reason or ""
    return reasons


def node_pods(
    plane: ControlPlane, *, system: dict[str, str], gpu: dict[str, str], device_allocation: str = "device-plugin"
) -> None:
    """The pods that share the nodes with the Ray pods (core.node_pods: EKS's and the stack's DaemonSets, CoreDNS and
    the KubeRay operator's Deployment), as real DaemonSets and Deployments with the requests core.node_pods gives
    them, so the real scheduler counts them beside the Ray pods. `system` and `gpu` are the node groups' labels. The
    RayJob's submitter is not among them: the operator creates the real one."""
    from ray_efa.core import node_pods as known

    every_node = {pod.name for pod in known.node_daemonsets("system")}
    workloads = [
        *known.node_daemonsets("gpu", device_allocation=device_allocation),  # type: ignore[arg-type]
        *(pod for pod in known.system_node_pods() if pod.kind == "Deployment"),
    ]
    objects: list[dict[str, Any]] = []
    for pod in workloads:
        containers = [
            {
                "name": c.name,
                "image": "registry.k8s.io/pause:3.10",
                "resources": {
                    "requests": {
                        **({"cpu": f"{c.cpu_m}m"} if c.cpu_m else {}),
                        **({"memory": f"{c.memory_mib}Mi"} if c.memory_mib else {}),
                    }
                },
            }
            for c in pod.containers
        ]
        spec: dict[str, Any] = {"containers": containers}
        if pod.kind == "DaemonSet":  # EKS's DaemonSets tolerate every taint; the GPU ones select the GPU nodes
            spec["tolerations"] = [{"operator": "Exists"}]
            if pod.name not in every_node:
                spec["nodeSelector"] = gpu
        elif pod.name == "kuberay-operator":
            spec["nodeSelector"] = system
        labels = {"app": pod.name}
        body: dict[str, Any] = {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        }
        if pod.kind == "Deployment":
            body["replicas"] = pod.pods_per_node
        objects.append(
            {
                "apiVersion": "apps/v1",
                "kind": pod.kind,
                "metadata": {"name": pod.name, "namespace": "kube-system"},
                "spec": body,
            }
        )
    plane.apply(objects)


def wait_for_node_pods(api: ApiClient, system: list[str], gpu: list[str]) -> None:
    """Until node_pods' pods are Running where they belong: each DaemonSet on each of its nodes, the Deployments'
    replicas on the system nodes. Then a Ray pod placed after it competes with all of them, as on a real cluster."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)

    def settled() -> bool:
        running = [
            p
            for p in core.list_namespaced_pod("kube-system").items
            if status_of(p).phase == "Running" and spec_of(p).node_name in (*system, *gpu)
        ]
        nodes = {name_of(n): n for n in core.list_node().items if name_of(n) in (*system, *gpu)}

        def targets(spec: client.V1PodSpec) -> set[str]:
            # the nodes a pod of `spec` may land on: its selector's, untainted ones unless it tolerates every taint
            # (node pods made for another app's node groups select none of these nodes and are not waited for)
            tolerates_all = any(t.operator == "Exists" and not t.key for t in spec.tolerations or [])
            return {
                name
                for name, node in nodes.items()
                if all(labels_of(node).get(k) == v for k, v in (spec.node_selector or {}).items())
                and (tolerates_all or not spec_of(node).taints)
            }

        for daemon_set in apps.list_namespaced_daemon_set("kube-system").items:
            placed = {spec_of(p).node_name for p in running if labels_of(p).get("app") == name_of(daemon_set)}
            if not targets(spec_of(spec_of(daemon_set).template)) <= placed:
                return False
        for deployment in apps.list_namespaced_deployment("kube-system").items:
            placed = [p for p in running if labels_of(p).get("app") == name_of(deployment)]
            if targets(spec_of(spec_of(deployment).template)) and len(placed) < (spec_of(deployment).replicas or 1):
                return False
        return True

    wait_for(settled, f"the node pods on {system + gpu}", timeout_s=60)


def _resolve(value: Any, template: Mapping[str, Any]) -> Any:
    """A CloudFormation value with its intrinsics replaced by plausible stand-ins (what the deploy would put there:
    an ARN for a GetAtt of Arn, the logical id for a Ref); Fn::Join joined."""
    if isinstance(value, dict) and len(value) == 1:
        ((key, arg),) = value.items()
        if key == "Fn::Join":
            separator, parts = arg
            return separator.join(str(_resolve(part, template)) for part in parts)
        if key == "Ref":
            return {
                "AWS::Region": "us-east-2",
                "AWS::AccountId": "123456789012",
                "AWS::Partition": "aws",
                "AWS::URLSuffix": "amazonaws.com",
            }.get(arg, arg.lower())
        if key == "Fn::GetAtt":
            logical_id, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
            return f"arn:aws:iam::123456789012:role/{logical_id}" if attribute == "Arn" else f"{logical_id}-{attribute}"
        if key.startswith("Fn::"):
            return f"{key[4:].lower()}-token"
    if isinstance(value, dict):
        return {k: _resolve(v, template) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, template) for v in value]
    return value


def stack_manifests(template: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every Kubernetes object a synthesized stack applies through aws_eks_v2's kubectl handler (each
    Custom::AWSCDK-EKS-KubernetesResource's Manifest, a JSON list), in template order."""
    objects: list[dict[str, Any]] = []
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") == "Custom::AWSCDK-EKS-KubernetesResource":
            manifest = _resolve(resource["Properties"]["Manifest"], template)
            objects += json.loads(manifest)
    return objects


def apply_in_order(plane: ControlPlane, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Namespaces and service accounts first, as the stacks' dependencies order them on a deploy."""
    first = ("Namespace", "ServiceAccount", "ConfigMap")
    ordered = sorted(objects, key=lambda o: first.index(o["kind"]) if o["kind"] in first else len(first))
    return plane.apply(ordered)
