"""cdk-nag AwsSolutions acknowledgements and checkov skips: each names the rule, the exact finding and why it is
accepted.

The constructs that own the resources call these, so a platform repository that embeds them inherits the same
reasoned acknowledgements. Nothing is acknowledged stack-wide. checkov reads its skips from the resource's
CloudFormation metadata (`Metadata.checkov.skip: [{id, comment}]`), where they travel with the template.
"""

from __future__ import annotations

import aws_cdk as cdk
from constructs import IConstruct

__all__ = ["acknowledge", "acknowledge_managed_policies", "skip_checkov", "NODE_ROLE_POLICIES", "CNI_POLICY"]

_MANAGED = "Policy::arn:<AWS::Partition>:iam::aws:policy/{}"

NODE_ROLE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly")
"""What EKS requires of a managed node group's role (AWS maintains these as the API evolves), less
AmazonEKS_CNI_Policy: the vpc-cni add-on has a role of its own (infra.vpc_cni), so no process on a node can use the
CNI's account-wide ENI and security-group rights through the node's role."""
CNI_POLICY = "AmazonEKS_CNI_Policy"
"""What aws-node (the VPC CNI) needs; aws-cdk-lib puts it on every node group role it makes."""


def acknowledge(construct: IConstruct, rule: str, reason: str, finding: str | None = None) -> None:
    """Acknowledge one AwsSolutions finding (`rule`, optionally narrowed to `finding`) on one construct."""
    rule_id = f"AwsSolutions::{rule}" + (f"[{finding}]" if finding else "")
    cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id=rule_id, reason=reason))


def acknowledge_managed_policies(construct: IConstruct, policies: tuple[str, ...], reason: str) -> None:
    """AwsSolutions-IAM4, once per AWS managed policy the role uses."""
    for policy in policies:
        acknowledge(construct, "AwsSolutions-IAM4", reason, _MANAGED.format(policy))


def skip_checkov(construct: IConstruct, check_id: str, reason: str) -> None:
    """Record in the CloudFormation resource's metadata that checkov's `check_id` does not apply to it, and why.

    `construct` is the CfnResource or an L2 construct whose default child is one.
    """
    resource = construct if isinstance(construct, cdk.CfnResource) else construct.node.default_child
    if not isinstance(resource, cdk.CfnResource):
        raise TypeError(f"{construct.node.path} is not a CloudFormation resource")
    if len(reason) < 30:
        raise ValueError(f"give checkov skip {check_id} on {construct.node.path} a specific reason")
    metadata = resource.get_metadata("checkov") or {}
    skips = [skip for skip in metadata.get("skip", []) if skip["id"] != check_id]
    resource.add_metadata("checkov", {**metadata, "skip": [*skips, {"id": check_id, "comment": reason}]})
