"""The one settings object: every value the stack, the manifests and the training job read.

Settings come from CDK context (`-c key=value`, cdk.json's "context", cdk.context.json, ~/.cdk.json: see
core.context) under camelCase keys, the CDK convention. Each field below names its key, its default and what it allows; `Settings.from_context` parses
strings (`-c` gives strings), rejects unknown keys (a typo would otherwise be ignored silently) and reports every
problem at once, each naming the key, the bad value and what is allowed. Nothing is synthesized or written before
this succeeds.

The sections are pydantic v2 models in strict mode: the Python API takes the field's own type
(`NodeSettings(gpu_node_count=2.5)`, `True` or `'4'` is a SettingsError naming the setting, never a TypeError), and
only `from_context` parses the strings of `-c` leniently. Checks that read several fields (a zone of the region,
a placement group with a reservation) are rules run beside the field checks, so one error lists everything.
`context_json_schema()` is the JSON Schema of the context (docs/settings.schema.json, for editors of cdk.json).

Pure Python with pydantic alone on purpose: the training job imports this module inside the container, which has
no CDK but has pydantic (Ray depends on it).

Adding a setting: one annotated field in its section,

    system_root_volume_gib: int = setting(100, "systemRootVolumeGib", "Root volume of each system node, GiB.", ge=20, le=16384)

with `Literal[...]` for a closed set of values, pydantic constraints (ge, le, gt, pattern) for the rest and
`message=` where the generic "must be between 20 and 16384" needs the setting's own words; a check that pydantic
cannot express is an Annotated type with `_check(...)` (see Cidr); one that reads two settings is a `@_rule(...)`
function below the sections. Then `python tools/settings_table.py --write` and `python tools/settings_schema.py --write`.
The machinery behind `setting`, `_check` and `_rule` is core.settings_framework; Problem and SettingsError are
core.problems' (re-exported here).
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, cast

from pydantic import Field, WithJsonSchema

from ray_efa.core import addons, catalog, models, regions, scheduling
from ray_efa.core.model_source import data_path_problem, model_path_problem
from ray_efa.core.models import MODEL_PRESETS, model_preset
from ray_efa.core.problems import Problem, SettingsError

# The framework, under the names the declarations below use (private here: core.settings_framework exports them).
from ray_efa.core.settings_framework import LIST_AS_TUPLE as _LIST_AS_TUPLE
from ray_efa.core.settings_framework import RULES as _RULES
from ray_efa.core.settings_framework import Model as _Model
from ray_efa.core.settings_framework import Rule as _Rule
from ray_efa.core.settings_framework import Section as _Section
from ray_efa.core.settings_framework import check as _check
from ray_efa.core.settings_framework import choices_of as _choices_of
from ray_efa.core.settings_framework import parse_context_value as _parse
from ray_efa.core.settings_framework import rule as _rule
from ray_efa.core.settings_framework import rule_problems as _rule_problems
from ray_efa.core.settings_framework import setting
from ray_efa.core.settings_framework import string_schema as _schema

__all__ = [
    "SettingsError",
    "Problem",
    "SettingInfo",
    "ClusterSettings",
    "NodeSettings",
    "AddonSettings",
    "WorkloadSettings",
    "TrainingSettings",
    "Settings",
    "KUBERNETES_VERSIONS",
    "KUBERAY_VERSIONS",
    "KNOWN_IMAGE_RAY_VERSIONS",
    "LOG_RETENTION_DAYS",
    "DEFAULT_TRAIN_FUNCTION",
    "DEFAULT_JOB_NAME",
    "MAX_JOB_NAME_LENGTH",
    "setting_keys",
    "setting_choices",
    "context_json_schema",
]

KUBERNETES_VERSIONS = ("1.35", "1.36")
"""Versions that both aws_eks_v2 (aws-cdk-lib 2.275.0) and a pinned kubectl layer package support."""

LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922,
                      3288, 3653)
"""The retention periods CloudWatch Logs accepts (AWS::Logs::LogGroup RetentionInDays)."""

KUBERAY_VERSIONS = ("1.4.0", "1.7.0")
"""KubeRay releases whose CRD schemas the manifests are validated against."""

KNOWN_IMAGE_RAY_VERSIONS = {
    "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1": "2.58.0",
    "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0": "2.58.0",
}
"""Ray inside the Deep Learning Container tags we know; rayVersion must match the image's Ray."""

