"""The manifests the project produces, applied to a real API server, reconciled by the real KubeRay operator and
placed by the real scheduler on nodes shaped as the synthesized node groups bring them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.api_client import ApiClient

from ray_efa.core import catalog
from ray_efa.core import node_pods as node_pods_data
from tests.cluster.conftest import Nodes, served_kuberay, wait_for
from tests.cluster.controlplane import ControlPlane
from tests.cluster.deployment import ray_job_cluster
from tests.cluster.objects import name_of, node_of, requests_of, spec_of
from tests.cluster.workload import (
    NodeGroup,
    add_node_group,
    apply_in_order,
    load,
    node_pods,
    pending_reasons,
    stack_manifests,
    wait_for_node_pods,
    wait_for_pods,
    write_manifests,
)

pytestmark = pytest.mark.synth  # the node groups come from a real synth, the manifests from the CLI's synth


class Stack:
    """The default stacks, synthesized once: their node groups and the Kubernetes objects they apply."""

    def __init__(self) -> None:
        from tests.infra.conftest import synthesize

        # the stacks for the KubeRay version whose CRDs the API server serves (the deployed one, or in a clone alone
        # the one the operator's own CRDs take: conftest.served_kuberay)
        self.kuberay = served_kuberay()
        synth = synthesize(kuberayVersion=self.kuberay)
        self.cluster_template, self.gpu_template = synth.cluster.to_json(), synth.gpu.to_json()
        (self.system,) = NodeGroup.from_template(self.cluster_template)
        (self.gpu,) = NodeGroup.from_template(self.gpu_template)
        self.settings = synth.settings
        self.namespace = synth.settings.workload.namespace

    def service_account(self, namespace: str) -> dict[str, Any]:
        """The Ray pods' service account the cluster stack creates (IRSA-annotated), moved to `namespace`."""
        (account,) = [o for o in stack_manifests(self.cluster_template) if o["kind"] == "ServiceAccount"]
        account = copy.deepcopy(account)
        account["metadata"]["namespace"] = namespace
        return account


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane) -> Stack:
    made = Stack()
    node_pods(control_plane, system=made.system.labels, gpu=made.gpu.labels)
    return made


def deploy(
    plane: ControlPlane, stack: Stack, namespace: str, tmp_path: Path, *context: str, on: tuple[list[str], list[str]]
) -> list[dict[str, Any]]:
    """The kubectl route (README): every file `ray-efa manifests` wrote is accepted by a server-side dry run (schema,
    CEL rules, defaulting, admission); then, as the `train:` lines it prints say, the namespace and the EFA RayJob are
    applied, beside the service account the cluster stack creates, once the node pods run on the (system, GPU) nodes
    `on`. Returns the objects the server stored."""
    paths = write_manifests(tmp_path / "dist", f"namespace={namespace}", f"kuberayVersion={stack.kuberay}", *context)
    plane.apply(load(paths), dry_run=True)
    wait_for_node_pods(plane.api_client(), *on)
    train = [path for path in paths if path.name.endswith(("-namespace.yaml", "-rayjob-efa.yaml"))]
    return apply_in_order(plane, [stack.service_account(namespace), *load(train)])


def ray_pods(api: ApiClient, namespace: str, cluster: str, node_type: str, count: int) -> list[client.V1Pod]:
    try:
        return wait_for_pods(
            api, namespace, f"ray.io/cluster={cluster},ray.io/node-type={node_type}", count, what=f"Ray {node_type}"
        )
    except pytest.fail.Exception as error:
        raise AssertionError(f"{error}; the scheduler says: {pending_reasons(api, namespace)}") from None


def submitter(api: ApiClient, namespace: str, job: str) -> client.V1Pod:
    """The RayJob's submitter pod, which the operator's Job makes once the RayCluster is ready: placed on a node (the
    job's driver runs in it; a submitter that cannot be placed leaves the RayJob waiting until its deadline)."""
    try:
        (pod,) = wait_for_pods(api, namespace, f"batch.kubernetes.io/job-name={job}", 1, what="submitter", phase=None)
    except pytest.fail.Exception as error:
        raise AssertionError(f"{error}; the scheduler says: {pending_reasons(api, namespace)}") from None
    return pod


