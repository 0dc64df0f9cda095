"""The KubeRay workload (k8s/ cdk8s charts) applied to the cluster, after the operator's CRDs and the device plugins."""

from __future__ import annotations

from typing import Sequence

import cdk8s
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from ray_efa.core.settings import Settings
from ray_efa.k8s.workload import namespace_chart, ray_job_chart

__all__ = ["RayWorkload"]


class RayWorkload(Construct):
    """The workload namespace, then (if `trainingJob`) the training RayJob, each through cluster.add_cdk8s_chart.

    `after` are the constructs the manifests wait for: the KubeRay operator chart (CRDs first) and the device plugins.
    `storage_path` replaces the settings' storagePath in the job (the checkpoint bucket of the stack).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, cluster: eks.Cluster,
        after: Sequence[IConstruct],
    ) -> None:
        super().__init__(scope, construct_id)
        self._settings, self._cluster = settings, cluster
        self._app = cdk8s.App()
        self.namespace = self._apply(namespace_chart(self._app, settings), after)
        self.job: eks.KubernetesManifest | None = None

    def add_training_job(self, *, storage_path: str | None, after: Sequence[IConstruct]) -> eks.KubernetesManifest:
        """The training RayJob of settings.network; it runs once, when the stack creates it."""
        settings = self._settings
        if storage_path is not None and storage_path != settings.workload.storage_path:
            # A CloudFormation token inside settings.json: resolved when the manifest is applied.
            settings = settings.replace(storagePath=storage_path)
        chart = ray_job_chart(self._app, settings)
        chart.add_dependency(self._app.node.find_child("namespace"))
        self.job = self._apply(chart, [self.namespace, *after])
        return self.job

    def _apply(self, chart: cdk8s.Chart, after: Sequence[IConstruct]) -> eks.KubernetesManifest:
        manifest = self._cluster.add_cdk8s_chart(f"{chart.node.id}-chart", chart)
        for dependency in after:
            manifest.node.add_dependency(dependency)
        return manifest

