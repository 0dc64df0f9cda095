"""`ray-efa report RUN`: a run folder (local or s3://) to PNG charts and one self-contained HTML page.

The run folder is `<storagePath>/<run name>` (training.run_folder): metrics.jsonl (training.history) is required;
settings.json, summary.json and verdict.json (the driver's) are used where present, and each one missing is named on
the page, as are a cut last line (a run killed while writing it), unreadable lines, and steps that two attempts
reported (a resumed run: the later attempt is charted). S3 is read with boto3 (the base install's).
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray_efa.training.run_folder import METRICS_FILE, SETTINGS_FILE, SUMMARY_FILE, VERDICT_FILE

__all__ = [
    "ReportError",
    "RunRecords",
    "read_run",
    "charts",
    "render_html",
    "write_report",
    "CHARTS",
    "is_builtin",
    "metric_keys",
    "OWN_RUN_TRAINING_KEYS",
]


class ReportError(ValueError):
    """The run folder cannot be reported (no such folder, no metrics history, unreadable storage); exit 2."""


@dataclass(kw_only=True)
class RunRecords:
    """What a run folder holds, read and checked."""

    uri: str
    name: str
    history: list[dict[str, Any]]
    """One record per reported step, sorted by step (the latest attempt's where two reported it)."""
    notes: list[str] = field(default_factory=list)
    """Gaps and oddities, each a sentence: what is missing or was skipped, and why it matters."""
    settings: Any = None
    """core.settings.Settings, or None."""
    summary: dict[str, Any] | None = None
    verdict: dict[str, Any] | None = None


# -- reading ---------------------------------------------------------------------------------------------------------


def _reader(uri: str) -> tuple[Callable[[str], bytes | None], Callable[[], list[str]]]:
    """(read(name) -> bytes or None when absent, listing() -> the folder's entries) for a local folder or s3://."""
    if uri.startswith("s3://"):
        return _s3_reader(uri)
    folder = Path(uri).expanduser()
    if not folder.exists():
        raise ReportError(f"no such run folder: {uri}")
    if not folder.is_dir():
        raise ReportError(f"{uri} is a file; give the run folder (<storagePath>/<run name>) that holds {METRICS_FILE}")

    def read(name: str) -> bytes | None:
        path = folder / name
        try:
            return path.read_bytes() if path.is_file() else None
        except OSError as error:
            raise ReportError(f"cannot read {path}: {error.strerror or error}") from None

    return read, lambda: sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def _s3_reader(uri: str) -> tuple[Callable[[str], bytes | None], Callable[[], list[str]]]:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, _, prefix = uri[len("s3://") :].partition("/")
    prefix = prefix.strip("/")
    if not bucket or not prefix:
        raise ReportError(f"{uri}: give the run folder, s3://BUCKET/PREFIX/RUN-NAME")
    client = boto3.client("s3")

    def failed(error: Exception) -> ReportError:
        if isinstance(error, ClientError):
            e = error.response.get("Error", {})
            return ReportError(f"cannot read {uri}: {e.get('Code', '?')}: {e.get('Message', error)}")
        return ReportError(f"cannot read {uri}: {error}")

    def read(name: str) -> bytes | None:
        try:
            return client.get_object(Bucket=bucket, Key=f"{prefix}/{name}")["Body"].read()
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise failed(error) from None
        except BotoCoreError as error:  # no credentials, no network
            raise failed(error) from None

    def listing() -> list[str]:
        try:
            page = client.list_objects_v2(Bucket=bucket, Prefix=prefix + "/", Delimiter="/", MaxKeys=50)
        except (ClientError, BotoCoreError) as error:
            raise failed(error) from None
        names = [c["Prefix"][len(prefix) + 1 :].rstrip("/") for c in page.get("CommonPrefixes", [])]
        names += [o["Key"][len(prefix) + 1 :] for o in page.get("Contents", [])]
        return sorted(n for n in names if n and not n.startswith("."))

    return read, listing


def _parse_history(data: bytes, where: str, notes: list[str]) -> list[dict[str, Any]]:
    lines = data.decode("utf-8", errors="replace").split("\n")
    cut = lines[-1] != ""  # the writer ends every record with a newline: text after the last one was cut short
    by_step: dict[int, dict[str, Any]] = {}
    seen: dict[int, int] = {}
    bad: list[int] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            step = record["step"]
            if not isinstance(step, int) or isinstance(step, bool):
                raise TypeError("step is not an integer")
        except (ValueError, KeyError, TypeError):
            if not (cut and number == len(lines)):
                bad.append(number)
            continue
        by_step[step] = record  # a later attempt's report of a step wins
        seen[step] = seen.get(step, 0) + 1
    if cut:
        notes.append(
            f"the last line of {where} is cut short (the run was stopped while writing it, or is still "
            "writing): it is left out"
        )
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        notes.append(
            f"{len(bad)} line(s) of {where} could not be read (line {shown}; a line cut when an attempt "
            "was killed, before the next attempt appended): left out"
        )
    again = sorted(step for step, count in seen.items() if count > 1)
    if again:
        notes.append(
            f"steps {_ranges(again)} were reported by more than one attempt (the run resumed from a "
            "checkpoint): the latest attempt's values are charted"
        )
    return [by_step[step] for step in sorted(by_step)]


def _ranges(steps: list[int]) -> str:
    out, start = [], steps[0]
    for previous, current in zip(steps, steps[1:] + [None]):
        if current != previous + 1:
            out.append(str(start) if start == previous else f"{start}-{previous}")
            start = current
    return ", ".join(out)


def _json_file(read: Callable[[str], bytes | None], name: str, notes: list[str], missing: str) -> dict[str, Any] | None:
    data = read(name)
    if data is None:
        notes.append(f"no {name}: {missing}")
        return None
    try:
        value = json.loads(data)
        if not isinstance(value, dict):
            raise ValueError("not a JSON object")
        return value
    except ValueError as error:
        notes.append(f"{name} could not be read ({error}): left out")
        return None


def read_run(uri: str) -> RunRecords:
    """Read and check a run folder; ReportError when there is nothing to chart."""
    uri = uri.rstrip("/") or uri
    read, listing = _reader(uri)
    data = read(METRICS_FILE)
    if data is None:
        entries = listing()
        held = (
            ", ".join(entries[:8]) + (f" and {len(entries) - 8} more" if len(entries) > 8 else "")
            if entries
            else "nothing"
        )
        raise ReportError(
            f"{uri} has no metrics history ({METRICS_FILE}); it holds {held}. Give a run folder "
            "(<storagePath>/<run name>) of a run that ray-efa trained: its rank 0 writes the history "
            "as it trains"
        )
    notes: list[str] = []
    history = _parse_history(data, METRICS_FILE, notes)
    if not history:
        raise ReportError(
            f"{uri}/{METRICS_FILE} holds no complete report (the run was stopped before its first "
            "report, or the file is not a ray-efa history)"
        )
    settings = None
    raw = _json_file(read, SETTINGS_FILE, notes, "the settings are not shown and there is no prediction to draw")
    if raw is not None:
        from ray_efa.core.settings import Settings

        try:
            settings = Settings.from_json(json.dumps(raw))
        except ValueError as error:
            notes.append(
                f"{SETTINGS_FILE} does not hold valid settings for this version ({str(error)[:200]}): "
                "the settings are not shown and there is no prediction to draw"
            )
    summary = _json_file(
        read,
        SUMMARY_FILE,
        notes,
        "the run has not finished (it failed, was stopped, or still runs), so there is no summary table",
    )
    verdict = _json_file(
        read,
        VERDICT_FILE,
        notes,
        "the transport gate did not judge this run (it was stopped before the gate ran), so there is no verdict",
    )
    name = (summary or {}).get("name") or uri.rstrip("/").rsplit("/", 1)[-1]
    return RunRecords(
        uri=uri, name=str(name), history=history, notes=notes, settings=settings, summary=summary, verdict=verdict
    )


# -- charts ----------------------------------------------------------------------------------------------------------


OWN_RUN_TRAINING_KEYS = ("trainFunction", "trainConfig", "maxFailures", "dataset")
"""The training settings the stack acts on for a function of yours (it runs trainFunction with trainConfig, retries
lost workers maxFailures times, hands it the dataset's shards): the report's settings table shows these of a run of
yours, not the built-in function's knobs (steps, learningRate, ...) that such a run never used."""

_DATASET_KEYS = ("evalDataset", "evalFraction", "modelPath", "seqLen")
"""With a dataset, what shapes the shards a function of yours gets: the held-out split, the tokenizer, the packing."""


def own_run_training_keys(settings: Any) -> tuple[str, ...]:
    """The training settings a run of your function used (OWN_RUN_TRAINING_KEYS, and with a dataset _DATASET_KEYS)."""
    return OWN_RUN_TRAINING_KEYS + (_DATASET_KEYS if settings.training.dataset is not None else ())


CHARTS = ("loss", "throughput", "step_time", "memory", "optimizer")
"""The charts a report draws, each `<name>.png`, when the history holds their series."""


def _device(run: RunRecords) -> str | None:
    if run.summary and isinstance(run.summary.get("device"), str):
        return run.summary["device"]
    return None


def _prediction(run: RunRecords) -> tuple[float | None, str]:
    """core.perf's step time for the settings, when the run ran on the settings' GPU; else None and why not."""
    if run.settings is None:
        return None, ""
    from ray_efa.core import catalog
    from ray_efa.core.strategy import choose

    s = run.settings
    device = _device(run)
    planned = s.nodes.gpu_instance
    if device is None:
        return None, "no prediction line: the run has no summary saying which device it ran on"
    gpu = catalog.gpu_for_device_name(device)
    if gpu is None or gpu.name != planned.gpu.name:
        return None, (
            f"no prediction line: the run ran on {device}, the settings plan {s.nodes.gpu_node_count} x "
            f"{planned.name} ({planned.gpu.name}); core.perf predicts the latter"
        )
    p = choose(s).prediction
    return p.step_time_s, f"core.perf, {s.nodes.gpu_node_count} x {planned.name}, {p.strategy}, {s.workload.network}"


def is_builtin(run: RunRecords) -> bool:
    """Whether the run is the built-in train function's (its settings say so; without settings, its keys do)."""
    if run.settings is not None:
        return bool(run.settings.training.builtin)
    return any("throughput/tokens_per_s" in record for record in run.history)


def metric_keys(history: list[dict[str, Any]]) -> list[str]:
    """Every key the run reported a finite number for (bools are not numbers here), in first-reported order."""
    from ray_efa.ops import plots

    seen: dict[str, None] = {}
    for record in history:
        for key in record:
            if key not in ("step", "wall_time") and key not in seen and plots.has_series(history, key):
                seen[key] = None
    return list(seen)


def chart_file_stem(key: str, taken: set[str]) -> str:
    """The PNG name (no suffix) of a reported metric's chart: the key, with characters a file name should not hold
    (the "/" of train/loss) as "_"; a name a built-in chart already took gets "_metric"."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", key).strip("._") or "metric"
    while stem in taken:
        stem += "_metric"
    return stem


def metric_group(key: str, keys: list[str]) -> str:
    """The prefix a key shares with another reported key ("eval" for eval_loss and eval_accuracy, "train" for
    train/loss and train/lr); "" when it shares none. The page shows a group's charts together."""
    for separator in ("/", "_"):
        head, found, _ = key.partition(separator)
        if found and head and sum(k.startswith(head + separator) for k in keys) > 1:
            return head
    return ""


def charts(run: RunRecords) -> dict[str, Any]:
    """name -> matplotlib Figure for each chart the history can draw; what cannot be drawn goes into run.notes.

    The built-in's charts where its keys are there (loss as cross-entropy only for the built-in model's run); for a
    function of yours, also one chart per other numeric metric it reported, named after the key (accuracy.png)."""
    from ray_efa.ops import plots

    h, name = run.history, run.name
    builtin = is_builtin(run)
    out: dict[str, Any] = {}
    covered: set[str] = set()
    if builtin:
        out["loss"] = plots.loss_chart(h, run=name)
        covered |= {"loss", *plots.eval_loss_keys(h)}
    elif plots.has_series(h, "loss") and plots.eval_loss_keys(h):  # yours: one chart, labelled with the keys
        out["loss"] = plots.loss_chart(h, run=name, unit=None)
        covered |= {"loss", *plots.eval_loss_keys(h)}
    if plots.has_series(h, "throughput/tokens_per_s"):
        out["throughput"] = plots.throughput_chart(h, run=name)
        covered |= {"throughput/tokens_per_s", "throughput/mfu_pct"}
        if not plots.has_series(h, "throughput/mfu_pct"):
            run.notes.append(f"no MFU: {_device(run) or 'the device'} has no bf16 peak in the catalog")
    elif builtin:
        run.notes.append("no throughput chart: the history has no throughput/tokens_per_s")
    if plots.has_series(h, "time/step_s"):
        predicted, label = _prediction(run) if builtin else (None, "")
        if predicted is None and label:
            run.notes.append(label)
        out["step_time"] = plots.step_time_chart(
            h, run=name, predicted_s=predicted, predicted_label=label if predicted is not None else ""
        )
        covered.add("time/step_s")
    if plots.has_series(h, "memory/peak_allocated_gib") or plots.has_series(h, "memory/peak_rss_gib"):
        out["memory"] = plots.memory_chart(h, run=name, device=_device(run) or "device", **_memory_lines(run))
        covered |= {"memory/peak_allocated_gib", "memory/peak_reserved_gib", "memory/peak_rss_gib"}
    if plots.has_series(h, "lr"):
        out["optimizer"] = plots.optimizer_chart(h, run=name)
        covered |= {"lr", "grad_norm"}
    if builtin:
        if not plots.eval_loss_keys(h):
            run.notes.append("no evaluation loss in the history (the run did not evaluate)")
        return out
    keys = metric_keys(h)
    for key in (k for k in keys if k not in covered):
        out[chart_file_stem(key, set(out))] = plots.metric_chart(h, key, run=name, group=metric_group(key, keys))
    if not keys:
        run.notes.append("the run reported no numeric metric (ray.train.report with numbers): nothing to chart")
    return out


def _memory_lines(run: RunRecords) -> dict[str, float | None]:
    """The device's capacity (catalog, by the device the run reports) and the planner's estimate (same GPU only)."""
    from ray_efa.core import catalog

    device = _device(run)
    gpu = catalog.gpu_for_device_name(device) if device and device != "cpu" else None
    if gpu is None:
        run.notes.append(
            f"memory: {'a CPU run: resident memory, no device capacity' if device == 'cpu' else 'the device is not in the catalog: no capacity line'}"
        )
        return {"capacity_gib": None, "estimate_gib": None}
    estimate = None
    if run.settings is not None and run.settings.nodes.gpu_instance.gpu.name == gpu.name:
        from ray_efa.core.strategy import estimate as estimate_memory

        estimate = estimate_memory(run.settings).total_gib
    return {"capacity_gib": gpu.memory_gib, "estimate_gib": estimate}


# -- the page --------------------------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;
color:#222}h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left;
vertical-align:top}th{background:#f5f5f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}pre{background:#f7f7f7;padding:.8em;overflow-x:auto;
font-size:.85em}.note{color:#8a5a00}.pass{color:#17803d;font-weight:bold}.fail{color:#b00020;font-weight:bold}
.no-proof{color:#8a5a00;font-weight:bold}
"""


def _number(value: Any, fmt: str) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return format(value, fmt)
    return "-"


def _summary_rows(run: RunRecords) -> list[tuple[str, str]]:
    from ray_efa.training.run_summary import describe_hardware

    s = run.summary
    if not is_builtin(run):
        return _reported_rows(run)
    if s is None:
        last = run.history[-1]
        return [
            ("status", "not finished: no summary.json"),
            ("last reported step", str(last["step"])),
            ("loss at that step", _number(last.get("loss"), ".4f")),
        ]
    rows = [
        ("run", str(s.get("name", run.name))),
        ("network", _network(s)),
        ("hardware", describe_hardware(s)),
        (
            "steps",
            f"{int(s.get('start_step') or 0) + 1}..{_number(s.get('steps'), 'd')}"
            + (f" (resumed after step {s['start_step']})" if s.get("start_step") else ""),
        ),
        (
            "loss",
            f"{_number(s.get('first_loss'), '.4f')} (step {s.get('first_step', '?')}) -> "
            f"{_number(s.get('final_loss'), '.4f')}",
        ),
        ("step time (steady state)", f"{_number(s.get('time/step_s'), '.4f')} s"),
        (
            "tokens/s",
            f"{_number(s.get('throughput/tokens_per_s'), ',.0f')} "
            f"({_number(s.get('throughput/tokens_per_s_per_device'), ',.0f')} per device)",
        ),
        (
            "MFU",
            f"{_number(s.get('throughput/mfu_pct'), '.1f')}% (6N + 12LdS FLOPs per token)"
            if "throughput/mfu_pct" in s
            else "n/a (no bf16 peak for this device)",
        ),
    ]
    if "memory/peak_allocated_gib" in s:
        rows.append(
            (
                "peak memory (rank 0)",
                f"{_number(s['memory/peak_allocated_gib'], '.2f')} GiB allocated, "
                f"{_number(s.get('memory/peak_reserved_gib'), '.2f')} GiB reserved",
            )
        )
    elif "memory/peak_rss_gib" in s:
        rows.append(("peak memory (rank 0)", f"{_number(s['memory/peak_rss_gib'], '.2f')} GiB resident (CPU)"))
    if s.get("precision"):
        rows.append(
            (
                "precision",
                f"{s['precision']} matrix products"
                + (f", gradients {s['grad_reduce_dtype']} on the wire" if s.get("grad_reduce_dtype") else ""),
            )
        )
    if s.get("dataset"):
        rows.append(("data", str(s["dataset"])))
    if "eval_loss" in s:
        unigram = (
            f"; unigram baseline {_number(s['eval_unigram_entropy'], '.4f')} (a model that ignores context)"
            if "eval_unigram_entropy" in s
            else ""
        )
        rows.append(
            ("eval loss (held out)", f"{_number(s['eval_loss'], '.4f')} at step {s.get('eval_step', '?')}" + unigram)
        )
    rows.append(("wall time", f"{_number(s.get('time/elapsed_s'), '.1f')} s"))
    return rows


def _network(summary: dict[str, Any]) -> str:
    """The transport the run used: a local run's is gloo over loopback, whatever the network setting says."""
    from ray_efa.training.run_summary import LOCAL

    if summary.get("instance_type") == LOCAL:
        return (
            f"gloo over loopback (a local run; the network setting, {summary.get('network', '-')}, is a cluster run's)"
        )
    return str(summary.get("network", "-"))


def _reported_rows(run: RunRecords) -> list[tuple[str, str]]:
    """The summary of a function of yours, from what it reported: where it ran, the reports, each metric's first and
    last value, and the wall time between the first and the last report."""
    from ray_efa.training.run_summary import describe_hardware

    h, s = run.history, run.summary
    rows = [("run", run.name)]
    if s is None:
        rows.append(("status", "not finished: no summary.json"))
    else:
        rows += [("network", _network(s)), ("hardware", describe_hardware(s))]
    rows.append(("reports", f"{len(h)}, steps {h[0]['step']}..{h[-1]['step']}"))
    for key in metric_keys(h):
        steps, values = _first_last(h, key)
        rows.append(
            (key, f"{_number(values[0], '.4g')} (step {steps[0]}) -> {_number(values[1], '.4g')} (step {steps[1]})")
        )
    times = [r["wall_time"] for r in h if isinstance(r.get("wall_time"), (int, float))]
    if len(times) > 1:
        rows.append(("wall time", f"{times[-1] - times[0]:.1f} s from the first report to the last"))
    return rows


def _first_last(history: list[dict[str, Any]], key: str) -> tuple[tuple[int, int], tuple[float, float]]:
    from ray_efa.ops import plots

    steps, values = plots.series(history, key)
    return (steps[0], steps[-1]), (values[0], values[-1])


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...] | None = None) -> str:
    e = html.escape
    head = "<tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def _verdict_html(verdict: dict[str, Any] | None) -> str:
    e = html.escape
    if verdict is None:
        return '<p class="note">No verdict: the transport gate did not judge this run.</p>'
    status = str(verdict.get("status", "?"))
    parts = [
        f'<p>Expected <b>{e(str(verdict.get("expect", "?")))}</b>: <span class="{e(status)}">{e(status)}</span> '
        f"(exit {e(str(verdict.get('exit_code', '?')))}). {e(str(verdict.get('summary', '')))}</p>"
    ]
    processes = verdict.get("processes") or []
    if processes:
        rows = [
            (
                p.get("process", "?"),
                ",".join(map(str, p.get("ranks", []))) or "-",
                ", ".join(p.get("networks", [])) or "-",
                ", ".join(p.get("plugins", [])) or "-",
                ", ".join(p.get("providers", [])) or "-",
                p.get("verdict", "?"),
                p.get("cause") or "",
            )
            for p in processes
        ]
        parts.append(_table(rows, ("process", "ranks", "network", "plugin", "provider", "verdict", "likely cause")))
    parts += [f'<p class="note">note: {e(str(n))}</p>' for n in verdict.get("notes", [])]
    if verdict.get("table"):
        parts.append(f"<details><summary>the gate's table</summary><pre>{e(str(verdict['table']))}</pre></details>")
    return "\n".join(parts)


