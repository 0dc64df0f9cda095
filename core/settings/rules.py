"""The rules across settings: checks that read several settings (a zone of the region, a placement group with a
reservation), each a `@_rule(key, ...)` function registered in core.settings.framework.RULES in declaration order.

A rule runs whenever each of its settings is valid on its own, so one SettingsError lists field and rule problems
together; a section runs the rules whose settings are all its own, core.settings.Settings the others. The sections
(core.settings.sections) import this module, so the rules are registered wherever a section is used. Pure Python with
pydantic alone, like core.settings (the training job imports it inside the container).
"""

from __future__ import annotations

import re
from typing import Any

from ray_efa.core import addons, catalog, prices, regions, scheduling
from ray_efa.core.image import image_without_digest
from ray_efa.core.models import model_preset
from ray_efa.core.problems import Problem
from ray_efa.core.settings.checks import (
    KNOWN_IMAGE_RAY_VERSIONS,
    described_gpu_instances,
)

# The framework, under the names the declarations below use (private here: core.settings.framework exports them).
from ray_efa.core.settings.framework import rule as _rule

# -- rules across fields ------------------------------------------------------------------------------------------


@_rule("capacityReservationId", "placementGroup")
def _forced_placement_group(reservation: str | None, placement: str) -> Problem | None:
    if reservation is not None and placement == "on":
        return Problem(
            "placementGroup",
            placement,
            "must be auto or off when capacityReservationId is set "
            "(a forced placement group can leave reserved capacity unused)",
        )
    return None


@_rule("endpointAccess", "publicAccessCidrs")
def _public_only_endpoint_is_open(access: str, cidrs: tuple[str, ...]) -> Problem | None:
    # EKS: a public-only endpoint is how the nodes reach the API server too, from addresses no CIDR list can name, so
    # CDK refuses to restrict it (CannotRestricPublicAccessEndpoint) and EKS would cut the nodes off.
    if access == "public" and tuple(cidrs) != ("0.0.0.0/0",):
        return Problem(
            "publicAccessCidrs",
            list(cidrs),
            "must be 0.0.0.0/0 (the default) with endpointAccess public: the nodes reach a public-only endpoint "
            "from the internet; restrict it with endpointAccess public_and_private",
        )
    return None


@_rule("systemNodeSelector", "gpuNodeSelector")
def _gpu_selector_skips_system_nodes(system: dict[str, str], gpu: dict[str, str]) -> Problem | None:
    # Workers asking for GPUs on a system node would stay Pending forever.
    if gpu.items() <= system.items():
        return Problem(
            "gpuNodeSelector",
            gpu,
            f"must not also select the system nodes ({scheduling.label_selector(system)}): "
            "add a label only GPU nodes carry",
        )
    return None


@_rule("capacityReservationType", "capacityReservationId")
def _capacity_block_needs_its_id(reservation_type: str, reservation: str | None) -> Problem | None:
    if reservation_type == "capacity-block" and reservation is None:
        return Problem(
            "capacityReservationType",
            reservation_type,
            "needs capacityReservationId: the Capacity Block's reservation id (cr-...)",
        )
    return None


@_rule("capacityReservationType", "gpuInstanceType", "extraGpuInstanceTypes")
def _capacity_block_instance_type(
    reservation_type: str, instance_type: str, descriptions: tuple[dict[str, Any], ...]
) -> Problem | None:
    row = described_gpu_instances(descriptions).get(instance_type) or catalog.GPU_INSTANCES.get(instance_type)
    if reservation_type == "capacity-block" and not (row is not None and row.capacity_blocks):
        return Problem(
            "gpuInstanceType",
            instance_type,
            "must be a type Capacity Blocks offer with capacityReservationType capacity-block: "
            f"{', '.join(sorted(catalog.CAPACITY_BLOCK_INSTANCES))} (or one of extraGpuInstanceTypes "
            "with capacityBlocks true)",
        )
    return None


@_rule("systemInstanceType")
def _head_fits_the_system_nodes(instance_type: str) -> Problem | None:
    # A head that does not fit beside the system node's DaemonSets, CoreDNS, the operator and the submitter stays
    # Pending until the job's deadline while the GPU nodes bill (core.node_pods lists them).
    problem = catalog.head_fit_problem(catalog.system_instance(instance_type))
    return (
        None
        if problem is None
        else Problem("systemInstanceType", instance_type, f"is too small for the Ray head: {problem}")
    )


