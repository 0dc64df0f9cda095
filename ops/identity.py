"""The IAM principal behind the caller's AWS credentials, in the form EKS access entries accept (adminPrincipalArns)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

if TYPE_CHECKING:
    import boto3.session

__all__ = ["IdentityError", "admin_principal_arn"]

_ASSUMED_ROLE = re.compile(r"^arn:(?P<partition>aws[-a-z]*):sts::(?P<account>\d{12}):assumed-role/(?P<role>[^/]+)/.+$")
_IAM_PRINCIPAL = re.compile(r"^arn:aws[-a-z]*:iam::\d{12}:(?:role|user)/.+$")


class IdentityError(RuntimeError):
    """The caller's identity cannot be turned into an access-entry principal; the message says what to do."""


def admin_principal_arn(session: boto3.session.Session) -> str:
    """The IAM role or user ARN of `session`'s credentials (a boto3 Session).

    `sts get-caller-identity` names an assumed role by its session (arn:aws:sts::ACCOUNT:assumed-role/NAME/SESSION),
    which EKS refuses in an access entry; the role's own ARN may carry a path (IAM Identity Center roles live under
    aws-reserved/sso.amazonaws.com/), which the session ARN drops, so it is read back with `iam get-role`.
    """
    try:
        arn = session.client("sts").get_caller_identity()["Arn"]
    except NoCredentialsError:
        raise IdentityError(
            "no AWS credentials found (configure them, e.g. `aws configure sso` or AWS_PROFILE)"
        ) from None
    except (BotoCoreError, ClientError) as error:
        raise IdentityError(f"sts get-caller-identity failed: {error}") from None
    if _IAM_PRINCIPAL.match(arn):
        return arn
    assumed = _ASSUMED_ROLE.match(arn)
    if not assumed:
        raise IdentityError(
            f"{arn} is not an IAM role or user (root and federated users cannot hold access entries); use a role"
        )
    try:
        return session.client("iam").get_role(RoleName=assumed["role"])["Role"]["Arn"]
    except (BotoCoreError, ClientError) as error:
        raise IdentityError(
            f"you are role {assumed['role']} (from {arn}), but reading its ARN with iam get-role failed: {error}. "
            f"Ask for the role's ARN (IAM console, or an administrator: aws iam get-role --role-name {assumed['role']}); "
            f"if the role has no path it is arn:{assumed['partition']}:iam::{assumed['account']}:role/{assumed['role']}"
        ) from None