def render_html(run: RunRecords, images: dict[str, bytes]) -> str:
    """The report page: every image inline (data: URIs), no script, nothing fetched when it is viewed."""
    e = html.escape
    titles = {
        "loss": "Loss",
        "throughput": "Throughput",
        "step_time": "Step time",
        "memory": "Memory",
        "optimizer": "Learning rate and gradient norm",
    }
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>ray-efa run report: {e(run.name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Run report: {e(run.name)}</h1>",
        f"<p>Run folder <code>{e(run.uri)}</code>; {len(run.history)} reports, steps {run.history[0]['step']} to "
        f"{run.history[-1]['step']}.</p>",
        "<h2>Summary</h2>",
        _table(_summary_rows(run)),
    ]
    if run.notes:
        out += ["<h2>Gaps and notes</h2>", "<ul>", *(f'<li class="note">{e(n)}</li>' for n in run.notes), "</ul>"]
    out.append("<h2>Charts</h2>")
    keys = metric_keys(run.history)
    stems = {chart_file_stem(k, set()): k for k in keys}
    order = {name: (metric_group(stems[name], keys) if name in stems else "", i) for i, name in enumerate(images)}
    for name, png in sorted(images.items(), key=lambda item: order[item[0]]):  # a group's charts together
        data = base64.b64encode(png).decode("ascii")
        title = titles.get(name) if is_builtin(run) or name not in stems else stems[name]
        title = title or name
        out.append(f'<h3>{e(title)}</h3><img alt="{e(title)} of {e(run.name)}" src="data:image/png;base64,{data}">')
    out += ["<h2>Transport gate</h2>", _verdict_html(run.verdict), "<h2>Settings</h2>"]
    if run.settings is None:
        out.append('<p class="note">No settings: settings.json is missing or unreadable.</p>')
    else:
        from ray_efa.core.settings import setting_keys

        values = run.settings.to_context()
        shown = [(section, key) for key, (section, _) in setting_keys().items() if key in values]
        if not is_builtin(run):
            left_out = [
                key
                for section, key in shown
                if section == "training" and key not in own_run_training_keys(run.settings)
            ]
            shown = [(section, key) for section, key in shown if key not in left_out]
            note = (
                f"The built-in function's training settings ({', '.join(left_out)}) are left out: they drive the "
                f"built-in function, not {run.settings.training.train_function}, which gets them all in "
                'config["settings"] and reads what it chooses (its own parameters are trainConfig).'
            )
            out.append(f'<p class="note">{e(note)}</p>')
        rows = [
            (section, key, json.dumps(values[key]) if not isinstance(values[key], str) else values[key])
            for section, key in shown
        ]
        out.append(_table(rows, ("section", "key", "value")))
    out += [
        "<p><small>Written by <code>ray-efa report</code>; charts drawn with matplotlib.</small></p>",
        "</body></html>",
    ]
    return "\n".join(out) + "\n"


def write_report(run: RunRecords, out: Path) -> list[Path]:
    """Draw the charts and write them and index.html into `out` (core.output_dir.publish); the files written."""
    from ray_efa.core.output_dir import publish
    from ray_efa.ops.plots import png_bytes

    figures = charts(run)
    images = {name: png_bytes(figure, command="report") for name, figure in figures.items()}

    def build(staging: Path) -> None:
        for name, png in images.items():
            (staging / f"{name}.png").write_bytes(png)
        (staging / "index.html").write_text(render_html(run, images), encoding="utf-8")

    return publish(out, build, command="ray-efa report")
