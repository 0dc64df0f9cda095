"""The charts: a run's history (`ray-efa report`), the predicted scaling curve (`plan --plot`) and EFA against TCP
(`compare --plot`).

Each chart function takes plain data (the run folder's records, `plan --json`'s "scaling", `compare --json`) and
returns a matplotlib Figure, drawn with the Agg canvas (no display, no global pyplot state), so that tests can inspect
its lines and labels. `png_bytes` renders one; every PNG carries the PNG text key Software = "ray-efa ...", which is
how `is_ray_efa_png` knows a chart it may replace (core.output_dir.publish_file). matplotlib is the `plots` extra:
`pip install 'ray-efa-stack[plots]'`.
"""

from __future__ import annotations

import io
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "SOFTWARE",
    "png_bytes",
    "is_ray_efa_png",
    "series",
    "loss_chart",
    "metric_chart",
    "throughput_chart",
    "step_time_chart",
    "memory_chart",
    "optimizer_chart",
    "scaling_chart",
    "comparison_chart",
    "recommendation_chart",
]

SOFTWARE = "ray-efa"
"""The start of every chart's PNG Software text."""

_DPI = 110
_COLORS = {"fsdp": "#1f77b4", "hsdp": "#ff7f0e"}
_NETWORK_STYLE: dict[str, Any] = {"efa": "-", "tcp": "--"}  # matplotlib line styles
_EFA, _TCP = "#2ca02c", "#7f7f7f"


def _figure(*, width: float = 8.0, height: float = 4.2, rows: int = 1, cols: int = 1, sharex: bool = False):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, cols, sharex=sharex, squeeze=False)
    for ax in axes.flat:
        ax.grid(True, alpha=0.3)
    return figure, axes


def png_bytes(figure: Figure, *, command: str, dpi: int = _DPI) -> bytes:
    """The figure as PNG bytes, its Software text naming the command that drew it."""
    import matplotlib

    buffer = io.BytesIO()
    figure.savefig(
        buffer,
        format="png",
        dpi=dpi,
        metadata={"Software": f"{SOFTWARE} {command} (matplotlib {matplotlib.__version__})"},
    )
    return buffer.getvalue()


def _png_texts(data: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG (stdlib only); {} when `data` is not a PNG."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return {}
    texts, at = {}, 8
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        body = data[at + 8 : at + 8 + length]
        if kind == b"tEXt" and b"\0" in body:
            key, _, value = body.partition(b"\0")
            texts[key.decode("latin-1")] = value.decode("latin-1")
        if kind == b"IEND":
            break
        at += 12 + length
    return texts


def is_ray_efa_png(path: Path) -> bool:
    """Whether `path` is a PNG that ray-efa drew (its Software text says so): a chart a later run may replace."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(1 << 16)  # the text chunks come before the image data
    except OSError:
        return False
    return _png_texts(head).get("Software", "").startswith(SOFTWARE + " ")


# -- a run's history -------------------------------------------------------------------------------------------------


def series(history: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the records that have a number for `key`."""
    steps, values = [], []
    for record in history:
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            steps.append(int(record["step"]))
            values.append(float(value))
    return steps, values


def has_series(history: Sequence[Mapping[str, Any]], key: str) -> bool:
    return bool(series(history, key)[0])


def eval_loss_keys(history: Sequence[Mapping[str, Any]]) -> list[str]:
    """The evaluation losses the history holds (eval/loss, eval_loss, ...), sorted."""
    return sorted({k for r in history for k in r if k.startswith("eval") and "loss" in k and has_series(history, k)})


def _headroom(ax: Axes, *values: float | None) -> None:
    """y from 0 to a little above the highest of `values` (lines drawn at the top edge are hard to read)."""
    top = max((v for v in values if v is not None and math.isfinite(v)), default=0.0)
    ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)


def _legend_below(figure: Figure, lines: list) -> None:
    """One legend under the axes, for charts with a second y axis (a legend inside would cover a line)."""
    figure.legend(
        lines, [str(line.get_label()) for line in lines], loc="outside lower center", ncol=len(lines), frameon=False
    )


