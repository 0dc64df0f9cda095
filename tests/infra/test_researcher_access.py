"""researcherPrincipalArns: EKS access entries in a Kubernetes group with no access policy, and the RBAC objects of
that group applied after the workload namespace. What the objects allow is proved on a real API server
(tests/cluster/test_rbac.py); here, what the synthesized stack holds."""

from __future__ import annotations

import json

from ray_efa.infra.researcher_access import CLUSTER_RULES, NAMESPACE_RULES, RESEARCHER_GROUP
from tests.infra.conftest import synthesize

RESEARCHER = "arn:aws:iam::111122223333:role/Researcher"
ADMIN = "arn:aws:iam::111122223333:role/Admin"


def _manifests(template) -> dict[str, tuple[dict, list]]:
    """(kind, name) of each object the kubectl handler applies -> (the object, its resource's DependsOn)."""
    found = {}
    for resource in template.find_resources("Custom::AWSCDK-EKS-KubernetesResource").values():
        manifest = resource["Properties"]["Manifest"]
        if isinstance(manifest, str):
            for obj in json.loads(manifest):
                found[f"{obj['kind']}/{obj['metadata']['name']}"] = (obj, resource.get("DependsOn", []))
    return found


def test_researchers_get_an_access_entry_in_their_group_with_no_access_policy_and_rbac_after_the_namespace():
    synth = synthesize(researcherPrincipalArns=RESEARCHER, adminPrincipalArns=ADMIN)
    entries = {
        e["Properties"]["PrincipalArn"]: e["Properties"]
        for e in synth.cluster.find_resources("AWS::EKS::AccessEntry").values()
        if isinstance(e["Properties"]["PrincipalArn"], str)
    }  # not the deploy role's (a token)
    # THEN the researcher's entry carries the group and no EKS policy (RBAC alone authorizes it); the admin's is as before
    assert entries[RESEARCHER]["KubernetesGroups"] == [RESEARCHER_GROUP]
    assert entries[RESEARCHER]["Type"] == "STANDARD" and "AccessPolicies" not in entries[RESEARCHER]
    assert "KubernetesGroups" not in entries[ADMIN] and entries[ADMIN]["AccessPolicies"]
    # AND the Role, the ClusterRole and their bindings name that group, each applied after the namespace
    manifests = _manifests(synth.cluster)
    namespace = synth.settings.workload.namespace
    (namespace_id,) = [
        lid
        for lid, r in synth.cluster.find_resources("Custom::AWSCDK-EKS-KubernetesResource").items()
        if '"kind":"Namespace"' in r["Properties"]["Manifest"]
    ]
    for key in (
        "Role/ray-efa-researcher",
        "RoleBinding/ray-efa-researcher",
        f"ClusterRole/ray-efa-researcher-{namespace}",
        f"ClusterRoleBinding/ray-efa-researcher-{namespace}",
    ):
        obj, depends_on = manifests[key]
        assert namespace_id in depends_on, f"{key} must wait for the namespace: {depends_on}"
        if "Binding" in key:
            assert obj["subjects"] == [
                {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": RESEARCHER_GROUP}
            ]
    assert manifests["Role/ray-efa-researcher"][0]["metadata"]["namespace"] == namespace
    # AND the Role's delete of RayJobs comes with the admission policy that admits the delete of one's own alone
    policy, _ = manifests[f"ValidatingAdmissionPolicy/ray-efa-researchers-{namespace}"]
    assert {
        "apiGroups": ["ray.io"],
        "apiVersions": ["*"],
        "resources": ["rayjobs"],
        "operations": ["CREATE", "DELETE"],
    } in policy["spec"]["matchConstraints"]["resourceRules"]


def test_without_researchers_the_stack_has_no_researcher_rbac(default_synth):
    assert not [key for key in _manifests(default_synth.cluster) if "researcher" in key]
    assert not [
        e
        for e in default_synth.cluster.find_resources("AWS::EKS::AccessEntry").values()
        # (the system nodes' job guard has a group of its own: it lists RayJobs, tests/infra/test_job_guard.py)
        if e["Properties"].get("KubernetesGroups") not in (None, ["ray-train-cluster-job-guard"])
    ]


def test_no_researcher_rule_deletes_changes_the_cluster_or_names_secrets():
    for rule in (*NAMESPACE_RULES, *CLUSTER_RULES):
        assert not {"deletecollection", "update", "*", "escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
        assert "secrets" not in rule["resources"] and "*" not in rule["resources"], rule
        assert not {"pods/portforward", "pods/exec", "pods/attach"} & set(rule["resources"]), rule
    deleted = {r for rule in NAMESPACE_RULES if "delete" in rule["verbs"] for r in rule["resources"]}
    assert deleted == {"rayjobs"}  # ray-efa cancel; the admission policy admits the delete of one's own alone
    for rule in CLUSTER_RULES:  # across the cluster: read only
        assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
    patched = {r for rule in NAMESPACE_RULES if "patch" in rule["verbs"] for r in rule["resources"]}
    assert patched == {"configmaps", "networkpolicies"}  # submit's ownerReferences patch, never the Ray objects
