"""Can this account launch N GPU nodes of one type in one AZ of a region now, and which AZ is best?

Four signals, cheapest first:

1. offerings: which AZs offer the type at all (describe-instance-type-offerings, location type availability-zone);
2. quota: the On-Demand vCPU quota of the type's family (Service Quotas) against the vCPUs of the account's
   running instances of that family (describe-instances) plus the N new nodes;
3. placement score: EC2's 1-10 Spot placement score per AZ (get-spot-placement-scores, SingleAvailabilityZone).
   It rates the Spot pool, so it is a hint about how deep the pool is, not a promise of On-Demand capacity;
4. probe (opt-in): a real targeted On-Demand Capacity Reservation for N instances in each offered AZ, cancelled at
   once. It is the only signal that means "yes, now": EC2 either reserves the capacity or answers
   InsufficientInstanceCapacity. The reservation is billed while it exists, so it lives for seconds and is always
   cancelled, also on errors, Ctrl-C and SIGTERM; it is created with an end date one hour ahead as a last resort.
   That code, the only code here that spends money, is ops.reservation_probe (its names are exported here too).

AWS clients are passed in (EC2 and Service Quotas of the region), so tests run this code against moto and botocore
stubs. Nothing here prints: progress goes to the `status` callback, results come back as frozen dataclasses.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from ray_efa.ops._status import Status, quiet
from ray_efa.ops.reservation_probe import (
    AVAILABLE,
    ERROR,
    INSUFFICIENT_CAPACITY,
    QUOTA_EXCEEDED,
    UNSUPPORTED,
    CancelFailed,
    ProbeInterrupted,
    ProbeResult,
    error_text,
    probe_zone,
)

if TYPE_CHECKING:
    from rich.console import Console

# `ec2` and `service_quotas` are boto3 clients (or botocore Stubber-wrapped ones in the tests): boto3 generates their
# methods at run time and ships no type annotations (no boto3-stubs in the tree), so they are typed Any.

__all__ = [
    "VcpuQuotaClass",
    "ON_DEMAND_VCPU_QUOTAS",
    "quota_class",
    "CapacityRequest",
    "QuotaCheck",
    "ProbeResult",
    "ZoneReport",
    "CapacityReport",
    "ReservationCheck",
    "reservation_check",
    "describe_reservation",
    "ProbeInterrupted",
    "CancelFailed",
    "AVAILABLE",
    "INSUFFICIENT_CAPACITY",
    "QUOTA_EXCEEDED",
    "UNSUPPORTED",
    "ERROR",
    "availability_zones",
    "offered_zones",
    "instance_vcpus",
    "vcpus_in_use",
    "quota_limit",
    "check_quota",
    "placement_scores",
    "probe_zone",
    "rank_zones",
    "check_capacity",
]


# -- quotas ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class VcpuQuotaClass:
    """One EC2 On-Demand vCPU quota and the instance families it covers."""

    code: str
    """Service Quotas quota code (service code ec2)."""
    name: str
    """The quota's name as Service Quotas shows it."""
    prefixes: tuple[str, ...]
    """The leading letters of the instance families it covers ("p" for p4d, p5, p5en...)."""


ON_DEMAND_VCPU_QUOTAS: tuple[VcpuQuotaClass, ...] = (
    VcpuQuotaClass(code="L-417A185B", name="Running On-Demand P instances", prefixes=("p",)),
    VcpuQuotaClass(code="L-DB2E81BA", name="Running On-Demand G and VT instances", prefixes=("g", "vt")),
)
"""The quotas of the GPU families this project deploys (EC2 counts On-Demand limits in vCPUs per family group)."""

_FAMILY_LETTERS = re.compile(r"^[a-z]+")


def quota_class(instance_type: str) -> VcpuQuotaClass | None:
    """The vCPU quota an instance type counts against, or None for families outside ON_DEMAND_VCPU_QUOTAS."""
    letters = _FAMILY_LETTERS.match(instance_type)
    # Exact letters, not startswith: "gr6" (graphics) or "dl1" must not fall into "g" or... "d".
    return next((q for q in ON_DEMAND_VCPU_QUOTAS if letters and letters.group() in q.prefixes), None)


