"""`ray-efa submit`: the train function and its code as a new RayJob on a deployed cluster, followed to its end.

    deployed = deployed_settings(api_client, ns, job) # the cluster side as deployed: its <job>-settings ConfigMap
    settings, problems = on_deployed_cluster(settings, deployed)  # taken from it; a local contradiction: a problem
    settings, objects = submission(settings)        # jobName made unique; the objects `ray-efa manifests` writes
    upload_code_archive(s3, archive)                # codeDir too large for a ConfigMap: a zip under storagePath
    holders, _ = gpu_holders(api_client, namespace) # Ray clusters that hold the GPU nodes now: the job would wait
    objects = mark_submitted(objects, submitter_name(api_client))  # immutable ConfigMaps; all annotated with who
    uid = create_objects(api_client, objects)       # NetworkPolicy, ConfigMaps, then the RayJob
    own_by_job(api_client, objects, uid)            # deleting the RayJob deletes the others
    final = follow(api_client, namespace, name, ...) # status changes, the submitter's log as it is written
    code = job_exit_code(final.status)               # the driver's exit code: 0, 1 failed, 2 refused, 3 unproven

The objects are exactly those of k8s.objects.ray_job_objects, which `ray-efa manifests` writes for the same settings
(its chart wraps them: tests/k8s/test_charts.py compares the two). Everything goes through a kubernetes ApiClient
passed in: the CLI's, from the kubeconfig.
"""

from __future__ import annotations

import re
import secrets
import string
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ray_efa.core.settings import MAX_JOB_NAME_LENGTH, Problem, Settings

__all__ = [
    "SubmitError",
    "JobNotFound",
    "JobState",
    "unique_job_name",
    "submission",
    "gpu_holders",
    "create_objects",
    "DeployedSettings",
    "NoDeployedSettings",
    "submitter_name",
    "mark_submitted",
    "DEPLOYED_KEYS",
    "SETTINGS_SELECTOR",
    "deployed_settings",
    "on_deployed_cluster",
    "own_by_job",
    "follow",
    "InitContainerFailed",
    "check_init_containers",
    "submitter_log",
    "job_exit_code",
    "gate_lines",
    "cleanup_command",
    "TERMINAL_STATES",
    "SUBMITTER_CONTAINER",
    "api_error",
    "SUBMITTED_BY",
    "submitter_identity",
]

RAY_GROUP, RAY_VERSION, RAY_JOBS = "ray.io", "v1", "rayjobs"
STRICT = "Strict"
"""The fieldValidation every write asks for: an unknown or duplicate field is refused, not dropped."""
TERMINAL_STATES = ("Complete", "Failed")
"""RayJob status.jobDeploymentStatus values after which nothing changes (KubeRay's JobDeploymentStatus)."""
SUBMITTER_CONTAINER = "ray-job-submitter"
"""The container of the submitter pod (k8s.cluster_spec.submitter_template); KubeRay names its Job like the RayJob."""
_EXIT_CODE = re.compile(r"exit code (\d+)")
_TOKEN_CHARS = string.ascii_lowercase + string.digits
_TOKEN_LENGTH = 5


class SubmitError(RuntimeError):
    """The job could not be created or followed; the message names the object and the API's answer."""


class NoDeployedSettings(SubmitError):
    """The cluster's deployed settings cannot be found or read; the message says where it looked and what to do."""


class InitContainerFailed(SubmitError):
    """An init container of the job's Ray pods failed (the code fetch, the pip install): KubeRay keeps the RayJob
    Initializing until a deadline (KubeRay issue 4637), so the command says so and ends at once. `failures` has each
    container's pod, exit code and last log lines (ops.init_failures)."""

    def __init__(self, message: str, failures: list[Any]):
        super().__init__(message)
        self.failures = failures


class JobNotFound(SubmitError):
    """The RayJob is not there (404): a name or namespace that is wrong, or a job already deleted."""


