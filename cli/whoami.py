"""`ray-efa whoami`: print the IAM role or user ARN of your AWS credentials, for -c adminPrincipalArns=..."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ray_efa.cli._common import add_json_option, fail, print_json

EXIT_NO_IDENTITY = 1
"""The credentials' identity could not be read, or is not an IAM role or user (root, a federated user)."""


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="print your credentials' IAM role/user ARN, as adminPrincipalArns wants it",
        description=(__doc__ or "") + " Use it as: npx cdk deploy --all -c adminPrincipalArns=$(ray-efa whoami). "
        "Exit 1 when the identity cannot be read or is not an IAM role or user.",
    )
    p.add_argument("--profile", help="AWS profile (default: the AWS SDK's usual chain)")
    add_json_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import boto3
    from botocore.exceptions import BotoCoreError

    from ray_efa.ops.identity import IdentityError, admin_principal_arn

    try:
        arn = admin_principal_arn(boto3.Session(profile_name=args.profile))
    except (IdentityError, BotoCoreError) as error:  # BotoCoreError: e.g. an unknown --profile
        return fail(args, "whoami", str(error), code=EXIT_NO_IDENTITY)
    if args.json:
        print_json({"admin_principal_arn": arn})
    else:
        print(arn)
    return 0