@dataclass(frozen=True, kw_only=True, slots=True)
class QuotaCheck:
    """The family's On-Demand vCPU quota against what is running and what the new nodes need."""

    code: str
    name: str
    region: str
    limit_vcpus: float | None
    """The applied quota; None when it could not be read (see error)."""
    used_vcpus: int | None
    """vCPUs of the account's pending and running instances in this quota's families; None when unreadable."""
    needed_vcpus: int
    error: str | None = None

    @property
    def headroom_vcpus(self) -> float | None:
        if self.limit_vcpus is None or self.used_vcpus is None:
            return None
        return self.limit_vcpus - self.used_vcpus

    @property
    def sufficient(self) -> bool | None:
        """True or False when known; None when the quota or the usage could not be read."""
        headroom = self.headroom_vcpus
        return None if headroom is None else headroom >= self.needed_vcpus

    @property
    def desired_vcpus(self) -> int:
        """The quota value to ask for: what runs now plus the new nodes, never below the current quota."""
        wanted = (self.used_vcpus or 0) + self.needed_vcpus
        return max(wanted, math.ceil(self.limit_vcpus or 0))

    def request_command(self) -> str:
        """The exact AWS CLI command that asks for enough quota."""
        return (
            "aws service-quotas request-service-quota-increase --service-code ec2 "
            f"--quota-code {self.code} --desired-value {self.desired_vcpus} --region {self.region}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "name": self.name,
            "region": self.region,
            "limit_vcpus": self.limit_vcpus,
            "used_vcpus": self.used_vcpus,
            "needed_vcpus": self.needed_vcpus,
            "headroom_vcpus": self.headroom_vcpus,
            "sufficient": self.sufficient,
            "error": self.error,
            "request_command": self.request_command() if self.sufficient is False else None,
        }


