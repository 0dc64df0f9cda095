"""The one builder of the Ray cluster: head, GPU worker group and submitter pods, from settings and the instance catalog.

Both the long-lived RayCluster and each RayJob's own cluster come from `ray_cluster_spec`, so they cannot drift apart.
Every number comes from core.catalog (pod resources, GPUs, EFA interfaces, /dev/shm size), every label and taint from
core.scheduling, and the NCCL environment from core.pod_env; nothing about hardware is typed here. Who may reach
the pods and what their containers may do comes from k8s.security (token auth, pod labels, capabilities).
"""

from __future__ import annotations

from kubernetes.client import (
    V1Capabilities,
    V1ConfigMapProjection,
    V1ConfigMapVolumeSource,
    V1Container,
    V1ContainerPort,
    V1EmptyDirVolumeSource,
    V1EnvVar,
    V1ExecAction,
    V1HostPathVolumeSource,
    V1KeyToPath,
    V1Lifecycle,
    V1LifecycleHandler,
    V1ObjectMeta,
    V1PersistentVolumeClaimVolumeSource,
    V1PodSecurityContext,
    V1PodSpec,
    V1PodTemplateSpec,
    V1ProjectedVolumeSource,
    V1ResourceRequirements,
    V1SeccompProfile,
    V1SecurityContext,
    V1Toleration,
    V1Volume,
    V1VolumeMount,
    V1VolumeProjection,
)

from ray_efa.core import catalog, scheduling
from ray_efa.core.model_source import MODEL_CACHE_ENV
from ray_efa.core.pod_env import HOST_SYS, HOST_SYS_FOLDERS, network_env
from ray_efa.core.settings import Settings
from ray_efa.k8s.code_bundle import CodeBundle
from ray_efa.k8s.cuda_compat import cuda_compat_setup
from ray_efa.k8s.device_claims import container_claims, pod_resource_claims
from ray_efa.k8s.names import APP_CODE_PATH, CODE_MOUNT_PATH, USER_CODE_PATH
from ray_efa.k8s.pip_packages import INSTALL_SCRIPT, PACKAGES_PATH, PACKAGES_SITE_PATH, pod_packages
from ray_efa.k8s.ray_types import HeadGroupSpec, RayClusterSpec, WorkerGroupSpec
from ray_efa.k8s.security import (
    EFA_CAPABILITIES,
    RAY_NODE_COMPONENT,
    SUBMITTER_COMPONENT,
    pod_labels,
    token_auth,
)
from ray_efa.k8s.user_code import FETCH_SCRIPT, UserCodeVolume

__all__ = [
    "HEAD_PORTS",
    "WORKER_GROUP_NAME",
    "RAY_TMP_PATH",
    "SHM_PATH",
    "MODEL_CACHE_PATH",
    "container_security_context",
    "pod_security_context",
    "host_sysfs_parts",
    "head_template",
    "worker_template",
    "submitter_template",
    "ray_cluster_spec",
]

HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001}
"""Ray's GCS, dashboard/job API and client ports, under the names KubeRay looks up (it finds the dashboard by name)."""

WORKER_GROUP_NAME = "gpu"
RAY_TMP_PATH = "/tmp/ray"
"""Ray's session directory (logs, sockets, spilled objects): an emptyDir, so it neither fills the image layer nor
survives a restart with a stale session."""
SHM_PATH = "/dev/shm"
MODEL_CACHE_PATH = "/mnt/model-cache"
"""Node-local copies of s3:// models and the Hub cache of hf:// ones: an emptyDir on the node's disk, kept while the pod
lives (a restarted worker group reuses it), gone with the pod."""

# The submitter pod only runs `ray job submit` and tails the logs: small, and Guaranteed like every other Ray pod.
_SUBMITTER_CPU, _SUBMITTER_MEMORY = "500m", "1Gi"

