"""The checks of one setting's value, and the patterns and closed sets they check against: core.settings' fields.

Each `_*_problem(value)` returns what is wrong ("must be ...") or None; the Annotated types below (Region, Cidr,
ImageReference, ...) attach one to a field with `_check(...)` and give the JSON Schema a hint with `_schema(...)`.
The sections (core.settings.sections) declare their fields with these types and patterns; core.settings re-exports
the public constants (KUBERNETES_VERSIONS, LOG_RETENTION_DAYS, ...). Pure Python with pydantic alone, like
core.settings (the training job imports it inside the container).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import WithJsonSchema

from ray_efa.core import addons, catalog, regions, scheduling
from ray_efa.core.image import KNOWN_IMAGES
from ray_efa.core.model_source import data_path_problem, model_path_problem
from ray_efa.core.models import MODEL_PRESETS

# The framework, under the names the declarations below use (private here: core.settings.framework exports them).
from ray_efa.core.settings.framework import LIST_AS_TUPLE as _LIST_AS_TUPLE
from ray_efa.core.settings.framework import check as _check
from ray_efa.core.settings.framework import string_schema as _schema

KUBERNETES_VERSIONS = ("1.35", "1.36")
"""Versions that both aws_eks_v2 (aws-cdk-lib 2.275.0) and a pinned kubectl layer package support."""

LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)
"""The retention periods CloudWatch Logs accepts (AWS::Logs::LogGroup RetentionInDays)."""

KUBERAY_VERSIONS = ("1.4.0", "1.7.0")
"""KubeRay releases whose CRD schemas the manifests are validated against."""

KNOWN_IMAGE_RAY_VERSIONS = {name: image.ray_version for name, image in KNOWN_IMAGES.items()}
"""Ray inside the Deep Learning Container tags we know (core.image); rayVersion must match the image's Ray."""

