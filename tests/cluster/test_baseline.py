"""The reset between modules (tests/cluster/baseline.py) on the real control plane: what a module makes, of every
scope and kind, is gone after it, and the names it used can be used again at once."""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.api_client import ApiClient

from ray_efa.core import catalog
from tests.cluster import baseline
from tests.cluster.conftest import Nodes
from tests.cluster.controlplane import ControlPlane

RAY_CLUSTER = {
    "apiVersion": "ray.io/v1",
    "kind": "RayCluster",
    "metadata": {"name": "left-behind"},
    "spec": {
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray"}]}},
        }
    },
}


def _make_a_module_s_leftovers(api: ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="left-behind")))
    Nodes(api).add(catalog.SYSTEM_INSTANCES["m7i.large"], 1, labels={})  # (not removed: a module's node)
    pod_spec = client.V1PodSpec(containers=[client.V1Container(name="c", image="pause")])
    core.create_namespaced_pod("left-behind", client.V1Pod(metadata=client.V1ObjectMeta(name="p"), spec=pod_spec))
    core.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="left-behind")))
    role = client.V1ClusterRole(metadata=client.V1ObjectMeta(name="left-behind"), rules=[])
    client.RbacAuthorizationV1Api(api).create_cluster_role(role)
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "ray.io", "v1", "left-behind", "rayclusters", RAY_CLUSTER
    )


def test_everything_made_since_the_snapshot_is_deleted_and_its_names_are_free_again(
    control_plane: ControlPlane, api: ApiClient
):
    before = baseline.snapshot(api)
    _make_a_module_s_leftovers(api)
    made = {r.object_path(m) for r, m in baseline.leftovers(api, before)}
    assert {
        "/api/v1/namespaces/left-behind",
        "/api/v1/namespaces/left-behind/pods/p",
        "/api/v1/namespaces/default/configmaps/left-behind",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/left-behind",
        "/apis/ray.io/v1/namespaces/left-behind/rayclusters/left-behind",
    } <= made
    assert any(path.startswith("/api/v1/nodes/m7i-large-") for path in made)

    baseline.restore(api, before, timeout_s=60)

    assert baseline.leftovers(api, before) == []
    # the next module may use the same names at once
    _make_a_module_s_leftovers(api)
    baseline.restore(api, before, timeout_s=60)
    assert baseline.leftovers(api, before) == []
