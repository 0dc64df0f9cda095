"""`ray-efa compare`: the EFA-versus-TCP ratio from the two runs' driver logs, as kubectl logs carries them."""

from __future__ import annotations

import json

import pytest

from ray_efa.ops.compare import CompareError, compare_logs
from tests.ops.cli_helpers import run_cli
from ray_efa.training.run_summary import find_summaries, summary_line


def _summary(tokens_per_s: float, step_s: float) -> dict:
    return {"steps": 20, "first_loss": 12.24, "final_loss": 12.18, "time/step_s": step_s,
            "throughput/tokens_per_s": tokens_per_s, "throughput/tokens_per_s_per_device": tokens_per_s / 8,
            "throughput/mfu_pct": 30.0, "device": "NVIDIA L4"}


def _driver_log(path, network: str, tokens_per_s: float, step_s: float, prefix: str = ""):
    # What the driver prints at the end of a run, behind whatever prefix the log's carrier adds.
    line = summary_line(name=f"ray-train-{network}", network=network, instance_type="g6.12xlarge", nodes=2,
                        summary=_summary(tokens_per_s, step_s))
    path.write_text(f"{prefix}step 20/20 | loss 12.1800\n{prefix}{line}\n{prefix}transport gate: PASS\n")
    return path


def test_the_summary_line_round_trips_behind_prefixes():
    line = summary_line(name="n", network="efa", instance_type="p5.48xlarge", nodes=4, summary=_summary(1e6, 0.5))
    found = find_summaries([f"2026-11-29T10:00:00Z stdout F {line}", "noise", f"(pid=1) {line[:40]}"])
    assert len(found) == 1  # the truncated copy is not trusted
    assert found[0]["network"] == "efa" and found[0]["nodes"] == 4 and found[0]["throughput/tokens_per_s"] == 1e6


def test_ratio_of_efa_over_tcp(tmp_path):
    # GIVEN the EFA run at 2.06x the TCP run's throughput (the AWS reference's g6.12xlarge figure)
    efa = _driver_log(tmp_path / "efa.log", "efa", 20_600, 0.40, prefix="2026-11-29T10:00:00.000Z ")
    tcp = _driver_log(tmp_path / "tcp.log", "tcp", 10_000, 0.82)
    comparison = compare_logs([tcp, efa])
    assert comparison.ratio == pytest.approx(2.06)
    assert comparison.efa["name"] == "ray-train-efa"


def test_a_missing_run_is_an_error(tmp_path):
    efa = _driver_log(tmp_path / "efa.log", "efa", 20_600, 0.40)
    with pytest.raises(CompareError, match="no finished tcp run"):
        compare_logs([efa])


def test_runs_on_different_hardware_are_not_compared(tmp_path):
    efa = _driver_log(tmp_path / "efa.log", "efa", 20_600, 0.40)
    tcp = tmp_path / "tcp.log"
    tcp.write_text(summary_line(name="t", network="tcp", instance_type="p5.48xlarge", nodes=2, summary=_summary(1, 1)))
    with pytest.raises(CompareError, match="different hardware"):
        compare_logs([efa, tcp])


def test_cli_prints_the_ratio_and_json(tmp_path, capsys):
    efa = _driver_log(tmp_path / "efa.log", "efa", 20_600, 0.40)
    tcp = _driver_log(tmp_path / "tcp.log", "tcp", 10_000, 0.82)
    assert run_cli("compare", str(efa), str(tcp)) == 0
    assert "2.06x as fast as TCP" in capsys.readouterr().out
    assert run_cli("compare", "--json", str(efa), str(tcp)) == 0
    assert json.loads(capsys.readouterr().out)["efa_over_tcp"] == pytest.approx(2.06)
    assert run_cli("compare", str(efa)) == 2
