"""What a GPU node costs per hour, by region and purchase option: a dated, sourced price table (pure data).

- On-Demand (Linux, shared tenancy):
  - us-east-2 and us-east-1: the catalog rows' prices (core.catalog, InstanceType.usd_per_hour), from the AWS Price
    List API in 2026-10/11, except where core/data/on_demand_prices.csv has a row for the (region, type): the P types
    are recorded there for both regions, so p5e (no On-Demand price in us-east-2, not offered in us-east-1) and p4de
    (not offered in us-east-2) are never priced with another type's number.
  - ap-southeast-2, ap-northeast-1, eu-central-1, eu-west-1 and us-west-2: core/data/on_demand_prices.csv, one row
    per (region, instance type) with its source and the date it was read. Each row is `priced` (that region's list
    price), `not-offered` (the source lists no offering of the type in the region: the plan leaves the type out there)
    or `no-price` (offered, but the source has no On-Demand price: p5e sells through Capacity Blocks). The source is
    SkyPilot's AWS catalog (skypilot-org/skypilot-catalog, catalogs/v8/aws/vms.csv, at the commit each row names),
    which SkyPilot regenerates from the AWS Price List API; its us-east-2 prices equal the catalog's for every type
    it lists there.
  - A row of the table, for any region, is the one offering lookup: `offering_problem` (a settings rule: synth and
    plan refuse a type recorded `not-offered` in the stack's region, naming the regions that offer it) and
    `plan --recommend` (which leaves such a type out) read the same rows.
  - Any other region is NOT recorded: a row there says so and shows the us-east-2 price as a lower bound (US East is
    among the cheapest regions for these types; every recorded region's price is at least us-east-2's), never as that
    region's. Record a region with `aws pricing get-products --service-code AmazonEC2 --filters
    Type=TERM_MATCH,Field=regionCode,Value=<region> ...` and add its rows to core/data/on_demand_prices.csv.
- Capacity Blocks for ML: the effective instance hourly rate of AWS's Capacity Blocks pricing page, as a public snapshot
  of it quoted them (rates are updated regularly by supply and demand; the snapshot says the next update was
  2025-01-01): only the (type, region) pairs recorded below.
- Spot: not recorded. Spot prices move every few minutes per Availability Zone (`aws ec2 describe-spot-price-history`);
  the plan says so rather than guess. The job checkpoints (checkpointEvery), so it can run on Spot.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

from ray_efa.core import catalog

__all__ = [
    "ON_DEMAND_RECORDED",
    "ON_DEMAND_SOURCE",
    "CATALOG_REGIONS",
    "RECORDED_REGIONS",
    "CAPACITY_BLOCKS",
    "STATUSES",
    "RecordedPrice",
    "ON_DEMAND_TABLE",
    "Price",
    "on_demand",
    "capacity_block",
    "SPOT_NOTE",
    "offering",
    "offered_regions",
    "offering_problem",
    "buyable",
    "price_record_problems",
]

ON_DEMAND_RECORDED = "2026-10/11"
ON_DEMAND_SOURCE = (
    "AWS Price List API, On-Demand Linux, us-east-2 (core.catalog's rows; us-east-1 lists the same "
    "prices for these types)"
)
CATALOG_REGIONS = frozenset({"us-east-1", "us-east-2"})
"""Regions whose On-Demand prices are the catalog's."""

STATUSES = ("priced", "not-offered", "no-price")
"""What a row of core/data/on_demand_prices.csv says of its (region, type)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordedPrice:
    """One row of core/data/on_demand_prices.csv."""

    region: str
    instance_type: str
    usd_per_hour: float | None
    """The region's On-Demand USD per instance hour; None where not offered or not priced."""
    status: str
    source: str
    """Repository, path and commit (or URL) the price was read from."""
    retrieved: str
    """The date it was read (YYYY-MM-DD)."""


