"""The sections of the settings: ClusterSettings, NodeSettings, AddonSettings, WorkloadSettings, TrainingSettings.

Each is a pydantic model of `setting(...)` fields (core.settings.framework) whose types and patterns are
core.settings.checks'; core.settings.Settings holds one of each, in the order of `SECTIONS`. Importing this module
registers the rules across settings (core.settings.rules), which each section runs on its own fields. Pure Python
with pydantic alone, like core.settings (the training job imports it inside the container).
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeVar, cast

from ray_efa.core import catalog, models, scheduling
from ray_efa.core.image import DLC_IMAGE
from ray_efa.core.settings import rules as _rules  # noqa: F401  (registers the rules the sections run)
from ray_efa.core.settings.checks import (
    CAPACITY_RESERVATION,
    CAPACITY_RESERVATION_MESSAGE,
    CLUSTER_NAME,
    DEFAULT_JOB_NAME,
    DEFAULT_TRAIN_FUNCTION,
    DNS_LABEL,
    DNS_LABEL_MESSAGE,
    DNS_SUBDOMAIN,
    KMS_KEY_ARN,
    KMS_KEY_ARN_MESSAGE,
    SEMVER,
    TRAIN_FUNCTION,
    VPC_ID,
    AdminPrincipalArn,
    AutoBool,
    AutoCheckpointing,
    AutoChunk,
    AutoCount,
    Cidr,
    CodeDir,
    DataPath,
    EfaDevicePluginVersion,
    EfaDraDriverVersion,
    GpuDescriptions,
    GpuInstanceType,
    ImageReference,
    JobName,
    KuberayVersion,
    KubernetesVersion,
    LogRetentionDays,
    ModelPath,
    ModelPreset,
    NcclDebugSubsys,
    NodeSelector,
    NodeTaints,
    Region,
    StoragePath,
    SystemInstanceType,
    TrainConfig,
    described_gpu_instances,
)

# The framework, under the names the declarations below use (private here: core.settings.framework exports them).
from ray_efa.core.settings.framework import LIST_AS_TUPLE as _LIST_AS_TUPLE
from ray_efa.core.settings.framework import Section as _Section
from ray_efa.core.settings.framework import setting

# -- the sections -------------------------------------------------------------------------------------------------


class ClusterSettings(_Section):
    """The EKS cluster and its network."""

    cluster_name: str = setting(
        "ray-train",
        "clusterName",
        "EKS cluster name; also prefixes the stack names.",
        pattern=CLUSTER_NAME,
        message="must be 1-100 letters, digits, '-' or '_', starting with a letter or digit",
    )
    region: Region = setting("us-east-2", "region", "AWS region of both stacks.")
    kubernetes_version: KubernetesVersion = setting("1.36", "kubernetesVersion", "EKS Kubernetes version.")
    endpoint_access: Literal["public_and_private", "private", "public"] = setting(
        "public_and_private",
        "endpointAccess",
        "Who reaches the Kubernetes API endpoint.",
    )
    public_access_cidrs: Annotated[tuple[Cidr, ...], _LIST_AS_TUPLE] = setting(
        ("0.0.0.0/0",), "publicAccessCidrs", "CIDRs allowed to the public endpoint (comma-separated or a JSON list)."
    )
    cluster_creator_admin: bool = setting(
        False,
        "clusterCreatorAdmin",
        "Let the identity that creates the cluster (CloudFormation's) keep cluster-admin; EKS fixes it at creation, "
        "so true for a cluster deployed before this setting (false there would replace the cluster).",
    )
    vpc_id: str | None = setting(
        None,
        "vpcId",
        "Existing VPC to use (looked up at synth); unset creates a VPC.",
        pattern=VPC_ID,
        message="must look like vpc-0123456789abcdef0",
    )
    nat_gateways: int = setting(
        1, "natGateways", "NAT gateways of a created VPC (1 is cheapest, one per AZ survives AZ loss).", ge=1, le=3
    )
    log_retention_days: LogRetentionDays = setting(
        365,
        "logRetentionDays",
        "Days the stack's log groups keep logs (a CloudWatch Logs period: 1, 3, 5, 7, 14, 30, 60, 90, ... 3653).",
    )
    admin_principal_arns: Annotated[tuple[AdminPrincipalArn, ...], _LIST_AS_TUPLE] = setting(
        (),
        "adminPrincipalArns",
        "IAM role/user ARNs that get cluster-admin access entries (comma-separated or a JSON list); unset: nobody "
        "but the stack's own roles can reach the Kubernetes API (`ray-efa whoami` prints yours).",
    )
    researcher_principal_arns: Annotated[tuple[AdminPrincipalArn, ...], _LIST_AS_TUPLE] = setting(
        (),
        "researcherPrincipalArns",
        "IAM role/user ARNs that get a researcher's access (comma-separated or a JSON list): submit, follow and read "
        "RayJobs and their pods' logs in the workload namespace, read nodes; never delete or change the RayCluster, "
        "the nodes or the namespace, nor read Secrets (docs/security.md, Researcher access).",
    )
    availability_zones: Annotated[tuple[str, ...], _LIST_AS_TUPLE] = setting(
        (),
        "vpcAvailabilityZones",
        "AZs of a created VPC, fixed for its life (changing them replaces subnets); unset: the region's first three "
        "in name order. gpuAvailabilityZone must be one of them.",
    )


class NodeSettings(_Section):
    """The two managed node groups."""

    system_instance_type: SystemInstanceType = setting(
        "m7i.xlarge",
        "systemInstanceType",
        "Instance type of the system node group (KubeRay operator, Ray head).",
    )
    system_node_count: int = setting(1, "systemNodeCount", "Nodes in the system node group.", ge=1, le=10)
    gpu_instance_type: GpuInstanceType = setting(
        "g6.12xlarge",
        "gpuInstanceType",
        "EFA-capable GPU instance type of the worker nodes: one of the catalog, or one of extraGpuInstanceTypes.",
    )
    gpu_node_count: int = setting(
        2,
        "gpuNodeCount",
        "GPU nodes (one Ray worker pod each); 0 scales the GPU node group to zero and applies no job, keeping both "
        "stacks (deploy again with 1 or more to come back).",
        ge=0,
        le=64,
    )
    gpu_availability_zone: str | None = setting(
        None, "gpuAvailabilityZone", "The one AZ of all GPU nodes (EFA does not cross AZs); unset: the region's first."
    )
    capacity_reservation_id: str | None = setting(
        None,
        "capacityReservationId",
        "On-Demand Capacity Reservation (cr-...) the GPU nodes launch into.",
        pattern=CAPACITY_RESERVATION,
        message=CAPACITY_RESERVATION_MESSAGE,
    )
    placement_group: Literal["auto", "on", "off"] = setting(
        "auto",
        "placementGroup",
        "Cluster placement group for the GPU nodes; auto: on unless a reservation is targeted.",
    )
    gpu_root_volume_gib: int = setting(
        500,
        "gpuRootVolumeGib",
        "Encrypted gp3 root volume of each GPU node, GiB (holds the image).",
        ge=100,
        le=16384,
        message="must be between 100 and 16384 GiB (the training image alone is tens of GB)",
    )
    system_root_volume_gib: int = setting(
        100,
        "systemRootVolumeGib",
        "Encrypted gp3 root volume of each system node, GiB (holds the image of the Ray head and the job submitter).",
        ge=20,
        le=16384,
        message="must be between 20 and 16384 GiB",
    )
    capacity_reservation_type: Literal["odcr", "capacity-block"] = setting(
        "odcr",
        "capacityReservationType",
        "What capacityReservationId names: odcr (On-Demand Capacity Reservation) or capacity-block (Capacity Blocks for ML).",
    )
    node_repair: bool = setting(
        True,
        "nodeRepair",
        "EKS node auto repair (NodeRepairConfig) on the GPU and system node groups: a node whose conditions stay bad "
        "(a GPU fault: AcceleratedHardwareReady, after 10 min; networking, kernel, runtime, storage or Ready after "
        "30 min) is rebooted or replaced by EKS (docs/node-health.md).",
    )
    node_monitoring_agent: bool = setting(
        True,
        "nodeMonitoringAgent",
        "Install the eks-node-monitoring-agent EKS add-on, which reads each node's GPU (NVIDIA XID, DCGM), network, "
        "kernel, runtime and storage health into node conditions that nodeRepair acts on and `ray-efa verify` reports.",
    )
    offering_check: Literal["on", "off"] = setting(
        "on",
        "offeringCheck",
        "on: a gpuInstanceType that core/data/on_demand_prices.csv records as not offered in the region is an error "
        "(naming the regions that offer it); off: trust your own check (aws ec2 describe-instance-type-offerings) "
        "where that dated table is stale.",
    )

    @property
    def capacity_block(self) -> bool:
        """Whether the GPU nodes launch into a Capacity Block for ML (CAPACITY_BLOCK node group, capacity-block market)."""
        return self.capacity_reservation_type == "capacity-block"

    system_node_selector: NodeSelector = setting(
        scheduling.DEFAULT_SYSTEM_NODE_SELECTOR,
        "systemNodeSelector",
        "Node labels of the system side (KubeRay operator, Ray head, RayJob submitter); the system node group gets them.",
    )
    gpu_node_selector: NodeSelector = setting(
        scheduling.DEFAULT_GPU_NODE_SELECTOR,
        "gpuNodeSelector",
        "Node labels of the GPU side (Ray workers, device plugins); the GPU node group gets them "
        "(and nvidia.com/gpu.present=true).",
    )
    gpu_node_taints: NodeTaints = setting(
        scheduling.DEFAULT_GPU_TAINTS,
        "gpuNodeTaints",
        "Taints of the GPU node group, each key=value:Effect or key:Effect; the Ray workers and the device plugins "
        "tolerate them, nothing else does.",
    )

    extra_gpu_instance_types: GpuDescriptions = setting(
        (),
        "extraGpuInstanceTypes",
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
        "0.20.0",
        "nvidiaDevicePluginVersion",
        "nvidia-device-plugin Helm chart version.",
        pattern=SEMVER,
        message="must be a chart version like 0.20.0",
    )
    efa_device_plugin_version: EfaDevicePluginVersion = setting(
        "v0.5.30",
        "efaDevicePluginVersion",
        "aws-efa-k8s-device-plugin Helm chart version (its allowlist must hold the GPU type).",
    )
    device_allocation: Literal["device-plugin", "dra"] = setting(
        "device-plugin",
        "deviceAllocation",
        "How the worker pods get GPUs and EFA interfaces: device-plugin (nvidia.com/gpu, vpc.amazonaws.com/efa "
        "extended resources), or dra (the NVIDIA and EFA DRA drivers; ResourceClaimTemplates that pair each GPU with "
        "the EFA interfaces on its PCIe root; Kubernetes 1.34 or later). Switch with the GPU nodes at zero.",
    )
    nvidia_dra_driver_version: str = setting(
        "0.4.1",
        "nvidiaDraDriverVersion",
        "dra-driver-nvidia-gpu Helm chart version (deviceAllocation dra).",
        pattern=SEMVER,
        message="must be a chart version like 0.4.1",
    )
    efa_dra_driver_version: EfaDraDriverVersion = setting(
        "1.0.0",
        "efaDraDriverVersion",
        "aws-dranet (EFA DRA driver) Helm chart version, deviceAllocation dra (its allowlist must hold the GPU type).",
    )


class WorkloadSettings(_Section):
    """The RayCluster and the RayJob that runs training on it."""

    namespace: str = setting(
        "ray",
        "namespace",
        "Kubernetes namespace of the RayCluster and the RayJob.",
        pattern=DNS_LABEL,
        message=DNS_LABEL_MESSAGE,
    )
    dlc_image: ImageReference = setting(
        DLC_IMAGE.reference,
        "dlcImage",
        "AWS Ray Train Deep Learning Container image, for head and workers (tag or digest required).",
    )
    ray_version: str = setting(
        DLC_IMAGE.ray_version,
        "rayVersion",
        "Ray version inside dlcImage (KubeRay's rayVersion).",
        pattern=SEMVER,
        message="must be a version like 2.58.0",
    )
    network: Literal["efa", "tcp"] = setting(
        "efa", "network", "Transport between nodes: efa, or tcp for the EFA-versus-TCP comparison run."
    )
    nccl_debug_subsys: NcclDebugSubsys | None = setting(
        None,
        "ncclDebugSubsys",
        "NCCL_DEBUG_SUBSYS of the Ray pods; it must keep INIT and NET, whose lines the transport gate reads. Unset: "
        "NCCL's default (INIT, BOOTSTRAP, ENV), under which NCCL logs each of those lines too (as INIT).",
    )
    preflight: bool = setting(
        True, "preflight", "Run the all-reduce bandwidth probe before training and fail fast on a slow path."
    )
    preflight_min_busbw_gbps: float | None = setting(
        None,
        "preflightMinBusbwGbps",
        "Inter-node all-reduce floor in GB/s at 1 GiB on the job's network (the comparison run keeps its own); "
        "unset: the network's, from a healthy node (plan shows it).",
        gt=0,
    )
    storage_path: StoragePath | None = setting(
        None,
        "storagePath",
        "Ray Train storage_path for checkpoints (s3://... or a shared filesystem); unset: local ~/ray_results.",
    )
    storage_kms_key: str | None = setting(
        None,
        "storageKmsKey",
        "ARN of the KMS key that encrypts storagePath's bucket (SSE-KMS): the Ray pods' role may use it for S3 there.",
        pattern=KMS_KEY_ARN,
        message=KMS_KEY_ARN_MESSAGE,
    )
    bootstrap_kms_key: str | None = setting(
        None,
        "bootstrapKmsKey",
        "ARN of the KMS key of the CDK asset bucket (`cdk bootstrap --bootstrap-kms-key-id`): the Ray pods' role may "
        "decrypt the code they fetch from it.",
        pattern=KMS_KEY_ARN,
        message=KMS_KEY_ARN_MESSAGE,
    )
    pip_packages: Annotated[tuple[str, ...], _LIST_AS_TUPLE] = setting(
        (),
        "pipPackages",
        "Extra pip packages for the Ray pods, installed by an init container beside the image's (never Ray's runtime_env pip).",
    )
    service_account: str = setting(
        "ray-train",
        "serviceAccount",
        "Kubernetes service account of the Ray pods; the cluster stack creates it with access to the checkpoint bucket.",
        pattern=DNS_LABEL,
        message=DNS_LABEL_MESSAGE,
    )
    training_job: bool = setting(
        True,
        "trainingJob",
        "Apply the training RayJob from the GPU stack, once the GPU nodes exist (CloudFormation creates it once); false: no "
        "job, only its settings ConfigMap (what `ray-efa submit` reads as the deployment's settings).",
    )
    allow_job_disruption: bool = setting(
        False,
        "allowJobDisruption",
        "Let a deploy roll the system nodes (the Ray heads) or the GPU nodes, resize the GPU nodes, or change or "
        "delete the stack's RayJob, while a RayJob runs (it dies; the node groups' updates are forced for that "
        "deploy); false: the stacks' job guards fail such a deploy before anything changes, naming the job.",
    )
    job_name: JobName = setting(
        DEFAULT_JOB_NAME,
        "jobName",
        "Name of the training RayJob; its ConfigMaps, NetworkPolicy and TCP comparison job (<name>-tcp, or train-tcp "
        "for train-efa) follow it, so several jobs live side by side in one namespace.",
    )
    code_dir: CodeDir | None = setting(
        None,
        "codeDir",
        "Folder of your training code (absolute, or relative to the app directory), shipped to the pods and put on "
        "every worker's import path; unset: none.",
    )
    job_active_deadline_seconds: int = setting(3600, "jobActiveDeadlineSeconds", "RayJob activeDeadlineSeconds.", gt=0)
    job_pre_running_deadline_seconds: int = setting(
        1200,
        "jobPreRunningDeadlineSeconds",
        "RayJob preRunningDeadlineSeconds: KubeRay fails the job when it has not reached Running this long after it "
        "was created (a failing init container, a pod that never schedules), instead of holding the GPU nodes until "
        "jobActiveDeadlineSeconds. The default leaves a few minutes over pulling the multi-GB image on fresh nodes "
        "and the init containers (code fetch: seconds; pipPackages: a minute or two). Needs kuberayVersion 1.7.0 (the "
        "1.4.0 CRD has no such field) and a value below jobActiveDeadlineSeconds; else it is left out.",
        gt=0,
        le=2**31 - 1,
    )
    job_backoff_limit: int = setting(0, "jobBackoffLimit", "RayJob backoffLimit (retries of the whole job).", ge=0)
    job_ttl_seconds_after_finished: int = setting(
        600, "jobTtlSecondsAfterFinished", "RayJob ttlSecondsAfterFinished.", ge=0
    )
    shared_volume_claim: str | None = setting(
        None,
        "sharedVolumeClaim",
        "PersistentVolumeClaim (in namespace) of a shared filesystem (FSx for Lustre, EFS) mounted into every Ray pod at "
        "sharedVolumeMountPath; local paths in modelPath, dataset, evalDataset and storagePath must lie under it. "
        "Unset: no volume, and a cluster run refuses local paths.",
        pattern=DNS_SUBDOMAIN,
        message="must be a PersistentVolumeClaim name (lowercase, digits, '-', '.')",
    )
    shared_volume_mount_path: str = setting(
        "/mnt/shared",
        "sharedVolumeMountPath",
        "Where the pods mount sharedVolumeClaim (an absolute folder).",
        pattern=r"^/\S*[^/\s]$",
        message="must be an absolute folder like /mnt/fsx, not / itself",
    )


_T = TypeVar("_T")


LOSS_CHUNK_BEFORE_PLAN = 1024
"""lossChunkSize's value in formulas before core.strategy.resolve decides auto (the previous fixed default)."""


