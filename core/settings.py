"""The one settings object: every value the stack, the manifests and the training job read.

Settings come from CDK context (cdk.json's "context", cdk.context.json, `-c key=value`) under camelCase keys,
the CDK convention. Each field below names its key, its default and what it allows; `Settings.from_context` parses
strings (`-c` gives strings), rejects unknown keys (a typo would otherwise be ignored silently) and reports every
problem at once, each naming the key, the bad value and what is allowed. Nothing is synthesized or written before
this succeeds.

Pure Python on purpose: the training job imports this module inside the container, which has no CDK.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping

from ray_efa.core import catalog, regions
from ray_efa.core.models import MODEL_PRESETS, model_preset

__all__ = [
    "SettingsError",
    "Problem",
    "ClusterSettings",
    "NodeSettings",
    "AddonSettings",
    "WorkloadSettings",
    "TrainingSettings",
    "Settings",
    "KUBERNETES_VERSIONS",
    "KUBERAY_VERSIONS",
    "KNOWN_IMAGE_RAY_VERSIONS",
    "setting_keys",
]

KUBERNETES_VERSIONS = ("1.35", "1.36")
"""Versions that both aws_eks_v2 (aws-cdk-lib 2.275.0) and a pinned kubectl layer package support."""

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
_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
_CAPACITY_RESERVATION = re.compile(r"^cr-[0-9a-f]{17}$")
_VPC_ID = re.compile(r"^vpc-(?:[0-9a-f]{8}|[0-9a-f]{17})$")
_CIDR = re.compile(r"^(\d{1,3}\.){3}\d{1,3}/\d{1,2}$")


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the settings."""

    key: str
    value: Any
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}, got {self.value!r}"