_HEAD_CONTAINER, _WORKER_CONTAINER, _SUBMITTER_CONTAINER = "ray-head", "ray-worker", "ray-job-submitter"
_FETCH_CODE_CONTAINER, _FETCH_APP_CONTAINER, _INSTALL_PACKAGES_CONTAINER = "fetch-code", "fetch-app", "install-packages"
_RAY_TMP_VOLUME, _SHM_VOLUME, _CODE_VOLUME, _USER_CODE_VOLUME = "ray-tmp", "dshm", "code", "user-code"
_APP_CODE_VOLUME = "app-code"
_MODEL_CACHE_VOLUME, _SHARED_VOLUME, _PACKAGES_VOLUME = "model-cache", "shared", "packages"
# The init container that unpacks codeDir from S3 streams the zip through a temporary file: little CPU or memory.
_FETCH_CPU, _FETCH_MEMORY = "1", "2Gi"


def _gib(value: int) -> str:
    return f"{value}Gi"


def _guaranteed(cpu: str, memory: str, extended: dict[str, str] | None = None, claims=None) -> V1ResourceRequirements:
    """Requests equal to limits (Guaranteed QoS): one throttled or evicted rank would stall every other rank.
    `claims`: DRA claims of the container (deviceAllocation dra), which QoS does not count."""
    amounts = {"cpu": cpu, "memory": memory, **(extended or {})}
    return V1ResourceRequirements(requests=dict(amounts), limits=dict(amounts), claims=claims)


# Every Ray container runs Python with unbuffered stdio, whatever dlcImage sets: CPython then unbuffers C's stdout too
# (Python/initconfig.c, config_init_stdio: setvbuf(stdout, NULL, _IONBF, ...)), and NCCL writes its INFO lines there
# with vfprintf and no fflush (src/debug.cc, ncclDebugLog): block-buffered, a rank's last lines (the transport gate's
# evidence) would be lost when the worker ends with _exit.
_PYTHON_ENV = {"PYTHONUNBUFFERED": "1"}


def _env(values: dict[str, str]) -> list[V1EnvVar]:
    return [V1EnvVar(name=name, value=value) for name, value in sorted({**_PYTHON_ENV, **values}.items())]


def _code_env(
    settings: Settings, user_code: UserCodeVolume | None = None, app_archive_uri: str | None = None
) -> dict[str, str]:
    # PYTHONPATH, not a working_dir: Ray workers inherit the container env, so Ray Train workers on every node can
    # import training.* (the train function is pickled by reference) with no upload through the job API. codeDir
    # comes after the project's code, which it may not shadow (core.user_code refuses a ray_efa/ in it); the extra
    # packages (k8s.pip_packages) come last: they hold only what the image lacks. The project's code is at
    # APP_CODE_PATH when it comes as a zip (`app_archive_uri`), else in the ConfigMaps at CODE_MOUNT_PATH.
    paths = [
        APP_CODE_PATH if app_archive_uri is not None else CODE_MOUNT_PATH,
        *([USER_CODE_PATH] if user_code is not None else []),
        *([PACKAGES_SITE_PATH] if pod_packages(settings) else []),
    ]
    return {"PYTHONPATH": ":".join(paths)}


def _fetch_container(settings: Settings, name: str, uri: str, volume: str, dest: str) -> V1Container:
    """An init container that unpacks the zip at `uri` (s3://...) into the volume `volume` at `dest` (FETCH_SCRIPT)."""
    return V1Container(
        name=name,
        image=settings.workload.dlc_image,  # already on the node for the Ray container: no second pull
        command=["python", "-c", FETCH_SCRIPT, uri, dest],
        env=_env({"NVIDIA_VISIBLE_DEVICES": "void", **_region_env(settings)}),  # it needs no GPU
        resources=_guaranteed(_FETCH_CPU, _FETCH_MEMORY),
        volume_mounts=[V1VolumeMount(name=volume, mount_path=dest)],
        security_context=container_security_context(),
    )