def _load() -> dict[tuple[str, str], RecordedPrice]:
    text = resources.files("ray_efa.core").joinpath("data", "on_demand_prices.csv").read_text(encoding="utf-8")
    table: dict[tuple[str, str], RecordedPrice] = {}
    for row in csv.DictReader(text.splitlines()):
        price = RecordedPrice(
            region=row["region"],
            instance_type=row["instance_type"],
            usd_per_hour=float(row["usd_per_hour"]) if row["usd_per_hour"] else None,
            status=row["status"],
            source=row["source"],
            retrieved=row["retrieved"],
        )
        key = (price.region, price.instance_type)
        if (
            key in table
            or price.status not in STATUSES
            or (price.status == "priced") != (price.usd_per_hour is not None)
        ):
            raise ValueError(f"core/data/on_demand_prices.csv: bad or repeated row {row}")
        table[key] = price
    return table


ON_DEMAND_TABLE: dict[tuple[str, str], RecordedPrice] = _load()
"""(region, instance type) -> its recorded On-Demand price, for the regions core/data/on_demand_prices.csv records."""
RECORDED_REGIONS = CATALOG_REGIONS | {region for region, _ in ON_DEMAND_TABLE}
"""Regions whose On-Demand prices are recorded (the catalog's, or the table's)."""

_CB_SOURCE = (
    "AWS 'Amazon EC2 Capacity Blocks for ML Pricing' page, effective instance hourly rate, as a public "
    "snapshot quoted it (rates updated by supply and demand; that snapshot's next update 2025-01-01)"
)
CAPACITY_BLOCKS: dict[tuple[str, str], float] = {
    ("p5.48xlarge", "us-east-1"): 39.33,
    ("p5.48xlarge", "us-east-2"): 39.33,
    ("p4d.24xlarge", "us-east-2"): 14.75,
    ("p4d.24xlarge", "us-west-2"): 14.75,
    # The snapshot's row after p5's reads "US East (Ohio) $43.26, 8 x H200, 1128 GB HBM3, 3200 Gigabit" with its type
    # name lost in the copy; the EC2 User Guide of that time names p5e.48xlarge, in US East (Ohio), as the only H200
    # type Capacity Blocks offered.
    ("p5e.48xlarge", "us-east-2"): 43.26,
}
"""(instance type, region) -> USD per instance hour of a Capacity Block (reservation fee; Linux adds nothing)."""


def price_record_problems(types: Iterable[str] | None = None) -> list[str]:
    """Each built-in GPU type (core.catalog.families' records: `types`, the catalog's by default) without a row in
    core/data/on_demand_prices.csv, and each row or recorded Capacity Block of a type without a record: the prices
    are data beside the records, and neither may name what the other lacks."""
    known = set(catalog.BUILT_IN_GPU_INSTANCES if types is None else types)
    priced = {name for _, name in ON_DEMAND_TABLE}
    problems = [
        f"{name}: a GPU type without a row in core/data/on_demand_prices.csv (add one per recorded region)"
        for name in sorted(known - priced)
    ]
    problems += [
        f"{name}: core/data/on_demand_prices.csv prices a type without a record in core.catalog.families"
        for name in sorted(priced - known)
    ]
    problems += [
        f"{name}: core.prices.CAPACITY_BLOCKS prices a type without a record in core.catalog.families"
        for name in sorted({name for name, _ in CAPACITY_BLOCKS} - known)
    ]
    return problems