@dataclass(frozen=True, kw_only=True, slots=True)
class JobState:
    """What the RayJob's status says at one moment."""

    deployment: str
    """status.jobDeploymentStatus (Initializing, Running, Complete, Failed, ...); "" before KubeRay set it."""
    job: str
    """status.jobStatus, Ray's own (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED); "" before the job exists."""
    status: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.deployment in TERMINAL_STATES

    def describe(self) -> str:
        text = self.deployment or "New"
        if self.job:
            text += f" ({self.job})"
        if self.status.get("rayClusterName"):
            text += f", Ray cluster {self.status['rayClusterName']}"
        if self.finished and self.status.get("reason"):
            text += f", reason {self.status['reason']}"
        return text


def unique_job_name(base: str, token: str | None = None) -> str:
    """`base` with a random 5-character suffix, within jobName's limit: train-efa -> train-efa-k3x9a."""
    token = token or "".join(secrets.choice(_TOKEN_CHARS) for _ in range(_TOKEN_LENGTH))
    return f"{base[: MAX_JOB_NAME_LENGTH - len(token) - 1].rstrip('-')}-{token}"


def submission(
    settings: Settings, *, job_name: str | None = None, code_archive_uri: str | None = None
) -> tuple[Settings, list[dict[str, Any]]]:
    """The settings with jobName `job_name` (default: a unique one) and the job's objects, in apply order;
    `code_archive_uri`: codeDir's zip in S3 (k8s.code_archive), fetched by the pods in place of a ConfigMap.

    Raises SettingsError or ManifestError as `ray-efa manifests` would (a plan that cannot fit, a trainFunction
    missing from codeDir, code too large for a ConfigMap without an archive).
    """
    from ray_efa.k8s.objects import ray_job_objects

    settings = settings.replace(jobName=job_name or unique_job_name(settings.workload.job_name))
    return settings, ray_job_objects(settings, code_archive_uri=code_archive_uri)


DEPLOYED_KEYS: tuple[str, ...] = (
    # the EKS cluster and its network
    "clusterName",
    "region",
    "kubernetesVersion",
    "vpcId",
    "vpcAvailabilityZones",
    # the node groups: what the workers are, how many, where, and the labels their pods select
    "systemInstanceType",
    "systemNodeCount",
    "gpuInstanceType",
    "gpuNodeCount",
    "gpuAvailabilityZone",
    "capacityReservationId",
    "capacityReservationType",
    "placementGroup",
    "systemNodeSelector",
    "gpuNodeSelector",
    "extraGpuInstanceTypes",
    "gpuRootVolumeGib",
    "systemRootVolumeGib",
    # what is installed into the cluster: the operator's CRDs, how pods get GPUs and EFA interfaces
    "kuberayVersion",
    "deviceAllocation",
    "nvidiaDevicePluginVersion",
    "efaDevicePluginVersion",
    "nvidiaDraDriverVersion",
    "efaDraDriverVersion",
    # what the cluster stack made for the pods: their namespace, the service account with access to the checkpoint
    # bucket, the storage it grants and the shared volume
    "namespace",
    "serviceAccount",
    "storagePath",
    "sharedVolumeClaim",
    "sharedVolumeMountPath",
)
"""The settings a job takes from the cluster it runs on, not from the submitting machine: a job that asks for other
nodes, labels, a namespace or storage than the deployment made waits Pending until its deadline, or fails at Ray's
storage check. The rest (the train function, its code and config, network efa or tcp, the image, the training
knobs, jobName) belong to the job."""