def _package_parts(settings: Settings) -> tuple[list[V1Volume], list[V1VolumeMount], list[V1Container]]:
    """(volumes, main-container mounts, init containers) of the extra packages on a Ray pod; nothing without any."""
    packages = pod_packages(settings)
    if not packages:
        return [], [], []
    init = V1Container(
        name=_INSTALL_PACKAGES_CONTAINER,
        image=settings.workload.dlc_image,  # the image's own pip and Python: already on the node, no second pull
        command=["python", "-c", INSTALL_SCRIPT, PACKAGES_PATH, *packages],
        env=_env({"NVIDIA_VISIBLE_DEVICES": "void", "PIP_ROOT_USER_ACTION": "ignore"}),  # it needs no GPU
        resources=_guaranteed(_FETCH_CPU, _FETCH_MEMORY),
        volume_mounts=[V1VolumeMount(name=_PACKAGES_VOLUME, mount_path=PACKAGES_PATH)],
        security_context=container_security_context(),
    )
    return (
        [V1Volume(name=_PACKAGES_VOLUME, empty_dir=V1EmptyDirVolumeSource())],
        [V1VolumeMount(name=_PACKAGES_VOLUME, mount_path=PACKAGES_PATH, read_only=True)],
        [init],
    )


def _user_code_volume(user_code: UserCodeVolume) -> V1Volume:
    """codeDir: its ConfigMap with the items that restore the tree, or the emptyDir the init container fills."""
    if user_code.bundle is not None:
        return V1Volume(
            name=_USER_CODE_VOLUME,
            config_map=V1ConfigMapVolumeSource(
                name=user_code.config_map,
                items=[V1KeyToPath(key=key, path=path) for key, path in user_code.bundle.items],
            ),
        )
    return V1Volume(name=_USER_CODE_VOLUME, empty_dir=V1EmptyDirVolumeSource())


def _user_code_parts(
    settings: Settings, user_code: UserCodeVolume | None
) -> tuple[list[V1Volume], list[V1VolumeMount], list[V1Container]]:
    """(volumes, main-container mounts, init containers) of codeDir on a Ray pod; nothing without user code."""
    if user_code is None:
        return [], [], []
    mount = V1VolumeMount(name=_USER_CODE_VOLUME, mount_path=USER_CODE_PATH, read_only=True)
    init: list[V1Container] = []
    if user_code.archive_uri is not None:
        init.append(
            _fetch_container(settings, _FETCH_CODE_CONTAINER, user_code.archive_uri, _USER_CODE_VOLUME, USER_CODE_PATH)
        )
    return [_user_code_volume(user_code)], [mount], init


def _app_code_parts(
    settings: Settings, config_map: str, bundle: CodeBundle, app_archive_uri: str | None
) -> tuple[list[V1Volume], list[V1VolumeMount], list[V1Container]]:
    """(volumes, main-container mounts, init containers) of the project's code and settings.json on a Ray pod: the
    ConfigMaps at CODE_MOUNT_PATH, and with `app_archive_uri` the code's zip unpacked into APP_CODE_PATH first."""
    volumes, mounts = [_code_volume(config_map, bundle)], [_code_mount()]
    if app_archive_uri is None:
        return volumes, mounts, []
    volumes.append(V1Volume(name=_APP_CODE_VOLUME, empty_dir=V1EmptyDirVolumeSource()))
    mounts.append(V1VolumeMount(name=_APP_CODE_VOLUME, mount_path=APP_CODE_PATH, read_only=True))
    return (
        volumes,
        mounts,
        [_fetch_container(settings, _FETCH_APP_CONTAINER, app_archive_uri, _APP_CODE_VOLUME, APP_CODE_PATH)],
    )