SPOT_NOTE = (
    "Spot: not recorded (prices move every few minutes per zone: aws ec2 describe-spot-price-history); the "
    "job checkpoints, so it can run on Spot"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Price:
    """A node's price per hour in a region under one purchase option, and how it is known."""

    usd_per_hour: float
    option: str
    """on-demand or capacity-block."""
    region: str
    """The region asked for."""
    recorded: bool
    """Whether this price is that region's (False: another region's, shown as a lower bound)."""
    date: str
    source: str
    offered: bool = True
    """False where the source lists no offering of the type in the region (the price is then us-east-2's)."""

    def as_dict(self) -> dict[str, object]:
        return {
            "usd_per_hour": round(self.usd_per_hour, 4),
            "option": self.option,
            "region": self.region,
            "recorded": self.recorded,
            "offered": self.offered,
            "date": self.date,
            "source": self.source,
        }


def on_demand(instance: catalog.InstanceType, region: str) -> Price:
    """The On-Demand price of `instance` in `region`: the recorded one (the table's row, else the catalog's for
    us-east-1/us-east-2), or us-east-2's, marked not recorded (and not offered, where the region's record says the type
    is not offered there)."""
    row = None if instance.described else ON_DEMAND_TABLE.get((region, instance.name))
    if row is None and region in CATALOG_REGIONS:
        return Price(
            usd_per_hour=instance.usd_per_hour,
            option="on-demand",
            region=region,
            recorded=True,
            date=ON_DEMAND_RECORDED,
            source=ON_DEMAND_SOURCE,
        )
    if instance.described:
        return Price(
            usd_per_hour=instance.usd_per_hour,
            option="on-demand",
            region=region,
            recorded=False,
            date=ON_DEMAND_RECORDED,
            source="your description's usdPerHour (extraGpuInstanceTypes), region not stated",
        )
    if row is not None and row.usd_per_hour is not None:
        return Price(
            usd_per_hour=row.usd_per_hour,
            option="on-demand",
            region=region,
            recorded=True,
            date=row.retrieved,
            source=row.source,
        )
    lower_bound = f"us-east-2's list price shown as a lower bound ({ON_DEMAND_SOURCE})"
    if row is None:
        return Price(
            usd_per_hour=instance.usd_per_hour,
            option="on-demand",
            region=region,
            recorded=False,
            date=ON_DEMAND_RECORDED,
            source=(f"not recorded for {region}: {lower_bound}; `aws pricing get-products` gives {region}'s"),
        )
    offered = row.status != "not-offered"
    why = (
        f"not offered in {region}"
        if not offered
        else f"offered in {region} but no On-Demand price listed (Capacity Blocks)"
    )
    figure = (
        lower_bound
        if not offered
        else "the figure shown is the catalog's (for p5e its us-east-2 Capacity Block rate), not an On-Demand price"
    )
    return Price(
        usd_per_hour=instance.usd_per_hour,
        option="on-demand",
        region=region,
        recorded=False,
        offered=offered,
        date=row.retrieved,
        source=f"{why}, per {row.source} (read {row.retrieved}); {figure}",
    )


def offering(instance_name: str, region: str) -> str | None:
    """What the table records of `instance_name` in `region` (priced, not-offered, no-price), or None: not recorded."""
    row = ON_DEMAND_TABLE.get((region, instance_name))
    return None if row is None else row.status


def offered_regions(instance_name: str) -> list[str]:
    """The recorded regions that offer `instance_name` (priced there, or offered without an On-Demand price)."""
    return sorted(
        region
        for (region, name), row in ON_DEMAND_TABLE.items()
        if name == instance_name and row.status != "not-offered"
    )


def offering_problem(instance_name: str, region: str) -> str | None:
    """Why `instance_name` cannot be launched in `region` by the table's record, or None (offered, or not recorded):
    the one offering lookup that synth, plan and plan --recommend share."""
    if offering(instance_name, region) != "not-offered":
        return None
    row = ON_DEMAND_TABLE[(region, instance_name)]
    where = offered_regions(instance_name)
    return f"is not offered in {region} (core/data/on_demand_prices.csv, per {row.source}, read {row.retrieved}); " + (
        f"regions that offer it: {', '.join(where)}" if where else "no recorded region offers it"
    )


def buyable(instance: catalog.InstanceType, region: str) -> list[Price]:
    """The prices of `instance` in `region` that are recorded for that region: On-Demand where priced, a Capacity
    Block where recorded. Empty: nothing here can be bought at a known price (plan --recommend leaves it out)."""
    found = [
        price
        for price in (on_demand(instance, region), capacity_block(instance, region))
        if price is not None and price.recorded
    ]
    return found


def capacity_block(instance: catalog.InstanceType, region: str) -> Price | None:
    """The Capacity Block price of `instance` in `region` where recorded; None where not recorded or not offered
    (InstanceType.capacity_blocks says which types Capacity Blocks offer at all)."""
    usd = CAPACITY_BLOCKS.get((instance.name, region))
    if usd is None:
        return None
    return Price(
        usd_per_hour=usd, option="capacity-block", region=region, recorded=True, date="2024-12", source=_CB_SOURCE
    )
