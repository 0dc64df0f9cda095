"""Where multi-node Ray Train keeps its checkpoints: an S3 bucket, and the Ray pods' service account that may use it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import cast

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct, IConstruct

from ray_efa.core.model_source import parse_s3_url, s3_read_locations
from ray_efa.core.settings import Problem, Settings, SettingsError
from ray_efa.core.settings.checks import DNS_LABEL, DNS_LABEL_MESSAGE
from ray_efa.infra._private import add_synth_check, on_cluster
from ray_efa.infra._settings import default
from ray_efa.infra.nag import acknowledge, skip_checkov
from ray_efa.infra.workload import RayWorkload
from ray_efa.k8s.code_archive import CODE_ARCHIVE_FOLDER

__all__ = ["CheckpointStorage", "NONCURRENT_VERSION_DAYS", "POD_IDENTITY_AGENT_ADDON"]

NONCURRENT_VERSION_DAYS = 30
"""How long an overwritten or deleted checkpoint object stays recoverable (as a noncurrent version)."""

POD_IDENTITY_AGENT_ADDON = "eks-pod-identity-agent"
"""The add-on that hands Pod Identity credentials to pods; aws_eks_v2 adds it to a cluster it creates."""


def _check_props(
    namespace: str, service_account: str, bucket: s3.IBucket | None, storage_path: str | None, prefix: str
) -> None:
    """ValueError naming the first bad prop of CheckpointStorage."""
    for prop, value in (("namespace", namespace), ("service_account", service_account)):
        if not re.match(DNS_LABEL, value):
            raise ValueError(f"CheckpointStorage {prop} {DNS_LABEL_MESSAGE}, got {value!r}")
    if bucket is not None and storage_path is not None:
        raise ValueError("CheckpointStorage takes bucket or storage_path, not both: bucket is s3://<bucket>/prefix")
    if not prefix or prefix.startswith("/") or prefix.endswith("/") or "//" in prefix:
        raise ValueError(
            f"CheckpointStorage prefix must be a key prefix like 'ray-efa' or 'team/ray-efa', got {prefix!r}"
        )
    if storage_path is not None and not storage_path.startswith(("s3://", "/")):
        raise ValueError(
            f"CheckpointStorage storage_path must be s3://bucket/prefix or an absolute path on storage "
            f"every node shares, got {storage_path!r}"
        )


def _read_locations(read_locations: Sequence[str]) -> list[tuple[str, str]]:
    """(bucket, prefix) of each read location; ValueError for one that is not an s3://bucket/prefix URL."""
    locations = []
    for url in read_locations:
        try:
            locations.append(parse_s3_url(url) if url.startswith("s3://") else ("", ""))
        except ValueError:
            locations.append(("", ""))
        if not locations[-1][0]:
            raise ValueError(f"CheckpointStorage read_locations must be s3://bucket/prefix URLs, got {url!r}")
    return locations


