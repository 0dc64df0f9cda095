"""Helpers shared by the infra constructs (not part of the public API)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from aws_cdk import Token
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_lambda as lambda_
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from aws_cdk.lambda_layer_kubectl_v36 import KubectlV36Layer
from constructs import Construct

from ray_efa.core.addons import HelmRelease
from ray_efa.core.scheduling import node_selector_problem
from ray_efa.core.settings import KUBERNETES_VERSIONS

# kubernetesVersion -> (aws_eks_v2 version, kubectl layer class). The kubectl layer must match the cluster version;
# every version core.settings allows must appear here (a test checks it).
_VERSIONS = {
    "1.35": (eks.KubernetesVersion.V1_35, KubectlV35Layer),
    "1.36": (eks.KubernetesVersion.V1_36, KubectlV36Layer),
}
assert set(_VERSIONS) == set(KUBERNETES_VERSIONS), "core.settings.KUBERNETES_VERSIONS and infra disagree"


def literal_cluster_name(cluster: eks.ICluster) -> str | None:
    """`cluster`'s name as a literal: an imported cluster's, or the cluster_name a created eks.Cluster was given (its
    cluster_name attribute is a Ref then; its CfnCluster holds the literal). None when neither is one."""
    if not Token.is_unresolved(cluster.cluster_name):
        return cluster.cluster_name
    resource = cluster.node.default_child
    if isinstance(resource, eks.CfnCluster) and isinstance(resource.name, str) and not Token.is_unresolved(resource.name):
        return resource.name
    return None


def literal_kubernetes_version(cluster: eks.ICluster) -> str | None:
    """The Kubernetes version a created eks.Cluster was given (its CfnCluster's Version), as a literal; None for an
    imported cluster, whose version the construct does not know."""
    resource = cluster.node.default_child
    if isinstance(resource, eks.CfnCluster) and isinstance(resource.version, str) and not Token.is_unresolved(
            resource.version):
        return resource.version
    return None


def kubernetes_version(version: str) -> eks.KubernetesVersion:
    return _VERSIONS[version][0]


def kubectl_layer(scope: Construct, version: str) -> lambda_.LayerVersion:
    """The kubectl Lambda layer matching the cluster's Kubernetes version."""
    return _VERSIONS[version][1](scope, "KubectlLayer")


def helm_chart(
    scope: Construct, construct_id: str, cluster: eks.ICluster, release: HelmRelease, version: str,
    values: dict[str, Any],
    **options: Any,
) -> eks.HelmChart:
    """A pinned Helm release; `wait` so that what depends on it (CRDs, DaemonSets) exists when it completes."""
    return eks.HelmChart(
        scope, construct_id, cluster=cluster, chart=release.chart, repository=release.repository,
        release=release.release, namespace=release.namespace, version=version, values=values, wait=True, **options,
    )


def check_node_selector(prop: str, selector: Mapping[str, str]) -> None:
    """Raise ValueError naming the prop when `selector` is not a valid node selector."""
    problem = node_selector_problem(selector)
    if problem is not None:
        raise ValueError(f"{prop} {problem}, got {dict(selector)!r}")


def follow_kubernetes_version(nodegroup: eks.Nodegroup, version: str | None) -> None:
    """Pin the managed node group to the cluster's Kubernetes `version`, so that a kubernetesVersion bump upgrades its
    nodes too (UpdateNodegroupVersion to the new version's latest EKS AMI), not only the control plane.

    aws_eks_v2's Nodegroup takes no version (only releaseVersion), so it is set on its AWS::EKS::Nodegroup. Without it
    a node group keeps the version it was created with: "If no version is specified, then the Kubernetes version of
    the node group does not change" (EKS API reference, UpdateNodegroupVersion; CreateNodegroup: "By default, the
    Kubernetes version of the cluster is used"). The launch templates here set no image id (the EKS AMI of the
    node group's amiType), where EKS accepts a version ("If you specify launchTemplate, and your launch template
    uses a custom AMI, then don't specify version"). `Version` updates without interruption of the resource
    (AWS::EKS::Nodegroup, CloudFormation reference): EKS rolls the nodes, drained, onto the new AMI.
    """
    if version is None:
        return
    resource = nodegroup.node.default_child
    assert isinstance(resource, eks.CfnNodegroup)
    resource.version = version


_NODEGROUP_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,62}$")


def nodegroup_name(prop: str, *parts: str) -> str:
    """A managed node group name from `parts` (dots become '-'); raise ValueError naming `prop` when EKS would refuse
    it (1-63 letters, digits, '-' or '_', starting with a letter or digit: CreateNodegroup's nodegroupName)."""
    name = "-".join(part if Token.is_unresolved(part) else part.replace(".", "-") for part in parts)
    if not Token.is_unresolved(name) and not _NODEGROUP_NAME.match(name):
        raise ValueError(f"{prop} makes the node group name {name!r}, which EKS refuses: at most 63 letters, digits, "
                         "'-' or '_'; choose a shorter cluster_name")
    return name
