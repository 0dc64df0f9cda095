"""Assemble the CDK app from the settings: the cluster stack, the GPU stack, and the compliance checks."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from ray_efa.core.settings import Problem, Settings, SettingsError
from ray_efa.infra.cluster_stack import ClusterStack
from ray_efa.infra.gpu_stack import GpuStack

__all__ = ["RayEfaStacks", "build_stacks", "settings_from_app", "stack_environment", "feature_flags"]

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def feature_flags(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    """The CDK feature flags of cdk.json (context keys starting with "@"), for apps built outside the CDK CLI
    (`ray-efa demo`, the tests), so that they synthesize what `cdk synth` does."""
    context = json.loads((root / "cdk.json").read_text())["context"]
    return {key: value for key, value in context.items() if key.startswith("@")}


@dataclass(frozen=True)
class RayEfaStacks:
    """The app's two stacks: the cluster, and the GPU node group with the training job that runs on it."""

    cluster: ClusterStack
    gpu: GpuStack


def settings_from_app(app: cdk.App) -> Settings:
    """Settings from the app's context (cdk.json, cdk.context.json and `-c`, merged by the CDK CLI)."""
    return Settings.from_context(app.node.get_all_context())


def stack_environment(settings: Settings) -> cdk.Environment:
    """The settings' region, and the account of the credentials when there are any (synth needs none).

    Looking up an existing VPC (`vpcId`) needs a concrete account; without one we fail here, before synthesis.
    """
    account = os.environ.get("CDK_DEFAULT_ACCOUNT")
    if settings.cluster.vpc_id and not account:
        raise SettingsError(
            [
                Problem(
                    "vpcId",
                    settings.cluster.vpc_id,
                    "needs AWS credentials (or CDK_DEFAULT_ACCOUNT) to look the VPC up; unset it to create a VPC",
                )
            ]
        )
    return cdk.Environment(account=account, region=settings.cluster.region)


def build_stacks(app: cdk.App, settings: Settings, *, env: cdk.Environment | None = None) -> RayEfaStacks:
    """Both stacks of the product, with cdk-nag's AwsSolutions checks and our reasoned acknowledgements."""
    env = env or stack_environment(settings)
    cluster = ClusterStack(app, settings.cluster_stack_name, settings=settings, env=env)
    gpu = GpuStack(app, settings.gpu_stack_name, settings=settings, cluster_stack=cluster, env=env)
    for stack in (cluster, gpu):
        cdk.Tags.of(stack).add("project", "ray-efa")
        cdk.Tags.of(stack).add("ray-efa/cluster", settings.cluster.cluster_name)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return RayEfaStacks(cluster=cluster, gpu=gpu)