def _code_volume(config_map: str, bundle: CodeBundle) -> V1Volume:
    """The code ConfigMaps and the settings ConfigMap (k8s.code_config_map) projected into one directory."""
    sources = [
        V1VolumeProjection(
            config_map=V1ConfigMapProjection(
                name=name, items=[V1KeyToPath(key=key, path=path) for key, path in part.items]
            )
        )
        for name, part in bundle.config_maps(config_map)
    ]
    return V1Volume(name=_CODE_VOLUME, projected=V1ProjectedVolumeSource(sources=sources))


def _code_mount() -> V1VolumeMount:
    return V1VolumeMount(name=_CODE_VOLUME, mount_path=CODE_MOUNT_PATH, read_only=True)


def _ray_tmp() -> tuple[V1Volume, V1VolumeMount]:
    return (
        V1Volume(name=_RAY_TMP_VOLUME, empty_dir=V1EmptyDirVolumeSource()),
        V1VolumeMount(name=_RAY_TMP_VOLUME, mount_path=RAY_TMP_PATH),
    )


def _data_volumes(settings: Settings) -> tuple[list[V1Volume], list[V1VolumeMount], dict[str, str]]:
    """The model cache (emptyDir) and, with sharedVolumeClaim, the shared filesystem; their env for training.weights.

    modelPath, dataset and storagePath may name folders under sharedVolumeMountPath (core.model_source.pod_path_problems
    refuses any other local path at synth).
    """
    volumes = [V1Volume(name=_MODEL_CACHE_VOLUME, empty_dir=V1EmptyDirVolumeSource())]
    mounts = [V1VolumeMount(name=_MODEL_CACHE_VOLUME, mount_path=MODEL_CACHE_PATH)]
    claim = settings.workload.shared_volume_claim
    if claim is not None:
        volumes.append(
            V1Volume(name=_SHARED_VOLUME, persistent_volume_claim=V1PersistentVolumeClaimVolumeSource(claim_name=claim))
        )
        mounts.append(V1VolumeMount(name=_SHARED_VOLUME, mount_path=settings.workload.shared_volume_mount_path))
    env = {MODEL_CACHE_ENV: MODEL_CACHE_PATH, "HF_HUB_CACHE": f"{MODEL_CACHE_PATH}/hf"}
    return volumes, mounts, env


def _region_env(settings: Settings) -> dict[str, str]:
    # The AWS SDKs (boto3, pyarrow's S3 filesystem) would otherwise ask IMDS for the region, which pods cannot reach
    # (IMDSv2 hop limit 1 on the nodes); Pod Identity supplies the credentials, this the region.
    return {"AWS_REGION": settings.cluster.region, "AWS_DEFAULT_REGION": settings.cluster.region}


def host_sysfs_parts() -> tuple[list[V1Volume], list[V1VolumeMount]]:
    """The host's /sys/class/infiniband and /sys/devices, read-only under HOST_SYS: where a worker reads its EFA
    devices' hardware counters (training.efa_counters), which the pod's own /sys cannot show.

    The pod's /sys is a sysfs mounted in the pod's network namespace (fs/sysfs/mount.c sysfs_init_fs_context tags it
    with the mounter's namespace), where the RDMA core shows compat copies of the devices without hw_counters
    (drivers/infiniband/core/sysfs.c setup_port: `if (port_num && is_full_dev)`). A hostPath is a bind of the host's
    own sysfs mount, which keeps the host's namespace view. Only these two folders, which have no mount below them,
    so readOnly covers all of each (a hostPath of all of /sys would leave its submounts, cgroup among them, writable);
    the pod's own /sys already shows every other device folder, so they add the host namespace's net and RDMA devices
    alone. No privilege, no hostNetwork, no capability.
    """
    volumes, mounts = [], []
    for folder in HOST_SYS_FOLDERS:
        name = "host-sys-" + folder.replace("/", "-")
        volumes.append(V1Volume(name=name, host_path=V1HostPathVolumeSource(path=f"/sys/{folder}", type="Directory")))
        mounts.append(V1VolumeMount(name=name, mount_path=f"{HOST_SYS}/{folder}", read_only=True))
    return volumes, mounts


