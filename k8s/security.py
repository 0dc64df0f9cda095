"""Who may reach the Ray pods and what they may do there, as plain data (no cdk8s) for the charts and `ray-efa verify`.

- Ray token authentication: KubeRay (1.5.1 and later) generates a random token per RayCluster, keeps it in a Secret
  named after the cluster and injects it as RAY_AUTH_TOKEN (with RAY_AUTH_MODE=token) into the head, every worker
  and the RayJob's submitter; the operator itself reads the Secret to call the dashboard. Ray's processes, the job's
  driver included, inherit the environment of `ray start`, so nobody copies a token by hand.
  (ray-project/kuberay v1.7.0: ray-operator/controllers/ray/common/pod.go SetContainerTokenAuthEnvVars,
  rayjob_controller.go configureSubmitterContainer, raycluster_controller.go reconcileAuthSecret; the operator
  rejects token mode below Ray 2.52.0, utils/validation.go.)
- Pod labels: the RayJob's cluster gets a random name (`<job>-<5 chars>`), so the NetworkPolicy cannot select on
  KubeRay's ray.io/cluster label at synth time. Every pod template carries the owner's name instead
  (app.kubernetes.io/instance), which KubeRay copies onto the pods it creates (common/pod.go labelPod).
- securityContext: what each container may do; see `container_security_context`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ray_efa.core.settings import Settings

__all__ = [
    "TOKEN_AUTH_MIN_KUBERAY",
    "TOKEN_AUTH_MIN_RAY",
    "token_auth_of",
    "AUTH_MODE_ENV",
    "INSTANCE_LABEL",
    "COMPONENT_LABEL",
    "RAY_NODE_COMPONENT",
    "SUBMITTER_COMPONENT",
    "DASHBOARD_PORT",
    "OPERATOR_POD_LABELS",
    "EFA_CAPABILITIES",
    "TokenAuth",
    "token_auth",
    "pod_labels",
    "network_policy_name",
]

TOKEN_AUTH_MIN_KUBERAY = (1, 5, 1)
"""The first KubeRay release whose CRDs have spec.authOptions (v1.5.0 has none; 1.4.0, a choice here, neither)."""
TOKEN_AUTH_MIN_RAY = (2, 52, 0)
"""KubeRay refuses authOptions.mode token for an older rayVersion."""
AUTH_MODE_ENV = "RAY_AUTH_MODE"
"""What KubeRay sets to "token" in every Ray container once token auth is on (verify reads it back)."""

INSTANCE_LABEL = "app.kubernetes.io/instance"
"""The RayCluster or RayJob a pod belongs to (its name): what the NetworkPolicy selects and admits."""
COMPONENT_LABEL = "app.kubernetes.io/component"
RAY_NODE_COMPONENT = "ray-node"
"""Head and workers: they talk to each other on many ports (GCS, raylets, object managers, workers, NCCL)."""
SUBMITTER_COMPONENT = "ray-job-submitter"
"""The RayJob's submitter pod: it only calls the head's dashboard (job API)."""

DASHBOARD_PORT = 8265
"""The head's dashboard and job API: the only port anything outside the Ray cluster needs."""

OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "kuberay-operator", "app.kubernetes.io/instance": "kuberay-operator"}
"""The operator pod's labels in the kuberay-operator chart (1.4.0 and 1.7.0: templates/deployment.yaml, chart name and
release name); the release is core.addons.KUBERAY_OPERATOR."""

EFA_CAPABILITIES = ("IPC_LOCK",)
"""The one capability a worker needs: libfabric registers (pins) its buffers with the EFA device, and the kernel
charges pinned pages to RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK. Kubernetes has no field for rlimits, and
EKS's AL2023 nodes set only RLIMIT_NOFILE in containerd's base runtime spec (awslabs/amazon-eks-ami
nodeadm/internal/containerd/base-runtime-spec.json), whose default capabilities do not include IPC_LOCK."""


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenAuth:
    """Whether the Ray cluster requires a token, and why not when it does not."""

    enabled: bool
    reason: str
    """Why it is on, or off (names the setting to change)."""


def token_auth(settings: Settings) -> TokenAuth:
    """Token authentication is on wherever the pinned KubeRay and the image's Ray support it."""
    return token_auth_of(settings.addons.kuberay_version, settings.workload.ray_version)


def token_auth_of(kuberay: str, ray: str) -> TokenAuth:
    """token_auth for a KubeRay chart version and a Ray version (what the KubeRayOperator construct knows)."""
    if _version(kuberay) < TOKEN_AUTH_MIN_KUBERAY:
        return TokenAuth(
            enabled=False,
            reason=(
                f"kuberayVersion {kuberay} has no authOptions (token auth needs KubeRay 1.5.1 or later, e.g. 1.7.0): any "
                "pod that gets past the NetworkPolicy can submit jobs to the Ray cluster"
            ),
        )
    if _version(ray) < TOKEN_AUTH_MIN_RAY:
        return TokenAuth(
            enabled=False,
            reason=(
                f"rayVersion {ray} is older than 2.52.0, which KubeRay requires for token auth: any pod that gets past "
                "the NetworkPolicy can submit jobs to the Ray cluster"
            ),
        )
    return TokenAuth(
        enabled=True,
        reason=(
            f"KubeRay {kuberay} generates a token per Ray cluster and injects it into the head, workers and submitter"
        ),
    )


def pod_labels(owner: str, component: str) -> dict[str, str]:
    """Labels of a Ray pod template: the owning RayCluster or RayJob, and the pod's role.

    Not app.kubernetes.io/name or created-by: KubeRay sets those on its pods, and template labels would override them.
    """
    return {INSTANCE_LABEL: owner, COMPONENT_LABEL: component}


def network_policy_name(owner: str) -> str:
    """The NetworkPolicy guarding the Ray pods of `owner` (a RayCluster or a RayJob)."""
    return f"{owner}-ray-ingress"