def _decided(value: _T | Literal["auto"], key: str) -> _T:
    """A lever's value once core.strategy.resolve decided it: what the formulas and the job compute with."""
    if value == "auto":
        raise ValueError(f"{key} is auto: decide it first (core.strategy.resolve)")
    return cast(_T, value)


class TrainingSettings(_Section):
    """The training run: model, batch shape, optimizer, reporting, checkpoints."""

    model: ModelPreset = setting(
        "qwen2.5-1.5b",
        "model",
        "Model architecture preset of a random initialization (unused with modelPath or modelConfig).",
    )
    model_path: ModelPath | None = setting(
        None,
        "modelPath",
        "Pretrained weights and tokenizer to fine-tune: an absolute folder (save_pretrained output), s3://bucket/prefix "
        "(downloaded once per node) or hf://org/name[@revision] (the Hub, from the cluster); the architecture comes "
        "from its config.json. Unset: random initialization of `model`.",
    )
    model_configuration: str | None = setting(
        None,
        "modelConfig",
        "A config.json (a local file) or a preset name. With modelPath: its architecture, for the plan when "
        "modelPath's config.json is not on this machine (s3://, a pod-only folder, an hf:// repository not in the Hub "
        "cache). Without: the architecture of a random initialization, in place of `model`. Its model_type must be one "
        f"of {', '.join(models.SUPPORTED_MODEL_TYPES)} (or gemma3, read as its text_config).",
    )
    dataset: DataPath | None = setting(
        None,
        "dataset",
        "Training data: an absolute path or s3://bucket/prefix of parquet or JSON-lines files with a text column "
        "(tokenized with modelPath's tokenizer, packed into seqLen sequences, EOS between documents) or an input_ids "
        "column; read with Ray Data. Unset: random tokens.",
    )
    eval_dataset: DataPath | None = setting(
        None, "evalDataset", "Held-out data in dataset's format, evaluated every evalEvery steps and at the end."
    )
    eval_fraction: float = setting(
        0.0,
        "evalFraction",
        "Share of dataset's documents held out for evaluation (chosen by a hash of each document, so the split is the "
        "same on every run); 0: none.",
        ge=0,
        lt=0.5,
        message="must be >= 0 and < 0.5",
    )
    eval_every: int = setting(0, "evalEvery", "Evaluate every N steps (and at the end); 0: at the end only.", ge=0)
    eval_batches: int = setting(
        0, "evalBatches", "Micro-batches per GPU of each evaluation; 0: the whole held-out split.", ge=0
    )
    steps: int = setting(20, "steps", "Optimizer steps.", ge=1)
    seq_len: int = setting(2048, "seqLen", "Tokens per sequence.", ge=1)
    global_batch_tokens: int = setting(
        524_288,
        "globalBatchTokens",
        "Tokens per optimizer step over the whole job (0.5 M, in the 0.25-1 M range used for models of this size), "
        "the same on every cluster: core.strategy splits it into microBatch x seqLen x gradAccumulation x the "
        "data-parallel ranks (a microBatch or gradAccumulation you set is kept; `plan` says when the split cannot "
        "reach it exactly, and the global batch it reaches).",
        ge=1,
    )
    micro_batch: AutoCount = setting(
        "auto",
        "microBatch",
        "Sequences per GPU per micro-batch; auto: the one core.strategy predicts fastest that fits in "
        "95% of the GPU's memory, its reserved peak planned (seqLen stays yours).",
    )
    learning_rate: float = setting(3e-4, "learningRate", "Peak AdamW learning rate.", gt=0)
    warmup_steps: int = setting(5, "warmupSteps", "Linear warm-up steps, then cosine decay to 10% of the peak.", ge=0)
    weight_decay: float = setting(0.1, "weightDecay", "AdamW weight decay.", ge=0)
    grad_clip: float = setting(1.0, "gradClip", "Gradient norm clip; 0 turns clipping off.", ge=0)
    seed: int = setting(0, "seed", "Seed of the initialization and the token batches (each rank adds its rank).", ge=0)
    report_every: int = setting(
        1,
        "reportEvery",
        "Measure metrics every N steps (and on the first and last): one all-reduce and a progress line, kept in the "
        "history; ray.train.report is called at most once per Ray Train controller poll, so a metrics report never "
        "waits; a checkpoint is reported at its own step, after its save, and may wait up to one poll (2 s) if the "
        "previous report is not yet drained.",
        ge=1,
    )
    checkpoint_every: int = setting(0, "checkpointEvery", "Checkpoint every K steps; 0: only at the end.", ge=0)
    max_failures: int = setting(
        1,
        "maxFailures",
        "Ray Train FailureConfig(max_failures): worker-group restarts from the last checkpoint after a lost worker, node or collective; an exception of the code is not retried.",
        ge=-1,
        message="must be >= 0, or -1 for unlimited",
    )
    compile: bool = setting(True, "compile", "torch.compile each decoder layer (and the chunked loss's softmax).")
    compile_tuning: bool = setting(
        True,
        "compileTuning",
        "With compile: time each generated kernel's launch configurations on the GPU and keep the fastest (inductor's "
        "coordinate-descent tuning): the default job's step 1.0% faster on an H100, its first compile about a minute "
        "longer (then from inductor's cache).",
    )
    activation_checkpointing: AutoCheckpointing = setting(
        "auto",
        "activationCheckpointing",
        "Recompute decoder-layer activations in backward: none; selective (per op: each layer keeps its attention "
        "output and every other matrix product's, and recomputes the rest: about a third of the forward's matrix "
        "products again); full (each layer keeps only its input and runs its forward again); true means full, false none. "
        "auto: the least recompute with which the plan fits (core.strategy).",
    )
    grad_sync_every_micro_batch: AutoBool = setting(
        "auto",
        "gradSyncEveryMicroBatch",
        "With gradAccumulation > 1 under fsdp: reduce-scatter the gradients after every micro-batch (sharded fp32 "
        "gradients accumulate: 4 bytes a parameter less per GPU, k times the gradient traffic) instead of keeping the "
        "unsharded fp32 gradients until the last one; auto: on where one node is one NVLink domain (one node, NVLink "
        "between its GPUs), where that traffic stays on NVLink (core.memory.grad_sync_every_micro_batch).",
    )
    decoder_block: Literal["lean", "transformers"] = setting(
        "lean",
        "decoderBlock",
        "The decoder layer's code: lean (training.lean_block: fused RoPE, SDPA flash attention with GQA called directly, "
        "the same weights and state dict) where it covers the architecture, else transformers' own; transformers: "
        "always transformers' own layer.",
    )
    loss_chunk_size: AutoChunk = setting(
        "auto",
        "lossChunkSize",
        "Tokens per chunk of the fused output projection + cross-entropy; 0: unchunked. The same FLOPs at any size, but "
        "each chunk adds one read and write of the projection's fp32 gradient accumulator (on an H100, 1024-token chunks "
        "ran 10% slower than 4096: docs/BENCHMARKS.md); a chunk holds about 5.4 x vocab x chunk bytes of logits "
        "compiled. auto: the largest of 4096, 2048, 1024 with which the plan's shape fits (core.strategy).",
    )
    sharding: Literal["auto", "fsdp", "hsdp"] = setting(
        "auto",
        "sharding",
        "How parameters, gradients and optimizer state are split: fsdp shards over every GPU; hsdp shards within a node "
        "and replicates across nodes (2-D DeviceMesh), so only a gradient all-reduce crosses the network; auto takes the "
        "one core.perf predicts fastest that fits memory.",
    )
    grad_accumulation: AutoCount = setting(
        "auto",
        "gradAccumulation",
        "Micro-batches per optimizer step (each of microBatch x seqLen tokens per GPU); gradients cross the network once "
        "per optimizer step. The global batch is microBatch x gradAccumulation x world size sequences; auto: what "
        "reaches globalBatchTokens.",
    )
    grad_reduce_dtype: Literal["auto", "fp32", "bf16"] = setting(
        "auto",
        "gradReduceDtype",
        "Precision of the gradient reduce-scatter/all-reduce on the wire on GPU: fp32, or bf16 (half the bytes); "
        "gradients are accumulated and the optimizer steps in fp32 either way. auto: bf16 where core.strategy "
        "predicts it at least 5% faster (a network-bound multi-node job), else fp32.",
    )
    precision: Literal["auto", "bf16", "fp8"] = setting(
        "auto",
        "precision",
        "Matrix-product precision of the decoder layers on GPU: bf16, or fp8 (torchao float8 training of the linears "
        "large enough to gain, tensorwise scaling, fp8 all-gather under FSDP2; needs fp8 tensor cores: "
        f"{', '.join(gpu.name for gpu in catalog.GPUS.values() if gpu.has_fp8)}); auto: fp8 where the GPU "
        "has them, compile is on, the GPU family's fp8 speed is measured or published (not assumed: plan says "
        "which) and core.perf predicts it faster at the chosen shape, else bf16.",
    )
    data_pool_size: int = setting(
        0,
        "dataPoolSize",
        "Random token sequences per rank that batches are drawn from (a set the model can memorize, so the loss falls); "
        "0: fresh random tokens every step.",
        ge=0,
    )

    train_function: str = setting(
        DEFAULT_TRAIN_FUNCTION,
        "trainFunction",
        "The function every Ray Train worker runs, as module:function (in codeDir, or importable); it gets a config "
        'dict of trainConfig\'s keys plus "settings" (README: Your own training).',
        pattern=TRAIN_FUNCTION,
        message="must be module:function, like my_training.train:train_func",
    )
    train_config: TrainConfig = setting(
        {},
        "trainConfig",
        "Free-form JSON object of your function's own parameters: its keys are the top-level keys of the config "
        "dict the function gets.",
    )

    @property
    def undecided(self) -> tuple[str, ...]:
        """The context keys still at auto that core.strategy.resolve decides before anything is predicted or run."""
        values = {
            "microBatch": self.micro_batch,
            "gradAccumulation": self.grad_accumulation,
            "precision": self.precision,
            "activationCheckpointing": self.activation_checkpointing,
        }
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
    def loss_chunk(self) -> int:
        """lossChunkSize as core.strategy.resolve decided it; while still auto, LOSS_CHUNK_BEFORE_PLAN (the chunk the
        compute and memory constants were measured with), so a formula on a shape set by hand needs no resolve."""
        return LOSS_CHUNK_BEFORE_PLAN if self.loss_chunk_size == "auto" else int(self.loss_chunk_size)

    @property
    def checkpointing(self) -> bool:
        """Whether decoder layers recompute anything in backward (checkpointing_mode is not none); ValueError while
        activationCheckpointing is still auto."""
        return self.checkpointing_mode != "none"

    @property
    def checkpointing_mode(self) -> Literal["none", "selective", "full"]:
        """activationCheckpointing once decided (core.strategy.resolve), true read as full and false as none;
        ValueError while it is still auto."""
        value = _decided(self.activation_checkpointing, "activationCheckpointing")
        if isinstance(value, bool):
            return "full" if value else "none"
        return cast(Literal["none", "selective", "full"], value)

    @property
    def builtin(self) -> bool:
        """Whether the job runs the built-in train function, whose model and memory the settings describe."""
        return self.train_function == DEFAULT_TRAIN_FUNCTION

    @property
    def preset(self) -> models.ModelPreset:
        """The architecture to train and plan: modelPath's config.json (core.model_source), else the `model` preset.

        Raises SettingsError when modelPath's config.json or modelConfig cannot be read here, or names an unsupported
        model_type.
        """
        from ray_efa.core.model_source import architecture

        return architecture(self)


SECTIONS: dict[str, type[_Section]] = {
    "cluster": ClusterSettings,
    "nodes": NodeSettings,
    "addons": AddonSettings,
    "workload": WorkloadSettings,
    "training": TrainingSettings,
}
"""The sections by their key, in the order core.settings.Settings holds them."""