def container_security_context(*, add: tuple[str, ...] = ()) -> V1SecurityContext:
    """No privilege escalation and no capability but `add`.

    Dropping every capability keeps a process that runs as the image's user (root, unless the image says otherwise)
    from raw sockets, mknod, chown of other users' files or setuid. Not set, and why: runAsNonRoot (the image's user
    is the image's choice, and Ray writes into its home) and
    readOnlyRootFilesystem (those installs, torch.compile's and Triton's caches and the image's CUDA compatibility
    setup write to the root filesystem).
    """
    return V1SecurityContext(
        allow_privilege_escalation=False,
        capabilities=V1Capabilities(drop=["ALL"], add=list(add) or None),
    )


def pod_security_context() -> V1PodSecurityContext:
    """The container runtime's default seccomp profile; every Ray pod template (head, workers, submitter) sets it,
    and automountServiceAccountToken false.

    No token: nothing in a Ray pod calls the Kubernetes API (the submitter calls the head's dashboard; KubeRay itself
    reads the cluster's token Secret and injects it as env). EKS Pod Identity does not need it either: its webhook
    projects a token of its own (audience pods.eks.amazonaws.com) whatever automountServiceAccountToken says. The
    admission policy (k8s.admission_policy) refuses a Ray pod that mounts one. RuntimeDefault: containerd's default
    profile blocks the syscalls a container has no use for (Pod Security Standards "restricted" asks for it); NCCL,
    libfabric and PyTorch need none of them.
    """
    return V1PodSecurityContext(seccomp_profile=V1SeccompProfile(type="RuntimeDefault"))


def _ray_stop_before_exit() -> V1Lifecycle:
    # `ray stop` lets the raylet and GCS shut down cleanly instead of dying with SIGKILL at the grace period's end.
    return V1Lifecycle(pre_stop=V1LifecycleHandler(_exec=V1ExecAction(command=["/bin/sh", "-c", "ray stop"])))


def head_template(
    settings: Settings,
    *,
    owner: str,
    config_map: str,
    bundle: CodeBundle,
    user_code: UserCodeVolume | None = None,
    app_archive_uri: str | None = None,
) -> V1PodTemplateSpec:
    """The GPU-less head on a system node: GCS, dashboard and the job driver. `owner`: the RayCluster or RayJob;
    `user_code`: codeDir, mounted at USER_CODE_PATH; `app_archive_uri`: the project's code as a zip in S3 (then
    `bundle` is settings.json alone)."""
    cpu, memory_gib = catalog.head_pod_resources(settings.nodes.system_instance)
    tmp_volume, tmp_mount = _ray_tmp()
    app_volumes, app_mounts, app_init = _app_code_parts(settings, config_map, bundle, app_archive_uri)
    user_volumes, user_mounts, init = _user_code_parts(settings, user_code)
    init = app_init + init
    package_volumes, package_mounts, package_init = _package_parts(settings)
    # The driver runs here: it fetches modelPath's config and tokenizer, and lists the data sets, before training.
    data_volumes, data_mounts, data_env = _data_volumes(settings)
    container = V1Container(
        name=_HEAD_CONTAINER,
        image=settings.workload.dlc_image,
        # The system node has no GPU; without "void" the NVIDIA container hook fails the pod on it.
        env=_env(
            {
                "NVIDIA_VISIBLE_DEVICES": "void",
                **_code_env(settings, user_code, app_archive_uri),
                **_region_env(settings),
                **data_env,
            }
        ),
        ports=[V1ContainerPort(name=name, container_port=port) for name, port in HEAD_PORTS.items()],
        resources=_guaranteed(str(cpu), _gib(memory_gib)),
        volume_mounts=[tmp_mount, *app_mounts, *user_mounts, *package_mounts, *data_mounts],
        lifecycle=_ray_stop_before_exit(),
        security_context=container_security_context(),
    )
    return V1PodTemplateSpec(
        metadata=V1ObjectMeta(labels=pod_labels(owner, RAY_NODE_COMPONENT)),
        spec=V1PodSpec(
            # The driver and Ray Train's checkpoint uploads read and write storagePath with this account's role.
            service_account_name=settings.workload.service_account,
            node_selector=dict(settings.nodes.system_node_selector),
            init_containers=[*init, *package_init] or None,
            containers=[container],
            volumes=[tmp_volume, *app_volumes, *user_volumes, *package_volumes, *data_volumes],
            automount_service_account_token=False,  # see pod_security_context
            security_context=pod_security_context(),
        ),
    )