class SettingsError(ValueError):
    """Every problem found in the settings, raised before anything is synthesized or written."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("invalid settings:\n" + "\n".join(f"  - {p}" for p in problems))


def setting(default: Any, key: str, doc: str, choices: tuple | None = None) -> Any:
    """A settings field: its context key, a one-line description and, where the values are a closed set, the choices."""
    return field(default=default, metadata={"key": key, "doc": doc, "choices": choices})


class _Section:
    """Shared behaviour of the settings sections: field-level checks run on construction."""

    def __post_init__(self) -> None:
        problems = list(self._choice_problems()) + list(self.problems())
        if problems:
            raise SettingsError(problems)

    def _choice_problems(self):
        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            value = getattr(self, f.name)
            if choices and value not in choices:
                yield Problem(f.metadata["key"], value, f"must be one of {', '.join(map(str, choices))}")

    def problems(self):  # overridden by sections with checks beyond their choices
        return ()

    @classmethod
    def key_of(cls, name: str) -> str:
        return cls.__dataclass_fields__[name].metadata["key"]


def _check(problems: list, ok: bool, section: type, name: str, value: Any, message: str) -> None:
    if not ok:
        problems.append(Problem(section.key_of(name), value, message))


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterSettings(_Section):
    """The EKS cluster and its network."""

    cluster_name: str = setting("ray-train", "clusterName", "EKS cluster name; also prefixes the stack names.")
    region: str = setting("us-east-2", "region", "AWS region of both stacks.")
    kubernetes_version: str = setting("1.36", "kubernetesVersion", "EKS Kubernetes version.", KUBERNETES_VERSIONS)
    endpoint_access: str = setting(
        "public_and_private", "endpointAccess", "Who reaches the Kubernetes API endpoint.",
        ("public_and_private", "private", "public"),
    )
    public_access_cidrs: tuple[str, ...] = setting(
        ("0.0.0.0/0",), "publicAccessCidrs", "CIDRs allowed to the public endpoint (comma-separated or a JSON list)."
    )
    vpc_id: str | None = setting(None, "vpcId", "Existing VPC to use (looked up at synth); unset creates a VPC.")
    nat_gateways: int = setting(1, "natGateways", "NAT gateways of a created VPC (1 is cheapest, one per AZ survives AZ loss).")

    def problems(self):
        p: list[Problem] = []
        cls = ClusterSettings
        _check(p, bool(_CLUSTER_NAME.match(self.cluster_name)), cls, "cluster_name", self.cluster_name,
               "must be 1-100 letters, digits, '-' or '_', starting with a letter or digit")
        _check(p, regions.is_valid_region(self.region), cls, "region", self.region, "must be a region name like us-east-2")
        for cidr in self.public_access_cidrs:
            _check(p, bool(_CIDR.match(cidr)), cls, "public_access_cidrs", cidr, "must be IPv4 CIDRs like 203.0.113.0/24")
        if self.vpc_id is not None:
            _check(p, bool(_VPC_ID.match(self.vpc_id)), cls, "vpc_id", self.vpc_id, "must look like vpc-0123456789abcdef0")
        _check(p, 1 <= self.nat_gateways <= 3, cls, "nat_gateways", self.nat_gateways, "must be between 1 and 3")
        return p


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeSettings(_Section):
    """The two managed node groups."""

    system_instance_type: str = setting(
        "m7i.xlarge", "systemInstanceType", "Instance type of the system node group (KubeRay operator, Ray head).",
        tuple(catalog.SYSTEM_INSTANCES),
    )
    system_node_count: int = setting(1, "systemNodeCount", "Nodes in the system node group.")
    gpu_instance_type: str = setting("g6.12xlarge", "gpuInstanceType", "EFA-capable GPU instance type of the worker nodes.")
    gpu_node_count: int = setting(2, "gpuNodeCount", "GPU nodes (one Ray worker pod each).")
    gpu_availability_zone: str | None = setting(
        None, "gpuAvailabilityZone", "The one AZ of all GPU nodes (EFA does not cross AZs); unset: the region's first."
    )
    capacity_reservation_id: str | None = setting(
        None, "capacityReservationId", "On-Demand Capacity Reservation (cr-...) the GPU nodes launch into."
    )
    placement_group: str = setting(
        "auto", "placementGroup", "Cluster placement group for the GPU nodes; auto: on unless a reservation is targeted.",
        ("auto", "on", "off"),
    )
    gpu_root_volume_gib: int = setting(500, "gpuRootVolumeGib", "Encrypted gp3 root volume of each GPU node, GiB (holds the image).")

    def problems(self):
        p: list[Problem] = []
        cls = NodeSettings
        _check(p, 1 <= self.system_node_count <= 10, cls, "system_node_count", self.system_node_count, "must be between 1 and 10")
        try:
            catalog.gpu_instance(self.gpu_instance_type)
        except catalog.CatalogError as error:
            p.append(Problem(cls.key_of("gpu_instance_type"), self.gpu_instance_type, str(error)))
        _check(p, 1 <= self.gpu_node_count <= 64, cls, "gpu_node_count", self.gpu_node_count, "must be between 1 and 64")
        if self.capacity_reservation_id is not None:
            _check(p, bool(_CAPACITY_RESERVATION.match(self.capacity_reservation_id)), cls, "capacity_reservation_id",
                   self.capacity_reservation_id, "must be 'cr-' and 17 hex digits, like cr-0123456789abcdef0")
            _check(p, self.placement_group != "on", cls, "placement_group", self.placement_group,
                   "must be auto or off when capacityReservationId is set (a forced placement group can leave reserved capacity unused)")
        _check(p, 100 <= self.gpu_root_volume_gib <= 16384, cls, "gpu_root_volume_gib", self.gpu_root_volume_gib,
               "must be between 100 and 16384 GiB (the training image alone is tens of GB)")
        return p

    @property
    def gpu_instance(self) -> catalog.InstanceType:
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


@dataclass(frozen=True, kw_only=True, slots=True)
class AddonSettings(_Section):
    """Pinned versions of the Helm charts installed into the cluster."""

    kuberay_version: str = setting("1.7.0", "kuberayVersion", "kuberay-operator Helm chart version.", KUBERAY_VERSIONS)
    nvidia_device_plugin_version: str = setting("0.20.0", "nvidiaDevicePluginVersion", "nvidia-device-plugin Helm chart version.")
    efa_device_plugin_version: str = setting(
        "v0.5.30", "efaDevicePluginVersion", "aws-efa-k8s-device-plugin Helm chart version (its allowlist must hold the GPU type).",
        tuple(catalog.EFA_DEVICE_PLUGIN_ALLOWLISTS),
    )

    def problems(self):
        p: list[Problem] = []
        _check(p, bool(_SEMVER.match(self.nvidia_device_plugin_version)), AddonSettings, "nvidia_device_plugin_version",
               self.nvidia_device_plugin_version, "must be a chart version like 0.20.0")
        return p


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkloadSettings(_Section):
    """The RayCluster and the RayJob that runs training on it."""

    namespace: str = setting("ray", "namespace", "Kubernetes namespace of the RayCluster and the RayJob.")
    dlc_image: str = setting(
        "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1", "dlcImage",
        "AWS Ray Train Deep Learning Container image, for head and workers (tag or digest required).",
    )
    ray_version: str = setting("2.58.0", "rayVersion", "Ray version inside dlcImage (KubeRay's rayVersion).")
    network: str = setting(
        "efa", "network", "Transport between nodes: efa, or tcp for the EFA-versus-TCP comparison run.", ("efa", "tcp")
    )
    preflight: bool = setting(True, "preflight", "Run the all-reduce bandwidth probe before training and fail fast on a slow path.")
    preflight_min_busbw_gbps: float | None = setting(
        None, "preflightMinBusbwGbps", "Inter-node all-reduce floor in GB/s at 1 GiB; unset: the instance catalog's estimate."
    )
    storage_path: str | None = setting(
        None, "storagePath", "Ray Train storage_path for checkpoints (s3://... or a shared filesystem); unset: local ~/ray_results."
    )
    pip_packages: tuple[str, ...] = setting((), "pipPackages", "Extra pip packages for the job's runtime_env (the image has the rest).")
    service_account: str = setting(
        "ray-train", "serviceAccount",
        "Kubernetes service account of the Ray pods; the cluster stack creates it with access to the checkpoint bucket.",
    )
    training_job: bool = setting(
        True, "trainingJob", "Apply the training RayJob with the cluster stack (it runs once per deploy); false: namespace only."
    )
    job_active_deadline_seconds: int = setting(3600, "jobActiveDeadlineSeconds", "RayJob activeDeadlineSeconds.")
    job_backoff_limit: int = setting(0, "jobBackoffLimit", "RayJob backoffLimit (retries of the whole job).")
    job_ttl_seconds_after_finished: int = setting(600, "jobTtlSecondsAfterFinished", "RayJob ttlSecondsAfterFinished.")

    def problems(self):
        p: list[Problem] = []
        cls = WorkloadSettings
        _check(p, bool(_DNS_LABEL.match(self.namespace)), cls, "namespace", self.namespace, "must be a DNS label (lowercase, digits, '-')")
        _check(p, bool(_DNS_LABEL.match(self.service_account)), cls, "service_account", self.service_account,
               "must be a DNS label (lowercase, digits, '-')")
        image = _IMAGE_REFERENCE.match(self.dlc_image)
        _check(p, bool(image and (image["tag"] or image["digest"])), cls, "dlc_image", self.dlc_image,
               "must be an image reference with a tag or digest, like registry/repository:tag")
        _check(p, bool(_SEMVER.match(self.ray_version)), cls, "ray_version", self.ray_version, "must be a version like 2.58.0")
        known = KNOWN_IMAGE_RAY_VERSIONS.get(self.dlc_image)
        _check(p, known is None or known == self.ray_version, cls, "ray_version", self.ray_version,
               f"must equal the Ray inside {self.dlc_image} ({known})")
        if self.preflight_min_busbw_gbps is not None:
            _check(p, self.preflight_min_busbw_gbps > 0, cls, "preflight_min_busbw_gbps", self.preflight_min_busbw_gbps, "must be > 0")
        _check(p, self.job_active_deadline_seconds > 0, cls, "job_active_deadline_seconds", self.job_active_deadline_seconds, "must be > 0")
        _check(p, self.job_backoff_limit >= 0, cls, "job_backoff_limit", self.job_backoff_limit, "must be >= 0")
        _check(p, self.job_ttl_seconds_after_finished >= 0, cls, "job_ttl_seconds_after_finished",
               self.job_ttl_seconds_after_finished, "must be >= 0")
        return p


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingSettings(_Section):
    """The training run: model, batch shape, optimizer, reporting, checkpoints."""

    model: str = setting("qwen2.5-1.5b", "model", "Model architecture preset (random initialization).", tuple(MODEL_PRESETS))
    model_path: str | None = setting(None, "modelPath", "Local directory of pretrained weights to load (never a hub download).")
    steps: int = setting(20, "steps", "Optimizer steps.")
    seq_len: int = setting(2048, "seqLen", "Tokens per sequence.")
    micro_batch: int = setting(2, "microBatch", "Sequences per GPU per step.")
    learning_rate: float = setting(3e-4, "learningRate", "Peak AdamW learning rate.")
    warmup_steps: int = setting(5, "warmupSteps", "Linear warm-up steps, then cosine decay to 10% of the peak.")
    weight_decay: float = setting(0.1, "weightDecay", "AdamW weight decay.")
    grad_clip: float = setting(1.0, "gradClip", "Gradient norm clip; 0 turns clipping off.")
    seed: int = setting(0, "seed", "Seed of the initialization and the token batches (each rank adds its rank).")
    report_every: int = setting(1, "reportEvery", "Report metrics every N steps (and on the first and last).")
    checkpoint_every: int = setting(0, "checkpointEvery", "Checkpoint every K steps; 0: only at the end.")
    max_failures: int = setting(1, "maxFailures", "Ray Train FailureConfig(max_failures): worker-group restarts from the last checkpoint.")
    compile: bool = setting(True, "compile", "torch.compile each decoder layer (and the chunked loss's softmax).")
    activation_checkpointing: bool = setting(False, "activationCheckpointing", "Recompute decoder-layer activations in backward.")
    loss_chunk_size: int = setting(4096, "lossChunkSize", "Tokens per chunk of the fused output projection + cross-entropy; 0: unchunked.")
    sharding: str = setting(
        "auto", "sharding",
        "How parameters, gradients and optimizer state are split: fsdp shards over every GPU; hsdp shards within a node "
        "and replicates across nodes (2-D DeviceMesh), so only a gradient all-reduce crosses the network; auto takes the "
        "one core.perf predicts fastest that fits memory.",
        ("auto", "fsdp", "hsdp"),
    )
    grad_accumulation: int = setting(
        1, "gradAccumulation",
        "Micro-batches per optimizer step (each of microBatch x seqLen tokens per GPU); gradients cross the network once "
        "per optimizer step. The effective batch is microBatch x gradAccumulation x world size sequences.",
    )
    grad_reduce_dtype: str = setting(
        "fp32", "gradReduceDtype",
        "Precision of the gradient reduce-scatter/all-reduce on GPU: fp32, or bf16 (half the bytes on the wire).",
        ("fp32", "bf16"),
    )
    data_pool_size: int = setting(
        0, "dataPoolSize",
        "Random token sequences per rank that batches are drawn from (a set the model can memorize, so the loss falls); "
        "0: fresh random tokens every step.",
    )

    def problems(self):
        p: list[Problem] = []
        cls = TrainingSettings
        positive = ("steps", "seq_len", "micro_batch", "report_every", "grad_accumulation")
        for name in positive:
            value = getattr(self, name)
            _check(p, value >= 1, cls, name, value, "must be >= 1")
        if self.model in MODEL_PRESETS:
            limit = model_preset(self.model).max_position_embeddings
            _check(p, self.seq_len <= limit, cls, "seq_len", self.seq_len, f"must be <= {limit}, the max positions of {self.model}")
        _check(p, self.learning_rate > 0, cls, "learning_rate", self.learning_rate, "must be > 0")
        _check(p, self.warmup_steps >= 0, cls, "warmup_steps", self.warmup_steps, "must be >= 0")
        _check(p, self.weight_decay >= 0, cls, "weight_decay", self.weight_decay, "must be >= 0")
        _check(p, self.grad_clip >= 0, cls, "grad_clip", self.grad_clip, "must be >= 0")
        _check(p, self.seed >= 0, cls, "seed", self.seed, "must be >= 0")
        _check(p, self.checkpoint_every >= 0, cls, "checkpoint_every", self.checkpoint_every, "must be >= 0")
        _check(p, self.max_failures >= -1, cls, "max_failures", self.max_failures, "must be >= 0, or -1 for unlimited")
        _check(p, self.loss_chunk_size >= 0, cls, "loss_chunk_size", self.loss_chunk_size, "must be >= 0")
        _check(p, self.data_pool_size >= 0, cls, "data_pool_size", self.data_pool_size, "must be >= 0")
        return p

    @property
    def preset(self):
        return model_preset(self.model)


_SECTIONS: dict[str, type[_Section]] = {
    "cluster": ClusterSettings,
    "nodes": NodeSettings,
    "addons": AddonSettings,
    "workload": WorkloadSettings,
    "training": TrainingSettings,
}


def setting_keys() -> dict[str, tuple[str, dataclasses.Field]]:
    """Every context key -> (section name, dataclass field)."""
    return {
        f.metadata["key"]: (section, f) for section, cls in _SECTIONS.items() for f in dataclasses.fields(cls)
    }


def _is_foreign_key(key: str) -> bool:
    """Context keys that belong to the CDK itself (feature flags, lookups, CLI switches), not to us."""
    return key.startswith("@") or ":" in key or key.startswith("cdk") or key.startswith("aws-cdk")


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """All settings, in sections. Build with `Settings.from_context(...)` or `Settings()` for the defaults."""

    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    nodes: NodeSettings = field(default_factory=NodeSettings)
    addons: AddonSettings = field(default_factory=AddonSettings)
    workload: WorkloadSettings = field(default_factory=WorkloadSettings)
    training: TrainingSettings = field(default_factory=TrainingSettings)

    def __post_init__(self) -> None:
        problems = self._cross_section_problems()
        if problems:
            raise SettingsError(problems)

    def _cross_section_problems(self) -> list[Problem]:
        p: list[Problem] = []
        az = self.nodes.gpu_availability_zone
        region = self.cluster.region
        if az is not None:
            known = regions.AVAILABILITY_ZONES.get(region)
            allowed = known if known else (f"{region}a..{region}z",)
            in_region = az in known if known else bool(re.fullmatch(re.escape(region) + "[a-z]", az))
            if not in_region:
                p.append(Problem(NodeSettings.key_of("gpu_availability_zone"), az,
                                 f"must be an AZ of region {region}: {', '.join(allowed)}"))
        elif region not in regions.AVAILABILITY_ZONES:
            p.append(Problem(ClusterSettings.key_of("region"), region,
                             f"has no recorded AZ names; set gpuAvailabilityZone, or use one of {', '.join(regions.AVAILABILITY_ZONES)}"))
        if self.nodes.gpu_instance_type in catalog.GPU_INSTANCES:
            problem = catalog.efa_plugin_problem(self.nodes.gpu_instance_type, self.addons.efa_device_plugin_version)
            if problem:
                p.append(Problem(AddonSettings.key_of("efa_device_plugin_version"), self.addons.efa_device_plugin_version, problem))
        return p

    # -- derived values every layer shares ------------------------------------------------------------------

    @property
    def gpu_availability_zone(self) -> str:
        """The GPU AZ, resolved: the setting, else the region's first AZ."""
        return self.nodes.gpu_availability_zone or regions.availability_zones(self.cluster.region)[0]

    @property
    def vpc_availability_zones(self) -> tuple[str, ...]:
        """AZs of a created VPC: the GPU AZ first, then the next one (EKS needs subnets in two AZs)."""
        others = [z for z in regions.AVAILABILITY_ZONES.get(self.cluster.region, ()) if z != self.gpu_availability_zone]
        return (self.gpu_availability_zone, *others[:1])

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

    # -- construction ---------------------------------------------------------------------------------------

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> "Settings":
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
            section, f = keys[key]
            try:
                values[section][f.name] = _parse(raw, _field_type(_SECTIONS[section], f.name))
            except ValueError as error:
                problems.append(Problem(key, raw, str(error)))
        sections: dict[str, Any] = {}
        for section, section_cls in _SECTIONS.items():
            try:
                sections[section] = section_cls(**values[section])
            except SettingsError as error:
                problems.extend(error.problems)
        if problems:
            raise SettingsError(problems)
        return cls(**sections)

    def to_context(self) -> dict[str, Any]:
        """Every setting as JSON-ready context values (the form the RayJob ships to the training driver)."""
        out: dict[str, Any] = {}
        for section in _SECTIONS:
            obj = getattr(self, section)
            for f in dataclasses.fields(obj):
                value = getattr(obj, f.name)
                out[f.metadata["key"]] = list(value) if isinstance(value, tuple) else value
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_context(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Settings":
        return cls.from_context(json.loads(text))

    def replace(self, **context: Any) -> "Settings":
        """A copy with some settings changed, by context key: `settings.replace(steps=5, model="tiny")`."""
        return Settings.from_context({**self.to_context(), **context})


def _field_type(section_cls: type, name: str) -> Any:
    return typing.get_type_hints(section_cls)[name]


_TRUE, _FALSE, _NONE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}, {"", "none", "null"}


