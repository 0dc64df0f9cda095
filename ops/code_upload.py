"""Put a code archive (k8s.code_archive) at its s3:// URI for `ray-efa submit`, once per content.

    uploaded = upload_code_archive(s3_client, archive)   # at archive.uri; True: written now; False: it was there

The key names the content's hash, so an object already at the URI that carries this archive's hash (its x-amz-meta-
sha256) is this code: nothing is sent again. An object there without that hash was not written by ray-efa for this
code and is left alone (CodeUploadError), never overwritten. `s3_client` is a boto3 S3 client (or a moto one in the
tests).
"""

from __future__ import annotations

from typing import Any

from ray_efa.k8s.code_archive import CodeArchive

__all__ = ["CodeUploadError", "upload_code_archive"]

_HASH_METADATA = "sha256"


class CodeUploadError(RuntimeError):
    """The archive could not be put at its URI; the message names the URI, S3's answer and what to check."""


def _bucket_key(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def _failed(uri: str, error: Exception) -> CodeUploadError:
    from botocore.exceptions import ClientError, NoCredentialsError

    if isinstance(error, NoCredentialsError):
        return CodeUploadError(
            f"cannot upload the code to {uri}: no AWS credentials here (aws configure, AWS_PROFILE or aws sso login)"
        )
    if isinstance(error, ClientError):
        e = error.response.get("Error", {})
        code = str(e.get("Code", "?"))
        hint = {
            "AccessDenied": " (these credentials need s3:GetObject and s3:PutObject under storagePath)",
            "403": " (these credentials need s3:GetObject and s3:PutObject under storagePath)",
            "NoSuchBucket": " (storagePath names a bucket that does not exist: the cluster stack's output "
            "CheckpointStoragePath gives the right one)",
        }.get(code, "")
        return CodeUploadError(f"cannot upload the code to {uri}: {code}: {e.get('Message', error)}{hint}")
    return CodeUploadError(f"cannot upload the code to {uri}: {error}")


def upload_code_archive(s3_client: Any, archive: CodeArchive) -> bool:
    """Write `archive` to `archive.uri` unless this content is there already; True when it was written now.

    Raises CodeUploadError when S3 refuses, or when another object holds the key."""
    from botocore.exceptions import BotoCoreError, ClientError

    uri = archive.uri
    bucket, key = _bucket_key(uri)
    try:
        head = s3_client.head_object(Bucket=bucket, Key=key)
    except ClientError as error:
        if str(error.response.get("Error", {}).get("Code")) not in ("404", "NoSuchKey", "NotFound"):
            raise _failed(uri, error) from None
        head = None
    except BotoCoreError as error:
        raise _failed(uri, error) from None
    if head is not None:
        if (head.get("Metadata") or {}).get(_HASH_METADATA) == archive.sha256:
            return False
        raise CodeUploadError(
            f"cannot upload the code to {uri}: an object is there that ray-efa did not write for this code (no "
            f"x-amz-meta-{_HASH_METADATA} {archive.sha256}); it is left alone: move it, or give another storagePath"
        )
    try:
        s3_client.put_object(
            Bucket=bucket,
            Key=key,
            Body=archive.data,
            ContentType="application/zip",
            Metadata={_HASH_METADATA: archive.sha256},
        )
    except (ClientError, BotoCoreError) as error:
        raise _failed(uri, error) from None
    return True
