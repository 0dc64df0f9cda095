"""Where multi-node Ray Train keeps its checkpoints: an S3 bucket, and the Ray pods' service account that may use it."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3 as s3
from constructs import Construct, IConstruct

from ray_efa.core.settings import Settings
from ray_efa.infra.nag import acknowledge, skip_checkov

__all__ = ["CheckpointStorage", "NONCURRENT_VERSION_DAYS"]

NONCURRENT_VERSION_DAYS = 30
"""How long an overwritten or deleted checkpoint object stays recoverable (as a noncurrent version)."""


class CheckpointStorage(Construct):
    """The service account of the Ray pods (EKS Pod Identity) and, unless `storagePath` names storage of your own, an
    encrypted, private, SSL-only S3 bucket it can read and write.

    Every node's workers write checkpoint shards into Ray Train's storage_path, and a restarted worker group may land
    on other nodes, so a multi-node run needs storage all nodes share. The bucket is retained on `cdk destroy`:
    checkpoints outlive the cluster. It is versioned: an overwritten or deleted checkpoint stays recoverable for
    NONCURRENT_VERSION_DAYS days, then its old version expires, as do uploads left incomplete for a week.
    `storage_path` is what the training job's settings get.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, cluster: eks.Cluster, after: IConstruct
    ) -> None:
        super().__init__(scope, construct_id)
        workload = settings.workload
        self.service_account = cluster.add_service_account(
            "RayServiceAccount", name=workload.service_account, namespace=workload.namespace,
            identity_type=eks.IdentityType.POD_IDENTITY,
        )
        self.service_account.node.add_dependency(after)  # the namespace must exist first

        self.bucket: s3.Bucket | None = None
        self.storage_path = workload.storage_path
        if self.storage_path is None:
            self.bucket = s3.Bucket(
                self, "Bucket", encryption=s3.BucketEncryption.S3_MANAGED, enforce_ssl=True,
                block_public_access=s3.BlockPublicAccess.BLOCK_ALL, removal_policy=RemovalPolicy.RETAIN,
                versioned=True,
                lifecycle_rules=[s3.LifecycleRule(
                    id="expire-old-checkpoint-versions",
                    noncurrent_version_expiration=Duration.days(NONCURRENT_VERSION_DAYS),
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                    expired_object_delete_marker=True,
                )],
            )
            self.bucket.grant_read_write(self.service_account)
            self.storage_path = f"s3://{self.bucket.bucket_name}/ray-efa"
            no_access_logs = ("Checkpoint bucket written only by the Ray pods' own role; object-level audit belongs to "
                              "CloudTrail data events, and an access-log bucket would double the buckets to retain.")
            acknowledge(self.bucket, "AwsSolutions-S1", no_access_logs)
            skip_checkov(self.bucket, "CKV_AWS_18", no_access_logs)
            policy = self.service_account.role.node.find_child("DefaultPolicy").node.default_child
            bucket_arn = Stack.of(self).get_logical_id(self.bucket.node.default_child)
            for finding in ("Action::s3:Abort*", "Action::s3:DeleteObject*", "Action::s3:GetBucket*",
                            "Action::s3:GetObject*", "Action::s3:List*", f"Resource::<{bucket_arn}.Arn>/*"):
                acknowledge(policy, "AwsSolutions-IAM5",
                            "grant_read_write of the checkpoint bucket: Ray Train writes, lists and deletes checkpoint "
                            "objects under one prefix of this one bucket, nothing else.", finding)
