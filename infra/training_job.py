"""The training RayJob, applied from the GPU stack once the GPU nodes exist: the built-in function or yours."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aws_cdk import Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct, IConstruct

from ray_efa.core import catalog, regions
from ray_efa.core.addons import EFA_DEVICE_CLASS, GPU_DEVICE_CLASS
from ray_efa.core.settings import Problem, Settings, SettingsError, shared_storage_problem
from ray_efa.core.user_code import check_user_code
from ray_efa.infra._private import add_synth_check, check_node_selector, literal_cluster_name, on_cluster
from ray_efa.infra._settings import check_type
from ray_efa.infra.checkpoints import CheckpointStorage
from ray_efa.infra.cluster import RayEksCluster
from ray_efa.infra.device_plugins import GpuDevicePlugins
from ray_efa.infra.dra_drivers import GpuDraDrivers
from ray_efa.infra.gpu_nodegroup import EfaGpuNodegroup
from ray_efa.infra.kuberay import KubeRayOperator
from ray_efa.infra.manifests import apply_objects
from ray_efa.infra.network import is_placeholder_zone
from ray_efa.infra.workload import RayWorkload
from ray_efa.k8s.code_bundle import collect_code, config_map_problem
from ray_efa.k8s.disruption_budget import ray_pods_disruption_budget
from ray_efa.k8s.names import ray_job_of, user_code_config_map_name
from ray_efa.k8s.objects import ray_job_objects, settings_objects, shipped_settings

__all__ = ["RayTrainingJob", "CODE_ASSET_EXCLUDE", "device_allocation_problems"]

CODE_ASSET_EXCLUDE = (".*", "__pycache__", "node_modules", "cdk.out", "*.egg-info", "*.pyc", "*.pyo")
"""What the S3 asset of codeDir leaves out: what core.user_code.code_files skips (glob patterns, each matched
against the base name at any depth, as aws-cdk-lib's GLOB ignore mode does with matchBase)."""

# Setting key -> the prop that sets it: an error names what the caller wrote.
_PROPS = {"trainFunction": "train_function", "codeDir": "code", "jobName": "job_name", "trainConfig": "train_config"}


def _one(scope: Construct, kind: type, given: Any, prop: str) -> Any:
    """The construct of `kind` given as `prop`, else the only one in the enclosing stack (None if there is none)."""
    if given is not None:
        return given
    found = [c for c in Stack.of(scope).node.find_all() if isinstance(c, kind)]
    if len(found) > 1:
        paths = ", ".join(c.node.path for c in found)
        raise ValueError(
            f"RayTrainingJob: the stack holds {len(found)} {kind.__name__} constructs ({paths}); pass "
            f"{prop}= to say which one the job runs on"
        )
    return found[0] if found else None


def _zone_changes(
    base: Settings, region: str, cluster: eks.ICluster, gpu_nodes: EfaGpuNodegroup | None, explicit: frozenset[str]
) -> dict[str, Any]:
    """gpuAvailabilityZone (and the zones of their VPC, which it must be one of) from the GPU nodes, else, in a region
    the settings have no AZ table for, from the cluster's VPC: the table is the project's own app's default, not a
    gate. Nothing where the settings already resolve to that zone."""

    def literal(zone: str) -> str | None:
        return None if Token.is_unresolved(zone) or is_placeholder_zone(zone) else zone

    vpc: ec2.IVpc | None = gpu_nodes.vpc if gpu_nodes is not None else None
    if vpc is None:
        try:
            vpc = cluster.vpc
        except RuntimeError:  # jsii's form of the JavaScript error
            vpc = None  # a cluster imported without its VPC ("vpc" is not defined for this imported cluster)
    zone, source = None, ""
    if gpu_nodes is not None:
        zone, source = literal(gpu_nodes.availability_zone), f"EfaGpuNodegroup {gpu_nodes.node.path}"
    elif (
        region not in regions.AVAILABILITY_ZONES
        and base.nodes.gpu_availability_zone is None
        and vpc is not None
        and vpc.private_subnets
    ):
        zone, source = literal(vpc.private_subnets[0].availability_zone), "the cluster's VPC"
    if zone is None:
        return {}
    if "gpuAvailabilityZone" in explicit and base.nodes.gpu_availability_zone != zone:
        raise ValueError(
            f"RayTrainingJob gpuAvailabilityZone: the settings say {base.nodes.gpu_availability_zone!r} "
            f"but {source} says {zone!r}; drop it from the settings (the construct is the source of "
            "truth) or make them agree"
        )
    recorded = regions.AVAILABILITY_ZONES.get(region)
    if zone == (base.nodes.gpu_availability_zone or (recorded[0] if recorded else None)):
        return {}  # what the settings resolve to already
    changes: dict[str, Any] = {"gpuAvailabilityZone": zone}
    vpc_zones = [z for z in (literal(z) for z in (vpc.availability_zones if vpc is not None else ())) if z is not None]
    if not explicit & {"vpcAvailabilityZones", "vpcId"} and zone in vpc_zones and len(set(vpc_zones)) >= 2:
        changes["vpcAvailabilityZones"] = vpc_zones  # the GPU AZ must be one of the VPC's
    return changes


def device_allocation_problems(job: Construct, cluster: eks.ICluster, allocation: str) -> list[str]:
    """At synth: the job's device requests (deviceAllocation) against what the app installs on `cluster`'s GPU nodes.
    The device plugins advertise nvidia.com/gpu and vpc.amazonaws.com/efa, the DRA drivers serve ResourceClaims of
    their DeviceClasses; a job asking for the other kind would stay Pending until its deadline while the GPU nodes
    bill. Nothing to say when the app installs neither (an imported cluster whose platform installs them elsewhere)."""
    plugins = [c.node.path for c in on_cluster(job, GpuDevicePlugins, cluster)]
    drivers = [c.node.path for c in on_cluster(job, GpuDraDrivers, cluster)]
    if allocation != "dra" and drivers and not plugins:
        return [
            f"RayTrainingJob deviceAllocation: the settings say {allocation!r}, so the workers ask for nvidia.com/gpu and "
            f"vpc.amazonaws.com/efa, but the GPU nodes of {cluster.node.path} run the DRA drivers (GpuDraDrivers "
            f"{', '.join(drivers)}) and no GpuDevicePlugins advertises those resources: the workers would stay "
            "Pending. Set deviceAllocation to dra in the job's settings, or install GpuDevicePlugins instead"
        ]
    if allocation == "dra" and plugins and not drivers:
        return [
            f"RayTrainingJob deviceAllocation: the settings say 'dra', so the workers claim {GPU_DEVICE_CLASS} and "
            f"{EFA_DEVICE_CLASS} devices, but the GPU nodes of {cluster.node.path} run the device plugins "
            f"(GpuDevicePlugins {', '.join(plugins)}) and no GpuDraDrivers serves those claims: the workers would "
            "stay Pending. Set deviceAllocation to device-plugin (the default) in the job's settings, or install "
            "GpuDraDrivers instead"
        ]
    return []


def _app_code_folder(settings: Settings) -> Path:
    """A folder holding the project's shipped code (k8s.code_bundle.collect_code, settings.json aside), for its S3
    asset: made under the system's temporary folder and removed when the process ends (the CDK copies an asset into
    its output when the asset is constructed)."""
    folder = Path(tempfile.mkdtemp(prefix="ray-efa-app-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return collect_code(shipped_settings(settings)).write_tree(folder / "code")


def _construct_claims(
    cluster: eks.ICluster,
    gpu_nodes: EfaGpuNodegroup | None,
    workload: RayWorkload | None,
    storage: CheckpointStorage | None,
    operator: KubeRayOperator | None,
    *,
    storage_path: str | None,
    system_node_selector: Mapping[str, str] | None,
    gpu_node_selector: Mapping[str, str] | None,
) -> dict[str, list[tuple[Any, str]]]:
    """Each setting the constructs and props decide, with who says what (in the order they are asked)."""
    claims: dict[str, list[tuple[Any, str]]] = {}

    def claim(key: str, value: Any, source: str, *, none_too: bool = False) -> None:
        if value is not None or none_too:
            claims.setdefault(key, []).append((value, source))

    claim("clusterName", literal_cluster_name(cluster), f"the cluster {cluster.node.path}")
    ray_cluster = cluster.node.scope if isinstance(cluster.node.scope, RayEksCluster) else None
    if ray_cluster is not None:
        # The Ray head and the submitter run on its system nodes: the head is sized for their instance type.
        where = f"RayEksCluster {ray_cluster.node.path}"
        if ray_cluster.system_instance_type not in catalog.SYSTEM_INSTANCES:
            raise ValueError(
                f"RayTrainingJob: {where} has system_instance_type {ray_cluster.system_instance_type!r}, "
                "for which the catalog cannot size the Ray head; choose one of "
                f"{', '.join(sorted(catalog.SYSTEM_INSTANCES))}"
            )
        claim("systemInstanceType", ray_cluster.system_instance_type, where)
        if operator is None:
            claim("systemNodeSelector", ray_cluster.system_node_selector, where)
    if gpu_nodes is not None:
        where = f"EfaGpuNodegroup {gpu_nodes.node.path}"
        claim("gpuInstanceType", gpu_nodes.instance_type, where)
        claim("gpuNodeCount", gpu_nodes.node_count, where)
        claim("gpuNodeSelector", gpu_nodes.node_selector, where)
        claim("gpuNodeTaints", list(gpu_nodes.taints), where)  # what the Ray workers tolerate
        # What the nodes launch into: the recorded settings (and the TCP comparison's floor and sockets) follow it.
        claim("capacityReservationId", gpu_nodes.capacity_reservation_id, where, none_too=True)
        claim("capacityReservationType", gpu_nodes.capacity_reservation_type, where)
    if workload is not None:
        claim("namespace", workload.namespace_name, f"RayWorkload {workload.node.path}")
    if storage is not None:
        where = f"CheckpointStorage {storage.node.path}"
        claim("namespace", storage.namespace_name, where)
        claim("serviceAccount", storage.service_account_name, where)
        claim("storagePath", storage.storage_path, where)
    if operator is not None:
        claim("systemNodeSelector", operator.node_selector, f"KubeRayOperator {operator.node.path}")
    claim("storagePath", storage_path, "RayTrainingJob storage_path")
    claim(
        "systemNodeSelector",
        dict(system_node_selector) if system_node_selector is not None else None,
        "RayTrainingJob system_node_selector",
    )
    claim(
        "gpuNodeSelector",
        dict(gpu_node_selector) if gpu_node_selector is not None else None,
        "RayTrainingJob gpu_node_selector",
    )
    return claims


def _claimed_changes(
    claims: Mapping[str, list[tuple[Any, str]]], given: Mapping[str, Any], explicit: frozenset[str]
) -> dict[str, Any]:
    """The settings' changes the claims make; ValueError where two claims, or a claim and a given setting, disagree."""
    changes: dict[str, Any] = {}
    for key, values in claims.items():
        (first, first_source), *rest = values
        for value, source in rest:
            if value != first:
                raise ValueError(
                    f"RayTrainingJob {key}: {first_source} says {first!r} but {source} says {value!r}; "
                    "make them agree (one cluster, one source of truth)"
                )
        if key in explicit and given[key] != first:
            raise ValueError(
                f"RayTrainingJob {key}: the settings say {given[key]!r} but {first_source} says "
                f"{first!r}; drop it from the settings (the construct is the source of truth) or make "
                "them agree"
            )
        if first != given[key]:
            changes[key] = first
    return changes


def _placement_change(
    gpu_nodes: EfaGpuNodegroup,
    given: Mapping[str, Any],
    claims: Mapping[str, list[tuple[Any, str]]],
    explicit: frozenset[str],
) -> dict[str, Any]:
    """placementGroup is on, off or auto (on without a reservation): what it resolves to must be the nodes'."""
    placement, reservation = given["placementGroup"], claims["capacityReservationId"][0][0]
    if (placement == "on" or (placement == "auto" and reservation is None)) == gpu_nodes.use_placement_group:
        return {}
    built = "on" if gpu_nodes.use_placement_group else "off"
    if "placementGroup" in explicit:
        raise ValueError(
            f"RayTrainingJob placementGroup: the settings say {placement!r} but EfaGpuNodegroup "
            f"{gpu_nodes.node.path} has it {built}; drop it from the settings (the construct "
            "is the source of truth) or make them agree"
        )
    return {"placementGroup": built}


def _resolved_settings(
    base: Settings, changes: Mapping[str, Any], props: Mapping[str, Any]
) -> tuple[Settings, Path | None]:
    """`base` with `changes`, and its checked code folder; a SettingsError names the job's props where they said it."""
    try:
        resolved = base.replace(**changes) if changes else base
        # The driver and `ray-efa manifests` refuse a multi-node job without shared storage; so does its construct.
        nodes = resolved.nodes.gpu_node_count
        if shared_storage_problem(nodes, resolved.workload.storage_path, resolved.cluster_stack_name) is not None:
            raise SettingsError(
                [
                    Problem(
                        "RayTrainingJob storage_path",
                        None,
                        (
                            f"must be s3://... or a shared filesystem for a job on {nodes} GPU nodes (gpuNodeCount): every "
                            "node's workers write checkpoint shards into it, and a restart may land on other nodes; pass "
                            "storage= (a CheckpointStorage: its bucket), storage_path=, or the settings' storagePath"
                        ),
                    )
                ]
            )
        return resolved, check_user_code(resolved).code_dir
    except SettingsError as error:
        raise SettingsError(
            [
                type(p)(
                    f"RayTrainingJob {_PROPS[p.key]}" if p.key in _PROPS and props.get(p.key) is not None else p.key,
                    p.value,
                    p.message,
                )
                for p in error.problems
            ]
        ) from None


def _refuse_a_second_job_of_the_name(
    job: RayTrainingJob, cluster: eks.ICluster, settings: Settings, *, explicit: bool
) -> None:
    """ValueError naming job_name when another RayTrainingJob of the app applies a RayJob of the same name to the same
    namespace of the same cluster: the second would replace the first's objects at deploy."""
    name, namespace = ray_job_of(settings), settings.workload.namespace
    for other in job.node.root.node.find_all():
        if (
            isinstance(other, RayTrainingJob)
            and other is not job
            and getattr(other, "cluster", None) is cluster
            and getattr(other, "name", None) == name
            and other.settings.workload.namespace == namespace
        ):
            prop = "job_name" if explicit else "job_name (the settings' jobName)"
            raise ValueError(
                f"RayTrainingJob {prop} must differ from every other job's in namespace {namespace} of "
                f"{cluster.node.path}: {other.node.path} runs RayJob {name} there already, got "
                f"{settings.workload.job_name!r}"
            )


def _waits(
    after: Sequence[IConstruct],
    gpu_nodes: EfaGpuNodegroup | None,
    workload: RayWorkload | None,
    storage: CheckpointStorage | None,
) -> list[IConstruct]:
    """What the job's objects wait for: `after`, then the GPU node group (the deadline), the namespace and the pods'
    service account, which exist before the job's first object whatever `after` says."""
    return [
        *after,
        *(
            c
            for c in (
                gpu_nodes.nodegroup if gpu_nodes else None,
                workload.namespace if workload else None,
                storage.service_account if storage else None,
            )
            if c is not None and c not in after
        ),
    ]


class RayTrainingJob(Construct):
    """The RayJob of the train function (the built-in one, or `train_function` in `code`) with its ConfigMaps (code,
    settings, and your code's when it fits one; else an S3 asset the pods fetch), each object its own
    KubernetesManifest, applied after `after`.

    One source of truth: where the job runs (cluster name, system instance type, GPU instance type, node count, GPU
    node selector and AZ, capacity reservation and placement group, namespace, service account, storage path, system
    node selector) comes from `cluster` (its RayEksCluster, when one built it) and the constructs that build those
    things, `gpu_nodes`, `workload`, `storage` and `operator`, each taken from the props or, when not
    given, as the only construct of its kind in the enclosing stack; the region is the stack's. A value the settings
    were given (Settings.given_keys: not left at its default) or a prop that disagrees with them fails synth naming
    both; the settings describe the training itself (model, steps, network, trainConfig...). The settings' table of
    region AZs is only a default: with the GPU nodes (or the cluster's VPC) fixing the zone, any region synthesizes.

    Applied after the GPU node group of `gpu_nodes`: the RayJob's activeDeadlineSeconds counts from its creation,
    so it must not start before any GPU node can exist. Changing a training setting changes the small settings
    ConfigMap alone. CloudFormation creates the RayJob once per deploy; docs/deploy.md says how to run it again.
    Refuses (SettingsError) a plan that cannot fit the GPUs, like every producer of a job, and a train function that
    is not in `code`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        settings: Settings | None = None,
        train_function: str | None = None,
        code: str | Path | None = None,
        job_name: str | None = None,
        train_config: Mapping[str, Any] | None = None,
        gpu_nodes: EfaGpuNodegroup | None = None,
        workload: RayWorkload | None = None,
        storage: CheckpointStorage | None = None,
        operator: KubeRayOperator | None = None,
        storage_path: str | None = None,
        system_node_selector: Mapping[str, str] | None = None,
        gpu_node_selector: Mapping[str, str] | None = None,
        code_reader: iam.IRole | None = None,
        after: Sequence[IConstruct] = (),
        apply_job: bool = True,
    ) -> None:
        """
        :param cluster: the EKS cluster, created or imported, with KubeRay and the device plugins installed.
        :param settings: the job's configuration (model, steps, network, image, trainConfig...); its region becomes
            the enclosing stack's where that is known. @default - Settings(): the defaults
        :param train_function: the function every worker runs, module:function (setting trainFunction).
            @default - the settings' (the built-in train_func)
        :param code: the folder of your code (absolute, or relative to the working directory of `cdk synth`: the app
            directory), put on every worker's import path (setting codeDir). @default - the settings' codeDir
        :param job_name: the RayJob's name; its ConfigMaps and NetworkPolicy follow it (setting jobName).
            @default - the settings' jobName ("train-efa")
        :param train_config: your function's own parameters, the top-level keys of its config (setting trainConfig).
            @default - the settings' trainConfig
        :param gpu_nodes: the GPU node group the workers run on: instance type, node count, node selector and AZ; the
            job is applied after its node group. @default - the stack's only EfaGpuNodegroup, else the settings
        :param workload: the workload namespace. @default - the stack's only RayWorkload, else the settings
        :param storage: checkpoint storage: namespace, service account and storage path; its service account's role
            reads the code asset. @default - the stack's only CheckpointStorage, else the settings
        :param operator: the KubeRay operator, whose node selector the head and the submitter share.
            @default - the stack's only KubeRayOperator, else the settings' systemNodeSelector
        :param storage_path: Ray Train's storage_path (a token is fine). @default - storage's, else the settings'
        :param system_node_selector: labels of the nodes of the Ray head and the submitter.
            @default - operator's, else the settings' systemNodeSelector
        :param gpu_node_selector: labels of the GPU nodes of the workers. @default - gpu_nodes', else the settings'
        :param code_reader: the role that reads the code asset (the Ray pods' role), when `storage` is not given.
            @default - storage's service account role
        :param after: what else the job waits for, besides the node group of `gpu_nodes`, the namespace of `workload`
            and the service account of `storage`, which it always waits for. @default - nothing more
        :param apply_job: apply the RayJob with its code, NetworkPolicy and PodDisruptionBudget; False: the settings
            ConfigMap alone (what `ray-efa submit` reads as the deployment's settings, under the same construct path,
            so that turning the job off or on updates it in place), no job. @default True
        """
        super().__init__(scope, construct_id)
        # Resolve and validate everything before creating any child; the props' types first (a str train_config
        # would be read as a sequence of pairs, a non-str job_name as a pydantic error of the setting's name).
        for prop, value, kind, what in (
            ("train_function", train_function, str, "module:function"),
            ("job_name", job_name, str, "a string"),
            ("train_config", train_config, Mapping, "a mapping (dict) of your parameters"),
            ("code", code, (str, Path), "a folder's path"),
        ):
            if value is not None:
                check_type(f"RayTrainingJob {prop}", value, kind, what)
        gpu_nodes = _one(self, EfaGpuNodegroup, gpu_nodes, "gpu_nodes")
        workload = _one(self, RayWorkload, workload, "workload")
        storage = _one(self, CheckpointStorage, storage, "storage")
        operator = _one(self, KubeRayOperator, operator, "operator")
        resolved, code_dir = self._resolve_settings(
            settings,
            cluster,
            gpu_nodes,
            workload,
            storage,
            operator,
            storage_path=storage_path,
            system_node_selector=system_node_selector,
            gpu_node_selector=gpu_node_selector,
            props={
                "trainFunction": train_function,
                "jobName": job_name,
                "codeDir": str(Path(code).resolve()) if code is not None else None,
                "trainConfig": dict(train_config) if train_config is not None else None,
            },
        )
        self.settings: Settings = resolved
        """The settings the job runs with: the given ones, with where it runs taken from the constructs."""
        _refuse_a_second_job_of_the_name(self, cluster, resolved, explicit=job_name is not None)
        # The plugins or drivers may be built after the job: checked once the whole app exists.
        allocation = resolved.addons.device_allocation
        add_synth_check(self, lambda: device_allocation_problems(self, cluster, allocation))
        self.name: str = ray_job_of(resolved)
        self.cluster: eks.ICluster = cluster
        """The cluster the job is applied to."""

        self.job: eks.KubernetesManifest | None = None
        """The RayJob's manifest (the last: its ConfigMaps come first); None without apply_job."""
        self.job_object: dict[str, Any] | None = None
        """The RayJob object of `job` (tokens unresolved); None without apply_job."""
        self.disruption_budget: eks.KubernetesManifest | None = None
        """The manifest of the job's PodDisruptionBudget (k8s.disruption_budget); None without apply_job."""
        self.code_asset: s3_assets.Asset | None = None
        self.app_asset: s3_assets.Asset | None = None
        if not apply_job:
            self.manifests: list[eks.KubernetesManifest] = apply_objects(
                self,
                cluster,
                settings_objects(resolved),
                after=_waits(after, None, workload, storage),
            )
            return
        reader = code_reader or (storage.service_account.role if storage is not None else None)
        self.code_asset = self._user_code_asset(code_dir, reader)
        self.app_asset = self._app_code_asset(resolved) if reader is not None else None
        self._grant_code_read(reader)

        objects = ray_job_objects(
            resolved,
            code_archive_uri=self.code_asset.s3_object_url if self.code_asset else None,
            app_archive_uri=self.app_asset.s3_object_url if self.app_asset else None,
        )
        waits = _waits(after, gpu_nodes, workload, storage)
        self.manifests = apply_objects(self, cluster, objects, after=waits)
        self.job = self.manifests[-1]
        self.job_object = objects[-1]
        # The Ray pods' PodDisruptionBudget, before the job: a drain fails rather than evicting one of them. The
        # stack's alone (`ray-efa manifests` and `submit` create none).
        self.disruption_budget = apply_objects(
            self, cluster, [ray_pods_disruption_budget(self.name, resolved.workload.namespace)], after=waits
        )[0]
        self.job.node.add_dependency(self.disruption_budget)

    def _resolve_settings(
        self,
        settings: Settings | None,
        cluster: eks.ICluster,
        gpu_nodes: EfaGpuNodegroup | None,
        workload: RayWorkload | None,
        storage: CheckpointStorage | None,
        operator: KubeRayOperator | None,
        *,
        storage_path: str | None,
        system_node_selector: Mapping[str, str] | None,
        gpu_node_selector: Mapping[str, str] | None,
        props: Mapping[str, Any],
    ) -> tuple[Settings, Path | None]:
        """The settings the job runs with (the given ones, where it runs taken from the constructs and props) and its
        checked code folder; ValueError where they disagree."""
        for key, selector in (("system_node_selector", system_node_selector), ("gpu_node_selector", gpu_node_selector)):
            if selector is not None:
                check_node_selector(f"RayTrainingJob {key}", selector)
        base = settings if settings is not None else Settings()
        claims = _construct_claims(
            cluster,
            gpu_nodes,
            workload,
            storage,
            operator,
            storage_path=storage_path,
            system_node_selector=system_node_selector,
            gpu_node_selector=gpu_node_selector,
        )
        given = base.to_context()
        explicit = base.given_keys if settings is not None else frozenset()
        changes = _claimed_changes(claims, given, explicit)
        if gpu_nodes is not None:
            changes.update(_placement_change(gpu_nodes, given, claims, explicit))
        region = Stack.of(self).region
        if not Token.is_unresolved(region):
            if region != base.cluster.region:
                changes["region"] = region  # the pods' AWS_REGION: the stack's, where the bucket and the cluster are
            changes.update(_zone_changes(base, region, cluster, gpu_nodes, explicit))
        changes.update({key: value for key, value in props.items() if value is not None})
        return _resolved_settings(base, changes, props)

    def _user_code_asset(self, code_dir: Path | None, reader: iam.IRole | None) -> s3_assets.Asset | None:
        """codeDir as an S3 asset, which an init container of every Ray pod fetches, when it does not fit a ConfigMap
        (None when it does, or without codeDir)."""
        if code_dir is None or config_map_problem(code_dir, user_code_config_map_name(self.name)) is None:
            return None
        if reader is None:
            raise ValueError(
                f"RayTrainingJob code: {code_dir} is too large or binary for a ConfigMap, so it ships "
                "as an S3 asset that the Ray pods' role must read: pass storage= (CheckpointStorage) "
                "or code_reader= (the role of serviceAccount)"
            )
        return s3_assets.Asset(self, "Code", path=str(code_dir), exclude=list(CODE_ASSET_EXCLUDE))

    def _app_code_asset(self, resolved: Settings) -> s3_assets.Asset:
        """The project's own code (ray_efa.core and ray_efa.training, some 600 KB) as an S3 asset, made whenever the
        pods' role can read one, so that the stack template holds settings.json, not the source (CloudFormation's
        template limit is 1 MB). Without a reader it stays in ConfigMaps, as `ray-efa manifests` ships it."""
        return s3_assets.Asset(self, "AppCode", path=str(_app_code_folder(resolved)))

    def _grant_code_read(self, reader: iam.IRole | None) -> None:
        """Lets `reader` (the Ray pods' role) read the code assets, if any."""
        assets = [a for a in (self.code_asset, self.app_asset) if a is not None]
        if assets:
            # The grant lives here, in the job's stack, attached to the role of the (often other) storage stack: a
            # grant on the role's own policy would make that stack refer to this one's asset, a cycle.
            assert reader is not None
            iam.Policy(
                self,
                "CodeRead",
                roles=[reader],
                statements=[
                    iam.PolicyStatement(
                        actions=["s3:GetObject"],
                        resources=[a.bucket.arn_for_objects(a.s3_object_key) for a in assets],
                    )
                ],
            )

    @classmethod
    def from_settings(
        cls,
        scope: Construct,
        construct_id: str,
        settings: Settings,
        *,
        cluster: eks.ICluster,
        gpu_nodes: EfaGpuNodegroup | None = None,
        workload: RayWorkload | None = None,
        storage: CheckpointStorage | None = None,
        after: Sequence[IConstruct] = (),
        apply_job: bool = True,
    ) -> RayTrainingJob:
        """The job of the project's own app: trainFunction, codeDir, jobName and trainConfig of the settings."""
        return cls(
            scope,
            construct_id,
            cluster=cluster,
            settings=settings,
            gpu_nodes=gpu_nodes,
            workload=workload,
            storage=storage,
            after=after,
            apply_job=apply_job,
        )