# -- the request and the report -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class CapacityRequest:
    """What to check: N instances of one type in one AZ of a region."""

    region: str
    instance_type: str
    count: int
    probe: bool = False
    reservation_id: str | None = None
    """A capacity reservation the nodes launch into (capacityReservationId): its AZ, type, size and state are checked."""
    reservation_zone: str | None = None
    """The AZ the nodes must launch in (gpuAvailabilityZone), which the reservation must be in; None: not checked."""
    capacity_block: bool = False
    """The reservation is a Capacity Block for ML (capacityReservationType capacity-block)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ZoneReport:
    zone: str
    zone_id: str | None
    """The account-independent AZ ID (use1-az4); names like us-east-1a map to different zones in each account."""
    offered: bool
    placement_score: int | None = None
    probe: ProbeResult | None = None

    @property
    def usable(self) -> bool:
        """Offered, and no probe said there is no capacity here."""
        return self.offered and (self.probe is None or self.probe.outcome not in (INSUFFICIENT_CAPACITY, UNSUPPORTED))


@dataclass(frozen=True, kw_only=True, slots=True)
class ReservationCheck:
    """What EC2 says of a named capacity reservation, and why the nodes cannot launch into it (problems)."""

    reservation_id: str
    state: str | None = None
    instance_type: str | None = None
    zone: str | None = None
    total: int | None = None
    available: int | None = None
    reservation_type: str | None = None
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "reservation_id": self.reservation_id,
            "state": self.state,
            "instance_type": self.instance_type,
            "zone": self.zone,
            "total": self.total,
            "available": self.available,
            "reservation_type": self.reservation_type,
            "ok": self.ok,
            "problems": list(self.problems),
            "notes": list(self.notes),
        }


_RESERVATION_READY = ("active",)
_RESERVATION_LATER = ("scheduled", "pending", "assessing")
"""States of a reservation not active yet (a Capacity Block before its start): the nodes launch once it is."""


def reservation_check(request: CapacityRequest, reservation: dict[str, Any] | None) -> ReservationCheck:
    """The check of `request.reservation_id` against EC2's CapacityReservation (describe-capacity-reservations), or
    None when EC2 does not know it."""
    rid = request.reservation_id or ""
    key = "capacityReservationId"
    if reservation is None:
        return ReservationCheck(
            reservation_id=rid,
            problems=(f"{key} {rid}: EC2 knows no such reservation in {request.region} for this account",),
        )
    state = reservation.get("State")
    instance_type = reservation.get("InstanceType")
    zone = reservation.get("AvailabilityZone")
    total = reservation.get("TotalInstanceCount")
    available = reservation.get("AvailableInstanceCount")
    kind = reservation.get("ReservationType") or "default"
    problems, notes = [], []
    if instance_type != request.instance_type:
        problems.append(
            f"{key} {rid} reserves {instance_type}, but gpuInstanceType is {request.instance_type}: "
            "instances launch only into a reservation of their own type"
        )
    if request.reservation_zone is not None and zone != request.reservation_zone:
        problems.append(
            f"{key} {rid} is in {zone}, but the GPU nodes launch in {request.reservation_zone}: set "
            f"gpuAvailabilityZone={zone}"
        )
    if total is not None and total < request.count:
        problems.append(
            f"{key} {rid} holds {total} instance(s), but gpuNodeCount is {request.count}: EKS would "
            "retry the missing nodes until the node group fails"
        )
    elif available is not None and available < request.count:
        notes.append(f"{key} {rid}: {available} of its {total} instance(s) are free now (others run in it)")
    if state in _RESERVATION_LATER:
        notes.append(
            f"{key} {rid} is {state}: the nodes launch once it is active"
            + (f" ({reservation['StartDate']})" if reservation.get("StartDate") else "")
        )
    elif state not in _RESERVATION_READY:
        problems.append(f"{key} {rid} is {state}: nothing launches into it; reserve again")
    if request.capacity_block != (kind == "capacity-block"):
        want = "capacity-block" if kind == "capacity-block" else "odcr"
        problems.append(
            f"{key} {rid} is a {'Capacity Block' if kind == 'capacity-block' else 'capacity reservation'}"
            f": set capacityReservationType={want}"
        )
    return ReservationCheck(
        reservation_id=rid,
        state=state,
        instance_type=instance_type,
        zone=zone,
        total=total,
        available=available,
        reservation_type=kind,
        problems=tuple(problems),
        notes=tuple(notes),
    )


def describe_reservation(ec2: Any, reservation_id: str) -> dict[str, Any] | None:
    """EC2's CapacityReservation of `reservation_id`; None when EC2 says it does not exist."""
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in (
            "InvalidCapacityReservationId.NotFound",
            "InvalidCapacityReservationId.Malformed",
        ):
            return None
        raise
    return found[0] if found else None


@dataclass(frozen=True, kw_only=True, slots=True)
class CapacityReport:
    request: CapacityRequest
    vcpus_per_instance: int
    zones: tuple[ZoneReport, ...]
    """All AZs of the region, best first (see rank_zones)."""
    quota: QuotaCheck | None
    """None for a type outside ON_DEMAND_VCPU_QUOTAS."""
    placement_scores_error: str | None = None
    notes: tuple[str, ...] = ()
    reservation: ReservationCheck | None = None
    """The named reservation's check (None without one)."""

    @property
    def recommended_zone(self) -> str | None:
        """The best usable AZ, or None when no AZ is usable."""
        return next((z.zone for z in self.zones if z.usable), None)

    @property
    def quota_refused(self) -> bool:
        """Whether the quota is known to be short, or a probe was refused by a limit."""
        short = self.quota is not None and self.quota.sufficient is False
        return short or any(z.probe is not None and z.probe.outcome == QUOTA_EXCEEDED for z in self.zones)

    @property
    def ok(self) -> bool:
        """A usable AZ exists and nothing known stands in the way (an unreadable quota is a note, not a failure); a
        named reservation fits the nodes."""
        fits = self.reservation is None or self.reservation.ok
        return self.recommended_zone is not None and not self.quota_refused and fits

    def as_dict(self) -> dict[str, Any]:
        return {
            "region": self.request.region,
            "instance_type": self.request.instance_type,
            "count": self.request.count,
            "probe": self.request.probe,
            "vcpus_per_instance": self.vcpus_per_instance,
            "recommended_zone": self.recommended_zone,
            "ok": self.ok,
            "quota": self.quota.as_dict() if self.quota else None,
            "zones": [
                {
                    "zone": z.zone,
                    "zone_id": z.zone_id,
                    "offered": z.offered,
                    "usable": z.usable,
                    "placement_score": z.placement_score,
                    "probe": None
                    if z.probe is None
                    else {
                        "outcome": z.probe.outcome,
                        "error_code": z.probe.error_code,
                        "message": z.probe.message,
                        "reservation_id": z.probe.reservation_id,
                        "cancelled": z.probe.cancelled,
                    },
                }
                for z in self.zones
            ],
            "placement_scores_error": self.placement_scores_error,
            "notes": list(self.notes),
            "reservation": self.reservation.as_dict() if self.reservation else None,
        }


