"""The training RayJob, applied from the GPU stack once the GPU nodes exist."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import cdk8s
from aws_cdk import Stack, Token
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from ray_efa.core.settings import Settings
from ray_efa.infra._private import check_node_selector
from ray_efa.infra.manifests import apply_objects
from ray_efa.k8s.workload import ray_job_chart

__all__ = ["RayTrainingJob"]


class RayTrainingJob(Construct):
    """The RayJob of settings.network with its code and settings ConfigMaps (k8s.workload.ray_job_chart), each object
    its own KubernetesManifest, applied after `after`.

    The settings are the job's configuration (the driver reads them from its settings ConfigMap); where it runs and
    where it writes are props. Applied after the GPU node group (pass it in `after`): the RayJob's
    activeDeadlineSeconds counts from its creation, so it must not start before any GPU node can exist. Changing a
    training setting changes the small settings ConfigMap alone. CloudFormation creates the RayJob once per deploy;
    see the README for running it again. Refuses (SettingsError) a plan that cannot fit the GPUs, like every producer
    of a job.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, cluster: eks.ICluster,
        storage_path: str | None = None, system_node_selector: Mapping[str, str] | None = None,
        gpu_node_selector: Mapping[str, str] | None = None, after: Sequence[IConstruct] = (),
    ) -> None:
        """
        :param settings: the job's configuration (model, steps, network, image, namespace...); its region becomes
            the enclosing stack's where that is known.
        :param cluster: the EKS cluster, created or imported, with KubeRay and the device plugins installed.
        :param storage_path: Ray Train's storage_path (CheckpointStorage.storage_path; a token is fine).
            @default - the settings' storagePath
        :param system_node_selector: labels of the nodes of the Ray head and the submitter.
            @default - the settings' systemNodeSelector
        :param gpu_node_selector: labels of the GPU nodes of the workers. @default - the settings' gpuNodeSelector
        :param after: what the job waits for (the GPU node group). @default - nothing
        """
        super().__init__(scope, construct_id)
        changes: dict[str, object] = {}
        region = Stack.of(self).region
        if not Token.is_unresolved(region) and region != settings.cluster.region:
            changes["region"] = region  # the pods' AWS_REGION: the stack's, where the bucket and the cluster are
        for key, selector in (("systemNodeSelector", system_node_selector), ("gpuNodeSelector", gpu_node_selector)):
            if selector is not None:
                check_node_selector(f"RayTrainingJob {key}", selector)
                changes[key] = dict(selector)
        if storage_path is not None and storage_path != settings.workload.storage_path:
            # A CloudFormation token inside settings.json: resolved when the manifest is applied.
            changes["storagePath"] = storage_path
        if changes:
            settings = settings.replace(**changes)
        objects = ray_job_chart(cdk8s.App(), settings).to_json()
        self.name: str = objects[-1]["metadata"]["name"]
        self.manifests = apply_objects(self, cluster, objects, after=after)
        self.job = self.manifests[-1]
        """The RayJob's manifest (the last: its ConfigMaps come first)."""