def worker_template(
    settings: Settings,
    *,
    owner: str,
    config_map: str,
    bundle: CodeBundle,
    user_code: UserCodeVolume | None = None,
    app_archive_uri: str | None = None,
) -> V1PodTemplateSpec:
    """One worker pod per GPU node, holding all its GPUs and EFA interfaces, with the NCCL env of `settings.network`."""
    instance = settings.nodes.gpu_instance
    pod = catalog.worker_pod_resources(instance)
    tmp_volume, tmp_mount = _ray_tmp()
    app_volumes, app_mounts, app_init = _app_code_parts(settings, config_map, bundle, app_archive_uri)
    user_volumes, user_mounts, init = _user_code_parts(settings, user_code)
    init = app_init + init
    package_volumes, package_mounts, package_init = _package_parts(settings)
    data_volumes, data_mounts, data_env = _data_volumes(settings)
    sysfs_volumes, sysfs_mounts = host_sysfs_parts()  # the EFA counters of the transport gate, as the host shows them
    # The TCP comparison run keeps the EFA devices: the pods stay identical but for the NCCL env, so the run measures
    # the transport alone (NCCL_NET=Socket never opens them). With DRA the devices come from a ResourceClaimTemplate
    # (k8s.device_claims) instead of extended resources.
    dra = settings.addons.device_allocation == "dra"
    extended = {} if dra else {"nvidia.com/gpu": str(pod.gpus), "vpc.amazonaws.com/efa": str(pod.efa)}
    container = V1Container(
        name=_WORKER_CONTAINER,
        image=settings.workload.dlc_image,
        # The image's CUDA forward-compatibility setup, which its ENTRYPOINT would run: KubeRay puts these args in
        # front of `ray start`, in the same shell (k8s.cuda_compat).
        args=[cuda_compat_setup()],
        env=_env(
            {
                **network_env(
                    settings.workload.network,
                    instance,
                    placement_group=settings.nodes.use_placement_group,
                    debug_subsys=settings.workload.nccl_debug_subsys,
                ),
                **_code_env(settings, user_code, app_archive_uri),
                **_region_env(settings),
                **data_env,
            }
        ),
        resources=_guaranteed(
            str(pod.cpu), _gib(pod.memory_gib), extended, container_claims(instance) if dra else None
        ),
        volume_mounts=[
            V1VolumeMount(name=_SHM_VOLUME, mount_path=SHM_PATH),
            tmp_mount,
            *app_mounts,
            *user_mounts,
            *package_mounts,
            *data_mounts,
            *sysfs_mounts,
        ],
        lifecycle=_ray_stop_before_exit(),
        # The TCP run keeps it too: its pods differ from the EFA run's only in the NCCL env.
        security_context=container_security_context(add=EFA_CAPABILITIES),
    )
    # NCCL's SHM transport and DataLoader workers live in /dev/shm; the container runtime's default is 64 MiB.
    # A Memory emptyDir counts against the pod's memory limit, so it is bounded by the catalog's shm_gib.
    shm = V1Volume(name=_SHM_VOLUME, empty_dir=V1EmptyDirVolumeSource(medium="Memory", size_limit=_gib(pod.shm_gib)))
    return V1PodTemplateSpec(
        metadata=V1ObjectMeta(labels=pod_labels(owner, RAY_NODE_COMPONENT)),
        spec=V1PodSpec(
            service_account_name=settings.workload.service_account,
            node_selector=dict(settings.nodes.gpu_node_selector),
            tolerations=[
                V1Toleration(key=t["key"], operator=t["operator"], effect=t["effect"])
                for t in scheduling.gpu_tolerations(list(settings.nodes.gpu_node_taints))
            ],
            init_containers=[*init, *package_init] or None,
            containers=[container],
            resource_claims=pod_resource_claims(owner, instance) if dra else None,
            volumes=[shm, tmp_volume, *app_volumes, *user_volumes, *package_volumes, *data_volumes, *sysfs_volumes],
            automount_service_account_token=False,  # see pod_security_context
            security_context=pod_security_context(),
        ),
    )