def _steps_axis(ax: Axes, title: str) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel("optimizer step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title, loc="left")


def loss_chart(history: Sequence[Mapping[str, Any]], *, run: str, unit: str | None = "cross-entropy, nats") -> Figure:
    """Training loss per reported step, each evaluation loss the history holds, and the held-out unigram baseline
    (eval_unigram_entropy: what a model that ignores context scores) where the run measured it. `unit`: the built-in
    model's; None for a function of yours, whose losses are labelled with their keys (no unit guessed)."""
    figure, axes = _figure()
    ax = axes[0, 0]
    steps, values = series(history, "loss")
    ax.plot(steps, values, marker="o", markersize=3, label="training loss" if unit else "loss")
    for key in eval_loss_keys(history):
        ax.plot(*series(history, key), marker="s", markersize=4, linestyle="--", label=key)
    unigram = series(history, "eval_unigram_entropy")[1]
    if unigram:
        ax.axhline(unigram[-1], color="gray", linestyle=":", label=f"unigram baseline (held out), {unigram[-1]:.2f}")
    ax.set_ylabel(f"loss ({unit})" if unit else "loss")
    _steps_axis(ax, f"Loss: {run}")
    if unit is None:
        ax.set_xlabel("step (the reported step, else the report's number)")
    ax.legend(loc="upper right")
    return figure


def metric_chart(history: Sequence[Mapping[str, Any]], key: str, *, run: str, group: str = "") -> Figure:
    """One metric a function reported, per reported step: titled and labelled with its key (the report does not
    guess units for a function it did not write)."""
    figure, axes = _figure()
    ax = axes[0, 0]
    steps, values = series(history, key)
    ax.plot(steps, values, marker="o", markersize=3, label=key)
    ax.set_ylabel(key)
    _steps_axis(ax, f"{key}: {run}" + (f" ({group})" if group else ""))
    ax.set_xlabel("step (the reported step, else the report's number)")
    return figure


def throughput_chart(history: Sequence[Mapping[str, Any]], *, run: str) -> Figure:
    """Tokens/s (all devices) per reported step; MFU on the right axis where the device has a catalog peak."""
    figure, axes = _figure()
    ax = axes[0, 0]
    steps, values = series(history, "throughput/tokens_per_s")
    lines = ax.plot(steps, values, marker="o", markersize=3, color="#1f77b4", label="tokens/s (all devices)")
    ax.set_ylabel("tokens per second")
    _headroom(ax, *values)
    ax.yaxis.set_major_formatter(_thousands())
    if has_series(history, "throughput/mfu_pct"):
        right = ax.twinx()
        mfu = series(history, "throughput/mfu_pct")
        lines += right.plot(
            *mfu,
            marker="s",
            markersize=3,
            color="#d62728",
            linestyle="--",
            label="MFU, % of the bf16 peak (6N + 12LdS FLOPs/token)",
        )
        right.set_ylabel("MFU (%)")
        _headroom(right, *mfu[1])
    _steps_axis(ax, f"Throughput: {run}")
    _legend_below(figure, lines)
    return figure


def _thousands():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _: f"{value:,.0f}")


def step_time_chart(
    history: Sequence[Mapping[str, Any]], *, run: str, predicted_s: float | None = None, predicted_label: str = ""
) -> Figure:
    """Step time per reported step (the wall time between reports over the steps between), and the plan's prediction."""
    import statistics

    figure, axes = _figure()
    ax = axes[0, 0]
    steps, values = series(history, "time/step_s")
    steady = values[1:] or values
    scale, unit = (1000.0, "ms") if statistics.median(steady + [predicted_s or steady[0]]) < 2.0 else (1.0, "s")
    ax.plot(
        steps, [v * scale for v in values], marker="o", markersize=3, label="measured (mean over each report interval)"
    )
    if predicted_s is not None:
        ax.axhline(
            predicted_s * scale,
            color="#d62728",
            linestyle="--",
            label=f"predicted {predicted_s * scale:,.3g} {unit}" + (f" ({predicted_label})" if predicted_label else ""),
        )
    ax.set_ylabel(f"step time ({unit})")
    _headroom(ax, *(v * scale for v in steady), (predicted_s or 0.0) * scale)
    if len(values) > 1 and values[0] > 3 * statistics.median(steady):  # the warm-up would flatten everything else
        ax.annotate(
            f"step {steps[0]}: {values[0] * scale:,.0f} {unit} (warm-up, off the chart)",
            xy=(0.01, 0.97),
            xycoords="axes fraction",
            va="top",
            fontsize="small",
            color="#555555",
        )
    _steps_axis(ax, f"Step time: {run}")
    ax.legend(loc="upper right")
    return figure


def memory_chart(
    history: Sequence[Mapping[str, Any]],
    *,
    run: str,
    device: str,
    capacity_gib: float | None = None,
    estimate_gib: float | None = None,
) -> Figure:
    """Peak memory of rank 0 per reported step: allocated and reserved GPU memory against the device's capacity (and
    the memory planner's estimate), or the resident memory of a CPU run."""
    figure, axes = _figure()
    ax = axes[0, 0]
    keys = (
        (("memory/peak_allocated_gib", "peak allocated"), ("memory/peak_reserved_gib", "peak reserved"))
        if has_series(history, "memory/peak_allocated_gib")
        else (("memory/peak_rss_gib", "peak resident (CPU)"),)
    )
    highest = []
    for (key, label), marker in zip(keys, "os"):
        steps, values = series(history, key)
        ax.plot(steps, values, marker=marker, markersize=3, label=label)
        highest += values
    if capacity_gib is not None:
        ax.axhline(capacity_gib, color="#d62728", linewidth=2, label=f"capacity of one {device}: {capacity_gib:g} GiB")
    if estimate_gib is not None:
        ax.axhline(estimate_gib, color="#9467bd", linestyle="--", label=f"planner's estimate: {estimate_gib:.1f} GiB")
    ax.set_ylabel("GiB (rank 0)")
    _headroom(ax, *highest, capacity_gib, estimate_gib)
    _steps_axis(ax, f"Memory: {run}")
    ax.legend(loc="lower right")
    return figure


