"""The training RayJob, applied from the GPU stack once the GPU nodes exist."""

from __future__ import annotations

from typing import Sequence

import cdk8s
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from ray_efa.core.settings import Settings
from ray_efa.infra.manifests import apply_objects
from ray_efa.k8s.workload import ray_job_chart

__all__ = ["RayTrainingJob"]


class RayTrainingJob(Construct):
    """The RayJob of settings.network with its code and settings ConfigMaps (k8s.workload.ray_job_chart), each object
    its own KubernetesManifest, applied after `after`.

    Applied after the GPU node group (pass it in `after`): the RayJob's activeDeadlineSeconds counts from its
    creation, so it must not start before any GPU node can exist. Changing a training setting changes the small
    settings ConfigMap alone. CloudFormation creates the RayJob once per deploy; see the README for running it again.
    Refuses (SettingsError) a plan that cannot fit the GPUs, like every producer of a job.

    :param storage_path: replaces the settings' storagePath in the job (the checkpoint bucket of the cluster stack).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, cluster: eks.ICluster,
        storage_path: str | None, after: Sequence[IConstruct],
    ) -> None:
        super().__init__(scope, construct_id)
        if storage_path is not None and storage_path != settings.workload.storage_path:
            # A CloudFormation token inside settings.json: resolved when the manifest is applied.
            settings = settings.replace(storagePath=storage_path)
        objects = ray_job_chart(cdk8s.App(), settings).to_json()
        self.name: str = objects[-1]["metadata"]["name"]
        self.manifests = apply_objects(self, cluster, objects, after=after)
        self.job = self.manifests[-1]
        """The RayJob's manifest (the last: its ConfigMaps come first)."""