SETTINGS_SELECTOR = "app.kubernetes.io/component=settings,app.kubernetes.io/part-of=ray-efa-stack"
"""The labels of every settings ConfigMap (k8s.code_config_map), those of deployments and of submitted jobs alike."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DeployedSettings:
    """The cluster side of the settings a deployment wrote into the cluster (DEPLOYED_KEYS of its settings.json)."""

    source: str
    """Where they were read: "ConfigMap research/train-efa-settings"."""
    context: dict[str, Any]
    """Context key -> the deployed value, as settings.json holds it (JSON)."""


def _settings_of(config_map: Any, where: str) -> dict[str, Any]:
    import json

    from ray_efa.k8s.names import SETTINGS_FILE

    data = (config_map.get("data") if isinstance(config_map, dict) else config_map.data) or {}
    try:
        values = json.loads(data[SETTINGS_FILE])
        if not isinstance(values, dict):
            raise ValueError("not a JSON object")
    except (KeyError, ValueError) as error:
        raise NoDeployedSettings(
            f"{where} holds no readable {SETTINGS_FILE} ({error}): was it written by "
            "ray-efa-stack? Name the deployment's with --deployed NAMESPACE/JOB"
        ) from None
    return {key: values[key] for key in DEPLOYED_KEYS if key in values}


def _owned_by_job(config_map: Any) -> bool:
    """Whether a RayJob owns it: `ray-efa submit` made it (own_by_job), it is no deployment's."""
    owners = (
        (config_map.metadata.owner_references or [])
        if not isinstance(config_map, dict)
        else (config_map.get("metadata") or {}).get("ownerReferences") or []
    )
    return any((o.kind if not isinstance(o, dict) else o.get("kind")) == "RayJob" for o in owners)


def _submitted_by(config_map: Any) -> str | None:
    """Who made it with `ray-efa submit` (mark_submitted), None for a deployment's: a researcher may create a
    ConfigMap in the namespace, never one without this annotation (k8s.admission_policy)."""
    from ray_efa.k8s.admission_policy import SUBMITTED_BY_ANNOTATION

    annotations = (
        (config_map.metadata.annotations or {})
        if not isinstance(config_map, dict)
        else (config_map.get("metadata") or {}).get("annotations") or {}
    )
    return annotations.get(SUBMITTED_BY_ANNOTATION)