@_rule("region", "gpuInstanceType", "extraGpuInstanceTypes", "offeringCheck")
def _gpu_type_offered_in_the_region(
    region: str, instance_type: str, descriptions: tuple[dict[str, Any], ...], check: str
) -> Problem | None:
    # The one offering lookup (core.prices.offering_problem): synth, plan and plan --recommend read the same rows.
    if check == "off" or instance_type in described_gpu_instances(descriptions):
        return None
    problem = prices.offering_problem(instance_type, region)
    if problem is None:
        return None
    return Problem(
        "gpuInstanceType",
        instance_type,
        f"{problem}: deploy to one of those (-c region=...) or pick a type {region} offers; if the table is "
        f"stale (aws ec2 describe-instance-type-offerings --region {region} --filters "
        f"Name=instance-type,Values={instance_type} lists it), set offeringCheck=off",
    )


@_rule("adminPrincipalArns")
def _admins_once_each(arns: tuple[str, ...]) -> Problem | None:
    if len(set(arns)) != len(arns):
        return Problem(
            "adminPrincipalArns", list(arns), "must not repeat an ARN (EKS allows one access entry per principal)"
        )
    return None


@_rule("researcherPrincipalArns", "adminPrincipalArns")
def _researchers_once_each_and_not_admins(arns: tuple[str, ...], admins: tuple[str, ...]) -> Problem | None:
    # EKS allows one access entry per principal: an ARN in both lists would be two entries for one principal.
    if len(set(arns)) != len(arns):
        return Problem(
            "researcherPrincipalArns", list(arns), "must not repeat an ARN (EKS allows one access entry per principal)"
        )
    if both := sorted(set(arns) & set(admins)):
        return Problem(
            "researcherPrincipalArns",
            list(arns),
            f"must not name an ARN of adminPrincipalArns ({', '.join(both)}): "
            "EKS allows one access entry per principal, and an admin can do what a researcher can",
        )
    return None


@_rule("dlcImage", "rayVersion")
def _ray_of_the_image(image: str, ray_version: str) -> Problem | None:
    known = KNOWN_IMAGE_RAY_VERSIONS.get(image_without_digest(image))  # a pinned digest of a known tag is that tag's
    if known is not None and known != ray_version:
        return Problem("rayVersion", ray_version, f"must equal the Ray inside {image} ({known})")
    return None


@_rule("precision", "gpuInstanceType", "extraGpuInstanceTypes")
def _fp8_needs_fp8_tensor_cores(
    precision: str, instance_type: str, descriptions: tuple[dict[str, Any], ...]
) -> Problem | None:
    row = catalog.GPU_INSTANCES.get(instance_type)
    if row is None:
        try:
            row = described_gpu_instances(descriptions).get(instance_type)
        except catalog.CatalogError:
            return None  # _descriptions_problem names extraGpuInstanceTypes
    if precision == "fp8" and row is not None and row.gpu is not None and not row.gpu.has_fp8:
        with_fp8 = sorted({r.gpu.name for r in catalog.GPU_INSTANCES.values() if r.gpu and r.gpu.has_fp8})
        return Problem(
            "precision",
            precision,
            f"must be bf16 on {instance_type}: its {row.gpu.name} has no fp8 tensor "
            f"cores (fp8 needs one of {', '.join(with_fp8)})",
        )
    return None


@_rule("model", "seqLen", "modelPath", "modelConfig")
def _sequence_fits_the_model(
    model: str, seq_len: int, model_path: str | None, model_config: str | None
) -> Problem | None:
    if model_path is not None or model_config is not None:
        return None  # `model` is unused: core.model_source.model_problems checks the architecture that is
    limit = model_preset(model).max_position_embeddings
    if seq_len > limit:
        return Problem("seqLen", seq_len, f"must be <= {limit}, the max positions of {model}")
    return None


@_rule("dataset", "evalDataset", "evalFraction", "evalEvery", "evalBatches")
def _evaluation_needs_held_out_data(
    dataset: str | None, eval_dataset: str | None, fraction: float, every: int, batches: int
) -> Problem | None:
    if eval_dataset is not None and fraction > 0:
        return Problem(
            "evalFraction",
            fraction,
            "must be 0 when evalDataset is set (one held-out set: either evalDataset or a fraction of dataset)",
        )
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
            return Problem(
                "region",
                region,
                "has no recorded AZ names; set gpuAvailabilityZone and vpcAvailabilityZones "
                f"(or vpcId), or use one of {', '.join(regions.AVAILABILITY_ZONES)}",
            )
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
        return Problem(
            "vpcAvailabilityZones", ",".join(outside), f"must be AZs of region {region}: {_zones_of(region)}"
        )
    if len(set(vpc_zones)) != len(vpc_zones) or not 2 <= len(vpc_zones) <= 6:
        return Problem(
            "vpcAvailabilityZones", ",".join(vpc_zones), "must be 2 to 6 different AZs (EKS needs subnets in two)"
        )
    return None