def optimizer_chart(history: Sequence[Mapping[str, Any]], *, run: str) -> Figure:
    """The learning rate and, on the right axis, the gradient norm before clipping."""
    figure, axes = _figure()
    ax = axes[0, 0]
    from matplotlib.ticker import FuncFormatter

    lr = series(history, "lr")
    lines = ax.plot(*lr, color="#1f77b4", label="learning rate")
    ax.set_ylabel("learning rate")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:.1e}" if value else "0"))
    _headroom(ax, *lr[1])
    if has_series(history, "grad_norm"):
        right = ax.twinx()
        norm = series(history, "grad_norm")
        lines += right.plot(*norm, color="#ff7f0e", marker="o", markersize=3, label="gradient norm (before clipping)")
        right.set_ylabel("gradient norm")
        _headroom(right, *norm[1])
    _steps_axis(ax, f"Learning rate and gradient norm: {run}")
    _legend_below(figure, lines)
    return figure


# -- plan --plot -----------------------------------------------------------------------------------------------------


def _masked(points: Iterable[Mapping[str, Any]], key: str, fits: bool) -> tuple[list[int], list[float]]:
    """(nodes, values) with NaN where the point does (fits=True) or does not (fits=False) fit memory: a line with gaps."""
    xs, ys = [], []
    for p in points:
        xs.append(int(p["nodes"]))
        ys.append(float(p[key]) if bool(p["fits"]) == fits and p[key] is not None else math.nan)
    return xs, ys


