"""Helpers shared by the infra constructs (not part of the public API)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import jsii
from aws_cdk import Token
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_lambda as lambda_
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from aws_cdk.lambda_layer_kubectl_v36 import KubectlV36Layer
from constructs import Construct, IConstruct, IValidation

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

CHART_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
"""A Helm chart version as the constructs take one: x.y.z."""


def literal_cluster_name(cluster: eks.ICluster) -> str | None:
    """`cluster`'s name as a literal: an imported cluster's, or the cluster_name a created eks.Cluster was given (its
    cluster_name attribute is a Ref then; its CfnCluster holds the literal). None when neither is one."""
    if not Token.is_unresolved(cluster.cluster_name):
        return cluster.cluster_name
    resource = cluster.node.default_child
    if (
        isinstance(resource, eks.CfnCluster)
        and isinstance(resource.name, str)
        and not Token.is_unresolved(resource.name)
    ):
        return resource.name
    return None


def literal_kubernetes_version(cluster: eks.ICluster) -> str | None:
    """The Kubernetes version a created eks.Cluster was given (its CfnCluster's Version), as a literal; None for an
    imported cluster, whose version the construct does not know."""
    resource = cluster.node.default_child
    if (
        isinstance(resource, eks.CfnCluster)
        and isinstance(resource.version, str)
        and not Token.is_unresolved(resource.version)
    ):
        return resource.version
    return None


def kubernetes_version(version: str) -> eks.KubernetesVersion:
    return _VERSIONS[version][0]


def kubectl_layer(scope: Construct, version: str) -> lambda_.LayerVersion:
    """The kubectl Lambda layer matching the cluster's Kubernetes version."""
    return _VERSIONS[version][1](scope, "KubectlLayer")


def helm_chart(
    scope: Construct,
    construct_id: str,
    cluster: eks.ICluster,
    release: HelmRelease,
    version: str,
    values: dict[str, Any],
    **options: Any,
) -> eks.HelmChart:
    """A pinned Helm release; `wait` so that what depends on it (CRDs, DaemonSets) exists when it completes."""
    return eks.HelmChart(
        scope,
        construct_id,
        cluster=cluster,
        chart=release.chart,
        repository=release.repository,
        release=release.release,
        namespace=release.namespace,
        version=version,
        values=values,
        wait=True,
        **options,
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
        raise ValueError(
            f"{prop} makes the node group name {name!r}, which EKS refuses: at most 63 letters, digits, "
            "'-' or '_'; choose a shorter cluster_name"
        )
    return name


@jsii.implements(IValidation)
class _Check:
    def __init__(self, check: Callable[[], list[str]]) -> None:
        self._check = check

    def validate(self) -> list[str]:
        return self._check()


def add_synth_check(scope: Construct, check: Callable[[], list[str]]) -> None:
    """Run `check` when the app synthesizes (every construct exists by then, in whatever order it was added); each
    string it returns fails the synth, under `scope`'s path."""
    scope.node.add_validation(_Check(check))


_C = TypeVar("_C", bound=IConstruct)


def on_cluster(scope: IConstruct, kind: type[_C], cluster: eks.ICluster) -> list[_C]:
    """The constructs of `kind` in `scope`'s whole app whose `cluster` attribute is `cluster` (the same object, or a
    construct at the same path)."""

    def same(other: object) -> bool:
        return other is cluster or (isinstance(other, Construct) and other.node.path == cluster.node.path)

    return [c for c in scope.node.root.node.find_all() if isinstance(c, kind) and same(getattr(c, "cluster", None))]


def common_labels(prop: str, label_sets: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """The labels every one of `label_sets` carries with the same value: a node selector that selects them all.
    ValueError naming `prop` when there is none."""
    sets = [dict(labels) for labels in label_sets]
    if not sets:
        raise ValueError(f"{prop} is empty: pass the node group(s) the construct serves")
    common = {key: value for key, value in sets[0].items() if all(s.get(key) == value for s in sets[1:])}
    if not common:
        raise ValueError(
            f"{prop}: the node groups share no label ({sets!r}), so no node selector selects them all; "
            "give them a common label"
        )
    return common


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether a pod with node selector `selector` may run on a node labelled `labels`."""
    return all(labels.get(key) == value for key, value in selector.items())


def node_role_policies(nodegroup: eks.Nodegroup, policies: Iterable[str]) -> None:
    """Give the role aws-cdk-lib made for `nodegroup` exactly the AWS managed `policies` (it attaches the VPC CNI's
    too). The role keeps its logical id and ARN, so a deployed node group is not replaced (its NodeRole is
    unchanged): CloudFormation updates the role's ManagedPolicyArns in place."""
    from aws_cdk import aws_iam as iam

    role = nodegroup.role.node.default_child
    assert isinstance(role, iam.CfnRole), f"{nodegroup.node.path}: a node group given a role of its own"
    # The L1 property itself (not an override), which cdk-nag reads too.
    role.managed_policy_arns = [
        iam.ManagedPolicy.from_aws_managed_policy_name(name).managed_policy_arn for name in policies
    ]
