"""ray-efa whoami / ops.identity against moto's STS and IAM (AWS is mocked, nothing else)."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from ray_efa.cli import main
from ray_efa.core.settings import Settings
from ray_efa.ops.identity import IdentityError, admin_principal_arn

TRUST = '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"sts:AssumeRole"}]}'


@pytest.fixture
def aws(monkeypatch):
    for key in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-2")
    with mock_aws():
        yield boto3.Session(region_name="us-east-2")


def assumed_session(session, path: str) -> boto3.Session:
    role = session.client("iam").create_role(
        RoleName="AWSReservedSSO_Admin_0123", Path=path, AssumeRolePolicyDocument=TRUST
    )["Role"]
    credentials = session.client("sts").assume_role(RoleArn=role["Arn"], RoleSessionName="me@example.com")[
        "Credentials"
    ]
    return boto3.Session(
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
        region_name="us-east-2",
    )


def test_an_assumed_role_gives_the_roles_arn_with_its_path(aws):
    # GIVEN credentials of an IAM Identity Center role (path aws-reserved/sso.amazonaws.com/...)
    session = assumed_session(aws, "/aws-reserved/sso.amazonaws.com/us-east-2/")
    assert ":assumed-role/" in session.client("sts").get_caller_identity()["Arn"]
    # THEN the role's IAM ARN, path included, which is what EKS access entries and our settings accept
    arn = admin_principal_arn(session)
    assert arn.endswith(":role/aws-reserved/sso.amazonaws.com/us-east-2/AWSReservedSSO_Admin_0123")
    assert Settings.from_context({"adminPrincipalArns": arn}).cluster.admin_principal_arns == (arn,)


def test_an_iam_user_is_returned_as_is(aws):
    aws.client("iam").create_user(UserName="alice")
    keys = aws.client("iam").create_access_key(UserName="alice")["AccessKey"]
    session = boto3.Session(
        aws_access_key_id=keys["AccessKeyId"], aws_secret_access_key=keys["SecretAccessKey"], region_name="us-east-2"
    )
    assert admin_principal_arn(session).endswith(":user/alice")


def test_whoami_prints_the_arn_for_the_deploy_command(aws, capsys, monkeypatch):
    session = assumed_session(aws, "/")
    credentials = session.get_credentials()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", credentials.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", credentials.secret_key)
    monkeypatch.setenv("AWS_SESSION_TOKEN", credentials.token)
    assert main(["whoami"]) == 0
    assert capsys.readouterr().out.strip().endswith(":role/AWSReservedSSO_Admin_0123")
    assert main(["whoami", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["admin_principal_arn"].endswith(":role/AWSReservedSSO_Admin_0123")


def test_whoami_without_credentials_says_so_in_one_line(monkeypatch, capsys, tmp_path):
    for key in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert main(["whoami"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ray-efa whoami: no AWS credentials found") and "Traceback" not in err
    assert main(["whoami", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["exit_code"] == 1


def test_an_unreadable_role_names_what_to_do(aws):
    # GIVEN a session whose role cannot be read back (here: it no longer exists)
    session = assumed_session(aws, "/")
    aws.client("iam").delete_role(RoleName="AWSReservedSSO_Admin_0123")
    with pytest.raises(IdentityError, match="aws iam get-role --role-name AWSReservedSSO_Admin_0123"):
        admin_principal_arn(session)
