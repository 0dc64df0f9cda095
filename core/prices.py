"""What a GPU node costs per hour, by region and purchase option: a dated, sourced price table (pure data).

- On-Demand (Linux, shared tenancy): the catalog rows' prices (core.catalog, InstanceType.usd_per_hour), recorded for
  us-east-2 from the AWS Price List API in 2026-10/11; us-east-1 lists the same prices for these types. Other regions
  are NOT recorded here: a row there says so and shows the us-east-2 price as a lower bound (US East is among the
  cheapest regions for these types), never as that region's. Record a region with `aws pricing get-products
  --service-code AmazonEC2 --filters Type=TERM_MATCH,Field=regionCode,Value=<region> ...` and add it to ON_DEMAND.
- Capacity Blocks for ML: the effective instance hourly rate of AWS's Capacity Blocks pricing page, as a public snapshot
  of it quoted them (rates are updated regularly by supply and demand; the snapshot says the next update was
  2025-01-01): only the (type, region) pairs recorded below.
- Spot: not recorded. Spot prices move every few minutes per Availability Zone (`aws ec2 describe-spot-price-history`);
  the plan says so rather than guess. The job checkpoints (checkpointEvery), so it can run on Spot.
"""

from __future__ import annotations

from dataclasses import dataclass

from ray_efa.core import catalog

__all__ = ["ON_DEMAND_RECORDED", "ON_DEMAND_SOURCE", "RECORDED_REGIONS", "CAPACITY_BLOCKS", "Price", "on_demand",
           "capacity_block", "SPOT_NOTE"]

ON_DEMAND_RECORDED = "2026-10/11"
ON_DEMAND_SOURCE = ("AWS Price List API, On-Demand Linux, us-east-2 (core.catalog's rows; us-east-1 lists the same "
                    "prices for these types)")
RECORDED_REGIONS = frozenset({"us-east-1", "us-east-2"})
"""Regions whose On-Demand prices are the catalog's."""

_CB_SOURCE = ("AWS 'Amazon EC2 Capacity Blocks for ML Pricing' page, effective instance hourly rate, as a public "
              "snapshot quoted it (rates updated by supply and demand; that snapshot's next update 2025-01-01)")
CAPACITY_BLOCKS: dict[tuple[str, str], float] = {
    ("p5.48xlarge", "us-east-1"): 39.33,
    ("p5.48xlarge", "us-east-2"): 39.33,
    ("p4d.24xlarge", "us-east-2"): 14.75,
    ("p4d.24xlarge", "us-west-2"): 14.75,
}
"""(instance type, region) -> USD per instance hour of a Capacity Block (reservation fee; Linux adds nothing)."""

SPOT_NOTE = ("Spot: not recorded (prices move every few minutes per zone: aws ec2 describe-spot-price-history); the "
             "job checkpoints, so it can run on Spot")


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

    def as_dict(self) -> dict[str, object]:
        return {"usd_per_hour": round(self.usd_per_hour, 4), "option": self.option, "region": self.region,
                "recorded": self.recorded, "date": self.date, "source": self.source}


def on_demand(instance: catalog.InstanceType, region: str) -> Price:
    """The On-Demand price of `instance` in `region`: the recorded one, or us-east-2's, marked not recorded."""
    if region in RECORDED_REGIONS:
        return Price(usd_per_hour=instance.usd_per_hour, option="on-demand", region=region, recorded=True,
                     date=ON_DEMAND_RECORDED, source=ON_DEMAND_SOURCE)
    if instance.described:
        source = "your description's usdPerHour (extraGpuInstanceTypes), region not stated"
    else:
        source = (f"not recorded for {region}: us-east-2's list price shown as a lower bound ({ON_DEMAND_SOURCE}); "
                  f"`aws pricing get-products` gives {region}'s")
    return Price(usd_per_hour=instance.usd_per_hour, option="on-demand", region=region, recorded=False,
                 date=ON_DEMAND_RECORDED, source=source)


def capacity_block(instance: catalog.InstanceType, region: str) -> Price | None:
    """The Capacity Block price of `instance` in `region` where recorded; None where not recorded or not offered
    (InstanceType.capacity_blocks says which types Capacity Blocks offer at all)."""
    usd = CAPACITY_BLOCKS.get((instance.name, region))
    if usd is None:
        return None
    return Price(usd_per_hour=usd, option="capacity-block", region=region, recorded=True, date="2024-12",
                 source=_CB_SOURCE)