def scaling_chart(scaling: Mapping[str, Any]) -> Figure:
    """`plan --json`'s "scaling": predicted tokens/s in total and per GPU, and USD per million tokens, against the
    node count, for each strategy on EFA and TCP; the plan's own point starred; node counts where nothing fits shaded."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    figure, axes = _figure(width=9.0, height=10.0, rows=3, sharex=True)
    panels = (
        ("tokens_per_s", "tokens/s, all GPUs", _thousands()),
        ("tokens_per_s_per_gpu", "tokens/s per GPU", _thousands()),
        ("usd_per_million_tokens", "USD per million tokens", None),
    )
    chosen = scaling["chosen"]
    series = scaling["series"]
    nodes = sorted({int(p["nodes"]) for s in series for p in s["points"]})
    nothing_fits = [n for n in nodes if not any(p["fits"] for s in series for p in s["points"] if p["nodes"] == n)]
    for (key, label, formatter), ax in zip(panels, axes[:, 0]):
        for s in series:
            style = {"color": _COLORS.get(s["strategy"], "black"), "linestyle": _NETWORK_STYLE.get(s["network"], ":")}
            ax.plot(
                *_masked(s["points"], key, True),
                marker="o",
                markersize=4,
                label=f"{s['strategy']}, {s['network'].upper()}",
                **style,
            )
            ax.plot(
                *_masked(s["points"], key, False),
                marker="x",
                markersize=5,
                linewidth=0.8,
                alpha=0.35,
                **{**style, "linestyle": ":"},
            )
            if s["network"] == chosen["network"] and s["strategy"] == chosen["strategy"]:
                point = next((p for p in s["points"] if p["nodes"] == chosen["nodes"]), None)
                if point is not None and point[key] is not None:
                    ax.plot(
                        [chosen["nodes"]],
                        [point[key]],
                        marker="*",
                        markersize=18,
                        color="gold",
                        markeredgecolor="black",
                        linestyle="none",
                        zorder=5,
                        label="this plan",
                    )
        for n in nothing_fits:
            ax.axvspan(n - 0.5, n + 0.5, color="#d62728", alpha=0.12, linewidth=0)
        ax.set_ylabel(label)
        top = max((p[key] for s in series for p in s["points"] if p[key] is not None), default=1.0)
        ax.set_ylim(0, top * 1.15)  # room above the highest point (and the star)
        if formatter is not None:
            ax.yaxis.set_major_formatter(formatter)
    bottom = axes[-1, 0]
    bottom.set_xlabel(f"GPU nodes ({scaling['instance']}, {scaling['gpus_per_node']} x {scaling['gpu']} each)")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_xlim(min(nodes) - 0.5, max(nodes) + 0.5)
    handles: list[Any] = [  # Line2D and Patch legend entries
        *(Line2D([], [], color=c, label=s) for s, c in _COLORS.items()),
        *(Line2D([], [], color="black", linestyle=ls, label=n.upper()) for n, ls in _NETWORK_STYLE.items()),
        Line2D(
            [],
            [],
            marker="*",
            markersize=14,
            color="gold",
            markeredgecolor="black",
            linestyle="none",
            label=f"this plan: {chosen['nodes']} nodes, {chosen['strategy']}, {chosen['network'].upper()}",
        ),
        Line2D([], [], marker="x", color="black", alpha=0.35, linestyle=":", label="does not fit GPU memory"),
    ]
    if nothing_fits:
        handles.append(Patch(color="#d62728", alpha=0.12, label="no strategy fits GPU memory"))
    axes[0, 0].legend(handles=handles, loc="upper left", fontsize="small", ncol=2)
    # two lines: model, batch and instance type on one overflow the figure's width
    figure.suptitle(
        f"Predicted scaling of {scaling['model']} on {scaling['instance']}\n({scaling['batch']})", fontweight="bold"
    )
    axes[0, 0].set_title(
        "core.perf's step-time model: a lead, not a measurement; cost: the whole stack at on-demand prices",
        loc="left",
        fontsize="small",
    )
    return figure


# -- compare --plot --------------------------------------------------------------------------------------------------


def comparison_chart(comparison: Mapping[str, Any]) -> Figure:
    """`compare --json`: tokens/s and step time of the EFA and the TCP run as bars, with the ratio."""
    figure, axes = _figure(width=9.0, height=4.5, cols=2)
    efa, tcp = comparison["efa"], comparison["tcp"]
    panels = (
        ("throughput/tokens_per_s", "tokens/s (all devices)", "{:,.0f}"),
        ("time/step_s", "step time (s)", "{:.3f}"),
    )
    for (key, label, fmt), ax in zip(panels, axes[0]):
        values = [efa.get(key), tcp.get(key)]
        heights = [v if isinstance(v, (int, float)) else 0.0 for v in values]
        bars = ax.bar(["EFA", "TCP"], heights, color=[_EFA, _TCP], label=label)
        ax.bar_label(bars, labels=[fmt.format(v) if isinstance(v, (int, float)) else "n/a" for v in values], padding=3)
        ax.set_ylabel(label)
        ax.set_ylim(0, max(heights + [1e-9]) * 1.18)
        ax.grid(True, axis="y", alpha=0.3)
        ax.grid(False, axis="x")
        if key == "throughput/tokens_per_s":
            ax.yaxis.set_major_formatter(_thousands())
    axes[0, 0].set_title("throughput: higher is better", loc="left", fontsize="small")
    axes[0, 1].set_title("step time: lower is better", loc="left", fontsize="small")
    ratio = comparison["efa_over_tcp"]
    from ray_efa.training.run_summary import describe_hardware

    where = (
        describe_hardware(efa)
        if comparison.get("same_hardware", True)
        else (
            f"different hardware: {describe_hardware(efa)} vs {describe_hardware(tcp)}, so not the transport's ratio alone"
        )
    )
    figure.suptitle(
        f"EFA runs the job {ratio:.2f}x as fast as TCP\n{efa.get('name')} vs {tcp.get('name')}, {where}",
        fontweight="bold",
    )
    return figure


def recommendation_chart(recommendations: Mapping[str, Any], *, top: int = 20) -> Figure:
    """`plan --recommend --json`'s ranking: predicted USD per million tokens of the `top` cheapest (instance type,
    nodes), cheapest first, with each one's tokens/s beside it."""
    rows = list(recommendations["recommendations"])[:top]
    figure, axes = _figure(width=9.0, height=max(3.0, 0.32 * len(rows) + 1.2), cols=2)
    cost, speed = axes[0][0], axes[0][1]
    labels = [f"{r['nodes']} x {r['instance_type']}" for r in rows]
    where = list(range(len(rows)))[::-1]  # cheapest at the top
    cost.barh(where, [r["usd_per_million_tokens"] for r in rows], color=_EFA)
    cost.set_yticks(where, labels)
    cost.set_xlabel("USD per million tokens")
    speed.barh(where, [r["tokens_per_s"] for r in rows], color=_TCP)
    speed.set_yticks(where, [""] * len(rows))
    speed.set_xlabel("tokens/s, all GPUs")
    speed.xaxis.set_major_formatter(_thousands())
    figure.suptitle(f"Predicted cost to train {recommendations['tokens']:,} tokens, each with its own plan")
    return figure
