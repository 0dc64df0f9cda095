"""Every CloudWatch log group the cluster stack writes to: created by the stack, KMS-encrypted, with a retention,
and deleted with the stack (so that `cdk destroy` leaves no log group behind).

Log groups that AWS services would otherwise create on first write (EKS control-plane logs, a Lambda function's
logs) never expire and outlive the stack; creating them in the stack first, under the name the service writes to,
puts them under the stack's retention, encryption and lifecycle.
"""

from __future__ import annotations

from typing import cast

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

from ray_efa.core.settings import LOG_RETENTION_DAYS

__all__ = ["StackLogs"]

_KEY_PENDING_DAYS = 7  # KMS's shortest waiting period before a scheduled key deletion


class StackLogs(Construct):
    """The KMS key of the stack's log groups and the log groups themselves.

    The key (rotated yearly) lets CloudWatch Logs of this account and region use it for log groups only; it is
    scheduled for deletion (7-day waiting period) when the stack is destroyed, after the log groups it encrypts.
    """

    def __init__(self, scope: Construct, construct_id: str, *, retention_days: int) -> None:
        super().__init__(scope, construct_id)
        if retention_days not in LOG_RETENTION_DAYS:  # settings validate it; a construct user may not have
            raise ValueError(f"retention_days must be one of {LOG_RETENTION_DAYS}, got {retention_days}")
        self.retention_days = retention_days
        stack = Stack.of(self)
        self.key: kms.Key = kms.Key(
            self,
            "Key",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.DESTROY,
            pending_window=Duration.days(_KEY_PENDING_DAYS),
            description=f"CloudWatch Logs encryption of the log groups of stack {stack.stack_name}",
        )
        # CloudWatch Logs encrypts with the key only for log groups of this account and region (the encryption context
        # names the log group), as the CloudWatch Logs User Guide's key policy for encrypted log groups shows.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                # The jsii stub of ServicePrincipal names a parameter `_statement` where IPrincipal says `statement`, so
                # pyright finds the class unlike the protocol it implements (aws-cdk-lib 2.275).
                principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],  # pyright: ignore[reportArgumentType]
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                resources=["*"],
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": stack.format_arn(
                            service="logs",
                            resource="log-group",
                            resource_name="*",
                            arn_format=ArnFormat.COLON_RESOURCE_NAME,
                        )
                    }
                },
            )
        )

    def log_group(self, scope: Construct, construct_id: str, *, name: str | None = None) -> logs.LogGroup:
        """A new encrypted log group with the stack's retention, deleted with the stack."""
        group = logs.LogGroup(
            scope,
            construct_id,
            log_group_name=name,
            encryption_key=self.key,
            removal_policy=RemovalPolicy.DESTROY,
        )
        cast(logs.CfnLogGroup, group.node.default_child).retention_in_days = self.retention_days
        return group

    def adopt(self, log_group: logs.CfnLogGroup) -> None:
        """Give a log group another construct created (e.g. aws-eks-v2's kubectl provider) the stack's retention,
        key and lifecycle."""
        log_group.retention_in_days = self.retention_days
        log_group.kms_key_id = self.key.key_arn
        log_group.apply_removal_policy(RemovalPolicy.DESTROY)
        log_group.node.add_dependency(self.key)

    def for_function(
        self, scope: Construct, construct_id: str, *, function_name: str, users: tuple[IConstruct, ...]
    ) -> logs.LogGroup:
        """The log group Lambda writes a function's logs to (/aws/lambda/<name>), created before any of `users`
        (the custom resources that invoke the function) runs, so Lambda never creates it unmanaged."""
        group = self.log_group(scope, construct_id, name=f"/aws/lambda/{function_name}")
        for user in users:
            user.node.add_dependency(group)
        return group