def deployed_settings(api_client: Any, namespace: str, job: str, *, exact: bool = False) -> DeployedSettings:
    """The cluster side of the settings the cluster was deployed with: settings.json of the ConfigMap `<job>-settings`
    in `namespace` (k8s.names.settings_config_map_name; the deployment's training job writes it). When that one is
    not there (404) and not `exact`, every settings ConfigMap of the cluster (SETTINGS_SELECTOR, all namespaces) that
    no submitted RayJob owns: one deployment's, or several that agree on DEPLOYED_KEYS.

    Raises NoDeployedSettings naming where it looked and what to do when there is none, or several that disagree;
    SubmitError when the API refuses the read (the 401/403 of the credentials themselves propagate, as job_state's).
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from ray_efa.k8s.names import code_config_map_name, settings_config_map_name

    core = client.CoreV1Api(api_client)
    name = settings_config_map_name(code_config_map_name(job))
    where = f"ConfigMap {namespace}/{name}"
    try:
        config_map = core.read_namespaced_config_map(name, namespace)
    except ApiException as error:
        if error.status != 404:
            raise SubmitError(f"cannot read {where}, the cluster's deployed settings: {api_error(error)}") from None
    else:
        # storagePath comes from here, and the code is uploaded there: never from a ConfigMap a researcher wrote.
        if (user := _submitted_by(config_map)) is not None:
            raise NoDeployedSettings(
                f"{where} was made by `ray-efa submit` (user {user}), not by the deployment: "
                "its settings are not trusted; name the deployment's job with --deployed "
                "NAMESPACE/JOB"
            )
        return DeployedSettings(source=where, context=_settings_of(config_map, where))
    what_to_do = (
        f"--deployed NAMESPACE/JOB names the deployment's training job (kubectl get configmaps -A -l "
        f"{SETTINGS_SELECTOR} lists the settings ConfigMaps); a cluster deployed by an earlier release with "
        "trainingJob false or gpuNodeCount 0 has none: deploy it again (ray-efa-stack writes "
        "<jobName>-settings in the job's namespace, with its training job or without)"
    )
    if exact:
        raise NoDeployedSettings(
            f"no {where} in the cluster (404 Not Found), so its deployed settings are unknown: {what_to_do}"
        )
    try:
        listing: Any = core.list_config_map_for_all_namespaces(label_selector=SETTINGS_SELECTOR)
    except ApiException as error:
        raise NoDeployedSettings(
            f"no {where} (404 Not Found), and the settings ConfigMaps of the other namespaces "
            f"cannot be listed: {api_error(error)}; {what_to_do}"
        ) from None
    found: dict[str, dict[str, Any]] = {}
    for item in listing.items or []:
        if not _owned_by_job(item) and _submitted_by(item) is None:
            at = f"ConfigMap {item.metadata.namespace}/{item.metadata.name}"
            found[at] = _settings_of(item, at)
    if not found:
        raise NoDeployedSettings(
            f"no {where}, nor any other settings ConfigMap of a deployment in the cluster, so "
            f"its deployed settings are unknown: {what_to_do}"
        )
    first, *others = sorted(found)
    if differ := [at for at in others if found[at] != found[first]]:
        raise NoDeployedSettings(
            f"no {where}, and the cluster holds the settings of deployments that differ "
            f"({', '.join([first, *differ])}): name the one to run on with --deployed "
            "NAMESPACE/JOB"
        )
    return DeployedSettings(source=first, context=found[first])


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


COMMAND_LINE = "-c"
"""The source name core.context gives a value of the command line."""


def on_deployed_cluster(
    settings: Settings, deployed: DeployedSettings, *, sources: dict[str, str] | None = None
) -> tuple[Settings, list[Problem]]:
    """`settings` with the cluster side (DEPLOYED_KEYS) as deployed, and a problem for each value stated here that
    contradicts the deployment, naming both values; a storagePath under the deployed one (a run's own folder in the
    granted bucket) is no contradiction and stays. `sources`: context key -> where the local value came from
    (core.context.ResolvedSettings.sources); with them only a value of the command line (-c) is stated: what the
    checkout's cdk.json or cdk.context.json holds describes the deployment made from that checkout, not the one
    asked, so the deployed cluster's value wins over it. Without `sources`, every value given (not left at its
    default) is stated."""
    import json

    local = settings.to_context()
    given = settings.given_keys
    taken: dict[str, Any] = {}
    problems: list[Problem] = []
    for key, value in deployed.context.items():
        mine = local.get(key)
        if json.dumps(mine, sort_keys=True) == json.dumps(value, sort_keys=True):
            continue
        if key == "storagePath" and isinstance(mine, str) and isinstance(value, str) and _under(mine, value):
            continue
        if key in given and (sources is None or sources.get(key) == COMMAND_LINE):
            source = (sources or {}).get(key)
            origin = f" (from {source})" if source and source != "default" else ""
            problems.append(
                Problem(
                    key,
                    mine,
                    (
                        f"the cluster was deployed with {json.dumps(value)} ({deployed.source}) and the local value{origin} "
                        f"contradicts it: a job runs on what was deployed; drop {key} from the local settings to take the "
                        f"cluster's{' (or name a folder under it)' if key == 'storagePath' else ''}, or deploy the cluster "
                        "with it"
                    ),
                )
            )
        else:
            taken[key] = value
    if problems or not taken:
        return settings, problems
    return settings.replace(**taken), []


def api_error(error: Exception) -> str:
    """The Kubernetes API's answer in one line: status, reason, the endpoint (on a 401/403 of the CLI's client) and
    the Status message of the body."""
    body = getattr(error, "body", None)
    reason = getattr(error, "reason", None) or type(error).__name__
    try:
        import json

        message = json.loads(body).get("message") if body else None
    except (ValueError, AttributeError):
        message = None
    at = getattr(error, "endpoint", None)  # the CLI's client names the API server on a 401/403 (cli._kube)
    return f"{getattr(error, 'status', '')} {reason}{f' from {at}' if at else ''}: {message or body or error}".strip()


def gpu_holders(api_client: Any, namespace: str) -> tuple[list[str], str | None]:
    """The Ray clusters already in `namespace` with workers, each of which takes every GPU node of the cluster's
    node group (the plan gives a job all of them), so that a new job's workers wait for it to go; described for a
    person ("RayCluster ray/x (of RayJob y, ready)"). Second: why they could not be listed (RBAC), else None; a
    namespace or CRD that is not there lists nothing here (the create that follows names it)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        listing: Any = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
            RAY_GROUP, RAY_VERSION, namespace, "rayclusters"
        )
    except ApiException as error:
        return [], None if error.status == 404 else api_error(error)
    holders = []
    for cluster in listing.get("items") or []:
        groups = (cluster.get("spec") or {}).get("workerGroupSpecs") or []
        if not any((g.get("replicas") or g.get("minReplicas") or 0) > 0 for g in groups):
            continue
        meta = cluster.get("metadata") or {}
        owner = next((o["name"] for o in meta.get("ownerReferences") or [] if o.get("kind") == "RayJob"), None)
        state = (cluster.get("status") or {}).get("state")
        about = ", ".join(x for x in (f"of RayJob {owner}" if owner else "", state or "") if x)
        holders.append(f"RayCluster {namespace}/{meta.get('name')}" + (f" ({about})" if about else ""))
    return holders, None