_IMAGE_REFERENCE = re.compile(
    r"^(?:(?P<registry>[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::\d+)?)/)?"
    r"(?P<repository>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)
# Patterns that pydantic checks and the JSON Schema publishes: plain syntax that Python, Rust (pydantic-core) and
# ECMAScript (editors) read alike.
CLUSTER_NAME = r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
SEMVER = r"^\d+\.\d+\.\d+$"
CAPACITY_RESERVATION = r"^cr-[0-9a-f]{17}$"
CAPACITY_RESERVATION_MESSAGE = "must be 'cr-' and 17 hex digits, like cr-0123456789abcdef0"
KMS_KEY_ARN = r"^arn:aws(-[a-z]+)*:kms:[a-z0-9-]+:[0-9]{12}:key/[A-Za-z0-9-]+$"
KMS_KEY_ARN_MESSAGE = "must be a KMS key ARN, like arn:aws:kms:us-east-2:123456789012:key/<key id> (not an alias)"
"""What a setting that fails KMS_KEY_ARN is told (a section's field gives it as the pattern's message)."""
VPC_ID = r"^vpc-(?:[0-9a-f]{8}|[0-9a-f]{17})$"
_INSTANCE_TYPE = r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$"
DNS_LABEL_MESSAGE = "must be a DNS label (lowercase, digits, '-')"
"""What a setting that fails DNS_LABEL is told."""
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
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


def cidr_problem(cidr: str) -> str | None:
    """publicAccessCidrs' (and RayEksCluster public_access_cidrs') check of one CIDR."""
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


def admin_arn_problem(arn: str) -> str | None:
    """adminPrincipalArns' (and RayEksCluster admin_principal_arns') check of one ARN."""
    session = _STS_ASSUMED_ROLE_ARN.match(arn)
    if session:
        # EKS refuses session ARNs, which lack the role's path: no way to derive the role ARN here.
        return (
            "must be IAM role or user ARNs, not an STS session; `ray-efa whoami` prints the role's ARN "
            f"(or: aws iam get-role --role-name {session['role']} --query Role.Arn --output text)"
        )
    if not re.match(_IAM_PRINCIPAL_ARN, arn):
        return "must be IAM role or user ARNs like arn:aws:iam::111122223333:role/Admin"
    return None


def capacity_reservation_problem(reservation: str) -> str | None:
    """capacityReservationId's (and EfaGpuNodegroup capacity_reservation_id's) check."""
    return None if re.match(CAPACITY_RESERVATION, reservation) else CAPACITY_RESERVATION_MESSAGE


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
        label = (
            f"entry {index} ({description.get('name', 'no name')})"
            if isinstance(description, dict)
            else f"entry {index}"
        )
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
        bucket = path[len("s3://") :].partition("/")[0]
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

TRAIN_FUNCTION = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
"""trainFunction's form, module:function (a dotted module path, a function name)."""
_DNS_1035 = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
TRAIN_CONFIG_RESERVED = "settings"
"""The key of the function's config dict that holds the resolved settings; trainConfig may not use it (nor keys
starting with "_", which the project's test hooks use)."""


def job_name_problem(name: str) -> str | None:
    """jobName's (and RayTrainingJob job_name's) check: a DNS-1035 label of at most MAX_JOB_NAME_LENGTH characters."""
    if not re.match(_DNS_1035, name):
        return (
            "must be a DNS-1035 label (lowercase letters, digits and '-', starting with a letter and ending with a "
            "letter or digit)"
        )
    if len(name) > MAX_JOB_NAME_LENGTH:
        return (
            f"must be at most {MAX_JOB_NAME_LENGTH} characters, not {len(name)}: KubeRay's 47 minus the -tcp of "
            "the comparison job"
        )
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
        return (
            f"must not use the keys {', '.join(reserved)}: config[{TRAIN_CONFIG_RESERVED!r}] holds the resolved "
            "settings, and keys starting with '_' are the project's"
        )
    return None


# Annotated types with their checks; pydantic runs them after the type.
Region = Annotated[str, _check(_region_problem), _schema(pattern=regions.REGION_PATTERN.pattern)]
Cidr = Annotated[str, _check(cidr_problem), _schema(pattern=r"^\d{1,3}(\.\d{1,3}){3}/\d{1,2}$")]
GpuInstanceType = Annotated[
    str,
    _check(_gpu_instance_problem),
    _schema(pattern=_INSTANCE_TYPE, examples=sorted(n for n, row in catalog.GPU_INSTANCES.items() if row.efa_capable)),
]
_DESCRIPTION_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": [key for key, (_, required, _) in catalog.DESCRIPTION_KEYS.items() if required],
    "properties": {
        key: {
            "description": meaning,
            **(
                {"type": "string"}
                if kind is str
                else {"type": "boolean"}
                if kind is bool
                else {"type": "integer"}
                if kind is int
                else {"type": "number"}
            ),
        }
        for key, (kind, _, meaning) in catalog.DESCRIPTION_KEYS.items()
    },
}
GpuDescriptions = Annotated[
    tuple[dict[str, Any], ...],
    _LIST_AS_TUPLE,
    _check(_descriptions_problem),
    WithJsonSchema({"type": "array", "items": _DESCRIPTION_SCHEMA}),
]
"""GPU instance types a user describes (catalog.DESCRIPTION_KEYS), checked like the catalog's own rows."""
ImageReference = Annotated[
    str, _check(_image_problem), _schema(pattern=r"^[^\s]+(:[\w][\w.-]{0,127}|@sha256:[a-f0-9]{64})$")
]
StoragePath = Annotated[str, _check(_storage_path_problem), _schema(pattern=r"^(s3://[^/]+(/.*)?|/.*)$")]
ModelPath = Annotated[
    str, _check(model_path_problem), _schema(pattern=r"^(/.*|s3://[^/]+(/.*)?|hf://[^/@]+/[^/@]+(@.+)?)$")
]
DataPath = Annotated[str, _check(data_path_problem), _schema(pattern=r"^(/.*|s3://[^/]+(/.*)?)$")]
AdminPrincipalArn = Annotated[str, _check(admin_arn_problem), _schema(pattern=_IAM_PRINCIPAL_ARN)]
LogRetentionDays = Annotated[
    int, _check(_log_retention_problem), WithJsonSchema({"type": "integer", "enum": list(LOG_RETENTION_DAYS)})
]
NodeSelector = Annotated[
    dict[str, str],
    _check(scheduling.node_selector_problem),
    WithJsonSchema({"type": "object", "minProperties": 1, "additionalProperties": {"type": "string"}}),
]
"""Node labels a pod must match; on `-c` a JSON object or key=value,key2=value2."""
NodeTaints = Annotated[
    tuple[str, ...],
    _LIST_AS_TUPLE,
    _check(scheduling.taints_problem),
    WithJsonSchema(
        {
            "type": "array",
            "items": {"type": "string", "pattern": r"^[^=:]+(=[^:]*)?:(NoSchedule|PreferNoSchedule|NoExecute)$"},
        }
    ),
]
"""Node taints, each key=value:Effect or key:Effect."""
TrainConfig = Annotated[dict[str, Any], _check(_train_config_problem), WithJsonSchema({"type": "object"})]
"""A free-form JSON object; on `-c` its JSON text."""
JobName = Annotated[
    str,
    _check(job_name_problem),
    _schema(pattern=_DNS_1035, maxLength=MAX_JOB_NAME_LENGTH, **{"not": {"pattern": "-tcp$"}}),
]
CodeDir = Annotated[str, _check(_code_dir_problem), _schema(minLength=1)]