def test_the_api_server_and_the_operator_are_the_pinned_builds(control_plane: ControlPlane, api: ApiClient):
    from tools.controlplane import build

    # the API server reports the version the Go module pins, and serves the deployed version's CRDs to the operator
    assert client.VersionApi(api).get_code().git_version == build.required_version("kube", "k8s.io/kubernetes")
    crds = client.ApiextensionsV1Api(api).list_custom_resource_definition().items
    assert {name_of(c) for c in crds} >= {"rayclusters.ray.io", "rayjobs.ray.io"}
    assert control_plane.processes["kuberay-operator"].popen.poll() is None


def test_the_service_account_the_other_modules_apply_is_the_one_the_stack_applies(stack: Stack):
    # GIVEN the synthesized cluster stack's ServiceAccount for the Ray pods, and the one tests/cluster builds without
    # a synth for the modules that deploy a job (deployment.stack_service_account)
    from tests.cluster.deployment import POD_ROLE_ARN, stack_service_account

    (synthesized,) = [o for o in stack_manifests(stack.cluster_template) if o["kind"] == "ServiceAccount"]
    meta = synthesized["metadata"]
    # THEN they are the same object, but for the label aws_eks_v2's kubectl handler prunes by and the role's ARN (a
    # deploy-time token in the template)
    labels = {k: v for k, v in meta["labels"].items() if not k.startswith("aws.cdk.eks/prune-")}
    assert set(meta["annotations"]) == {"eks.amazonaws.com/role-arn"}
    annotations = {"eks.amazonaws.com/role-arn": POD_ROLE_ARN}
    assert {**synthesized, "metadata": {**meta, "labels": labels, "annotations": annotations}} == (
        stack_service_account(stack.settings)
    )


def test_the_default_job_runs_its_head_on_a_system_node_and_one_worker_on_each_gpu_node(
    control_plane: ControlPlane, api: ApiClient, nodes: Nodes, stack: Stack, namespace: str, tmp_path: Path
):
    system = add_node_group(nodes, stack.system)
    gpu = add_node_group(nodes, stack.gpu)
    stored = deploy(control_plane, stack, namespace, tmp_path, on=(system, gpu))
    assert ("RayJob", "train-efa") in {(o["kind"], o["metadata"]["name"]) for o in stored}
    cluster = ray_job_cluster(api, namespace, "train-efa")
    head = ray_pods(api, namespace, cluster, "head", 1)
    workers = ray_pods(api, namespace, cluster, "worker", len(gpu))
    assert node_of(head[0]) in system
    assert sorted(node_of(w) for w in workers) == sorted(gpu), "one worker on each GPU node"
    assert node_of(submitter(api, namespace, "train-efa")) in system


def test_the_stack_s_own_manifests_are_accepted_and_its_job_reconciled(
    control_plane: ControlPlane, api: ApiClient, nodes: Nodes, stack: Stack, tmp_path: Path
):
    # GIVEN the objects both stacks apply through the kubectl handler (namespace, service account, RayJob, ...)
    objects = stack_manifests(stack.cluster_template) + stack_manifests(stack.gpu_template)
    assert {o["kind"] for o in objects} >= {"Namespace", "ServiceAccount", "RayJob"}
    system = add_node_group(nodes, stack.system)
    gpu = add_node_group(nodes, stack.gpu)
    wait_for_node_pods(api, system, gpu)
    # WHEN applied server-side, THEN the server takes every one, and the operator places the job's pods
    apply_in_order(control_plane, objects)
    job = next(o for o in objects if o["kind"] == "RayJob")["metadata"]["name"]
    cluster = ray_job_cluster(api, stack.namespace, job)
    ray_pods(api, stack.namespace, cluster, "head", 1)
    ray_pods(api, stack.namespace, cluster, "worker", len(gpu))
    client.CoreV1Api(api).delete_namespace(stack.namespace)


def _refusal(*context: str) -> str | None:
    """The settings problem `ray-efa manifests` would exit 2 with for `context` (None: it would write them)."""
    from ray_efa.cli._common import _check, parse_overrides, resolve_settings
    from ray_efa.core.settings import SettingsError

    try:
        resolved = resolve_settings(parse_overrides(list(context)))
        _check(resolved.settings, resolved.app_dir, require_fit=True, require_code=False, require_model=False)
    except SettingsError as error:
        return str(error)
    return None