@_rule("region", "vpcId", "vpcAvailabilityZones", "gpuAvailabilityZone")
def _gpu_zone_in_the_vpc(
    region: str, vpc_id: str | None, vpc_zones: tuple[str, ...], zone: str | None
) -> Problem | None:
    """A created VPC's AZs do not follow the GPU AZ (see Settings.vpc_availability_zones): the GPU AZ must be one of
    them. An existing VPC (vpcId) is checked at synth, against its looked-up subnets."""
    if vpc_id is not None or (zone is not None and not _in_region(region, zone)):
        return None  # the zone's own rule reports a zone of another region
    recorded = regions.AVAILABILITY_ZONES.get(region)
    zones = vpc_zones or (tuple(sorted(recorded)[:3]) if recorded else ())
    if not zones:
        if zone is None:
            return None  # _zone_of_the_region asks for both
        return Problem(
            "vpcAvailabilityZones",
            "",
            f"must name two AZs or more of {region} (EKS needs subnets in two): the region has no recorded AZ names",
        )
    gpu_zone = zone or (recorded[0] if recorded else zones[0])
    if gpu_zone not in zones:
        return Problem(
            "gpuAvailabilityZone",
            gpu_zone,
            f"must be one of the VPC's AZs ({', '.join(zones)}); to use it, set vpcAvailabilityZones to include "
            "it before the first deploy (changing a deployed VPC's AZs replaces its subnets)",
        )
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
def _efa_plugin_runs_on_the_gpu_type(
    instance_type: str, chart_version: str, descriptions: tuple[dict[str, Any], ...], allocation: str, dra_version: str
) -> Problem | None:
    # Built-in and described types alike: the recorded allowlist is the chart's own (every GPU type it lists).
    if instance_type not in catalog.GPU_INSTANCES and instance_type not in described_gpu_instances(descriptions):
        return None  # _gpu_type_is_known says what is wrong
    if allocation == "dra":  # the EFA DRA driver is installed instead, with an allowlist of its own
        problem = catalog.efa_plugin_problem(instance_type, dra_version, addons.EFA_DRA_DRIVER_ALLOWLISTS)
        return (
            Problem(
                "efaDraDriverVersion", dra_version, problem.replace("efaDevicePluginVersion", "efaDraDriverVersion")
            )
            if problem
            else None
        )
    problem = catalog.efa_plugin_problem(instance_type, chart_version)
    return Problem("efaDevicePluginVersion", chart_version, problem) if problem else None


def dra_kubernetes_problem(kubernetes_version: str) -> str | None:
    """Why DRA cannot be used on this Kubernetes version (resource.k8s.io/v1 is GA from 1.34), or None."""
    major, minor = (int(part) for part in kubernetes_version.split(".")[:2])
    if (major, minor) < addons.DRA_MIN_KUBERNETES:
        return (
            f"must be device-plugin on Kubernetes {kubernetes_version}: DRA (resource.k8s.io/v1, the NVIDIA and EFA "
            f"DRA drivers) needs Kubernetes {'.'.join(map(str, addons.DRA_MIN_KUBERNETES))} or later"
        )
    return None


@_rule("deviceAllocation", "kubernetesVersion")
def _dra_needs_its_kubernetes(allocation: str, kubernetes_version: str) -> Problem | None:
    problem = dra_kubernetes_problem(kubernetes_version) if allocation == "dra" else None
    return Problem("deviceAllocation", allocation, problem) if problem else None


def shared_storage_problem(gpu_node_count: int, storage_path: str | None, stack_name: str) -> Problem | None:
    """storagePath for a job on gpuNodeCount nodes: a job on more than one node without it refuses to train (every
    node's workers write checkpoint shards into it, and a restart may land on other nodes). Not a rule of the
    settings (`plan` shows such settings): what produces or runs a job asks it (the driver, `ray-efa manifests`)."""
    if gpu_node_count <= 1 or storage_path is not None:
        return None
    return Problem(
        "storagePath",
        None,
        (
            f"must be s3://... or a shared filesystem when gpuNodeCount is {gpu_node_count}: every node's workers write "
            "checkpoint shards into it, and a restart may land on other nodes. The cluster stack made a bucket for it: "
            f"its output CheckpointStoragePath (aws cloudformation describe-stacks --stack-name {stack_name} --query "
            "\"Stacks[0].Outputs[?OutputKey=='CheckpointStoragePath'].OutputValue\" --output text), passed as "
            "-c storagePath=..."
        ),
    )