def submitter_name(api_client: Any) -> str:
    """The Kubernetes user name the API server gives the caller's credentials (a SelfSubjectReview,
    authentication.k8s.io/v1, GA in Kubernetes 1.28, which the default system:basic-user ClusterRole lets every
    authenticated user create: https://kubernetes.io/docs/reference/access-authn-authz/authentication/#self-subject-review).
    The admission policy (k8s.admission_policy) admits a researcher's ConfigMap or NetworkPolicy only under it."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        review: Any = client.AuthenticationV1Api(api_client).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}  # pyright: ignore[reportArgumentType]
        )
    except ApiException as error:
        raise SubmitError(
            f"cannot ask the API server who these credentials are (SelfSubjectReview): {api_error(error)}"
        ) from None
    return review.status.user_info.username


def mark_submitted(objects: list[dict[str, Any]], user: str) -> list[dict[str, Any]]:
    """Copies of `objects` with each ConfigMap immutable (a job's code and settings never change once submitted) and
    each ConfigMap, NetworkPolicy and RayJob annotated with `user` (SUBMITTED_BY_ANNOTATION): the admission policy
    admits a researcher's objects only so, and lets them change (or, a RayJob, delete) their own alone;
    deployed_settings never trusts them."""
    from ray_efa.k8s.admission_policy import SUBMITTED_BY_ANNOTATION

    marked = []
    for obj in objects:
        if obj["kind"] in ("ConfigMap", "NetworkPolicy", "RayJob"):
            metadata = obj["metadata"]
            obj = {
                **obj,
                "metadata": {
                    **metadata,
                    "annotations": {**(metadata.get("annotations") or {}), SUBMITTED_BY_ANNOTATION: user},
                },
            }
            if obj["kind"] == "ConfigMap":
                obj["immutable"] = True
        marked.append(obj)
    return marked


SUBMITTED_BY = "ray-efa-stack/submitted-by"
"""The annotation `submit` puts on the RayJob it creates: who submitted it from where (`ray-efa jobs` shows it);
Kubernetes itself keeps the creating user only in its audit log."""


def submitter_identity() -> str:
    """`user@host (ray-efa submit)` of this machine, what SUBMITTED_BY holds."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (a container's)
        user = "unknown"
    return f"{user}@{socket.gethostname()} (ray-efa submit)"


def create_objects(api_client: Any, objects: list[dict[str, Any]], *, submitted_by: str | None = None) -> str | None:
    """Create each object (new names: create, never replace), in order; SubmitError on the first refusal. Returns
    the created RayJob's uid (None without one), which `own_by_job` makes the others' owner. `submitted_by`: the
    RayJob's SUBMITTED_BY annotation (the objects themselves are not changed).

    Each create asks for fieldValidation=Strict, as kubectl does: the API server refuses a field its schema does not
    declare (a RayJob field the cluster's KubeRay CRD lacks, a misspelt key) instead of dropping it and storing the
    rest (its default for a plain POST is to warn and prune), so what runs is what was written."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core, networking, custom = (
        client.CoreV1Api(api_client),
        client.NetworkingV1Api(api_client),
        client.CustomObjectsApi(api_client),
    )
    job_uid = None
    for obj in objects:
        kind, namespace, name = obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
        try:
            # The client takes a manifest dict as the body (ApiClient.sanitize_for_serialization passes it through);
            # the kubernetes stubs name only the model class.
            if kind == "ConfigMap":
                core.create_namespaced_config_map(
                    namespace,
                    obj,  # pyright: ignore[reportArgumentType]
                    field_validation=STRICT,
                )
            elif kind == "NetworkPolicy":
                networking.create_namespaced_network_policy(
                    namespace,
                    obj,  # pyright: ignore[reportArgumentType]
                    field_validation=STRICT,
                )
            elif kind == "RayJob":
                if submitted_by:
                    meta = obj["metadata"]
                    obj = {
                        **obj,
                        "metadata": {
                            **meta,
                            "annotations": {**meta.get("annotations", {}), SUBMITTED_BY: submitted_by},
                        },
                    }
                created: Any = custom.create_namespaced_custom_object(
                    RAY_GROUP, RAY_VERSION, namespace, RAY_JOBS, obj, field_validation=STRICT
                )
                job_uid = (created.get("metadata") or {}).get("uid")
            else:
                raise SubmitError(f"cannot create a {kind} ({name}): not a kind the job's chart holds")
        except ApiException as error:
            hint = ""
            if error.status == 404:
                hint = (
                    f" (is namespace {namespace} there, and the KubeRay operator with its CRDs? `ray-efa verify` "
                    "checks the cluster)"
                )
            elif error.status in (401, 403):
                hint = " (are these credentials allowed into the cluster? see adminPrincipalArns)"
            raise SubmitError(f"cannot create {kind} {namespace}/{name}: {api_error(error)}{hint}") from None
    return job_uid


def own_by_job(api_client: Any, objects: list[dict[str, Any]], job_uid: str) -> list[str]:
    """Make the RayJob (the last object, uid `job_uid`) the owner of the objects created before it, so that deleting
    the RayJob deletes its ConfigMaps and NetworkPolicy too (Kubernetes' garbage collector follows ownerReferences;
    they must exist before the job starts, so the reference is added after the RayJob has its uid). Returns the
    objects it could not patch, each with the API's answer; they stay until deleted by hand."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    job = objects[-1]
    owner = {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": job["metadata"]["name"], "uid": job_uid}
    patch = [{"op": "add", "path": "/metadata/ownerReferences", "value": [owner]}]  # a list: sent as a JSON patch
    core, networking = client.CoreV1Api(api_client), client.NetworkingV1Api(api_client)
    failed = []
    for obj in objects[:-1]:
        kind, namespace, name = obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
        try:
            if kind == "ConfigMap":
                core.patch_namespaced_config_map(name, namespace, patch, field_validation=STRICT)
            elif kind == "NetworkPolicy":
                networking.patch_namespaced_network_policy(name, namespace, patch, field_validation=STRICT)
        except ApiException as error:
            failed.append(f"{kind.lower()}/{name}: {api_error(error)}")
    return failed


def job_state(api_client: Any, namespace: str, name: str) -> JobState:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        job: Any = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            RAY_GROUP, RAY_VERSION, namespace, RAY_JOBS, name
        )
    except ApiException as error:
        if error.status == 404:
            raise JobNotFound(f"no RayJob {namespace}/{name} (kubectl -n {namespace} get rayjobs lists them)") from None
        if error.status in (
            401,
            403,
        ):  # the credentials, not this job: the CLI says what to check (unreachable_message)
            raise
        raise SubmitError(f"cannot read RayJob {namespace}/{name}: {api_error(error)}") from None
    status = job.get("status") or {}
    return JobState(deployment=status.get("jobDeploymentStatus", ""), job=status.get("jobStatus", ""), status=status)


def _submitter_pod(api_client: Any, namespace: str, name: str) -> Any | None:
    """The newest pod of the submitter Job (named like the RayJob), or None before it exists."""
    from kubernetes import client

    listing: Any = client.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=f"job-name={name}")
    pods: list[Any] = listing.items
    return max(pods, key=lambda p: str(p.metadata.creation_timestamp or ""), default=None)