# -- single AWS reads -----------------------------------------------------------------------------------------------


def availability_zones(ec2: Any) -> list[tuple[str, str | None]]:
    """(name, zone ID) of the region's availability zones (not Local or Wavelength Zones), by name."""
    response = ec2.describe_availability_zones(Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}])
    return sorted((z["ZoneName"], z.get("ZoneId")) for z in response["AvailabilityZones"])


def offered_zones(ec2: Any, instance_type: str) -> set[str]:
    """The AZs of the client's region that offer the instance type."""
    paginator = ec2.get_paginator("describe_instance_type_offerings")
    pages = paginator.paginate(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}]
    )
    return {o["Location"] for page in pages for o in page["InstanceTypeOfferings"]}


def instance_vcpus(ec2: Any, instance_types: Iterable[str]) -> dict[str, int]:
    """Default vCPUs of each type, from describe-instance-types (AWS wins over the catalog)."""
    names = sorted(set(instance_types))
    out: dict[str, int] = {}
    for start in range(0, len(names), 100):  # the API takes at most 100 types per call
        response = ec2.describe_instance_types(InstanceTypes=names[start : start + 100])
        out.update({t["InstanceType"]: t["VCpuInfo"]["DefaultVCpus"] for t in response["InstanceTypes"]})
    return out


def vcpus_in_use(ec2: Any, quota: VcpuQuotaClass) -> int:
    """vCPUs of the pending and running instances that count against the quota.

    Counted at each type's default vCPUs: that is what the quota meters, whatever CPU options an instance uses.
    """
    counts: dict[str, int] = {}
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                kind = instance["InstanceType"]
                if quota_class(kind) == quota:
                    counts[kind] = counts.get(kind, 0) + 1
    if not counts:
        return 0
    vcpus = instance_vcpus(ec2, counts)
    return sum(vcpus[kind] * n for kind, n in counts.items())


def quota_limit(service_quotas: Any, code: str) -> float:
    """The applied value of an EC2 quota; the AWS default when the account has no applied value recorded."""
    try:
        return float(service_quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "NoSuchResourceException":
            raise
    return float(service_quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])


def check_quota(
    ec2: Any, service_quotas: Any, *, region: str, instance_type: str, count: int, vcpus_per_instance: int
) -> QuotaCheck | None:
    """The family's vCPU quota against usage plus `count` new instances; read errors are kept, not raised."""
    quota = quota_class(instance_type)
    if quota is None:
        return None
    errors: list[str] = []
    limit = used = None
    try:
        limit = quota_limit(service_quotas, quota.code)
    except ClientError as error:
        errors.append(f"reading quota {quota.code}: {error_text(error)}")
    try:
        used = vcpus_in_use(ec2, quota)
    except ClientError as error:
        errors.append(f"counting running vCPUs: {error_text(error)}")
    return QuotaCheck(
        code=quota.code,
        name=quota.name,
        region=region,
        limit_vcpus=limit,
        used_vcpus=used,
        needed_vcpus=count * vcpus_per_instance,
        error="; ".join(errors) or None,
    )