_IMAGE_REFERENCE = re.compile(
    r"^(?:(?P<registry>[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::\d+)?)/)?"
    r"(?P<repository>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)
# Patterns that pydantic checks and the JSON Schema publishes: plain syntax that Python, Rust (pydantic-core) and
# ECMAScript (editors) read alike.
_CLUSTER_NAME = r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_SEMVER = r"^\d+\.\d+\.\d+$"
_CAPACITY_RESERVATION = r"^cr-[0-9a-f]{17}$"
_VPC_ID = r"^vpc-(?:[0-9a-f]{8}|[0-9a-f]{17})$"
_INSTANCE_TYPE = r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$"
_DNS_LABEL_MESSAGE = "must be a DNS label (lowercase, digits, '-')"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
# An IAM role or user ARN (a role may have a path, e.g. AWS IAM Identity Center's aws-reserved/sso.amazonaws.com/).
_IAM_PRINCIPAL_ARN = r"^arn:aws(-cn|-us-gov)?:iam::\d{12}:(role|user)/[\w+=,.@/-]{1,512}$"
_STS_ASSUMED_ROLE_ARN = re.compile(r"^arn:aws(?:-cn|-us-gov)?:sts::\d{12}:assumed-role/(?P<role>[\w+=,.@-]+)/.+$")


# The closed sets that come from data (a version tuple, a catalog table): pydantic validates against a Literal built
# at import, which static type checkers cannot evaluate (`Literal[*x]` is not a type expression), so to them each is
# a plain str.
if TYPE_CHECKING:
    KubernetesVersion = KuberayVersion = SystemInstanceType = EfaDevicePluginVersion = ModelPreset = str
    EfaDraDriverVersion = str
else:
    KubernetesVersion = Literal[*KUBERNETES_VERSIONS]
    KuberayVersion = Literal[*KUBERAY_VERSIONS]
    SystemInstanceType = Literal[*catalog.SYSTEM_INSTANCES]
    EfaDevicePluginVersion = Literal[*catalog.EFA_DEVICE_PLUGIN_ALLOWLISTS]
    ModelPreset = Literal[*MODEL_PRESETS]
    EfaDraDriverVersion = Literal[*addons.EFA_DRA_DRIVER_ALLOWLISTS]


def _region_problem(region: str) -> str | None:
    return None if regions.is_valid_region(region) else "must be a region name like us-east-2"


def _cidr_problem(cidr: str) -> str | None:
    # ipaddress accepts a bare address as a /32; a public-access list names networks, so the prefix is required.
    try:
        network = ipaddress.IPv4Network(cidr, strict=False)
    except ValueError:
        network = None
    if network is None or "/" not in cidr:
        return "must be IPv4 CIDRs like 203.0.113.0/24"
    if str(network) != cidr:
        return f"must be a network address with its host bits zero: {network}"
    return None


def _admin_arn_problem(arn: str) -> str | None:
    session = _STS_ASSUMED_ROLE_ARN.match(arn)
    if session:
        # EKS refuses session ARNs, which lack the role's path: no way to derive the role ARN here.
        return ("must be IAM role or user ARNs, not an STS session; `ray-efa whoami` prints the role's ARN "
                f"(or: aws iam get-role --role-name {session['role']} --query Role.Arn --output text)")
    if not re.match(_IAM_PRINCIPAL_ARN, arn):
        return "must be IAM role or user ARNs like arn:aws:iam::111122223333:role/Admin"
    return None


def _log_retention_problem(days: int) -> str | None:
    return None if days in LOG_RETENTION_DAYS else f"must be one of {', '.join(map(str, LOG_RETENTION_DAYS))}"


def _gpu_instance_problem(name: str) -> str | None:
    # A name the catalog does not know may be one of extraGpuInstanceTypes: the rule _gpu_type_is_known decides.
    # A name it knows must be usable (a GPU, with EFA) here already, so that no other rule reads a type it refuses.
    if name not in catalog.GPU_INSTANCES and name not in catalog.SYSTEM_INSTANCES:
        return None if re.match(_INSTANCE_TYPE, name) else "must be an EC2 instance type like p5.48xlarge"
    try:
        catalog.gpu_instance(name)
    except catalog.CatalogError as error:
        return str(error)
    return None


def _descriptions_problem(descriptions: tuple[dict[str, Any], ...]) -> str | None:
    problems, names = [], []
    for index, description in enumerate(descriptions):
        label = f"entry {index} ({description.get('name', 'no name')})" if isinstance(description, dict) else f"entry {index}"
        if not isinstance(description, dict):
            problems.append(f"{label} must be a JSON object")
            continue
        try:
            names.append(catalog.describe_gpu_instance(description).name)
        except catalog.CatalogError as error:
            problems.append(f"{label}: {error}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        problems.append(f"names must differ: {', '.join(repeated)} more than once")
    return ("must describe GPU types as the catalog's rows are checked: " + "; ".join(problems)) if problems else None


def described_gpu_instances(descriptions: Iterable[Mapping[str, Any]]) -> dict[str, catalog.GpuInstanceType]:
    """The extraGpuInstanceTypes rows by name (each checked by catalog.describe_gpu_instance)."""
    rows = (catalog.describe_gpu_instance(description) for description in descriptions)
    return {row.name: row for row in rows}


def _image_problem(image: str) -> str | None:
    match = _IMAGE_REFERENCE.match(image)
    if match and (match["tag"] or match["digest"]):
        return None
    return "must be an image reference with a tag or digest, like registry/repository:tag"


def _storage_path_problem(path: str) -> str | None:
    # Every node writes checkpoint shards here, so a relative path (each node's own working directory) is useless.
    # The bucket name is not checked: a stack passes its own bucket as a CDK token, unresolved until deploy.
    if path.startswith("s3://"):
        bucket = path[len("s3://"):].partition("/")[0]
        return None if bucket else "must name a bucket: s3://bucket/prefix"
    if path.startswith("/"):
        return None
    return "must be s3://bucket/prefix or an absolute path on storage every node shares, like /mnt/fsx/runs"


DEFAULT_TRAIN_FUNCTION = "ray_efa.training.train:train_func"
"""The built-in train function (FSDP2 on the model presets); trainFunction names another as module:function."""

DEFAULT_JOB_NAME = "train-efa"
"""The RayJob of the EFA run; its TCP comparison job is train-tcp (k8s.names.ray_job_name)."""

MAX_JOB_NAME_LENGTH = 43
"""KubeRay caps a RayJob's name at 47 characters (its cluster is <job>-<5 chars>, a 63-character DNS label), and
the TCP comparison job adds "-tcp": so 43."""

_TRAIN_FUNCTION = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
_DNS_1035 = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
TRAIN_CONFIG_RESERVED = "settings"
"""The key of the function's config dict that holds the resolved settings; trainConfig may not use it (nor keys
starting with "_", which the project's test hooks use)."""


def _job_name_problem(name: str) -> str | None:
    if not re.match(_DNS_1035, name) or len(name) > MAX_JOB_NAME_LENGTH:
        return (f"must be a DNS-1035 label of at most {MAX_JOB_NAME_LENGTH} characters (lowercase letters, digits, '-', "
                "starting with a letter): KubeRay's 47 minus the -tcp of the comparison job")
    if name.endswith("-tcp"):
        return "must not end with -tcp: that is the suffix of the TCP comparison job (train-efa's is train-tcp)"
    return None


def _code_dir_problem(path: str) -> str | None:
    return "must be a folder of your code (absolute, or relative to the app directory)" if not path.strip() else None


def _train_config_problem(config: dict[str, Any]) -> str | None:
    try:
        text = json.dumps(config, allow_nan=False)
    except (TypeError, ValueError):
        return "must be a JSON object (strings, numbers, booleans, null, lists and objects; no NaN)"
    if not isinstance(json.loads(text), dict):
        return "must be a JSON object"
    reserved = sorted(k for k in config if k == TRAIN_CONFIG_RESERVED or k.startswith("_"))
    if reserved:
        return (f"must not use the keys {', '.join(reserved)}: config[{TRAIN_CONFIG_RESERVED!r}] holds the resolved "
                "settings, and keys starting with '_' are the project's")
    return None


# Annotated types with their checks; pydantic runs them after the type.
Region = Annotated[str, _check(_region_problem), _schema(pattern=regions.REGION_PATTERN.pattern)]
Cidr = Annotated[str, _check(_cidr_problem), _schema(pattern=r"^\d{1,3}(\.\d{1,3}){3}/\d{1,2}$")]
GpuInstanceType = Annotated[str, _check(_gpu_instance_problem), _schema(
    pattern=_INSTANCE_TYPE, examples=sorted(n for n, row in catalog.GPU_INSTANCES.items() if row.efa_capable))]
_DESCRIPTION_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "required": [key for key, (_, required, _) in catalog.DESCRIPTION_KEYS.items() if required],
    "properties": {key: {"description": meaning, **({"type": "string"} if kind is str else {"type": "boolean"}
                                                     if kind is bool else {"type": "integer"} if kind is int
                                                     else {"type": "number"})}
                   for key, (kind, _, meaning) in catalog.DESCRIPTION_KEYS.items()},
}
GpuDescriptions = Annotated[tuple[dict[str, Any], ...], _LIST_AS_TUPLE, _check(_descriptions_problem),
                            WithJsonSchema({"type": "array", "items": _DESCRIPTION_SCHEMA})]
"""GPU instance types a user describes (catalog.DESCRIPTION_KEYS), checked like the catalog's own rows."""
ImageReference = Annotated[str, _check(_image_problem), _schema(pattern=r"^[^\s]+(:[\w][\w.-]{0,127}|@sha256:[a-f0-9]{64})$")]
StoragePath = Annotated[str, _check(_storage_path_problem), _schema(pattern=r"^(s3://[^/]+(/.*)?|/.*)$")]
ModelPath = Annotated[str, _check(model_path_problem), _schema(pattern=r"^(/.*|s3://[^/]+(/.*)?|hf://[^/@]+/[^/@]+(@.+)?)$")]
DataPath = Annotated[str, _check(data_path_problem), _schema(pattern=r"^(/.*|s3://[^/]+(/.*)?)$")]
AdminPrincipalArn = Annotated[str, _check(_admin_arn_problem), _schema(pattern=_IAM_PRINCIPAL_ARN)]
LogRetentionDays = Annotated[int, _check(_log_retention_problem),
                             WithJsonSchema({"type": "integer", "enum": list(LOG_RETENTION_DAYS)})]
NodeSelector = Annotated[
    dict[str, str], _check(scheduling.node_selector_problem),
    WithJsonSchema({"type": "object", "minProperties": 1, "additionalProperties": {"type": "string"}}),
]
"""Node labels a pod must match; on `-c` a JSON object or key=value,key2=value2."""
TrainConfig = Annotated[dict[str, Any], _check(_train_config_problem), WithJsonSchema({"type": "object"})]
"""A free-form JSON object; on `-c` its JSON text."""
JobName = Annotated[str, _check(_job_name_problem),
                    _schema(pattern=_DNS_1035, maxLength=MAX_JOB_NAME_LENGTH, **{"not": {"pattern": "-tcp$"}})]
CodeDir = Annotated[str, _check(_code_dir_problem), _schema(minLength=1)]


def _positive_or_auto(value: int | str) -> str | None:
    return None if value == "auto" or (isinstance(value, int) and value >= 1) else "must be auto or an integer >= 1"


AutoCount = Annotated[Literal["auto"] | int, _check(_positive_or_auto),
                      WithJsonSchema({"anyOf": [{"const": "auto"}, {"type": "integer", "minimum": 1}]})]
"""A count core.strategy decides when left at auto (microBatch, gradAccumulation); on `-c` auto or an integer."""
AutoBool = Annotated[Literal["auto"] | bool, WithJsonSchema({"anyOf": [{"const": "auto"}, {"type": "boolean"}]})]
"""A switch core.strategy decides when left at auto (activationCheckpointing); on `-c` auto, true or false."""


# -- the sections -------------------------------------------------------------------------------------------------

class ClusterSettings(_Section):
    """The EKS cluster and its network."""

    cluster_name: str = setting(
        "ray-train", "clusterName", "EKS cluster name; also prefixes the stack names.", pattern=_CLUSTER_NAME,
        message="must be 1-100 letters, digits, '-' or '_', starting with a letter or digit",
    )
    region: Region = setting("us-east-2", "region", "AWS region of both stacks.")
    kubernetes_version: KubernetesVersion = setting("1.36", "kubernetesVersion", "EKS Kubernetes version.")
    endpoint_access: Literal["public_and_private", "private", "public"] = setting(
        "public_and_private", "endpointAccess", "Who reaches the Kubernetes API endpoint.",
    )
    public_access_cidrs: Annotated[tuple[Cidr, ...], _LIST_AS_TUPLE] = setting(
        ("0.0.0.0/0",), "publicAccessCidrs", "CIDRs allowed to the public endpoint (comma-separated or a JSON list)."
    )
    vpc_id: str | None = setting(
        None, "vpcId", "Existing VPC to use (looked up at synth); unset creates a VPC.", pattern=_VPC_ID,
        message="must look like vpc-0123456789abcdef0",
    )
    nat_gateways: int = setting(
        1, "natGateways", "NAT gateways of a created VPC (1 is cheapest, one per AZ survives AZ loss).", ge=1, le=3
    )
    log_retention_days: LogRetentionDays = setting(
        365, "logRetentionDays",
        "Days the stack's log groups keep logs (a CloudWatch Logs period: 1, 3, 5, 7, 14, 30, 60, 90, ... 3653).",
    )
    admin_principal_arns: Annotated[tuple[AdminPrincipalArn, ...], _LIST_AS_TUPLE] = setting(
        (), "adminPrincipalArns",
        "IAM role/user ARNs that get cluster-admin access entries (comma-separated or a JSON list); unset: nobody "
        "but the stack's own roles can reach the Kubernetes API (`ray-efa whoami` prints yours).",
    )
    availability_zones: Annotated[tuple[str, ...], _LIST_AS_TUPLE] = setting(
        (), "vpcAvailabilityZones",
        "AZs of a created VPC, fixed for its life (changing them replaces subnets); unset: the region's first three "
        "in name order. gpuAvailabilityZone must be one of them.",
    )


class NodeSettings(_Section):
    """The two managed node groups."""

    system_instance_type: SystemInstanceType = setting(
        "m7i.xlarge", "systemInstanceType", "Instance type of the system node group (KubeRay operator, Ray head).",
    )
    system_node_count: int = setting(1, "systemNodeCount", "Nodes in the system node group.", ge=1, le=10)
    gpu_instance_type: GpuInstanceType = setting(
        "g6.12xlarge", "gpuInstanceType",
        "EFA-capable GPU instance type of the worker nodes: one of the catalog, or one of extraGpuInstanceTypes.",
    )
    gpu_node_count: int = setting(
        2, "gpuNodeCount",
        "GPU nodes (one Ray worker pod each); 0 scales the GPU node group to zero and applies no job, keeping both "
        "stacks (deploy again with 1 or more to come back).",
        ge=0, le=64,
    )
    gpu_availability_zone: str | None = setting(
        None, "gpuAvailabilityZone", "The one AZ of all GPU nodes (EFA does not cross AZs); unset: the region's first."
    )
    capacity_reservation_id: str | None = setting(
        None, "capacityReservationId", "On-Demand Capacity Reservation (cr-...) the GPU nodes launch into.",
        pattern=_CAPACITY_RESERVATION, message="must be 'cr-' and 17 hex digits, like cr-0123456789abcdef0",
    )
    placement_group: Literal["auto", "on", "off"] = setting(
        "auto", "placementGroup", "Cluster placement group for the GPU nodes; auto: on unless a reservation is targeted.",
    )
    gpu_root_volume_gib: int = setting(
        500, "gpuRootVolumeGib", "Encrypted gp3 root volume of each GPU node, GiB (holds the image).", ge=100, le=16384,
        message="must be between 100 and 16384 GiB (the training image alone is tens of GB)",
    )
    system_root_volume_gib: int = setting(
        100, "systemRootVolumeGib",
        "Encrypted gp3 root volume of each system node, GiB (holds the image of the Ray head and the job submitter).",
        ge=20, le=16384, message="must be between 20 and 16384 GiB",
    )
    capacity_reservation_type: Literal["odcr", "capacity-block"] = setting(
        "odcr", "capacityReservationType",
        "What capacityReservationId names: odcr (On-Demand Capacity Reservation) or capacity-block (Capacity Blocks for ML).",
    )

    @property
    def capacity_block(self) -> bool:
        """Whether the GPU nodes launch into a Capacity Block for ML (CAPACITY_BLOCK node group, capacity-block market)."""
        return self.capacity_reservation_type == "capacity-block"

    system_node_selector: NodeSelector = setting(
        scheduling.DEFAULT_SYSTEM_NODE_SELECTOR, "systemNodeSelector",
        "Node labels of the system side (KubeRay operator, Ray head, RayJob submitter); the system node group gets them.",
    )
    gpu_node_selector: NodeSelector = setting(
        scheduling.DEFAULT_GPU_NODE_SELECTOR, "gpuNodeSelector",
        "Node labels of the GPU side (Ray workers, device plugins); the GPU node group gets them "
        "(and nvidia.com/gpu.present=true).",
    )

    extra_gpu_instance_types: GpuDescriptions = setting(
        (), "extraGpuInstanceTypes",
        "GPU instance types the catalog does not build in, each a JSON object: name, gpus, gpuName, vcpus, memoryGib, "
        "efaInterfaces, networkGbps, usdPerHour, and gpuMemoryGib, peakBf16Tflops and memoryBandwidthGbS for a GPU the "
        "catalog does not know (optional: gpudirectRdma, gpuLinkGbS, efaOnlySecondary, capacityBlocks); checked like "
        "the catalog's rows (EFA required). gpuInstanceType may then name one.",
    )

    @property
    def gpu_instance(self) -> catalog.GpuInstanceType:
        """The catalog row of gpuInstanceType, or its description in extraGpuInstanceTypes."""
        described = described_gpu_instances(self.extra_gpu_instance_types)
        if self.gpu_instance_type in described:
            return described[self.gpu_instance_type]
        return catalog.gpu_instance(self.gpu_instance_type)

    @property
    def system_instance(self) -> catalog.InstanceType:
        return catalog.system_instance(self.system_instance_type)

    @property
    def use_placement_group(self) -> bool:
        return self.placement_group == "on" or (self.placement_group == "auto" and self.capacity_reservation_id is None)

    @property
    def total_gpus(self) -> int:
        return self.gpu_node_count * self.gpu_instance.gpus

    @property
    def scaled_to_zero(self) -> bool:
        """gpuNodeCount 0: the GPU node group stays, with no node, and no training job is applied."""
        return self.gpu_node_count == 0


class AddonSettings(_Section):
    """Pinned versions of the Helm charts installed into the cluster."""

    kuberay_version: KuberayVersion = setting("1.7.0", "kuberayVersion", "kuberay-operator Helm chart version.")
    nvidia_device_plugin_version: str = setting(
        "0.20.0", "nvidiaDevicePluginVersion", "nvidia-device-plugin Helm chart version.", pattern=_SEMVER,
        message="must be a chart version like 0.20.0",
    )
    efa_device_plugin_version: EfaDevicePluginVersion = setting(
        "v0.5.30", "efaDevicePluginVersion",
        "aws-efa-k8s-device-plugin Helm chart version (its allowlist must hold the GPU type).",
    )
    device_allocation: Literal["device-plugin", "dra"] = setting(
        "device-plugin", "deviceAllocation",
        "How the worker pods get GPUs and EFA interfaces: device-plugin (nvidia.com/gpu, vpc.amazonaws.com/efa "
        "extended resources), or dra (the NVIDIA and EFA DRA drivers; ResourceClaimTemplates that pair each GPU with "
        "the EFA interfaces on its PCIe root; Kubernetes 1.34 or later). Switch with the GPU nodes at zero.",
    )
    nvidia_dra_driver_version: str = setting(
        "0.4.1", "nvidiaDraDriverVersion", "dra-driver-nvidia-gpu Helm chart version (deviceAllocation dra).",
        pattern=_SEMVER, message="must be a chart version like 0.4.1",
    )
    efa_dra_driver_version: EfaDraDriverVersion = setting(
        "1.0.0", "efaDraDriverVersion",
        "aws-dranet (EFA DRA driver) Helm chart version, deviceAllocation dra (its allowlist must hold the GPU type).",
    )


class WorkloadSettings(_Section):
    """The RayCluster and the RayJob that runs training on it."""

    namespace: str = setting(
        "ray", "namespace", "Kubernetes namespace of the RayCluster and the RayJob.", pattern=_DNS_LABEL,
        message=_DNS_LABEL_MESSAGE,
    )
    dlc_image: ImageReference = setting(
        "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1", "dlcImage",
        "AWS Ray Train Deep Learning Container image, for head and workers (tag or digest required).",
    )
    ray_version: str = setting(
        "2.58.0", "rayVersion", "Ray version inside dlcImage (KubeRay's rayVersion).", pattern=_SEMVER,
        message="must be a version like 2.58.0",
    )
    network: Literal["efa", "tcp"] = setting(
        "efa", "network", "Transport between nodes: efa, or tcp for the EFA-versus-TCP comparison run."
    )
    preflight: bool = setting(True, "preflight", "Run the all-reduce bandwidth probe before training and fail fast on a slow path.")
    preflight_min_busbw_gbps: float | None = setting(
        None, "preflightMinBusbwGbps",
        "Inter-node all-reduce floor in GB/s at 1 GiB on the job's network (the comparison run keeps its own); "
        "unset: the network's, from a healthy node (plan shows it).",
        gt=0,
    )
    storage_path: StoragePath | None = setting(
        None, "storagePath",
        "Ray Train storage_path for checkpoints (s3://... or a shared filesystem); unset: local ~/ray_results.",
    )
    pip_packages: Annotated[tuple[str, ...], _LIST_AS_TUPLE] = setting(
        (), "pipPackages",
        "Extra pip packages for the Ray pods, installed by an init container beside the image's (never Ray's runtime_env pip).",
    )
    service_account: str = setting(
        "ray-train", "serviceAccount",
        "Kubernetes service account of the Ray pods; the cluster stack creates it with access to the checkpoint bucket.",
        pattern=_DNS_LABEL, message=_DNS_LABEL_MESSAGE,
    )
    training_job: bool = setting(
        True, "trainingJob",
        "Apply the training RayJob from the GPU stack, once the GPU nodes exist (CloudFormation creates it once); false: no job.",
    )
    job_name: JobName = setting(
        DEFAULT_JOB_NAME, "jobName",
        "Name of the training RayJob; its ConfigMaps, NetworkPolicy and TCP comparison job (<name>-tcp, or train-tcp "
        "for train-efa) follow it, so several jobs live side by side in one namespace.",
    )
    code_dir: CodeDir | None = setting(
        None, "codeDir",
        "Folder of your training code (absolute, or relative to the app directory), shipped to the pods and put on "
        "every worker's import path; unset: none.",
    )
    job_active_deadline_seconds: int = setting(3600, "jobActiveDeadlineSeconds", "RayJob activeDeadlineSeconds.", gt=0)
    job_backoff_limit: int = setting(0, "jobBackoffLimit", "RayJob backoffLimit (retries of the whole job).", ge=0)
    job_ttl_seconds_after_finished: int = setting(
        600, "jobTtlSecondsAfterFinished", "RayJob ttlSecondsAfterFinished.", ge=0
    )
    shared_volume_claim: str | None = setting(
        None, "sharedVolumeClaim",
        "PersistentVolumeClaim (in namespace) of a shared filesystem (FSx for Lustre, EFS) mounted into every Ray pod at "
        "sharedVolumeMountPath; local paths in modelPath, dataset, evalDataset and storagePath must lie under it. "
        "Unset: no volume, and a cluster run refuses local paths.",
        pattern=_DNS_SUBDOMAIN, message="must be a PersistentVolumeClaim name (lowercase, digits, '-', '.')",
    )
    shared_volume_mount_path: str = setting(
        "/mnt/shared", "sharedVolumeMountPath", "Where the pods mount sharedVolumeClaim (an absolute folder).",
        pattern=r"^/\S*[^/\s]$", message="must be an absolute folder like /mnt/fsx, not / itself",
    )


_T = TypeVar("_T")


def _decided(value: _T | Literal["auto"], key: str) -> _T:
    """A lever's value once core.strategy.resolve decided it: what the formulas and the job compute with."""
    if value == "auto":
        raise ValueError(f"{key} is auto: decide it first (core.strategy.resolve)")
    return cast(_T, value)


class TrainingSettings(_Section):
    """The training run: model, batch shape, optimizer, reporting, checkpoints."""

    model: ModelPreset = setting(
        "qwen2.5-1.5b", "model", "Model architecture preset of a random initialization (unused with modelPath)."
    )
    model_path: ModelPath | None = setting(
        None, "modelPath",
        "Pretrained weights and tokenizer to fine-tune: an absolute folder (save_pretrained output), s3://bucket/prefix "
        "(downloaded once per node) or hf://org/name[@revision] (the Hub, from the cluster); the architecture comes "
        "from its config.json. Unset: random initialization of `model`.",
    )
    model_configuration: str | None = setting(
        None, "modelConfig",
        "The architecture for the plan when modelPath's config.json is not on this machine (s3://, a pod-only folder, "
        "an hf:// repository not in the Hub cache): a local copy of that config.json, or a preset name.",
    )
    dataset: DataPath | None = setting(
        None, "dataset",
        "Training data: an absolute path or s3://bucket/prefix of parquet or JSON-lines files with a text column "
        "(tokenized with modelPath's tokenizer, packed into seqLen sequences, EOS between documents) or an input_ids "
        "column; read with Ray Data. Unset: random tokens.",
    )
    eval_dataset: DataPath | None = setting(
        None, "evalDataset", "Held-out data in dataset's format, evaluated every evalEvery steps and at the end."
    )
    eval_fraction: float = setting(
        0.0, "evalFraction",
        "Share of dataset's documents held out for evaluation (chosen by a hash of each document, so the split is the "
        "same on every run); 0: none.",
        ge=0, lt=0.5, message="must be >= 0 and < 0.5",
    )
    eval_every: int = setting(0, "evalEvery", "Evaluate every N steps (and at the end); 0: at the end only.", ge=0)
    eval_batches: int = setting(
        0, "evalBatches", "Micro-batches per GPU of each evaluation; 0: the whole held-out split.", ge=0
    )
    steps: int = setting(20, "steps", "Optimizer steps.", ge=1)
    seq_len: int = setting(2048, "seqLen", "Tokens per sequence.", ge=1)
    global_batch_tokens: int = setting(
        524_288, "globalBatchTokens",
        "Tokens per optimizer step over the whole job (0.5 M, in the 0.25-1 M range used for models of this size), "
        "the same on every cluster: core.strategy splits it into microBatch x seqLen x gradAccumulation x the "
        "data-parallel ranks (a microBatch or gradAccumulation you set is kept; `plan` says when the split cannot "
        "reach it exactly, and the global batch it reaches).",
        ge=1,
    )
    micro_batch: AutoCount = setting(
        "auto", "microBatch",
        "Sequences per GPU per micro-batch; auto: the one core.strategy predicts fastest that fits in "
        "92% of the GPU's memory (seqLen stays yours).",
    )
    learning_rate: float = setting(3e-4, "learningRate", "Peak AdamW learning rate.", gt=0)
    warmup_steps: int = setting(5, "warmupSteps", "Linear warm-up steps, then cosine decay to 10% of the peak.", ge=0)
    weight_decay: float = setting(0.1, "weightDecay", "AdamW weight decay.", ge=0)
    grad_clip: float = setting(1.0, "gradClip", "Gradient norm clip; 0 turns clipping off.", ge=0)
    seed: int = setting(0, "seed", "Seed of the initialization and the token batches (each rank adds its rank).", ge=0)
    report_every: int = setting(
        1, "reportEvery",
        "Measure metrics every N steps (and on the first and last): one all-reduce and a progress line, kept in the "
        "history; ray.train.report is called at most once per Ray Train controller poll, so a metrics report never "
        "waits; a checkpoint is reported at its own step, after its save, and may wait up to one poll (2 s) if the "
        "previous report is not yet drained.",
        ge=1,
    )
    checkpoint_every: int = setting(0, "checkpointEvery", "Checkpoint every K steps; 0: only at the end.", ge=0)
    max_failures: int = setting(
        1, "maxFailures", "Ray Train FailureConfig(max_failures): worker-group restarts from the last checkpoint after a lost worker, node or collective; an exception of the code is not retried.",
        ge=-1, message="must be >= 0, or -1 for unlimited",
    )
    compile: bool = setting(True, "compile", "torch.compile each decoder layer (and the chunked loss's softmax).")
    activation_checkpointing: AutoBool = setting(
        "auto", "activationCheckpointing",
        "Recompute decoder-layer activations in backward; auto: on only where it lets a faster plan fit (core.strategy).",
    )
    loss_chunk_size: int = setting(
        1024, "lossChunkSize",
        "Tokens per chunk of the fused output projection + cross-entropy; 0: unchunked. The same FLOPs at any size; "
        "1024 holds 8 x vocab x 1024 bytes of logits (1.2 GiB for Qwen2.5), a quarter of 4096's.",
        ge=0,
    )
    sharding: Literal["auto", "fsdp", "hsdp"] = setting(
        "auto", "sharding",
        "How parameters, gradients and optimizer state are split: fsdp shards over every GPU; hsdp shards within a node "
        "and replicates across nodes (2-D DeviceMesh), so only a gradient all-reduce crosses the network; auto takes the "
        "one core.perf predicts fastest that fits memory.",
    )
    grad_accumulation: AutoCount = setting(
        "auto", "gradAccumulation",
        "Micro-batches per optimizer step (each of microBatch x seqLen tokens per GPU); gradients cross the network once "
        "per optimizer step. The global batch is microBatch x gradAccumulation x world size sequences; auto: what "
        "reaches globalBatchTokens.",
    )
    grad_reduce_dtype: Literal["auto", "fp32", "bf16"] = setting(
        "auto", "gradReduceDtype",
        "Precision of the gradient reduce-scatter/all-reduce on the wire on GPU: fp32, or bf16 (half the bytes); "
        "gradients are accumulated and the optimizer steps in fp32 either way. auto: bf16 where core.strategy "
        "predicts it at least 5% faster (a network-bound multi-node job), else fp32.",
    )
    precision: Literal["auto", "bf16", "fp8"] = setting(
        "auto", "precision",
        "Matrix-product precision of the decoder layers on GPU: bf16, or fp8 (torchao float8 training of the linears "
        "large enough to gain, tensorwise scaling, fp8 all-gather under FSDP2; needs fp8 tensor cores: "
        f"{', '.join(gpu.name for gpu in catalog.GPUS.values() if gpu.has_fp8)}); auto: fp8 where the GPU "
        "has them, compile is on, the GPU family's fp8 speed is measured or published (not assumed: plan says "
        "which) and core.perf predicts it faster at the chosen shape, else bf16.",
    )
    data_pool_size: int = setting(
        0, "dataPoolSize",
        "Random token sequences per rank that batches are drawn from (a set the model can memorize, so the loss falls); "
        "0: fresh random tokens every step.",
        ge=0,
    )

    train_function: str = setting(
        DEFAULT_TRAIN_FUNCTION, "trainFunction",
        "The function every Ray Train worker runs, as module:function (in codeDir, or importable); it gets a config "
        "dict of trainConfig's keys plus \"settings\" (README: Your own training).",
        pattern=_TRAIN_FUNCTION, message="must be module:function, like my_training.train:train_func",
    )
    train_config: TrainConfig = setting(
        {}, "trainConfig",
        "Free-form JSON object of your function's own parameters: its keys are the top-level keys of the config "
        "dict the function gets.",
    )

    @property
    def undecided(self) -> tuple[str, ...]:
        """The context keys still at auto that core.strategy.resolve decides before anything is predicted or run."""
        values = {"microBatch": self.micro_batch, "gradAccumulation": self.grad_accumulation,
                  "precision": self.precision, "activationCheckpointing": self.activation_checkpointing}
        return tuple(key for key, value in values.items() if value == "auto")

    @property
    def micro_batch_size(self) -> int:
        """microBatch once decided (core.strategy.resolve); ValueError while it is still auto."""
        return _decided(self.micro_batch, "microBatch")

    @property
    def accumulation_steps(self) -> int:
        """gradAccumulation once decided (core.strategy.resolve); ValueError while it is still auto."""
        return _decided(self.grad_accumulation, "gradAccumulation")

    @property
    def checkpointing(self) -> bool:
        """activationCheckpointing once decided (core.strategy.resolve); ValueError while it is still auto."""
        return _decided(self.activation_checkpointing, "activationCheckpointing")

    @property
    def builtin(self) -> bool:
        """Whether the job runs the built-in train function, whose model and memory the settings describe."""
        return self.train_function == DEFAULT_TRAIN_FUNCTION

    @property
    def preset(self) -> models.ModelPreset:
        """The architecture to train and plan: modelPath's config.json (core.model_source), else the `model` preset.

        Raises SettingsError when modelPath is set and neither its config.json nor modelConfig can be read here.
        """
        from ray_efa.core.model_source import architecture

        return architecture(self)


_SECTIONS: dict[str, type[_Section]] = {
    "cluster": ClusterSettings,
    "nodes": NodeSettings,
    "addons": AddonSettings,
    "workload": WorkloadSettings,
    "training": TrainingSettings,
}


# -- rules across fields (declared after the sections they read) ---------------------------------------------------

@_rule("capacityReservationId", "placementGroup")
def _forced_placement_group(reservation: str | None, placement: str) -> Problem | None:
    if reservation is not None and placement == "on":
        return Problem("placementGroup", placement, "must be auto or off when capacityReservationId is set "
                                                    "(a forced placement group can leave reserved capacity unused)")
    return None


@_rule("systemNodeSelector", "gpuNodeSelector")
def _gpu_selector_skips_system_nodes(system: dict[str, str], gpu: dict[str, str]) -> Problem | None:
    # Workers asking for GPUs on a system node would stay Pending forever.
    if gpu.items() <= system.items():
        return Problem("gpuNodeSelector", gpu, f"must not also select the system nodes ({scheduling.label_selector(system)}): "
                                               "add a label only GPU nodes carry")
    return None


@_rule("capacityReservationType", "capacityReservationId")
def _capacity_block_needs_its_id(reservation_type: str, reservation: str | None) -> Problem | None:
    if reservation_type == "capacity-block" and reservation is None:
        return Problem("capacityReservationType", reservation_type,
                       "needs capacityReservationId: the Capacity Block's reservation id (cr-...)")
    return None


@_rule("capacityReservationType", "gpuInstanceType", "extraGpuInstanceTypes")
def _capacity_block_instance_type(reservation_type: str, instance_type: str,
                                  descriptions: tuple[dict[str, Any], ...]) -> Problem | None:
    row = described_gpu_instances(descriptions).get(instance_type) or catalog.GPU_INSTANCES.get(instance_type)
    if reservation_type == "capacity-block" and not (row is not None and row.capacity_blocks):
        return Problem("gpuInstanceType", instance_type,
                       "must be a type Capacity Blocks offer with capacityReservationType capacity-block: "
                       f"{', '.join(sorted(catalog.CAPACITY_BLOCK_INSTANCES))} (or one of extraGpuInstanceTypes "
                       "with capacityBlocks true)")
    return None


@_rule("adminPrincipalArns")
def _admins_once_each(arns: tuple[str, ...]) -> Problem | None:
    if len(set(arns)) != len(arns):
        return Problem("adminPrincipalArns", list(arns), "must not repeat an ARN (EKS allows one access entry per principal)")
    return None


@_rule("dlcImage", "rayVersion")
def _ray_of_the_image(image: str, ray_version: str) -> Problem | None:
    known = KNOWN_IMAGE_RAY_VERSIONS.get(image)
    if known is not None and known != ray_version:
        return Problem("rayVersion", ray_version, f"must equal the Ray inside {image} ({known})")
    return None


@_rule("precision", "gpuInstanceType", "extraGpuInstanceTypes")
def _fp8_needs_fp8_tensor_cores(precision: str, instance_type: str, descriptions: tuple[dict[str, Any], ...]
                                ) -> Problem | None:
    row = catalog.GPU_INSTANCES.get(instance_type)
    if row is None:
        try:
            row = described_gpu_instances(descriptions).get(instance_type)
        except catalog.CatalogError:
            return None  # _descriptions_problem names extraGpuInstanceTypes
    if precision == "fp8" and row is not None and row.gpu is not None and not row.gpu.has_fp8:
        with_fp8 = sorted({r.gpu.name for r in catalog.GPU_INSTANCES.values() if r.gpu and r.gpu.has_fp8})
        return Problem("precision", precision, f"must be bf16 on {instance_type}: its {row.gpu.name} has no fp8 tensor "
                                               f"cores (fp8 needs one of {', '.join(with_fp8)})")
    return None


@_rule("model", "seqLen")
def _sequence_fits_the_model(model: str, seq_len: int) -> Problem | None:
    limit = model_preset(model).max_position_embeddings
    if seq_len > limit:
        return Problem("seqLen", seq_len, f"must be <= {limit}, the max positions of {model}")
    return None


@_rule("modelConfig", "modelPath")
def _model_config_describes_a_model_path(model_config: str | None, model_path: str | None) -> Problem | None:
    if model_config is not None and model_path is None:
        return Problem("modelConfig", model_config, "needs modelPath: it describes modelPath's architecture "
                                                    "(a random initialization takes `model`)")
    return None


@_rule("dataset", "evalDataset", "evalFraction", "evalEvery", "evalBatches")
def _evaluation_needs_held_out_data(
    dataset: str | None, eval_dataset: str | None, fraction: float, every: int, batches: int
) -> Problem | None:
    if eval_dataset is not None and fraction > 0:
        return Problem("evalFraction", fraction, "must be 0 when evalDataset is set (one held-out set: either "
                                                 "evalDataset or a fraction of dataset)")
    if (eval_dataset is not None or fraction > 0) and dataset is None:
        key, value = ("evalDataset", eval_dataset) if eval_dataset is not None else ("evalFraction", fraction)
        return Problem(key, value, "needs dataset: random tokens have no held-out split to evaluate")
    if (every or batches) and eval_dataset is None and fraction == 0:
        key, value = ("evalEvery", every) if every else ("evalBatches", batches)
        return Problem(key, value, "needs held-out data: set evalFraction or evalDataset")
    return None


def _in_region(region: str, zone: str) -> bool:
    known = regions.AVAILABILITY_ZONES.get(region)
    return zone in known if known else bool(re.fullmatch(re.escape(region) + "[a-z]", zone))


def _zones_of(region: str) -> str:
    return ", ".join(regions.AVAILABILITY_ZONES.get(region) or (f"{region}a..{region}z",))


@_rule("region", "gpuAvailabilityZone", "vpcAvailabilityZones")
def _zone_of_the_region(region: str, zone: str | None, vpc_zones: tuple[str, ...]) -> Problem | None:
    if zone is None:
        if region not in regions.AVAILABILITY_ZONES and not vpc_zones:
            return Problem("region", region, "has no recorded AZ names; set gpuAvailabilityZone and vpcAvailabilityZones "
                                             f"(or vpcId), or use one of {', '.join(regions.AVAILABILITY_ZONES)}")
        return None
    if not _in_region(region, zone):
        return Problem("gpuAvailabilityZone", zone, f"must be an AZ of region {region}: {_zones_of(region)}")
    return None


@_rule("region", "vpcAvailabilityZones")
def _vpc_zones_of_the_region(region: str, vpc_zones: tuple[str, ...]) -> Problem | None:
    if not vpc_zones:
        return None
    outside = [zone for zone in vpc_zones if not _in_region(region, zone)]
    if outside:
        return Problem("vpcAvailabilityZones", ",".join(outside), f"must be AZs of region {region}: {_zones_of(region)}")
    if len(set(vpc_zones)) != len(vpc_zones) or not 2 <= len(vpc_zones) <= 6:
        return Problem("vpcAvailabilityZones", ",".join(vpc_zones), "must be 2 to 6 different AZs (EKS needs subnets in two)")
    return None


@_rule("region", "vpcId", "vpcAvailabilityZones", "gpuAvailabilityZone")
def _gpu_zone_in_the_vpc(region: str, vpc_id: str | None, vpc_zones: tuple[str, ...], zone: str | None) -> Problem | None:
    """A created VPC's AZs do not follow the GPU AZ (see Settings.vpc_availability_zones): the GPU AZ must be one of
    them. An existing VPC (vpcId) is checked at synth, against its looked-up subnets."""
    if vpc_id is not None or (zone is not None and not _in_region(region, zone)):
        return None  # the zone's own rule reports a zone of another region
    recorded = regions.AVAILABILITY_ZONES.get(region)
    zones = vpc_zones or (tuple(sorted(recorded)[:3]) if recorded else ())
    if not zones:
        if zone is None:
            return None  # _zone_of_the_region asks for both
        return Problem("vpcAvailabilityZones", "", f"must name two AZs or more of {region} (EKS needs subnets in two): "
                                                   "the region has no recorded AZ names")
    gpu_zone = zone or (recorded[0] if recorded else zones[0])
    if gpu_zone not in zones:
        return Problem("gpuAvailabilityZone", gpu_zone,
                       f"must be one of the VPC's AZs ({', '.join(zones)}); to use it, set vpcAvailabilityZones to include "
                       "it before the first deploy (changing a deployed VPC's AZs replaces its subnets)")
    return None


@_rule("gpuInstanceType", "extraGpuInstanceTypes")
def _gpu_type_is_known(instance_type: str, descriptions: tuple[dict[str, Any], ...]) -> Problem | None:
    if instance_type in catalog.GPU_INSTANCES or instance_type in described_gpu_instances(descriptions):
        return None
    try:
        catalog.gpu_instance(instance_type)
    except catalog.CatalogError as error:
        return Problem("gpuInstanceType", instance_type, f"{error}; or describe it in extraGpuInstanceTypes")
    return None


@_rule("gpuInstanceType", "efaDevicePluginVersion", "extraGpuInstanceTypes", "deviceAllocation", "efaDraDriverVersion")
def _efa_plugin_runs_on_the_gpu_type(instance_type: str, chart_version: str, descriptions: tuple[dict[str, Any], ...],
                                     allocation: str, dra_version: str) -> Problem | None:
    # Built-in and described types alike: the recorded allowlist is the chart's own (every GPU type it lists).
    if instance_type not in catalog.GPU_INSTANCES and instance_type not in described_gpu_instances(descriptions):
        return None  # _gpu_type_is_known says what is wrong
    if allocation == "dra":  # the EFA DRA driver is installed instead, with an allowlist of its own
        problem = catalog.efa_plugin_problem(instance_type, dra_version, addons.EFA_DRA_DRIVER_ALLOWLISTS)
        return Problem("efaDraDriverVersion", dra_version, problem.replace("efaDevicePluginVersion", "efaDraDriverVersion")
                       ) if problem else None
    problem = catalog.efa_plugin_problem(instance_type, chart_version)
    return Problem("efaDevicePluginVersion", chart_version, problem) if problem else None


def dra_kubernetes_problem(kubernetes_version: str) -> str | None:
    """Why DRA cannot be used on this Kubernetes version (resource.k8s.io/v1 is GA from 1.34), or None."""
    major, minor = (int(part) for part in kubernetes_version.split(".")[:2])
    if (major, minor) < addons.DRA_MIN_KUBERNETES:
        return (f"must be device-plugin on Kubernetes {kubernetes_version}: DRA (resource.k8s.io/v1, the NVIDIA and EFA "
                f"DRA drivers) needs Kubernetes {'.'.join(map(str, addons.DRA_MIN_KUBERNETES))} or later")
    return None


@_rule("deviceAllocation", "kubernetesVersion")
def _dra_needs_its_kubernetes(allocation: str, kubernetes_version: str) -> Problem | None:
    problem = dra_kubernetes_problem(kubernetes_version) if allocation == "dra" else None
    return Problem("deviceAllocation", allocation, problem) if problem else None


# -- the settings object ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SettingInfo:
    """One setting as the docs, the README table and the JSON Schema describe it."""

    section: str
    name: str
    key: str
    doc: str
    default: Any
    choices: tuple[Any, ...] | None

    @property
    def metadata(self) -> dict[str, Any]:
        """The dataclass-era view ({"key", "doc", "choices"}), kept for code written against it."""
        return {"key": self.key, "doc": self.doc, "choices": self.choices}


def setting_keys() -> dict[str, tuple[str, SettingInfo]]:
    """Every context key -> (section name, what the setting is), in declaration order."""
    out: dict[str, tuple[str, SettingInfo]] = {}
    for section, cls in _SECTIONS.items():
        for name, info in cls.model_fields.items():
            key = info.alias or name  # setting() always gives an alias; a field without one is keyed by its name
            out[key] = (section, SettingInfo(section, name, key, info.description or "", info.default,
                                             _choices_of(info.annotation)))
    return out


def setting_choices(key: str) -> tuple[str, ...]:
    """The values a closed setting (a Literal of strings, such as `network`) allows; ValueError for any other."""
    choices = setting_keys()[key][1].choices
    if choices is None:
        raise ValueError(f"setting {key} is not a closed set of values")
    return tuple(str(choice) for choice in choices)


def _is_foreign_key(key: str) -> bool:
    """Context keys that belong to the CDK itself (feature flags, lookups, CLI switches), not to us."""
    return key.startswith(("@", "cdk", "aws-cdk")) or ":" in key


_FOREIGN_KEY_PATTERN = "^@|:|^cdk|^aws-cdk"  # the same test as _is_foreign_key, for the JSON Schema


class Settings(_Model):
    """All settings, in sections. Build with `Settings.from_context(...)` or `Settings()` for the defaults."""

    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    nodes: NodeSettings = Field(default_factory=NodeSettings)
    addons: AddonSettings = Field(default_factory=AddonSettings)
    workload: WorkloadSettings = Field(default_factory=WorkloadSettings)
    training: TrainingSettings = Field(default_factory=TrainingSettings)

    @classmethod
    def _rules(cls) -> list[_Rule]:
        """The rules that read settings of more than one section (each section runs its own)."""
        inside = [rule for section in _SECTIONS.values() for rule in section._rules()]
        return [rule for rule in _RULES if rule not in inside]

    @classmethod
    def _values_by_key(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for section, section_cls in _SECTIONS.items():
            given = data.get(section)
            if isinstance(given, section_cls):
                values.update(given._flat())
            else:  # a mapping of the section's values, or nothing (its defaults)
                values.update(section_cls._values_by_key(given if isinstance(given, Mapping) else {}))
        return values

    def _flat(self) -> dict[str, Any]:
        return {key: value for section in _SECTIONS for key, value in getattr(self, section)._flat().items()}

    # -- derived values every layer shares ------------------------------------------------------------------

    @property
    def gpu_availability_zone(self) -> str:
        """The GPU AZ, resolved: the setting, else the region's first AZ (of the VPC's, for a region not recorded)."""
        if self.nodes.gpu_availability_zone:
            return self.nodes.gpu_availability_zone
        recorded = regions.AVAILABILITY_ZONES.get(self.cluster.region) or self.cluster.availability_zones
        return recorded[0]

    @property
    def vpc_availability_zones(self) -> tuple[str, ...]:
        """AZs of a created VPC: vpcAvailabilityZones, else the region's first three recorded AZs in name order.

        Independent of gpuAvailabilityZone on purpose: the VPC's subnets (and with them the NAT gateway, the EKS
        cluster's subnets and the system node group) are created per AZ, in this order, so a list that followed the
        GPU AZ would replace them all when capacity moves. Moving the GPU AZ changes only the GPU stack.
        """
        if self.cluster.availability_zones:
            return self.cluster.availability_zones
        return tuple(sorted(regions.AVAILABILITY_ZONES.get(self.cluster.region, ()))[:3])

    @property
    def world_size(self) -> int:
        return self.nodes.total_gpus

    @property
    def cluster_stack_name(self) -> str:
        """The stack with the VPC, the EKS cluster, the system nodes and the charts."""
        return f"{self.cluster.cluster_name}-cluster"

    @property
    def gpu_stack_name(self) -> str:
        """The stack with the GPU node group alone: destroy it first, and alone, to stop paying for GPUs."""
        return f"{self.cluster.cluster_name}-gpu"

    @property
    def teardown_commands(self) -> tuple[str, ...]:
        return (f"npx cdk destroy {self.gpu_stack_name}", f"npx cdk destroy {self.cluster_stack_name}")

    @property
    def scale_commands(self) -> tuple[str, str]:
        """(scale the GPU nodes to zero, come back): the GPU stack alone, both stacks kept."""
        back = self.nodes.gpu_node_count or NodeSettings.model_fields["gpu_node_count"].default
        return (f"npx cdk deploy {self.gpu_stack_name} -c gpuNodeCount=0",
                f"npx cdk deploy {self.gpu_stack_name} -c gpuNodeCount={back}")

    def scaled_to_zero_problem(self) -> Problem:
        """What to say where a training plan or a job needs GPUs and gpuNodeCount is 0."""
        return Problem("gpuNodeCount", 0, (
            "is 0: the GPU node group is scaled to zero and no job runs, so there is no GPU to plan or run the job "
            f"on; set it to 1 or more to train (`{self.scale_commands[1]}`)"))

    # -- construction ---------------------------------------------------------------------------------------

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> Settings:
        """Settings from CDK context values (strings from `-c`, JSON values from cdk.json); raises SettingsError."""
        keys = setting_keys()
        problems: list[Problem] = []
        values: dict[str, dict[str, Any]] = {section: {} for section in _SECTIONS}
        for key, raw in context.items():
            if key not in keys:
                if not _is_foreign_key(key):
                    close = difflib.get_close_matches(key, keys, n=1)
                    hint = f"did you mean {close[0]}?" if close else f"known settings: {', '.join(sorted(keys))}"
                    problems.append(Problem(key, raw, f"unknown setting ({hint})"))
                continue
            section, info = keys[key]
            try:
                values[section][key] = _parse(raw, _SECTIONS[section].model_fields[info.name].annotation)
            except ValueError as error:
                problems.append(Problem(key, raw, str(error)))
        sections: dict[str, Any] = {}  # section name -> its model, one type per name (ClusterSettings, ...)
        for section, section_cls in _SECTIONS.items():
            try:
                sections[section] = section_cls(**values[section])
            except SettingsError as error:
                problems.extend(error.problems)
        if not problems:
            return cls(**sections)
        # Some settings are bad: still run the rules across sections on the good ones, so that one error says all.
        flat = {info.key: info.default for _, info in keys.values()}
        for section_values in values.values():
            flat.update(section_values)
        problems += _rule_problems(cls._rules(), flat, {p.key for p in problems})
        raise SettingsError(problems)

    def to_context(self) -> dict[str, Any]:
        """Every setting as JSON-ready context values (the form the RayJob ships to the training driver)."""
        return {key: list(value) if isinstance(value, tuple) else json.loads(json.dumps(value)) if isinstance(value, dict)
                else value for key, value in self._flat().items()}

    def to_json(self) -> str:
        return json.dumps(self.to_context(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Settings:
        return cls.from_context(json.loads(text))

    @property
    def given_keys(self) -> frozenset[str]:
        """The context keys these settings were given (by from_context, a section's keyword or replace), as opposed
        to left at their defaults: what a construct that takes a value from elsewhere must not contradict."""
        return frozenset(info.alias for section in _SECTIONS for name, info in
                         type(getattr(self, section)).model_fields.items() if name in getattr(self, section).model_fields_set)

    def replace(self, **context: Any) -> Settings:
        """A copy with some settings changed, by context key: `settings.replace(steps=5, model="tiny")`. The keys
        left at their defaults stay so (given_keys)."""
        current = self.to_context()
        return Settings.from_context({**{key: current[key] for key in self.given_keys}, **context})


# -- JSON Schema ----------------------------------------------------------------------------------------------------

def context_json_schema() -> dict[str, Any]:
    """The JSON Schema of a cdk.json whose "context" holds these settings (docs/settings.schema.json).

    It describes the typed JSON form (numbers as numbers); `-c` strings are parsed before these checks apply.
    The CDK's own context keys (feature flags "@aws-cdk/...", lookups "x:y") are allowed as anything.
    """
    properties: dict[str, Any] = {}
    for section, cls in _SECTIONS.items():
        schema = cls.model_json_schema(by_alias=True, mode="validation")
        for key, prop in schema["properties"].items():
            prop.pop("title", None)
            prop["description"] = f"[{section}] {prop.get('description', '')}"
            properties[key] = prop
    context = {
        "type": "object",
        "description": "CDK context: the ray-efa settings (README, Settings) and the CDK's own keys.",
        "properties": properties,
        "patternProperties": {_FOREIGN_KEY_PATTERN: {}},
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "cdk.json of a ray-efa-stack app",
        "description": "Generated by tools/settings_schema.py from ray_efa.core.settings; do not edit by hand.",
        "type": "object",
        "properties": {"$schema": {"type": "string"}, "app": {"type": "string"}, "context": {"$ref": "#/$defs/context"}},
        "$defs": {"context": context},
    }