def submitter_template(settings: Settings, *, owner: str) -> V1PodTemplateSpec:
    """The RayJob's submitter pod: on a system node (where the head pulled the image already), Guaranteed QoS.

    KubeRay fills in its command (`ray job submit ... -- ENTRYPOINT`), the dashboard address and, with token auth,
    RAY_AUTH_TOKEN from the cluster's Secret; the entrypoint itself runs on the head, so this pod needs no code.
    `owner`: the RayJob, whose NetworkPolicy admits this pod to the head's dashboard by these labels.
    """
    container = V1Container(
        name=_SUBMITTER_CONTAINER,
        image=settings.workload.dlc_image,
        env=_env({}),
        resources=_guaranteed(_SUBMITTER_CPU, _SUBMITTER_MEMORY),
        security_context=container_security_context(),
    )
    return V1PodTemplateSpec(
        metadata=V1ObjectMeta(labels=pod_labels(owner, SUBMITTER_COMPONENT)),
        spec=V1PodSpec(
            node_selector=dict(settings.nodes.system_node_selector),
            containers=[container],
            restart_policy="Never",
            automount_service_account_token=False,  # see pod_security_context
            security_context=pod_security_context(),
        ),
    )


def ray_cluster_spec(
    settings: Settings,
    *,
    owner: str,
    config_map: str,
    bundle: CodeBundle,
    user_code: UserCodeVolume | None = None,
    app_archive_uri: str | None = None,
) -> RayClusterSpec:
    """The whole Ray cluster: the head on a system node and gpuNodeCount GPU workers, fixed size, behind a token
    where KubeRay supports it. `owner`: the RayCluster or RayJob (its pods are labelled with it); `user_code`:
    codeDir, on every pod; `app_archive_uri`: the project's code as a zip in S3, on every pod (`bundle` is then
    settings.json alone)."""
    instance = settings.nodes.gpu_instance
    nodes = settings.nodes.gpu_node_count
    return RayClusterSpec(
        ray_version=settings.workload.ray_version,
        token_auth=token_auth(settings).enabled,
        head_group_spec=HeadGroupSpec(
            # num-cpus 0 keeps Ray tasks off the small system node; Ray Train's controller asks for 0 CPUs.
            ray_start_params={"num-gpus": "0", "num-cpus": "0"},
            template=head_template(
                settings,
                owner=owner,
                config_map=config_map,
                bundle=bundle,
                user_code=user_code,
                app_archive_uri=app_archive_uri,
            ),
        ),
        worker_group_specs=(
            WorkerGroupSpec(
                group_name=WORKER_GROUP_NAME,
                replicas=nodes,
                min_replicas=nodes,
                max_replicas=nodes,
                ray_start_params={"num-gpus": str(catalog.worker_pod_resources(instance).gpus)},
                template=worker_template(
                    settings,
                    owner=owner,
                    config_map=config_map,
                    bundle=bundle,
                    user_code=user_code,
                    app_archive_uri=app_archive_uri,
                ),
            ),
        ),
    )
