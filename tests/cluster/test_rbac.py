"""Each RBAC object the stack creates, applied to the real API server and asked, with SubjectAccessReviews, what its
user must and must not be able to do: the researchers' group (researcherPrincipalArns' access entries) and the Ray
pods' service account (which the stack binds to nothing in Kubernetes: its rights are IAM's, through the pod
identity). Then a researcher, authenticated by a client certificate, runs `ray-efa submit`, `follow` and `verify`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from tests.cluster.conftest import Nodes, served_kuberay, wait_for
from tests.cluster.controlplane import ControlPlane
from tests.cluster.objects import status_of
from tests.cluster.rbac import Request, Subject, allowed, api_client_of, user_kubeconfig
from tests.cluster.workload import apply_in_order, stack_manifests

pytestmark = pytest.mark.synth  # the objects come from a real synth of the stacks

NS = "research"  # the synth's own workload namespace: not test_workload's "ray", which that module deletes
RESEARCHER_ARN = "arn:aws:iam::111122223333:role/Researcher"
JOB = "train-efa"  # the deployment's training job (jobName's default)
RAY = "ray.io"


class RbacStack:
    """The default stacks with one researcher and the workload in NS, synthesized once."""

    def __init__(self) -> None:
        from tests.infra.conftest import synthesize

        # for the KubeRay version whose CRDs the API server serves (conftest.served_kuberay)
        synth = synthesize(researcherPrincipalArns=RESEARCHER_ARN, namespace=NS, kuberayVersion=served_kuberay())
        self.cluster_template: dict[str, Any] = dict(synth.cluster.to_json())
        self.gpu_template: dict[str, Any] = dict(synth.gpu.to_json())
        self.objects = stack_manifests(self.cluster_template)
        (entry,) = [
            r["Properties"]
            for r in self.cluster_template["Resources"].values()
            if r["Type"] == "AWS::EKS::AccessEntry" and r["Properties"]["PrincipalArn"] == RESEARCHER_ARN
        ]
        # The group EKS gives the researcher's requests is the access entry's, as synthesized (not a test constant).
        (self.group,) = entry["KubernetesGroups"]
        assert "AccessPolicies" not in entry, "no EKS access policy: Kubernetes RBAC alone authorizes researchers"
        (account,) = [o for o in self.objects if o["kind"] == "ServiceAccount"]
        self.service_account = Subject.service_account(account["metadata"]["namespace"], account["metadata"]["name"])

    @property
    def researcher(self) -> Subject:
        return Subject("researcher", (self.group, "system:authenticated"))


@pytest.fixture(scope="module")
def rbac_stack(control_plane: ControlPlane, api: ApiClient) -> Iterator[RbacStack]:
    made = RbacStack()
    kinds = {o["kind"] for o in made.objects}
    assert kinds >= {"Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}, kinds
    apply_in_order(control_plane, made.objects)
    yield made
    rbac = client.RbacAuthorizationV1Api(api)
    for obj in made.objects:
        if obj["kind"] == "ClusterRole":
            rbac.delete_cluster_role(obj["metadata"]["name"])
        elif obj["kind"] == "ClusterRoleBinding":
            rbac.delete_cluster_role_binding(obj["metadata"]["name"])
    client.CoreV1Api(api).delete_namespace(NS)


RESEARCHER_MAY = [
    # ray-efa submit
    Request("create", "rayjobs", NS, RAY),
    Request("get", "rayjobs", NS, RAY),
    Request("list", "rayclusters", NS, RAY),
    # ray-efa cancel: RBAC lets them delete a RayJob; the admission policy, only their own (test_admission.py)
    Request("delete", "rayjobs", NS, RAY),
    Request("get", "configmaps", NS, name=f"{JOB}-settings"),
    Request("create", "configmaps", NS),
    Request("patch", "configmaps", NS),
    Request("create", "networkpolicies", NS, "networking.k8s.io"),
    Request("patch", "networkpolicies", NS, "networking.k8s.io"),
    # ray-efa follow (and submit's following)
    Request("watch", "rayjobs", NS, RAY),
    Request("list", "pods", NS),
    Request("get", "pods", NS, subresource="log"),
    # ray-efa verify
    Request("list", "nodes"),
    Request("list", "resourceslices", group="resource.k8s.io"),
    Request("get", "daemonsets", "kube-system", "apps", name="aws-node"),
    Request("get", "deployments", "kuberay-system", "apps", name="kuberay-operator"),
    Request("get", "rayclusters", NS, RAY),
    Request("get", "networkpolicies", NS, "networking.k8s.io"),
]
RESEARCHER_MAY_NOT = [
    # the cluster: the RayCluster, the RayJob that owns it, the nodes, the namespace
    Request("delete", "rayclusters", NS, RAY),
    Request("patch", "rayclusters", NS, RAY),
    Request("update", "rayclusters", NS, RAY),
    Request("create", "rayclusters", NS, RAY),
    Request("deletecollection", "rayjobs", NS, RAY),
    Request("patch", "rayjobs", NS, RAY),
    Request("update", "rayjobs", NS, RAY),
    Request("delete", "nodes"),
    Request("patch", "nodes"),
    Request("delete", "namespaces", name=NS),
    Request("delete", "daemonsets", "kube-system", "apps"),
    Request("patch", "deployments", "kuberay-system", "apps"),
    # secrets, and what would reach them: pods of one's own, exec, the Ray pods' service-account tokens, bindings
    Request("get", "secrets", NS),
    Request("list", "secrets", NS),
    Request("list", "secrets"),
    Request("create", "pods", NS),
    Request("create", "pods", NS, subresource="exec"),
    Request("create", "pods", NS, subresource="portforward"),
    Request("create", "serviceaccounts", NS, subresource="token", name="ray-train"),
    Request("create", "rolebindings", NS, "rbac.authorization.k8s.io"),
    # another namespace
    Request("create", "rayjobs", "default", RAY),
    Request("get", "configmaps", "kube-system"),
    Request("list", "pods", "kube-system"),
    Request("get", "pods", "kube-system", subresource="log"),
]
SERVICE_ACCOUNT_MAY_NOT = [
    Request("get", "secrets", NS),
    Request("list", "secrets", NS),
    Request("list", "secrets"),
    Request("get", "secrets", "kube-system"),
    Request("create", "pods", NS),
    Request("create", "pods", "default"),
    Request("create", "pods", "kube-system"),
    Request("create", "rayjobs", NS, RAY),
    Request("delete", "rayclusters", NS, RAY),
    Request("create", "serviceaccounts", NS, subresource="token"),
]


@pytest.mark.parametrize("request_", RESEARCHER_MAY, ids=str)
def test_a_researcher_may(api: ApiClient, rbac_stack: RbacStack, request_: Request):
    verdict, reason = allowed(api, rbac_stack.researcher, request_)
    assert verdict, f"researcher refused: {request_} ({reason or 'no rule allows it'})"


@pytest.mark.parametrize("request_", RESEARCHER_MAY_NOT, ids=str)
def test_a_researcher_may_not(api: ApiClient, rbac_stack: RbacStack, request_: Request):
    verdict, reason = allowed(api, rbac_stack.researcher, request_)
    assert not verdict, f"researcher allowed: {request_} ({reason})"


@pytest.mark.parametrize("request_", SERVICE_ACCOUNT_MAY_NOT, ids=str)
def test_the_ray_pods_service_account_may_not(api: ApiClient, rbac_stack: RbacStack, request_: Request):
    verdict, reason = allowed(api, rbac_stack.service_account, request_)
    assert not verdict, f"{rbac_stack.service_account.user} allowed: {request_} ({reason})"


def _status(call: Any) -> int:
    try:
        call()
    except ApiException as error:
        return error.status or 0
    return 200


def test_a_researcher_submits_follows_and_verifies_but_cannot_delete_the_cluster(
    control_plane: ControlPlane,
    api: ApiClient,
    rbac_stack: RbacStack,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
):
    from ray_efa.cli import main

    # GIVEN the deployment's training job (its settings ConfigMap and RayJob, as the GPU stack applies them)
    apply_in_order(control_plane, [o for o in stack_manifests(rbac_stack.gpu_template) if o["kind"] != "Namespace"])
    # AND a researcher authenticated by a certificate of the cluster's CA, in the access entry's group
    kubeconfig = str(
        user_kubeconfig(control_plane, tmp_path / "researcher", user="researcher", groups=(rbac_stack.group,))
    )

    # WHEN the researcher submits a job of their own (followed for a few seconds: no GPU node comes here)
    code = main(
        [
            "submit",
            "--kubeconfig",
            kubeconfig,
            "--deployed",
            f"{NS}/{JOB}",
            "--name",
            "mine",
            "--timeout",
            "5",
            "--poll",
            "0.5",
        ]
    )
    out = capsys.readouterr()
    # THEN everything submit creates is there, made by the researcher's credentials, and owned by the RayJob (the
    # JSON patch of ownerReferences was allowed)
    text = out.out + out.err
    assert "Forbidden" not in text and "403" not in text, text
    assert f"submitted RayJob {NS}/mine" in text, text  # it read the deployed settings and listed the RayClusters
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    job: Any = custom.get_namespaced_custom_object(RAY, "v1", NS, "rayjobs", "mine")
    config_maps: Any = core.list_namespaced_config_map(NS)
    owned = [
        c.metadata.name
        for c in config_maps.items
        if any(o.uid == job["metadata"]["uid"] for o in c.metadata.owner_references or [])
    ]
    assert owned, f"no ConfigMap owned by RayJob mine (submit exit {code}): {text}"

    # WHEN the researcher follows it, THEN it reads the job's state (and would read its pods and their logs)
    code = main(
        ["follow", "mine", "--kubeconfig", kubeconfig, "-c", f"namespace={NS}", "--timeout", "3", "--poll", "0.5"]
    )
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Forbidden" not in text and "403" not in text and "RayJob mine: Initializing" in text, f"exit {code}: {text}"
    # WHEN the researcher verifies the cluster, THEN every read is answered (here, with no GPU nodes or device plugins:
    # "not found" is a 404, an allowed read), none refused
    main(["verify", "--kubeconfig", kubeconfig, "-c", f"namespace={NS}", "--json"])
    out = capsys.readouterr()
    checks = {c["id"]: c["detail"] for c in json.loads(out.out)["checks"]}
    denied = {
        check: detail
        for check, detail in checks.items()
        if "forbidden" in detail.lower() or "403" in detail or "cannot" in detail.lower()
    }
    assert not denied and len(checks) >= 10, checks
    assert checks["nvidia-device-plugin"].startswith("not found"), checks  # DaemonSets in kube-system: readable

    # AND what deletes or changes the cluster, or reads a secret, is refused with 403 (RBAC); deleting the
    # deployment's RayJob, which RBAC allows, with 422 (the admission policy: a researcher deletes only their own)
    researcher = api_client_of(Path(kubeconfig))
    as_custom, as_core = client.CustomObjectsApi(researcher), client.CoreV1Api(researcher)
    cluster = job.get("status", {}).get("rayClusterName") or "any"
    refused = {
        "delete the RayCluster": lambda: as_custom.delete_namespaced_custom_object(
            RAY, "v1", NS, "rayclusters", cluster
        ),
        "delete the RayJob": lambda: as_custom.delete_namespaced_custom_object(RAY, "v1", NS, "rayjobs", JOB),
        "delete the namespace": lambda: as_core.delete_namespace(NS),
        "list secrets": lambda: as_core.list_namespaced_secret(NS),
        # a manifest dict as the body: the client takes one (the kubernetes stubs name only the model)
        "create a pod": lambda: as_core.create_namespaced_pod(
            NS,
            {  # pyright: ignore[reportArgumentType]
                "metadata": {"name": "x"},
                "spec": {"containers": [{"name": "x", "image": "busybox"}]},
            },
        ),
        "read another namespace's ConfigMaps": lambda: as_core.list_namespaced_config_map("kube-system"),
    }
    assert {what: _status(call) for what, call in refused.items()} == {
        **dict.fromkeys(refused, 403),
        "delete the RayJob": 422,
    }


def test_a_researcher_reads_the_submitters_log_as_follow_does(
    control_plane: ControlPlane, api: ApiClient, rbac_stack: RbacStack, nodes: Nodes, tmp_path: Path
):
    from ray_efa.core import catalog
    from ray_efa.core.scheduling import SYSTEM_NODE_LABELS
    from ray_efa.ops.submit import SUBMITTER_CONTAINER, submitter_log

    # GIVEN the submitter pod of a researcher's RayJob, running on a system node, whose log the node's kubelet API
    # (KWOK) serves through the API server
    nodes.add(catalog.SYSTEM_INSTANCES["m7i.large"], 1, labels=dict(SYSTEM_NODE_LABELS), prefix="sys-")
    pod = "mine-log-x8k2p"
    # a manifest dict as the body: the client takes one (the kubernetes stubs name only the model)
    client.CoreV1Api(api).create_namespaced_pod(
        NS,
        {  # pyright: ignore[reportArgumentType]
            "metadata": {"name": pod, "labels": {"job-name": "mine-log", "batch.kubernetes.io/job-name": "mine-log"}},
            # as the Job controller makes it from the stack's template: the workload admission policy admits no other
            "spec": {
                "nodeSelector": dict(SYSTEM_NODE_LABELS),
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": SUBMITTER_CONTAINER,
                        "image": "registry.k8s.io/pause:3.10",
                        "securityContext": {"allowPrivilegeEscalation": False},
                    }
                ],
            },
        },
    )
    wait_for(
        lambda: status_of(client.CoreV1Api(api).read_namespaced_pod(pod, NS)).phase == "Running", f"pod {pod} Running"
    )
    control_plane.serve_logs(NS, {SUBMITTER_CONTAINER: "epoch 1/1  loss 0.5\nexit code 0\n"}, pods=[pod])
    # WHEN `follow` reads it with the researcher's credentials (the access entry's group, the stack's Role)
    kubeconfig = user_kubeconfig(control_plane, tmp_path / "researcher", user="researcher", groups=(rbac_stack.group,))
    text = submitter_log(api_client_of(kubeconfig), NS, "mine-log")
    # THEN the API server fetched it from the kubelet for them: the Role's `get pods/log`, end to end
    assert text.splitlines() == ["epoch 1/1  loss 0.5", "exit code 0"], text
    client.CoreV1Api(api).delete_namespaced_pod(pod, NS, grace_period_seconds=0)