class CheckpointStorage(Construct):
    """The service account of the Ray pods (EKS Pod Identity) and, unless `storage_path` names storage of your own,
    an encrypted, private, SSL-only S3 bucket it can read and write. A `storage_path` of your own on S3
    (s3://bucket/prefix) gets read and write for the service account on that prefix of that bucket (the bucket's own
    policy, and its KMS key if it has one, must not refuse the role: see `storage_bucket`).

    The namespace is `workload`'s (stated once, on RayWorkload); synth fails naming `workload` when the app holds a
    RayWorkload on the same cluster in another namespace.

    Every node's workers write checkpoint shards into Ray Train's storage_path, and a restarted worker group may land
    on other nodes, so a multi-node run needs storage all nodes share. The bucket is retained on `cdk destroy`:
    checkpoints outlive the cluster. It is versioned: an overwritten or deleted checkpoint stays recoverable for
    NONCURRENT_VERSION_DAYS days, then its old version expires, as do uploads left incomplete for a week.
    `self.storage_path` is what the training job gets.

    Wiring attributes: `service_account` (the job waits for it), `bucket` (None with `storage_path`), `storage_bucket`
    (the bucket of an s3:// `storage_path`, imported by name: what was granted), `storage_path` (a token for a new
    bucket) and `pod_identity_agent` (the add-on, when asked for).

    `read_locations` (s3:// URLs: modelPath, dataset, evalDataset) become read grants for the service account, each
    exactly its bucket: s3:ListBucket on the bucket (listing the files, and a 404 rather than a 403 for a key that is
    not there, which pyarrow's and boto3's lookups need) and s3:GetObject on the objects under the prefix.

    Pod Identity needs the eks-pod-identity-agent add-on on the cluster. A cluster RayEksCluster creates has it
    (aws_eks_v2 adds it with the first Pod Identity service account); an imported cluster must have it already,
    or pass `pod_identity_agent=True` to add it here.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        workload: RayWorkload | None = None,
        namespace: str | None = None,
        service_account: str = default("serviceAccount"),
        storage_path: str | None = None,
        after: IConstruct | None = None,
        pod_identity_agent: bool = False,
        read_locations: Sequence[str] = (),
        storage_kms_key: str | None = None,
        bucket: s3.IBucket | None = None,
        prefix: str = "ray-efa",
    ) -> None:
        """
        :param cluster: the EKS cluster, created or imported.
        :param workload: the RayWorkload whose namespace the Ray pods run in; the service account waits for it.
            @default - `namespace`
        :param namespace: the namespace of the Ray pods, when no RayWorkload of this app makes it (it must exist: pass
            what creates it in `after`); it must agree with `workload`. @default - workload's, else "ray"
        :param service_account: the Ray pods' service account. @default "ray-train"
        :param storage_path: storage of your own: s3://bucket/prefix, whose prefix the service account may then read
            and write, or a path on a filesystem every node shares. @default - a new bucket, s3://<bucket>/ray-efa
        :param after: what creates the namespace. @default - workload's namespace, else nothing
        :param pod_identity_agent: add the eks-pod-identity-agent add-on (for an imported cluster without it).
            @default False
        :param read_locations: s3://bucket/prefix URLs the pods read (weights, data sets); each is granted read, no
            other bucket. @default - none
        :param storage_kms_key: the ARN of the KMS key that encrypts `storage_path`'s bucket (SSE-KMS): the service
            account may use it through S3 (kms:Decrypt, kms:GenerateDataKey). Needs an s3:// `storage_path` (the
            bucket made here is SSE-S3). @default - none
        :param bucket: a bucket your app creates or references (s3.Bucket, Bucket.from_bucket_name...): the storage is
            s3://<its name>/`prefix`, which the service account may read and write (and use the bucket's KMS key,
            when the bucket object knows it). Not with `storage_path`. @default - a new bucket made here
        :param prefix: the prefix of `bucket` the checkpoints go under. @default "ray-efa"
        """
        super().__init__(scope, construct_id)
        if workload is not None:
            if namespace is not None and namespace != workload.namespace_name:
                raise ValueError(
                    f"CheckpointStorage namespace {namespace!r} is not workload's, "
                    f"{workload.namespace_name!r}: leave namespace out (it comes from workload)"
                )
            namespace = workload.namespace_name
            after = after if after is not None else workload.namespace
        namespace_given = namespace is not None
        resolved: str = namespace if namespace is not None else default("namespace")
        _check_props(resolved, service_account, bucket, storage_path, prefix)
        self.namespace_name: str = resolved
        self.service_account_name = service_account
        self.cluster: eks.ICluster = cluster
        if workload is None and not namespace_given:
            add_synth_check(self, self._check_namespace)
        locations = _read_locations(read_locations)
        self.pod_identity_agent: eks.Addon | None = None
        if pod_identity_agent:
            self.pod_identity_agent = eks.Addon(
                self, "PodIdentityAgent", cluster=cluster, addon_name=POD_IDENTITY_AGENT_ADDON
            )
        self.service_account: eks.ServiceAccount = cluster.add_service_account(
            "RayServiceAccount",
            name=service_account,
            namespace=resolved,
            identity_type=eks.IdentityType.POD_IDENTITY,
        )
        if after is not None:
            self.service_account.node.add_dependency(after)  # the namespace must exist first
        if self.pod_identity_agent is not None:
            self.service_account.node.add_dependency(self.pod_identity_agent)

        self.bucket: s3.Bucket | None = None
        self.storage_bucket: s3.IBucket | None = None
        self.storage_path: str  # the given storage, or the bucket made here
        if bucket is not None:
            self._use_bucket(bucket, prefix)
        elif storage_path is not None:
            self.storage_path = storage_path
            if storage_path.startswith("s3://"):
                self._grant_storage(storage_path)
        else:
            self._make_bucket()

        if storage_kms_key is not None:
            if storage_path is None or not storage_path.startswith("s3://"):
                raise ValueError(
                    f"CheckpointStorage storage_kms_key {storage_kms_key!r} needs an s3:// storage_path: "
                    "the bucket made here is encrypted with S3-managed keys"
                )
            self.grant_kms(storage_kms_key, ["kms:Decrypt", "kms:GenerateDataKey"])

        self.read_buckets: tuple[str, ...] = ()
        """The buckets the service account may read for modelPath and the data sets."""
        if locations:
            self._grant_read(locations)

    def _use_bucket(self, bucket: s3.IBucket, prefix: str) -> None:
        """The storage is `prefix` of a bucket of the app's own (its name may be a token): what Ray Train writes under
        the prefix (_grant_prefix), and the bucket's key where the bucket object knows it."""
        self.storage_bucket = bucket
        self.storage_path = f"s3://{bucket.bucket_name}/{prefix}"
        self._grant_prefix(bucket, prefix)
        if bucket.encryption_key is not None:
            bucket.encryption_key.grant_encrypt_decrypt(self.service_account)
            policy = cast(iam.CfnPolicy, self.service_account.role.node.find_child("DefaultPolicy").node.default_child)
            for finding in ("Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*"):
                acknowledge(
                    policy,
                    "AwsSolutions-IAM5",
                    "The checkpoint bucket's own KMS key (grant_encrypt_decrypt): "
                    "S3 encrypts and decrypts the checkpoints with it for the Ray pods.",
                    finding,
                )

    def _make_bucket(self) -> None:
        """The encrypted, private, SSL-only, versioned bucket made here, which the service account may read and write."""
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            removal_policy=RemovalPolicy.RETAIN,
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-old-checkpoint-versions",
                    noncurrent_version_expiration=Duration.days(NONCURRENT_VERSION_DAYS),
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                    expired_object_delete_marker=True,
                )
            ],
        )
        self.storage_path = f"s3://{self.bucket.bucket_name}/ray-efa"
        self._grant_prefix(self.bucket, "ray-efa")
        no_access_logs = (
            "Checkpoint bucket written only by the Ray pods' own role; object-level audit belongs to "
            "CloudTrail data events, and an access-log bucket would double the buckets to retain."
        )
        acknowledge(self.bucket, "AwsSolutions-S1", no_access_logs)
        skip_checkov(self.bucket, "CKV_AWS_18", no_access_logs)

    def grant_kms(self, key_arn: str, actions: Sequence[str]) -> None:
        """Let the service account use KMS key `key_arn` through S3 alone (kms:ViaService): without it a bucket
        encrypted with that key answers the pods AccessDenied."""
        region = Stack.of(self).region
        self.service_account.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=list(actions),
                resources=[key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}},
            )
        )
        self.kms_keys = (*self.kms_keys, key_arn)

    kms_keys: tuple[str, ...] = ()
    """The KMS keys the service account may use through S3 (storage_kms_key, and those grant_kms added)."""

    def _check_namespace(self) -> list[str]:
        others = sorted({w.namespace_name for w in on_cluster(self, RayWorkload, self.cluster)} - {self.namespace_name})
        if not others:
            return []
        return [
            f"CheckpointStorage puts the Ray pods' service account in namespace {self.namespace_name!r}, but the "
            f"RayWorkload of its cluster makes {', '.join(map(repr, others))}: pass workload=<that RayWorkload> "
            "(the namespace comes from it)"
        ]

    def _grant_storage(self, storage_path: str) -> None:
        """Read and write for the service account on the objects under an s3:// storage_path's prefix, and listing
        its bucket: what Ray Train's checkpoints, the run's metrics and its storage check need."""
        try:
            bucket_name, prefix = parse_s3_url(storage_path)
        except ValueError:
            bucket_name, prefix = "", ""
        if not bucket_name:
            raise ValueError(f"CheckpointStorage storage_path must be s3://bucket/prefix, got {storage_path!r}")
        self.storage_bucket = s3.Bucket.from_bucket_name(self, "StorageBucket", bucket_name)
        self._grant_prefix(self.storage_bucket, prefix)

    def _grant_prefix(self, bucket: s3.IBucket, prefix: str) -> None:
        """What Ray Train's checkpoints, the run's metrics and its storage check need of storagePath, and nothing
        more: read, write and delete the current version of the objects under `prefix` of `bucket` ("" for all of
        it), list the bucket. Not s3:DeleteObjectVersion nor any other version or configuration action: a job may
        overwrite or delete its checkpoints, and the versioned bucket keeps the earlier versions out of its reach
        (NONCURRENT_VERSION_DAYS). Under `<prefix>/ray-efa-code/` (k8s.code_archive: the code zips `ray-efa
        submit` uploads with its user's credentials) the pods may only read: an explicit Deny of writes."""
        under = f"{prefix}/" if prefix else ""
        objects = bucket.arn_for_objects(f"{under}*")
        role = self.service_account.role
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="CheckpointObjects",
                resources=[objects],
                actions=[
                    "s3:GetObject",
                    "s3:PutObject",
                    "s3:DeleteObject",
                    "s3:AbortMultipartUpload",
                    "s3:ListMultipartUploadParts",
                ],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="CheckpointBucket",
                resources=[bucket.bucket_arn],
                actions=["s3:ListBucket", "s3:ListBucketMultipartUploads", "s3:GetBucketLocation"],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="CodeArchivesReadOnly",
                effect=iam.Effect.DENY,
                resources=[bucket.arn_for_objects(f"{under}{CODE_ARCHIVE_FOLDER}/*")],
                actions=["s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"],
            )
        )
        policy = cast(iam.CfnPolicy, role.node.find_child("DefaultPolicy").node.default_child)
        acknowledge(
            policy,
            "AwsSolutions-IAM5",
            "storagePath: Ray Train reads, writes and deletes checkpoint objects (their names are made at run "
            "time) under that one prefix of that one bucket, nothing else.",
            f"Resource::{_nag_arn(Stack.of(self).resolve(objects))}",
        )

    def _grant_read(self, locations: list[tuple[str, str]]) -> None:
        """One statement per bucket for the objects under its prefixes, one for listing the buckets."""
        buckets: dict[str, list[str]] = {}
        for bucket, prefix in locations:
            buckets.setdefault(bucket, [])
            pattern = f"{prefix}/*" if prefix else "*"
            if pattern not in buckets[bucket]:
                buckets[bucket].append(pattern)
        imported = {
            name: s3.Bucket.from_bucket_name(self, f"Read{index}", name) for index, name in enumerate(sorted(buckets))
        }
        role = self.service_account.role
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ReadModelAndDataObjects",
                actions=["s3:GetObject"],
                resources=[imported[name].arn_for_objects(p) for name in sorted(buckets) for p in buckets[name]],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ListModelAndDataBuckets",
                actions=["s3:ListBucket"],
                resources=[imported[name].bucket_arn for name in sorted(buckets)],
            )
        )
        policy = cast(iam.CfnPolicy, role.node.find_child("DefaultPolicy").node.default_child)
        for name in sorted(buckets):
            for pattern in buckets[name]:
                acknowledge(
                    policy,
                    "AwsSolutions-IAM5",
                    "Read of modelPath / dataset / evalDataset: GetObject on the objects under the prefix the "
                    "settings name (their file names are not known at synth), in that bucket alone.",
                    f"Resource::{_nag_arn(Stack.of(self).resolve(imported[name].arn_for_objects(pattern)))}",
                )
        self.read_buckets = tuple(sorted(buckets))

    @classmethod
    def from_settings(
        cls,
        scope: Construct,
        construct_id: str,
        settings: Settings,
        *,
        cluster: eks.ICluster,
        after: IConstruct | None = None,
        workload: RayWorkload | None = None,
    ) -> CheckpointStorage:
        """The storage of the project's own app: namespace (`workload`'s, when given and the settings do not name
        one), serviceAccount and storagePath of the settings, and read on the buckets of modelPath, dataset and
        evalDataset."""
        section = settings.workload
        namespace = section.namespace if workload is None or "namespace" in settings.given_keys else None
        if section.storage_kms_key is not None and not (section.storage_path or "").startswith("s3://"):
            raise SettingsError(
                [
                    Problem(
                        "storageKmsKey",
                        section.storage_kms_key,
                        "needs storagePath=s3://... (the bucket the cluster stack makes is encrypted "
                        "with S3-managed keys)",
                    )
                ]
            )
        storage = cls(
            scope,
            construct_id,
            cluster=cluster,
            workload=workload,
            namespace=namespace,
            service_account=section.service_account,
            storage_path=section.storage_path,
            after=after,
            read_locations=s3_read_locations(settings),
            storage_kms_key=section.storage_kms_key,
        )
        if section.bootstrap_kms_key is not None:  # the code assets the pods fetch from the CDK asset bucket
            storage.grant_kms(section.bootstrap_kms_key, ["kms:Decrypt"])
        return storage


def _nag_arn(resolved: object) -> str:
    """An ARN as cdk-nag names it in a finding: the partition a literal where the stack's region fixes it, else
    <AWS::Partition>."""
    if isinstance(resolved, str):
        return resolved
    parts = resolved["Fn::Join"][1]  # type: ignore[index]
    return "".join(_nag_part(part) for part in parts)


def _nag_part(part: object) -> str:
    """One piece of a joined ARN as cdk-nag writes it: <AWS::Partition>, <LogicalId.Attr>, <LogicalId>."""
    if isinstance(part, dict) and "Fn::GetAtt" in part:
        logical_id, attribute = part["Fn::GetAtt"]
        return f"<{logical_id}.{attribute}>"
    if isinstance(part, dict) and "Ref" in part:
        return f"<{part['Ref']}>"
    return str(part)