def submitter_log(
    api_client: Any,
    namespace: str,
    name: str,
    *,
    follow_log: bool = False,
    on_line: Callable[[str], None] | None = None,
) -> str:
    """The submitter's log (the driver's output: progress, the summary, the gate's table); "" if no pod has one.

    `follow_log`: stream it until the pod ends, calling `on_line` for each line as it arrives.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    pod = _submitter_pod(api_client, namespace, name)
    if pod is None:
        return ""
    core = client.CoreV1Api(api_client)
    try:
        if not follow_log:
            # The raw body: the client's own deserialization of a plain-text log gives "b'...'" (kubernetes 36). The
            # client takes _preload_content on every call (its **kwargs); the kubernetes stubs leave it out.
            whole: Any = core.read_namespaced_pod_log(
                pod.metadata.name,
                namespace,
                container=SUBMITTER_CONTAINER,
                _preload_content=False,  # pyright: ignore[reportCallIssue]
            )
            return whole.data.decode("utf-8", "replace")
        response: Any = core.read_namespaced_pod_log(
            pod.metadata.name,
            namespace,
            container=SUBMITTER_CONTAINER,
            follow=True,
            _preload_content=False,  # pyright: ignore[reportCallIssue]
            _request_timeout=(None, None),
        )  # lines come when they come
    except ApiException as error:
        if error.status == 400:  # the container has not started yet
            return ""
        # The API server reads logs from the node's kubelet, which may be gone (a node scaled in) or unreachable: say
        # so in the log's place and go on following the job, whose state and exit code still come from the RayJob.
        note = f"(the log of pod {namespace}/{pod.metadata.name} cannot be read: {api_error(error)})"
        if on_line:
            on_line(note)
        return note
    lines: list[str] = []
    pending = b""
    for chunk in response.stream(4096):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            line = raw.decode("utf-8", "replace")
            lines.append(line)
            if on_line:
                on_line(line)
    if pending:
        lines.append(pending.decode("utf-8", "replace"))
        if on_line:
            on_line(lines[-1])
    response.release_conn()
    return "\n".join(lines)


def follow(
    api_client: Any,
    namespace: str,
    name: str,
    *,
    timeout_s: float,
    poll_s: float = 5.0,
    on_state: Callable[[JobState, float], None] = lambda state, elapsed: None,
    on_line: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[JobState, str]:
    """Poll the RayJob until it is Complete or Failed (or `timeout_s` passed: SubmitError), reporting each new state;
    once the submitter runs, stream its log through `on_line`. Returns the final state and the whole log."""
    start = clock()
    last: JobState | None = None
    log: str | None = None
    while True:
        state = job_state(api_client, namespace, name)
        if last is None or (state.deployment, state.job) != (last.deployment, last.job):
            on_state(state, clock() - start)
            last = state
        if log is None and state.deployment in ("Running", *TERMINAL_STATES):
            pod = _submitter_pod(api_client, namespace, name)
            if pod is not None and pod.status is not None and pod.status.phase == "Running":
                log = submitter_log(api_client, namespace, name, follow_log=True, on_line=on_line)
                continue  # the stream ended with the pod: read the status again at once
            if pod is not None and pod.status is not None and pod.status.phase in ("Succeeded", "Failed"):
                log = _whole_log(api_client, namespace, name, on_line)  # it has ended: nothing more to follow
                continue
        if state.finished:
            if log is None:  # the submitter was never seen running (it finished between two polls)
                log = _whole_log(api_client, namespace, name, on_line)
            return state, log
        if state.deployment != "Running":
            check_init_containers(api_client, namespace, name, state)
        if clock() - start > timeout_s:
            raise SubmitError(
                f"RayJob {namespace}/{name} is still {state.describe()} after {timeout_s:.0f} s; it keeps "
                f"running: kubectl -n {namespace} get rayjob {name} -w"
            )
        sleep(poll_s)


def _whole_log(api_client: Any, namespace: str, name: str, on_line: Callable[[str], None] | None) -> str:
    """The submitter's log read once, each line through `on_line`."""
    log = submitter_log(api_client, namespace, name)
    if on_line:
        for line in log.splitlines():
            on_line(line)
    return log