NCCL_DEBUG_SUBSYSTEMS: tuple[str, ...] = (
    "INIT",
    "COLL",
    "P2P",
    "SHM",
    "NET",
    "GRAPH",
    "TUNING",
    "ENV",
    "ALLOC",
    "CALL",
    "PROXY",
    "NVLS",
    "BOOTSTRAP",
    "REG",
    "PROFILE",
    "RAS",
    "ALL",
)
"""The names NCCL_DEBUG_SUBSYS takes (NCCL 2.29.7, src/debug.cc ncclDebugInit: a comma list, case-insensitive, or
"^" and the subsystems to leave out of all; a name it does not know it ignores)."""
GATE_LOG_SUBSYSTEMS: tuple[str, ...] = ("INIT", "NET")
"""The NCCL_DEBUG_SUBSYS subsystems the transport gate reads: INIT (comm init's nNodes line, "Using network": INFO
NCCL_INIT only) and NET (the channels "via NET/..." and the plugin's lines, logged as NCCL_INIT|NCCL_NET;
NCCL 2.29.7 src/init.cc, src/transport/net.cc)."""


def nccl_debug_subsys_problem(value: str) -> str | None:
    """What NCCL_DEBUG_SUBSYS=`value` hides from the transport gate (GATE_LOG_SUBSYSTEMS), or an unknown name."""
    invert = value.startswith("^")
    names = [name.strip().upper() for name in value.removeprefix("^").split(",") if name.strip()]
    allowed = f"a comma list of {', '.join(NCCL_DEBUG_SUBSYSTEMS)} (or ^ and the ones to leave out)"
    if unknown := [name for name in names if name not in NCCL_DEBUG_SUBSYSTEMS]:
        return f"names no NCCL subsystem ({', '.join(unknown)}): must be {allowed}"
    kept = (
        ({*NCCL_DEBUG_SUBSYSTEMS} - {*names} if "ALL" not in names else set())
        if invert
        else ({*NCCL_DEBUG_SUBSYSTEMS} if "ALL" in names else {*names})
    )
    if missing := [name for name in GATE_LOG_SUBSYSTEMS if name not in kept]:
        return (
            f"leaves out {' and '.join(missing)}, whose INFO lines the transport gate reads: must keep "
            f"{' and '.join(GATE_LOG_SUBSYSTEMS)} (e.g. INIT,NET,ENV or ALL), as {allowed}"
        )
    return None


NcclDebugSubsys = Annotated[str, _check(nccl_debug_subsys_problem), _schema(minLength=1)]
"""NCCL_DEBUG_SUBSYS for the Ray pods, refused where it hides the lines the transport gate reads."""


def _positive_or_auto(value: int | str) -> str | None:
    return None if value == "auto" or (isinstance(value, int) and value >= 1) else "must be auto or an integer >= 1"


AutoCount = Annotated[
    Literal["auto"] | int,
    _check(_positive_or_auto),
    WithJsonSchema({"anyOf": [{"const": "auto"}, {"type": "integer", "minimum": 1}]}),
]
"""A count core.strategy decides when left at auto (microBatch, gradAccumulation); on `-c` auto or an integer."""


def _non_negative_or_auto(value: int | str) -> str | None:
    return None if value == "auto" or (isinstance(value, int) and value >= 0) else "must be auto or an integer >= 0"


AutoChunk = Annotated[
    Literal["auto"] | int,
    _check(_non_negative_or_auto),
    WithJsonSchema({"anyOf": [{"const": "auto"}, {"type": "integer", "minimum": 0}]}),
]
"""A token count core.strategy decides when left at auto, where 0 means none (lossChunkSize); on `-c` auto or an integer."""
AutoBool = Annotated[Literal["auto"] | bool, WithJsonSchema({"anyOf": [{"const": "auto"}, {"type": "boolean"}]})]
"""A switch core.strategy decides when left at auto (gradSyncEveryMicroBatch); on `-c` auto, true or false."""
CHECKPOINTING_MODES = ("none", "selective", "full")
"""What activationCheckpointing can be decided to (true means full, false none)."""
AutoCheckpointing = Annotated[
    Literal["auto", "none", "selective", "full"] | bool,
    WithJsonSchema({"anyOf": [{"enum": ["auto", *CHECKPOINTING_MODES]}, {"type": "boolean"}]}),
]
"""activationCheckpointing: auto (core.strategy decides), none, selective or full; true and false, its first values,
mean full and none."""
