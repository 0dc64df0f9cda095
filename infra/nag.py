"""cdk-nag AwsSolutions acknowledgements: each names the rule, the exact finding and why it is accepted.

The constructs that own the resources call these, so a platform repository that embeds them inherits the same
reasoned acknowledgements. Nothing is acknowledged stack-wide.
"""

from __future__ import annotations

import aws_cdk as cdk
from constructs import IConstruct

__all__ = ["acknowledge", "acknowledge_managed_policies", "NODE_ROLE_POLICIES"]

_MANAGED = "Policy::arn:<AWS::Partition>:iam::aws:policy/{}"

NODE_ROLE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly")
"""What EKS requires of a managed node group's role: AWS maintains these as the API evolves."""


def acknowledge(construct: IConstruct, rule: str, reason: str, finding: str | None = None) -> None:
    """Acknowledge one AwsSolutions finding (`rule`, optionally narrowed to `finding`) on one construct."""
    rule_id = f"AwsSolutions::{rule}" + (f"[{finding}]" if finding else "")
    cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id=rule_id, reason=reason))


def acknowledge_managed_policies(construct: IConstruct, policies: tuple[str, ...], reason: str) -> None:
    """AwsSolutions-IAM4, once per AWS managed policy the role uses."""
    for policy in policies:
        acknowledge(construct, "AwsSolutions-IAM4", reason, _MANAGED.format(policy))