def _parse(raw: Any, annotation: Any) -> Any:
    """Convert a context value to a field's type; raise ValueError with what was expected."""
    args = typing.get_args(annotation)
    if type(None) in args:  # X | None
        if raw is None or (isinstance(raw, str) and raw.strip().lower() in _NONE):
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _parse(raw, inner)
    if typing.get_origin(annotation) is tuple:
        if isinstance(raw, str):
            text = raw.strip()
            items = json.loads(text) if text.startswith("[") else [s for s in (x.strip() for x in text.split(",")) if s]
        elif isinstance(raw, (list, tuple)):
            items = list(raw)
        else:
            raise ValueError("must be a list (JSON list or comma-separated string)")
        return tuple(str(item) for item in items)
    if annotation is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
            return raw.strip().lower() in _TRUE
        raise ValueError("must be true or false")
    if annotation is int:
        if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
            raise ValueError("must be an integer")
        try:
            return int(raw) if not isinstance(raw, str) else int(raw.strip())
        except (TypeError, ValueError):
            raise ValueError("must be an integer") from None
    if annotation is float:
        if isinstance(raw, bool):
            raise ValueError("must be a number")
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise ValueError("must be a number") from None
    if annotation is str:
        if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
            raise ValueError("must be a string")
        return str(raw)
    raise TypeError(f"unsupported settings type {annotation!r}")  # a programming error, not bad input
