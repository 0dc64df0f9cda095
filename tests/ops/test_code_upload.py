"""Putting codeDir's zip at its URI under storagePath (ops.code_upload), once per content, never over an object it
did not write. S3 is moto's (the S3 API cannot exist here); AccessDenied, which moto does not enforce, is botocore's
Stubber with S3's error shape."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from ray_efa.k8s.code_archive import build_code_archive
from ray_efa.ops.code_upload import CodeUploadError, upload_code_archive

BUCKET = "research-ckpt"


@pytest.fixture
def archive(tmp_path: Path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("def fit(config): ...\n")
    (tmp_path / "pkg" / "table.bin").write_bytes(bytes(range(256)))
    return build_code_archive(tmp_path, storage_path=f"s3://{BUCKET}/ray-efa")


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-2")
        client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-east-2"})
        yield client


def test_the_zip_is_uploaded_once_and_found_the_second_time(archive, s3):
    uri = archive.uri
    key = uri.removeprefix(f"s3://{BUCKET}/")
    assert upload_code_archive(s3, archive) is True
    stored = s3.get_object(Bucket=BUCKET, Key=key)
    assert stored["Body"].read() == archive.data and stored["Metadata"] == {"sha256": archive.sha256}
    written = stored["LastModified"]
    # WHEN the same code is submitted again THEN nothing is sent
    assert upload_code_archive(s3, archive) is False
    assert s3.head_object(Bucket=BUCKET, Key=key)["LastModified"] == written


def test_an_object_ray_efa_did_not_write_is_left_alone(archive, s3):
    uri = archive.uri
    key = uri.removeprefix(f"s3://{BUCKET}/")
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"someone else's")
    with pytest.raises(CodeUploadError, match="an object is there that ray-efa did not write for this code"):
        upload_code_archive(s3, archive)
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"someone else's"


def test_a_bucket_that_is_not_there_is_named_with_where_the_right_one_is(archive, s3):
    archive = dataclasses.replace(archive, uri=archive.uri.replace(BUCKET, "no-such-bucket-here"))
    uri = archive.uri
    with pytest.raises(CodeUploadError) as raised:
        upload_code_archive(s3, archive)
    # head_object answers a bare 404 for a missing bucket; put_object then names it
    assert f"cannot upload the code to {uri}: NoSuchBucket" in str(raised.value)
    assert "CheckpointStoragePath" in str(raised.value)


def test_credentials_that_may_not_write_are_told_what_they_need(archive):
    client = boto3.client("s3", region_name="us-east-2", aws_access_key_id="x", aws_secret_access_key="y")
    with Stubber(client) as stub:
        stub.add_client_error("head_object", service_error_code="404", http_status_code=404)
        stub.add_client_error(
            "put_object", service_error_code="AccessDenied", service_message="Access Denied", http_status_code=403
        )
        with pytest.raises(
            CodeUploadError,
            match=r"AccessDenied: Access Denied \(these credentials need "
            r"s3:GetObject and s3:PutObject under storagePath\)",
        ):
            upload_code_archive(client, archive)
        stub.assert_no_pending_responses()