def placement_scores(
    ec2: Any, *, region: str, instance_type: str, count: int, zone_names: dict[str, str]
) -> dict[str, int]:
    """AZ name -> EC2's Spot placement score (1-10) for `count` instances in that single AZ.

    The API answers with AZ IDs; `zone_names` maps them to the account's AZ names.
    """
    pages = ec2.get_paginator("get_spot_placement_scores").paginate(
        InstanceTypes=[instance_type],
        TargetCapacity=count,
        TargetCapacityUnitType="units",
        SingleAvailabilityZone=True,
        RegionNames=[region],
    )
    scores: dict[str, int] = {}
    for page in pages:
        for entry in page.get("SpotPlacementScores", []):
            zone = zone_names.get(entry.get("AvailabilityZoneId", ""))
            if zone is not None and entry.get("Region", region) == region:
                scores[zone] = int(entry["Score"])
    return scores


# -- ranking and the whole check ------------------------------------------------------------------------------------

_PROBE_RANK = {AVAILABLE: 0, None: 1, QUOTA_EXCEEDED: 1, ERROR: 1, INSUFFICIENT_CAPACITY: 2, UNSUPPORTED: 3}


def rank_zones(zones: Iterable[ZoneReport]) -> tuple[ZoneReport, ...]:
    """Best first: offered before not offered, then by probe (capacity seen, unknown, none), then placement score."""

    def key(z: ZoneReport):
        outcome = z.probe.outcome if z.probe else None
        return (not z.offered, _PROBE_RANK[outcome], -(z.placement_score or 0), z.zone)

    return tuple(sorted(zones, key=key))


def check_capacity(
    request: CapacityRequest,
    *,
    ec2: Any,
    service_quotas: Any,
    catalog_vcpus: int,
    status: Status = quiet,
    probe_options: dict[str, Any] | None = None,
) -> CapacityReport:
    """Run every check for `request` and rank the region's AZs; `catalog_vcpus` is used if EC2 does not know the type."""
    notes: list[str] = []
    status(f"listing the AZs of {request.region}")
    zones = availability_zones(ec2)
    zone_names = {zone_id: name for name, zone_id in zones if zone_id}

    status(f"finding the AZs that offer {request.instance_type}")
    offered = offered_zones(ec2, request.instance_type)
    if not offered:
        notes.append(f"no AZ of {request.region} offers {request.instance_type}; choose another region or type")

    vcpus = catalog_vcpus
    try:
        vcpus = instance_vcpus(ec2, [request.instance_type]).get(request.instance_type, catalog_vcpus)
    except ClientError as error:
        notes.append(f"describe-instance-types failed ({error_text(error)}); using the catalog's {catalog_vcpus} vCPUs")

    status(f"reading the vCPU quota and usage of the {request.instance_type.split('.')[0]} family")
    quota = check_quota(
        ec2,
        service_quotas,
        region=request.region,
        instance_type=request.instance_type,
        count=request.count,
        vcpus_per_instance=vcpus,
    )
    if quota is not None and quota.error:
        notes.append(f"quota unknown ({quota.error}); check it in the Service Quotas console")

    status("reading Spot placement scores")
    scores: dict[str, int] = {}
    scores_error = None
    try:
        scores = placement_scores(
            ec2, region=request.region, instance_type=request.instance_type, count=request.count, zone_names=zone_names
        )
    except ClientError as error:
        scores_error = error_text(error)
        notes.append(f"no placement scores ({scores_error})")

    probes: dict[str, ProbeResult] = {}
    if request.probe:
        if quota is not None and quota.sufficient is False:
            notes.append("probe skipped: the vCPU quota is short, every reservation would be refused")
        else:
            order = sorted(offered, key=lambda z: (-scores.get(z, 0), z))
            for zone in order:
                probes[zone] = probe_zone(
                    ec2,
                    region=request.region,
                    instance_type=request.instance_type,
                    zone=zone,
                    count=request.count,
                    status=status,
                    **(probe_options or {}),
                )

    reports = [
        ZoneReport(
            zone=name,
            zone_id=zone_id,
            offered=name in offered,
            placement_score=scores.get(name),
            probe=probes.get(name),
        )
        for name, zone_id in zones
    ]
    reservation = None
    if request.reservation_id:
        status(f"reading capacity reservation {request.reservation_id}")
        reservation = reservation_check(request, describe_reservation(ec2, request.reservation_id))
    return CapacityReport(
        request=request,
        vcpus_per_instance=vcpus,
        zones=rank_zones(reports),
        quota=quota,
        placement_scores_error=scores_error,
        notes=tuple(notes),
        reservation=reservation,
    )