def check_init_containers(api_client: Any, namespace: str, name: str, state: JobState) -> None:
    """Raise InitContainerFailed when an init container of RayJob `name`'s Ray pods has failed (ops.init_failures),
    naming each pod and container with its exit code and last log lines. Pods that cannot be listed say nothing here:
    the deadline still ends the job."""
    from kubernetes.client.exceptions import ApiException

    from ray_efa.ops.init_failures import describe_failures, init_container_failures, job_pods_selector

    try:
        failures = init_container_failures(api_client, namespace, job_pods_selector(name))
    except ApiException:
        return
    if failures:
        raise InitContainerFailed(
            f"RayJob {namespace}/{name} cannot start: an init container of its Ray pods failed, and KubeRay keeps the "
            f"job {state.describe()} until preRunningDeadlineSeconds (or activeDeadlineSeconds) while its nodes "
            f"bill (KubeRay issue 4637).\n{describe_failures(failures)}\nFix the cause (fetch-*: the code zip and the "
            f"pods' access to it; install-packages: pipPackages) and delete the job: kubectl -n {namespace} delete "
            f"rayjob {name}",
            failures,
        )


def job_exit_code(state: JobState) -> int:
    """The driver's exit code, from the finished RayJob: 0 when Ray's job SUCCEEDED; else the code in Ray's message
    ("Job entrypoint command failed with exit code 3"), or 1 when it failed some other way (deadline, submission)."""
    if state.job == "SUCCEEDED" and state.deployment == "Complete":
        return 0
    match = _EXIT_CODE.search(str(state.status.get("message", "")))
    code = int(match.group(1)) if match else 1
    return code if code != 0 else 1


def gate_lines(log: str) -> list[str]:
    """The transport gate's verdict lines of the driver's log ("transport gate: ...")."""
    return [line[line.index("transport gate:") :] for line in log.splitlines() if "transport gate:" in line]


def cleanup_command(objects: list[dict[str, Any]], *, owned: bool = False) -> str:
    """The kubectl command that deletes what submit created (the RayJob deletes its own Ray cluster, and with
    `owned`, the objects own_by_job made it the owner of)."""
    namespace = objects[-1]["metadata"]["namespace"]
    names = " ".join(
        f"{o['kind'].lower()}/{o['metadata']['name']}" for o in (objects[-1:] if owned else reversed(objects))
    )
    return f"kubectl -n {namespace} delete {names}"
