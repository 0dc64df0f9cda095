"""Names and paths of the workload objects, as plain data (no cdk8s), for the charts and for tools that run kubectl.

ops/ and cli/ import this module to find the RayJob of a run (`kubectl -n NAMESPACE get rayjob JOBNAME`) without
starting jsii. The namespace itself is a setting (workload.namespace).
"""

from __future__ import annotations

import re

from ray_efa.core.settings import DEFAULT_JOB_NAME, Settings, setting_choices

__all__ = [
    "RAY_CLUSTER_NAME",
    "ray_job_name",
    "ray_job_of",
    "code_config_map_name",
    "user_code_config_map_name",
    "settings_config_map_name",
    "CODE_MOUNT_PATH",
    "APP_CODE_PATH",
    "USER_CODE_PATH",
    "SETTINGS_FILE",
    "SETTINGS_PATH",
    "DRIVER_MODULE",
    "SHIPPED_PACKAGES",
    "NETWORKS",
    "comparison_network",
    "check_object_name",
]

RAY_CLUSTER_NAME = "ray-efa"
"""The long-lived RayCluster for interactive use (`ray job submit`, `kubectl exec`); the RayJobs own their own."""

NETWORKS: tuple[str, ...] = setting_choices("network")
"""The transports a job can run on (the `network` setting's choices); each run has a comparison run on the other."""

CODE_MOUNT_PATH = "/opt/ray-efa/app"
"""Where every Ray container mounts the shipped code: it holds ray_efa/core/, ray_efa/training/ and settings.json, and is on PYTHONPATH.
When the code ships as a zip in S3 (APP_CODE_PATH) it holds settings.json alone."""

APP_CODE_PATH = "/opt/ray-efa/lib"
"""Where an init container unpacks the shipped code (ray_efa/core/, ray_efa/training/) when it comes as a zip in S3
(the CDK asset of infra.training_job.RayTrainingJob) instead of ConfigMaps; first on PYTHONPATH then."""

USER_CODE_PATH = "/opt/ray-efa/user"
"""Where every Ray container finds codeDir (a ConfigMap volume, or an emptyDir an init container fills from S3); on
PYTHONPATH after CODE_MOUNT_PATH, and the codeDir of the settings.json the pods get."""

SETTINGS_FILE = "settings.json"
SETTINGS_PATH = f"{CODE_MOUNT_PATH}/{SETTINGS_FILE}"

DRIVER_MODULE = "ray_efa.training.driver"
"""The module the RayJob entrypoint runs (`python -m ray_efa.training.driver --settings SETTINGS_PATH`)."""

SHIPPED_PACKAGES = ("ray_efa.core", "ray_efa.training")
"""Packages shipped to the pods at synth time: every .py file of the last (training), the modules of the others that
it imports, and ray_efa/__init__.py above them."""

# KubeRay names a RayJob's cluster "<job>-<5 random chars>" and requires a DNS-1035 label of at most 63 characters,
# so RayJob names are capped at 47 (KubeRay's MaxRayJobNameLength); RayCluster names get the same cap for symmetry.
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_MAX_RAY_OBJECT_NAME = 47


def ray_job_name(network: str, job_name: str = DEFAULT_JOB_NAME) -> str:
    """The RayJob of a training run on one transport: `job_name` (the jobName setting) on EFA; on TCP, the comparison
    run, its name with -efa replaced by -tcp (train-efa: train-tcp) or else -tcp added (exp1: exp1-tcp)."""
    if network not in NETWORKS:
        raise ValueError(f"network must be one of {', '.join(NETWORKS)}, got {network!r}")
    if network == "efa":
        return job_name
    return f"{job_name.removesuffix('-efa')}-{network}"


def ray_job_of(settings: Settings) -> str:
    """The RayJob of these settings: ray_job_name of their network and jobName."""
    return ray_job_name(settings.workload.network, settings.workload.job_name)


def comparison_network(network: str) -> str:
    """The other transport: the comparison job of an EFA run is TCP, and the other way round."""
    (other,) = (n for n in NETWORKS if n != network)
    return other


def code_config_map_name(owner: str) -> str:
    """The ConfigMap holding the code mounted by the Ray pods of `owner` (a RayCluster or a RayJob)."""
    return f"{owner}-code"


def user_code_config_map_name(owner: str) -> str:
    """The ConfigMap holding codeDir for the pods of `owner`, when it is small enough for one."""
    return f"{owner}-user-code"


def settings_config_map_name(code_config_map: str) -> str:
    """The ConfigMap holding settings.json beside the code ConfigMap `<owner>-code`: `<owner>-settings`.

    Settings live apart from the code so that changing one training setting changes a ConfigMap of a few hundred
    bytes (a readable `cdk diff`), not the 70 KB one of the code.
    """
    return f"{code_config_map.removesuffix('-code')}-settings"


def check_object_name(name: str) -> str:
    """Return `name` if KubeRay accepts it as a RayCluster or RayJob name, else raise ValueError saying why."""
    if len(name) > _MAX_RAY_OBJECT_NAME or not _DNS_1035.match(name):
        raise ValueError(
            f"Ray object name must be a DNS-1035 label (lowercase letters, digits, '-', starting with a letter) "
            f"of at most {_MAX_RAY_OBJECT_NAME} characters, got {name!r}"
        )
    return name
