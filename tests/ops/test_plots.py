"""`plan --plot` and `compare --plot`: the charts drawn from the commands' own JSON, the files they write, and the
files they refuse to write (core.output_dir.publish_file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from matplotlib.patches import Rectangle
from PIL import Image

from ray_efa.core.settings import Settings
from ray_efa.ops import plots
from ray_efa.ops.scaling import scaling
from ray_efa.training.run_summary import summary_line
from tests.ops.cli_helpers import run_cli


def _assert_png(path: Path, min_bytes: int = 20_000) -> None:
    with Image.open(path) as image:
        image.verify()
    assert path.stat().st_size > min_bytes and plots.is_ray_efa_png(path)


def _lines(figure) -> dict[str, list]:
    out: dict[str, list] = {}
    for ax in figure.axes:
        for line in ax.get_lines():
            out.setdefault(str(line.get_label()), []).append(line)
    return out


def test_plan_plot_draws_the_scaling_curve_of_plan_json(tmp_path, capsys, monkeypatch):
    # GIVEN the default plan (2 x g6.12xlarge), as `plan --json` prints it, WHEN --plot is given too
    chart = tmp_path / "charts" / "scaling.png"
    assert run_cli("plan", "--json", "--plot", str(chart)) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # stdout stays one JSON document; the path goes to stderr
    assert f"scaling chart: {chart}" in captured.err
    _assert_png(chart)
    # THEN the JSON's scaling holds 1..8 nodes for each strategy on EFA and TCP, with memory and cost
    s = data["scaling"]
    assert s["chosen"] == {"nodes": 2, "network": "efa", "strategy": data["performance"]["efa"]["strategy"]}
    assert {(x["network"], x["strategy"]) for x in s["series"]} == {
        ("efa", "fsdp"),
        ("efa", "hsdp"),
        ("tcp", "fsdp"),
        ("tcp", "hsdp"),
    }
    for series in s["series"]:
        assert [p["nodes"] for p in series["points"]] == list(range(1, 9))
        for p in series["points"]:
            assert p["tokens_per_s"] == pytest.approx(p["tokens_per_s_per_gpu"] * p["gpus"], rel=1e-4)
            assert p["usd_per_million_tokens"] == pytest.approx(
                p["usd_per_hour"] / p["tokens_per_s"] / 3600 * 1e6, rel=1e-4
            )
    # and the plan's own point is the prediction plan prints
    chosen = next(x for x in s["series"] if (x["network"], x["strategy"]) == ("efa", s["chosen"]["strategy"]))
    assert chosen["points"][1]["step_time_s"] == pytest.approx(data["performance"]["efa"]["step_time_s"], rel=1e-3)
    # WHEN the chart is drawn from that JSON THEN each panel has every series, the plan starred, units on the axes
    figure = plots.scaling_chart(s)
    lines = _lines(figure)
    for label in ("fsdp, EFA", "fsdp, TCP", "hsdp, EFA", "hsdp, TCP"):
        assert len(lines[label]) == 3  # total, per GPU, USD per million tokens
    stars = lines["this plan"]
    assert len(stars) == 3 and all(list(star.get_xdata()) == [2] for star in stars)
    fsdp_efa = next(x for x in s["series"] if (x["network"], x["strategy"]) == ("efa", "fsdp"))
    assert list(lines["fsdp, EFA"][0].get_xdata()) == list(range(1, 9))
    drawn = lines["fsdp, EFA"][0].get_ydata()  # NaN: a gap where the strategy does not fit memory
    for point, y in zip(fsdp_efa["points"], drawn):
        assert y == pytest.approx(point["tokens_per_s"], rel=1e-4) if point["fits"] else y != y
    assert [ax.get_ylabel() for ax in figure.axes] == [
        "tokens/s, all GPUs",
        "tokens/s per GPU",
        "USD per million tokens",
    ]
    # and the node counts where no strategy fits are shaded: none with the defaults (loss chunk 1024) ...
    nothing_fits = [n for n in range(1, 9) if not any(x["points"][n - 1]["fits"] for x in s["series"])]
    assert len(figure.axes[0].patches) == len(nothing_fits)
    # ... and one node of 4 x L4 with a 4096-token loss chunk, which fits neither strategy there at 8 bytes a logit
    # (the model before the measured 5.4 beyond 1024 tokens compiled; resolved plans are cached: emptied first)
    from ray_efa.core import memory, strategy

    monkeypatch.setattr(memory, "COMPILED_LOSS_BYTES_PER_LOGIT", 8)
    monkeypatch.setattr(strategy, "_RESOLVED", {})
    big = scaling(
        Settings.from_context(
            {
                "lossChunkSize": 4096,
                "microBatch": 2,
                "gradAccumulation": 1,
                "precision": "bf16",
                "activationCheckpointing": False,
            }
        )
    )
    assert [n for n in range(1, 9) if not any(x["points"][n - 1]["fits"] for x in big["series"])] == [1]
    assert len(plots.scaling_chart(big).axes[0].patches) == 1


def test_the_scaling_curve_reaches_the_planned_node_count():
    data = scaling(Settings.from_context({"gpuInstanceType": "p5.48xlarge", "gpuNodeCount": 12}), max_nodes=4)
    assert data["max_nodes"] == 12 and data["chosen"]["nodes"] == 12
    assert scaling(Settings.from_context({"gpuNodeCount": 40}))["max_nodes"] == 64


def test_plan_plot_replaces_its_own_chart_but_never_a_users_file(tmp_path, capsys):
    chart = tmp_path / "scaling.png"
    assert run_cli("plan", "--plot", str(chart), "--max-nodes", "3") == 0
    first = chart.read_bytes()
    # a second run replaces the chart it drew
    assert run_cli("plan", "--plot", str(chart), "--max-nodes", "4") == 0
    assert chart.read_bytes() != first
    capsys.readouterr()
    # but a file ray-efa did not draw is left alone, and the command says why (exit 2, no traceback)
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"\x89PNG\r\n\x1a\nnot ours")
    assert run_cli("plan", "--plot", str(mine)) == 2
    assert "the file exists and ray-efa did not write it" in capsys.readouterr().err
    assert mine.read_bytes() == b"\x89PNG\r\n\x1a\nnot ours"


@pytest.mark.parametrize("case", ["folder", "below-a-file", "source-folder"])
def test_plan_plot_refuses_a_path_it_may_not_write_before_any_work(tmp_path, capsys, case):
    import ray_efa.core.output_dir as output_dir

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    path, message = {
        "folder": (tmp_path, "it is a folder; give a file name"),
        "below-a-file": (blocker / "chart.png", "is a file, not a folder"),
        "source-folder": (output_dir.PROJECT_ROOT / "core" / "chart.png", "inside the project's source folder core/"),
    }[case]
    assert run_cli("plan", "--json", "--plot", str(path)) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err
    assert json.loads(captured.out)["exit_code"] == 2  # --json: the failure on stdout too, not a plan
    assert not (output_dir.PROJECT_ROOT / "core" / "chart.png").exists()


@pytest.mark.parametrize("value", ["0", "65", "two"])
def test_plan_max_nodes_is_checked(capsys, value):
    assert run_cli("plan", "--max-nodes", value) == 2
    assert f"--max-nodes: must be a whole number between 1 and 64, got '{value}'" in capsys.readouterr().err


def _log(path: Path, network: str, tokens_per_s: float, step_s: float, **where) -> Path:
    summary = {
        "steps": 20,
        "first_loss": 12.2,
        "final_loss": 12.1,
        "time/step_s": step_s,
        "throughput/tokens_per_s": tokens_per_s,
        "throughput/tokens_per_s_per_device": tokens_per_s / 8,
        "device": "NVIDIA L4",
        "devices": 8,
        "hosts": 2,
        "gate_status": "pass",
        "gate_exit_code": 0,
        "transport": {"efa": "efa", "tcp": "socket"}[network],
        "gate_hosts": 2,
        **where,
    }
    path.write_text(
        summary_line(
            name=f"ray-train-{network}", network=network, instance_type="g6.12xlarge", nodes=2, summary=summary
        )
        + "\n"
    )
    return path


def test_compare_plot_draws_efa_against_tcp_with_the_ratio(tmp_path, capsys):
    # GIVEN the two runs' driver logs (EFA at 2.06x TCP) WHEN compare --json --plot runs
    efa, tcp = _log(tmp_path / "efa.log", "efa", 20_600, 0.40), _log(tmp_path / "tcp.log", "tcp", 10_000, 0.82)
    chart = tmp_path / "compare.png"
    assert run_cli("compare", str(efa), str(tcp), "--json", "--plot", str(chart)) == 0
    data = json.loads(capsys.readouterr().out)
    _assert_png(chart, min_bytes=15_000)
    # THEN the chart drawn from that JSON has both runs' tokens/s and step time as bars, and the ratio in its title
    figure = plots.comparison_chart(data)
    throughput, step_time = figure.axes
    from matplotlib.patches import Rectangle

    assert [b.get_height() for b in throughput.patches if isinstance(b, Rectangle)] == [20_600, 10_000]
    assert [b.get_height() for b in step_time.patches if isinstance(b, Rectangle)] == pytest.approx([0.40, 0.82])
    assert [t.get_text() for t in throughput.get_xticklabels()] == ["EFA", "TCP"]
    assert figure.get_suptitle().startswith("EFA runs the job 2.06x as fast as TCP")
    assert throughput.get_ylabel() == "tokens/s (all devices)" and step_time.get_ylabel() == "step time (s)"


def test_compare_plot_names_different_hardware_and_refuses_a_users_file(tmp_path, capsys):
    efa, tcp = _log(tmp_path / "efa.log", "efa", 20_600, 0.40), _log(tmp_path / "tcp.log", "tcp", 10_000, 0.82, hosts=1)
    chart = tmp_path / "compare.png"
    assert run_cli("compare", str(efa), str(tcp), "--allow-different-hardware", "--plot", str(chart)) == 0
    assert (
        "different hardware"
        in plots.comparison_chart(
            {
                "efa": json.loads(efa.read_text().split(" ", 1)[1]),
                "tcp": json.loads(tcp.read_text().split(" ", 1)[1]),
                "efa_over_tcp": 2.06,
                "same_hardware": False,
            }
        ).get_suptitle()
    )
    capsys.readouterr()
    mine = tmp_path / "mine.png"
    mine.write_text("mine")
    assert run_cli("compare", str(efa), str(tcp), "--plot", str(mine)) == 2
    assert "ray-efa did not write it" in capsys.readouterr().err and mine.read_text() == "mine"


def test_a_png_is_ours_only_when_its_software_text_says_so(tmp_path):
    from matplotlib.figure import Figure

    figure = Figure()
    figure.add_subplot().plot([1, 2])
    ours, theirs = tmp_path / "ours.png", tmp_path / "theirs.png"
    ours.write_bytes(plots.png_bytes(figure, command="test"))
    figure.savefig(theirs)  # matplotlib's own Software text, not ray-efa's
    assert plots.is_ray_efa_png(ours) and not plots.is_ray_efa_png(theirs)
    assert not plots.is_ray_efa_png(tmp_path / "absent.png")


def test_plan_recommend_plot_draws_the_ranking_of_its_json(tmp_path, capsys):
    chart = tmp_path / "recommend.png"
    assert run_cli("plan", "--recommend", "--json", "--max-nodes", "2", "--plot", str(chart)) == 0
    captured = capsys.readouterr()
    ranking = json.loads(captured.out)
    assert f"recommendation chart: {chart}" in captured.err
    _assert_png(chart, min_bytes=10_000)
    figure = plots.recommendation_chart(ranking)
    cost = figure.axes[0]
    bars = [bar for bar in cost.patches if isinstance(bar, Rectangle)]
    assert len(bars) == len(cost.patches)
    drawn = sorted(((bar.get_y(), bar.get_width()) for bar in bars), reverse=True)  # top bar first
    expected = [r["usd_per_million_tokens"] for r in ranking["recommendations"][:20]]
    assert [width for _, width in drawn] == pytest.approx(expected)
    assert [t.get_text() for t in cost.get_yticklabels()][0] == (
        f"{ranking['recommendations'][0]['nodes']} x {ranking['recommendations'][0]['instance_type']}"
    )
