"""`ray-efa plan`: the answer first (what, what it costs, how fast), and `plan --recommend` within a budget, a time
and a purchase option (ops.recommend's limits)."""

from __future__ import annotations

import json
import re

import pytest

from tests.ops.cli_helpers import run_cli


def _recommend(capsys, *args: str) -> dict:
    assert run_cli("plan", "--recommend", "--json", "--max-nodes", "4", "--tokens", "1e10", *args) in (0, 1)
    return json.loads(capsys.readouterr().out)


def test_budget_ranks_only_plans_within_it(capsys):
    # GIVEN the ranking without a budget, which has plans above 500 USD
    every = _recommend(capsys)["recommendations"]
    assert any(r["usd"] > 500 for r in every) and any(r["usd"] <= 500 for r in every)
    # WHEN asked for at most 500 USD
    within = _recommend(capsys, "--budget", "500")
    # THEN only those predicted within it are ranked, in the same order, and the limit is said
    assert within["recommendations"] == [r for r in every if r["usd"] <= 500]
    assert within["limits"]["budget_usd"] == 500 and within["left_out_by_limits"] == sum(r["usd"] > 500 for r in every)
    # AND --hours keeps only those that finish in time
    quick = _recommend(capsys, "--hours", "2")["recommendations"]
    assert quick and quick == [r for r in every if r["hours"] <= 2]


def test_capacity_on_demand_lists_no_capacity_block(capsys):
    every = _recommend(capsys)["recommendations"]
    assert {r["purchase"] for r in every} == {"on-demand", "capacity-block"}
    on_demand = _recommend(capsys, "--capacity", "on-demand")["recommendations"]
    assert on_demand and all(r["purchase"] == "on-demand" for r in on_demand)
    assert on_demand == [r for r in every if r["purchase"] == "on-demand"]
    blocks = _recommend(capsys, "--capacity", "capacity-block")["recommendations"]
    assert blocks and all(r["purchase"] == "capacity-block" for r in blocks)
    # the table says so too, with no CB row
    assert (
        run_cli(
            "plan", "--recommend", "--max-nodes", "2", "--tokens", "1e9", "--capacity", "on-demand", "--budget", "500"
        )
        == 0
    )
    text = capsys.readouterr().out
    rows = [line for line in text.splitlines() if re.match(r"\s*\d+\s+\d+ x ", line)]
    assert rows and not [row for row in rows if " CB " in row] and all(" OD " in row for row in rows)
    assert "Limits: at most 500 USD, on-demand only" in " ".join(text.split())


@pytest.mark.parametrize("args", [("--budget", "0"), ("--budget", "lots"), ("--hours", "-1"), ("--capacity", "spot")])
def test_bad_limits_are_exit_2(args, capsys):
    assert run_cli("plan", "--recommend", *args) == 2
    assert args[0] in capsys.readouterr().err


def test_limits_without_recommend_are_refused(capsys):
    assert run_cli("plan", "--budget", "500") == 2
    assert "only with --recommend" in capsys.readouterr().err


def test_the_first_15_lines_of_the_plan_are_its_answer(capsys):
    assert run_cli("plan", "-c", "gpuInstanceType=p5.48xlarge", "-c", "gpuNodeCount=2") == 0
    out = capsys.readouterr().out
    head = "\n".join(out.splitlines()[:15])
    plan = json.loads(
        (
            run_cli("plan", "--json", "-c", "gpuInstanceType=p5.48xlarge", "-c", "gpuNodeCount=2"),
            capsys.readouterr().out,
        )[1]
    )
    # THEN the instance type, the cost per hour and the predicted tokens/s (those of --json) are in the first lines
    assert "2 x p5.48xlarge" in head
    assert f"cost: ${plan['usd_per_hour']['total']:,.3f}/h running" in head
    predicted = re.search(r"speed: ([\d,]+) tokens/s predicted", head)
    assert predicted and float(predicted.group(1).replace(",", "")) == pytest.approx(
        plan["performance"]["efa"]["tokens_per_s"], rel=1e-5
    )  # --json rounds to 6 digits
    assert "fits" in head
    # AND the settings table comes only with --settings, after everything else
    assert "Settings" not in out
    assert run_cli("plan", "--settings", "-c", "gpuInstanceType=p5.48xlarge", "-c", "gpuNodeCount=2") == 0
    full = capsys.readouterr().out
    assert full.index("Settings") > full.index("USD per hour") > full.index("Plan: 2 x p5.48xlarge")


def test_no_plan_within_the_limits_is_exit_1_saying_so(capsys):
    assert run_cli("plan", "--recommend", "--max-nodes", "2", "--budget", "1") == 1
    assert "No plan within the limits" in " ".join(capsys.readouterr().out.split())
