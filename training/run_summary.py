"""One machine-readable line per finished run, so that two runs' logs can be compared (EFA versus TCP).

The driver prints `RAY_EFA_RUN_SUMMARY {json}` after its table. The line survives whatever carries the driver's
output (`kubectl logs` of the RayJob's submitter, `ray job logs`, a file): `find_summaries` finds it behind any prefix.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = [
    "MARKER",
    "LOCAL",
    "summary_line",
    "summary_record",
    "find_summaries",
    "hardware",
    "describe_hardware",
    "gate_fields",
    "TRAINING_LEVERS",
    "training_levers",
    "training_differences",
    "own_function_differences",
]

MARKER = "RAY_EFA_RUN_SUMMARY"


LOCAL = "local"
"""The instance_type of a run on this machine (`ray-efa train --local`): it names no cloud instance."""


def summary_line(*, name: str, network: str, instance_type: str, nodes: int, summary: dict[str, Any]) -> str:
    """The line for one run: MARKER and summary_record's JSON."""
    record = summary_record(name=name, network=network, instance_type=instance_type, nodes=nodes, summary=summary)
    return f"{MARKER} {json.dumps(record, sort_keys=True)}"


def summary_record(
    *, name: str, network: str, instance_type: str, nodes: int, summary: dict[str, Any]
) -> dict[str, Any]:
    """One run: its name, transport, where it ran, and its steady-state figures (training.metrics).

    Where it ran: `instance_type` (the gpuInstanceType, or "local" for a run on this machine), `hosts` (machines the
    workers ran on), `devices` (workers: GPUs, or CPU processes) and `device` ("cpu" or the GPU's name). `summary`'s
    measured `hosts` and `devices` win over the planned `nodes`; `nodes` stays as an alias of `hosts`.
    """
    hosts = summary.get("hosts", nodes)
    return {"name": name, "network": network, "instance_type": instance_type, **summary, "hosts": hosts, "nodes": hosts}


def gate_fields(verdict: Any) -> dict[str, Any]:
    """What the transport gate proved, for the summary: `gate_status` (pass, fail, no-proof), `gate_exit_code`,
    `transport` (the transport the gate proved carried the job: its `expect` on a pass, else None) and `gate_hosts`
    (the hosts the gate counted). None verdict (the gate did not run): no proof."""
    if verdict is None:
        return {"gate_status": "no-proof", "gate_exit_code": None, "transport": None, "gate_hosts": None}
    passed = verdict.exit_code == 0
    return {
        "gate_status": verdict.status,
        "gate_exit_code": verdict.exit_code,
        "transport": verdict.expect if passed else None,
        "gate_hosts": verdict.hosts,
    }


def hardware(record: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """What two runs must share for their throughput ratio to be the transport's: (instance type, device, devices,
    hosts); a field an older summary lacks is None."""
    return (
        record.get("instance_type"),
        record.get("device"),
        record.get("devices"),
        record.get("hosts", record.get("nodes")),
    )


def describe_hardware(record: dict[str, Any]) -> str:
    """ "2 x g6.12xlarge, 8 x NVIDIA L4", or "this machine, 2 x cpu" for a local run."""
    hosts = record.get("hosts", record.get("nodes", "?"))
    devices = record.get("devices")
    kind = record.get("instance_type", "?")
    text = "this machine" if kind == LOCAL else f"{hosts} x {kind}"
    return text + (f", {devices} x {record.get('device', '?')}" if devices is not None else "")


TRAINING_LEVERS = (
    "model",
    "seq_len",
    "micro_batch",
    "grad_accumulation",
    "precision",
    "compile",
    "activation_checkpointing",
    "sharding",
    "grad_reduce_dtype",
)
"""The training settings a run summary records (`training`): a transport ratio needs them equal on both sides."""


def training_levers(settings: Any) -> dict[str, Any]:
    """The run's training levers as its driver decided them (core.strategy.resolve: no `auto` left), by
    TRAINING_LEVERS: what `compare` checks before it calls a ratio the transport's."""
    from ray_efa.core.strategy import resolve

    try:
        t = resolve(settings).training
    except Exception:  # noqa: BLE001 - the summary must still be printed; the levers as set then (auto shows)
        t = settings.training
    levers = {
        "model": t.preset.name,
        "seq_len": t.seq_len,
        "micro_batch": t.micro_batch,
        "grad_accumulation": t.grad_accumulation,
        "precision": t.precision,
        "compile": t.compile,
        "activation_checkpointing": t.activation_checkpointing,
        "sharding": t.sharding,
        "grad_reduce_dtype": t.grad_reduce_dtype,
    }
    if not settings.training.builtin:  # a function of your own: what it was given is what it trained by
        levers.update(
            train_function=settings.training.train_function, train_config=dict(settings.training.train_config)
        )
    return levers


def training_differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The TRAINING_LEVERS on which two run summaries' `training` differ: lever -> (a's, b's); empty when either has
    none recorded (an older driver)."""
    ta, tb = a.get("training"), b.get("training")
    if not isinstance(ta, dict) or not isinstance(tb, dict):
        return {}
    out = {k: (ta.get(k), tb.get(k)) for k in TRAINING_LEVERS if ta.get(k) != tb.get(k)}
    out.update(own_function_differences(ta, tb))
    return out


_UNSET = "(unset)"


def own_function_differences(ta: dict[str, Any], tb: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Where two runs' own train functions (`training.train_function`) and the trainConfig they were given
    (`training.train_config`) differ: "train_function" and "trainConfig.KEY" -> (a's, b's), a key one run lacks
    being "(unset)"; empty when neither recorded them (the built-in function, or an older driver)."""
    out: dict[str, tuple[Any, Any]] = {}
    if "train_function" not in ta and "train_function" not in tb:
        return out
    if ta.get("train_function") != tb.get("train_function"):
        out["train_function"] = (ta.get("train_function"), tb.get("train_function"))
    ca, cb = ta.get("train_config") or {}, tb.get("train_config") or {}
    for key in sorted(set(ca) | set(cb)):
        if ca.get(key, _UNSET) != cb.get(key, _UNSET):
            out[f"trainConfig.{key}"] = (ca.get(key, _UNSET), cb.get(key, _UNSET))
    return out


def find_summaries(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Every run summary in `lines`, in order (prefixes such as Ray's or a timestamp are ignored)."""
    found: list[dict[str, Any]] = []
    for line in lines:
        at = line.find(MARKER + " {")
        if at >= 0:
            try:
                found.append(json.loads(line[at + len(MARKER) + 1 :].strip()))
            except json.JSONDecodeError:
                continue  # a line cut by a log shipper: not a summary we can trust
    return found
