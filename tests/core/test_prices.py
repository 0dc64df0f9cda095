"""core.prices: the On-Demand price table by region (core/data/on_demand_prices.csv), each price dated and sourced."""

from __future__ import annotations

import re

import pytest

from ray_efa.core import catalog, prices


def test_every_recorded_price_is_positive_dated_and_sourced():
    assert prices.ON_DEMAND_TABLE
    for key, row in prices.ON_DEMAND_TABLE.items():
        name = row.instance_type
        assert key == (row.region, name) and name in catalog.GPU_INSTANCES, key
        assert row.status in prices.STATUSES
        assert (row.usd_per_hour is not None) == (row.status == "priced")
        assert row.usd_per_hour is None or row.usd_per_hour > 0
        # a source names a repository, path and commit (or a URL); the date is the day it was read
        assert re.search(r"\S+/\S+ \S+@[0-9a-f]{40}$|^https://", row.source), row.source
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row.retrieved)


def test_each_recorded_region_records_every_built_in_gpu_type():
    table_regions = prices.RECORDED_REGIONS - prices.CATALOG_REGIONS
    assert "ap-southeast-2" in table_regions
    for region in table_regions:
        recorded = {name for r, name in prices.ON_DEMAND_TABLE if r == region}
        assert recorded >= set(catalog.BUILT_IN_GPU_INSTANCES), region


def test_every_gpu_type_record_has_price_rows_and_every_price_row_a_record():
    # the records (core.catalog.families) and the prices (core/data/on_demand_prices.csv, CAPACITY_BLOCKS) agree
    assert prices.price_record_problems() == []
    # a record without a price row is named, and so is a price row without a record
    problems = prices.price_record_problems([*catalog.BUILT_IN_GPU_INSTANCES, "x9.48xlarge"][1:])
    dropped = next(iter(catalog.BUILT_IN_GPU_INSTANCES))
    assert problems[0].startswith("x9.48xlarge: a GPU type without a row in core/data/on_demand_prices.csv"), problems
    assert f"{dropped}: core/data/on_demand_prices.csv prices a type without a record" in problems[1], problems


def test_no_recorded_region_is_cheaper_than_us_east_2():
    # the lower-bound claim for unrecorded regions rests on this: US East is the floor for these types
    for (region, name), row in prices.ON_DEMAND_TABLE.items():
        if row.usd_per_hour is not None:
            assert row.usd_per_hour >= catalog.GPU_INSTANCES[name].usd_per_hour - 1e-3, (region, name)


@pytest.mark.parametrize(
    ("region", "recorded", "offered"),
    [("us-east-2", True, True), ("ap-southeast-2", True, True), ("sa-east-1", False, True)],
)
def test_on_demand_uses_the_regions_recorded_price(region, recorded, offered):
    p5 = catalog.gpu_instance("p5.48xlarge")
    price = prices.on_demand(p5, region)
    assert (price.recorded, price.offered, price.region) == (recorded, offered, region)
    if region == "ap-southeast-2":
        assert price.usd_per_hour == 71.552 != p5.usd_per_hour
    else:  # the catalog's (us-east-2) price: the region's own, or a lower bound said to be one
        assert price.usd_per_hour == p5.usd_per_hour
    assert (f"not recorded for {region}" in price.source) == (not recorded)


def test_a_type_the_region_does_not_offer_says_so():
    price = prices.on_demand(catalog.gpu_instance("p6-b200.48xlarge"), "ap-southeast-2")
    assert not price.offered and not price.recorded and "not offered in ap-southeast-2" in price.source


def test_p5e_has_no_on_demand_price_in_the_catalog_regions_and_is_not_given_p5ens():
    # SkyPilot's catalog lists p5e in us-east-2 without an On-Demand price and not at all in us-east-1; p4de is not
    # offered in us-east-2: the table's rows override the catalog's figures there
    p5e = catalog.gpu_instance("p5e.48xlarge")
    ohio, virginia = prices.on_demand(p5e, "us-east-2"), prices.on_demand(p5e, "us-east-1")
    assert not ohio.recorded and ohio.offered and "no On-Demand price" in ohio.source
    assert not virginia.recorded and not virginia.offered
    assert p5e.usd_per_hour != catalog.gpu_instance("p5en.48xlarge").usd_per_hour
    assert not prices.on_demand(catalog.gpu_instance("p4de.24xlarge"), "us-east-2").offered
    # what can be bought there at a recorded price: p5e only as a Capacity Block in Ohio, p5 both ways
    assert [p.option for p in prices.buyable(p5e, "us-east-2")] == ["capacity-block"]
    assert prices.buyable(p5e, "us-east-1") == []
    assert [p.option for p in prices.buyable(catalog.gpu_instance("p5.48xlarge"), "us-east-1")] == [
        "on-demand",
        "capacity-block",
    ]


def test_the_offering_lookup_names_the_regions_that_offer_a_type():
    problem = prices.offering_problem("p5.48xlarge", "eu-west-1")
    assert problem is not None and "is not offered in eu-west-1" in problem
    assert "us-east-2" in problem and "ap-southeast-2" in problem and "eu-central-1" not in problem
    assert prices.offering_problem("p5.48xlarge", "us-east-2") is None
    assert prices.offering_problem("p5.48xlarge", "sa-east-1") is None  # not recorded: nothing to say
    assert prices.offering_problem("p5e.48xlarge", "us-east-2") is None  # offered, through Capacity Blocks