# -- rendering ------------------------------------------------------------------------------------------------------

_OUTCOME_STYLE = {
    AVAILABLE: "green",
    INSUFFICIENT_CAPACITY: "red",
    QUOTA_EXCEEDED: "yellow",
    UNSUPPORTED: "red",
    ERROR: "yellow",
}


def render_capacity(report: CapacityReport, console: Console) -> None:
    """Tables of the AZs (ranked) and the quota, the recommendation, and the quota request command when short."""
    from rich.table import Table

    r = report.request
    zones = Table(title=f"{r.count} x {r.instance_type} ({report.vcpus_per_instance} vCPUs each) in {r.region}")
    for column in ("rank", "AZ", "AZ ID", "offered", "placement score", "probe"):
        zones.add_column(column, overflow="fold")  # wrap, never cut with an ellipsis (80-column logs)
    for rank, z in enumerate(report.zones, start=1):
        if z.probe is None:
            probe = "not probed" if z.offered else "-"
        else:
            detail = f" ({z.probe.error_code})" if z.probe.error_code else ""
            probe = f"[{_OUTCOME_STYLE[z.probe.outcome]}]{z.probe.outcome}[/]{detail}"
            if z.probe.reservation_id:
                probe += f", {z.probe.reservation_id} {'cancelled' if z.probe.cancelled else '[red]NOT cancelled[/]'}"
        zones.add_row(
            str(rank),
            z.zone,
            z.zone_id or "?",
            "[green]yes[/]" if z.offered else "[red]no[/]",
            "-" if z.placement_score is None else f"{z.placement_score}/10",
            probe,
        )
    console.print(zones)

    q = report.quota
    if q is not None:
        quota = Table(title="On-Demand vCPU quota")
        for column in ("quota", "code", "limit", "in use", "needed", "headroom", "verdict"):
            quota.add_column(column, overflow="fold")
        verdict = {True: "[green]enough[/]", False: "[red]short[/]", None: "[yellow]unknown[/]"}[q.sufficient]

        def num(value):
            return "?" if value is None else f"{value:g}"

        quota.add_row(
            q.name, q.code, num(q.limit_vcpus), num(q.used_vcpus), str(q.needed_vcpus), num(q.headroom_vcpus), verdict
        )
        console.print(quota)
        if q.sufficient is False:
            console.print(f"Quota {q.code} ({q.name}) is short. Ask for more with:")
            console.print(q.request_command(), markup=False, highlight=False, soft_wrap=True)
    for note in report.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    if (rc := report.reservation) is not None:
        console.print(
            f"Reservation {rc.reservation_id}: {rc.state or 'unknown'}, {rc.total if rc.total is not None else '?'}"
            f" x {rc.instance_type or '?'} in {rc.zone or '?'} ({rc.reservation_type or '?'})",
            highlight=False,
        )
        for note in rc.notes:
            console.print(f"[yellow]note:[/] {note}", highlight=False)
        for problem in rc.problems:
            console.print(f"[red]refused:[/] {problem}", highlight=False)
    if report.recommended_zone is None:
        console.print("[red]No usable AZ.[/]")
    else:
        colour = "green" if report.ok else "yellow"
        console.print(
            f"[{colour}]Recommended AZ: {report.recommended_zone}[/]"
            + ("" if report.ok else " (but the quota is short)")
        )
