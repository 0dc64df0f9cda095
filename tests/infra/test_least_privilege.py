"""What docs/security.md says of each identity and of the cluster, checked on the synthesized templates: cdk-nag's EKS
rules never evaluate an aws_eks_v2 cluster, so the project checks the endpoint, the control-plane logs, the launch
templates' IMDS settings, the cluster creator's access, the node roles, the VPC CNI's role, the Ray pods' S3 grants
and the admission policies itself."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ray_efa.k8s.admission_policy import researcher_policy_name, workload_policy_name
from ray_efa.k8s.code_archive import CODE_ARCHIVE_FOLDER
from tests.cluster.workload import stack_manifests
from tests.infra.conftest import synthesize

CNI_POLICY = "AmazonEKS_CNI_Policy"


def _resources(template: Any, kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in template.to_json()["Resources"].items() if r["Type"] == kind}


def _managed_policies(role: dict[str, Any]) -> list[str]:
    return [json.dumps(arn) for arn in role["Properties"].get("ManagedPolicyArns", [])]


def _statements(template: Any, role_id: str) -> list[dict[str, Any]]:
    """Every statement of the inline policies attached to role `role_id`."""
    return [
        statement
        for policy in _resources(template, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


def test_the_endpoint_is_open_by_default_and_narrowed_by_one_setting(default_synth):
    (cluster,) = _resources(default_synth.cluster, "AWS::EKS::Cluster").values()
    assert cluster["Properties"]["ResourcesVpcConfig"]["PublicAccessCidrs"] == ["0.0.0.0/0"]
    (narrowed,) = _resources(synthesize(publicAccessCidrs="203.0.113.0/24").cluster, "AWS::EKS::Cluster").values()
    assert narrowed["Properties"]["ResourcesVpcConfig"]["PublicAccessCidrs"] == ["203.0.113.0/24"]


def test_every_control_plane_log_is_on(default_synth):
    (cluster,) = _resources(default_synth.cluster, "AWS::EKS::Cluster").values()
    enabled = {entry["Type"] for entry in cluster["Properties"]["Logging"]["ClusterLogging"]["EnabledTypes"]}
    assert enabled == {"api", "audit", "authenticator", "controllerManager", "scheduler"}


def test_every_launch_template_keeps_imds_from_pods(default_synth):
    templates = [
        *_resources(default_synth.cluster, "AWS::EC2::LaunchTemplate").values(),
        *_resources(default_synth.gpu, "AWS::EC2::LaunchTemplate").values(),
    ]
    assert len(templates) >= 2  # the system nodes' and the GPU nodes'
    for template in templates:
        options = template["Properties"]["LaunchTemplateData"]["MetadataOptions"]
        assert options["HttpTokens"] == "required" and options["HttpPutResponseHopLimit"] == 1, options


def test_the_cluster_creator_keeps_no_admin_unless_asked(default_synth):
    (cluster,) = _resources(default_synth.cluster, "AWS::EKS::Cluster").values()
    assert cluster["Properties"]["AccessConfig"]["BootstrapClusterCreatorAdminPermissions"] is False
    # a cluster deployed before the setting keeps a template without the property: no replacement
    (kept,) = _resources(synthesize(clusterCreatorAdmin=True).cluster, "AWS::EKS::Cluster").values()
    assert "BootstrapClusterCreatorAdminPermissions" not in kept["Properties"]["AccessConfig"]


def test_no_node_role_carries_the_cni_policy_and_the_vpc_cni_has_its_own_role(default_synth):
    # GIVEN every role of both stacks
    roles = {**_resources(default_synth.cluster, "AWS::IAM::Role"), **_resources(default_synth.gpu, "AWS::IAM::Role")}
    with_cni = {k for k, role in roles.items() if any(CNI_POLICY in arn for arn in _managed_policies(role))}
    # THEN one role carries the CNI's policy: the one the vpc-cni add-on's Pod Identity association gives aws-node
    (addon,) = [
        a["Properties"]
        for a in _resources(default_synth.cluster, "AWS::EKS::Addon").values()
        if a["Properties"]["AddonName"] == "vpc-cni"
    ]
    (association,) = addon["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "aws-node"
    assert with_cni == {association["RoleArn"]["Fn::GetAtt"][0]}
    trust = roles[association["RoleArn"]["Fn::GetAtt"][0]]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert {p["Principal"]["Service"] for p in trust} == {"pods.eks.amazonaws.com"}
    # AND both node groups' roles keep what EKS requires of them
    for template in (default_synth.cluster, default_synth.gpu):
        for group in _resources(template, "AWS::EKS::Nodegroup").values():
            role = roles[group["Properties"]["NodeRole"]["Fn::GetAtt"][0]]
            policies = " ".join(_managed_policies(role))
            assert "AmazonEKSWorkerNodePolicy" in policies and "AmazonEC2ContainerRegistryReadOnly" in policies
            assert CNI_POLICY not in policies


def _ray_role(synth: Any) -> str:
    (account,) = [o for o in stack_manifests(synth.cluster.to_json()) if o["kind"] == "ServiceAccount"]
    (association,) = [
        a["Properties"]
        for a in _resources(synth.cluster, "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] == account["metadata"]["name"]
    ]
    return association["RoleArn"]["Fn::GetAtt"][0]


@pytest.mark.parametrize("context", [{}, {"storagePath": "s3://team-bucket/runs"}], ids=["made-bucket", "storagePath"])
def test_the_ray_role_writes_only_under_its_prefix_and_deletes_no_version(context):
    synth = synthesize(**context)
    prefix = "runs/" if context else "ray-efa/"
    statements = _statements(synth.cluster, _ray_role(synth))
    allowed = [s for s in statements if s["Effect"] == "Allow"]
    # THEN no grant deletes an object version, or names a wildcard action
    assert not any(a.startswith("s3:DeleteObjectVersion") or a.endswith("*") for s in allowed for a in _actions(s))
    # AND every write or delete is on objects under the prefix
    writes = [s for s in allowed if any(a in ("s3:PutObject", "s3:DeleteObject") for a in _actions(s))]
    assert writes
    for statement in writes:
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        assert all(json.dumps(r).endswith((f'/{prefix}*"]]}}', f'/{prefix}*"')) for r in resources), resources
    # AND the code zips under it are read-only to the pods
    (deny,) = [s for s in statements if s["Effect"] == "Deny"]
    assert {"s3:PutObject", "s3:DeleteObject"} <= set(_actions(deny))
    assert f"{prefix}{CODE_ARCHIVE_FOLDER}/*" in json.dumps(deny["Resource"])


def test_the_cluster_stack_applies_the_admission_policies():
    # the researchers' policy with the researchers (their access entries): the workload's always
    synth = synthesize(researcherPrincipalArns="arn:aws:iam::111122223333:role/Researcher")
    objects = stack_manifests(synth.cluster.to_json())
    namespace = synth.settings.workload.namespace
    policies = {o["metadata"]["name"] for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {o["spec"]["policyName"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert policies == set(bindings) == {workload_policy_name(namespace), researcher_policy_name(namespace)}
    for binding in bindings.values():
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": namespace
        }


def test_the_namespace_denies_ingress_to_any_pod_no_ray_policy_admits_to(default_synth):
    namespace = default_synth.settings.workload.namespace
    (deny,) = [
        o
        for o in stack_manifests(default_synth.cluster.to_json())
        if o["kind"] == "NetworkPolicy" and o["metadata"]["namespace"] == namespace
    ]
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