@pytest.mark.parametrize("row", sorted(catalog.GPU_INSTANCES))
def test_each_gpu_row_at_its_default_count_runs_one_worker_on_each_of_its_nodes(
    row: str, control_plane: ControlPlane, api: ApiClient, nodes: Nodes, stack: Stack, namespace: str, tmp_path: Path
):
    refusal = _refusal(f"gpuInstanceType={row}")
    if refusal is not None:  # a row the job cannot use is refused before anything is written, naming the setting
        assert "gpuInstanceType" in refusal, refusal
        return
    system = add_node_group(nodes, stack.system)
    gpu = add_node_group(nodes, stack.gpu, instance=row)
    deploy(control_plane, stack, namespace, tmp_path, f"gpuInstanceType={row}", on=(system, gpu))
    cluster = ray_job_cluster(api, namespace, "train-efa")
    (head,) = ray_pods(api, namespace, cluster, "head", 1)
    workers = ray_pods(api, namespace, cluster, "worker", len(gpu))
    assert node_of(head) in system
    assert sorted(node_of(w) for w in workers) == sorted(gpu), "one worker on each GPU node"
    # every GPU and EFA interface of the node goes to its worker: nothing is left for a second one
    row_type = catalog.GPU_INSTANCES[row]
    requests = requests_of(spec_of(workers[0]).containers[0])
    assert requests["nvidia.com/gpu"] == str(row_type.gpus)
    assert requests["vpc.amazonaws.com/efa"] == str(row_type.efa_interfaces)


@pytest.mark.parametrize("system_type", sorted(catalog.SYSTEM_INSTANCES))
def test_the_head_fits_each_system_node_type_beside_its_neighbours_or_synth_says_it_cannot(
    system_type: str,
    control_plane: ControlPlane,
    api: ApiClient,
    nodes: Nodes,
    stack: Stack,
    namespace: str,
    tmp_path: Path,
):
    context = f"systemInstanceType={system_type}"
    refusal = _refusal(context)
    system = add_node_group(nodes, stack.system, instance=system_type)
    gpu = add_node_group(nodes, stack.gpu)
    if refusal is not None:
        # the CLI refused, naming the setting; and the real scheduler agrees that the smallest head the job makes
        # (1 CPU, 2 GiB: catalog.head_fit_problem) and the submitter do not both fit beside the node's pods
        assert "systemInstanceType" in refusal, refusal
        wait_for_node_pods(api, system, gpu)
        (submitter_pod,) = [p for p in node_pods_data.system_node_pods() if p.kind == "Job"]
        asks = {
            "smallest-head": ("1", "2Gi"),
            "submitter": (f"{submitter_pod.cpu_m}m", f"{submitter_pod.memory_mib}Mi"),
        }
        for name, (cpu, memory) in asks.items():
            # a manifest dict as the body: the client takes one (the kubernetes stubs name only the model)
            client.CoreV1Api(api).create_namespaced_pod(
                namespace,
                {  # pyright: ignore[reportArgumentType]
                    "metadata": {"name": name},
                    "spec": {
                        "nodeSelector": stack.system.labels,
                        "containers": [
                            {
                                "name": "main",
                                "image": "registry.k8s.io/pause:3.10",
                                "resources": {
                                    "requests": {"cpu": cpu, "memory": memory},
                                    "limits": {"cpu": cpu, "memory": memory},
                                },
                            }
                        ],
                    },
                },
            )
        reasons = wait_for(lambda: pending_reasons(api, namespace), "the scheduler to leave one of them Pending")
        assert any("Insufficient cpu" in reason for reason in reasons.values()), reasons
        return
    deploy(control_plane, stack, namespace, tmp_path, context, on=(system, gpu))
    cluster = ray_job_cluster(api, namespace, "train-efa")
    (head,) = ray_pods(api, namespace, cluster, "head", 1)
    assert node_of(head) in system
    ray_pods(api, namespace, cluster, "worker", len(gpu))
    # and the submitter, which the catalog counts beside the head, finds its room too
    assert node_of(submitter(api, namespace, "train-efa")) in system
