"""codeDir on the pods, at k8s.names.USER_CODE_PATH, by one of two routes:

- a ConfigMap (UserCodeConfigMap) when the folder is text and small enough for one ConfigMap and kubectl's
  last-applied annotation: what `ray-efa manifests`, `ray-efa submit` and a small job of `cdk deploy` use;
- a zip in S3 (an archive URI), which an init container of every Ray pod downloads and unpacks into an emptyDir,
  with the pods' own role (Pod Identity): the CDK asset of infra.training_job.RayTrainingJob, or, from `ray-efa
  submit` and `ray-efa manifests`, the zip of k8s.code_archive under storagePath.

Why an init container and not Ray's runtime_env working_dir from s3://: Ray fetches remote working_dir and py_modules
URIs through smart_open (ray/_private/runtime_env/protocol.py, "You must `pip install smart_open[s3]`"), which the
Deep Learning Container does not promise; the init container uses pyarrow's S3 filesystem, which Ray Train itself
needs for an s3:// storagePath, with the same credentials: the EKS pod identity webhook gives init containers the
credentials it gives the others (aws/amazon-eks-pod-identity-webhook, pkg/handler/testdata/
rawPodWithInitContainer.pod.yaml: its expected patch adds them to /spec/initContainers too).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_efa.k8s._private import api_object, labels
from ray_efa.k8s.code_bundle import CodeBundle, ManifestError, collect_user_code

__all__ = ["UserCodeVolume", "UserCodeConfigMap", "FETCH_SCRIPT"]


@dataclass(frozen=True, kw_only=True, slots=True)
class UserCodeVolume:
    """How the Ray pods of one RayCluster or RayJob get codeDir: a ConfigMap, or a zip in S3."""

    config_map: str | None = None
    """The ConfigMap's name (with `bundle`)."""
    bundle: CodeBundle | None = None
    archive_uri: str | None = None
    """s3://bucket/key.zip (a CloudFormation token is fine), unpacked by an init container."""

    def __post_init__(self) -> None:
        if (self.config_map is None) == (self.archive_uri is None) or (self.config_map is None) != (
            self.bundle is None
        ):
            raise ValueError("UserCodeVolume takes config_map with bundle, or archive_uri")


FETCH_SCRIPT = (
    "import hashlib, os, re, shutil, sys, tempfile, zipfile\n"
    "from pyarrow import fs\n"
    "uri, dest = sys.argv[1], sys.argv[2]\n"
    "bucket_key = uri.removeprefix('s3://')\n"
    "named = re.fullmatch(r'code-([0-9a-f]{64})[.]zip', bucket_key.rpartition('/')[2])\n"
    "s3 = fs.S3FileSystem(region=os.environ['AWS_REGION'])\n"
    "with tempfile.TemporaryFile() as zipped:\n"
    "    with s3.open_input_stream(bucket_key) as source:\n"
    "        shutil.copyfileobj(source, zipped, 1 << 20)\n"
    "    zipped.seek(0)\n"
    "    sha256 = hashlib.sha256()\n"
    "    for block in iter(lambda: zipped.read(1 << 20), b''):\n"
    "        sha256.update(block)\n"
    "    digest = sha256.hexdigest()\n"
    "    if named and digest != named[1]:\n"
    "        sys.exit(f'ray-efa: {uri} is not the archive its name says (sha256 {digest}): not unpacked')\n"
    "    zipfile.ZipFile(zipped).extractall(dest)\n"
    "print(f'ray-efa: unpacked {uri} (sha256 {digest}) into {dest}', flush=True)\n"
)
"""What the init container runs (`python -c FETCH_SCRIPT URI DEST`): the zip through pyarrow's S3 filesystem (region
from AWS_REGION, credentials from Pod Identity), its sha256 checked against the name of a k8s.code_archive zip
(code-<sha256>.zip: the job's code is the content it was submitted with, whoever could write the object since; a
mismatch fails the init container, and the pod, before anything is unpacked), then unpacked with zipfile (which
refuses absolute and '..' paths). A CDK asset's key is a hash of its source, not of the zip: it is not checked, and
the Ray pods may only read the CDK assets bucket."""


class UserCodeConfigMap:
    """One ConfigMap holding codeDir, checked against the ConfigMap and kubectl annotation limits first (ManifestError,
    naming the route for larger code)."""

    def __init__(self, *, name: str, namespace: str, code_dir: Path):
        """
        :param name: the ConfigMap's name (k8s.names.user_code_config_map_name of its owner).
        :param namespace: where the pods that mount it run.
        :param code_dir: the folder to ship (absolute).
        """
        try:
            bundle = collect_user_code(code_dir)
            bundle.check_fits(name)
        except ManifestError as error:
            raise ManifestError(
                f"codeDir {code_dir} cannot ship in a ConfigMap: {error}. Larger or binary code ships as an S3 asset "
                "with `cdk deploy` (RayTrainingJob uploads it and the pods fetch it), or as a zip under an s3:// "
                "storagePath with `ray-efa submit` and `ray-efa manifests` (k8s.code_archive)"
            ) from None
        self.name = name
        self.volume: UserCodeVolume = UserCodeVolume(config_map=name, bundle=bundle)
        self.object: dict[str, Any] = api_object(
            api_version="v1",
            kind="ConfigMap",
            name=name,
            namespace=namespace,
            object_labels=labels(name, "user-code"),
            body={"data": bundle.data},
        )
        """The v1 ConfigMap."""
