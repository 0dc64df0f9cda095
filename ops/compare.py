"""The EFA-versus-TCP comparison: the same training job run once per transport, and the throughput ratio; and any two
runs side by side.

Each run's RAY_EFA_RUN_SUMMARY line (training.run_summary) names where it ran, its training levers as decided and
what its transport gate proved; a transport ratio needs one run proven EFA and one proven Socket, each across >= 2
hosts, with the same training levers (precision, sharding, reduce dtype, batch, ...: the comparison RayJob carries
the EFA job's); runs on different hardware or host counts are refused unless the caller allows it, because their
ratio would not be the transport's. `compare_runs` puts any two runs side by side (two log files or run folders:
two precisions, two instance types), saying what differs, and never calls their ratio a transport's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray_efa.training.run_folder import SUMMARY_FILE
from ray_efa.training.run_summary import (
    TRAINING_LEVERS,
    describe_hardware,
    find_summaries,
    hardware,
    training_differences,
)

__all__ = ["CompareError", "Comparison", "compare_logs", "REQUIRED", "RunPair", "compare_runs", "read_runs"]

_TOKENS = "throughput/tokens_per_s"

REQUIRED = ("name", "network", _TOKENS)
"""Fields every run summary must have for a comparison (the hardware fields are checked separately)."""


class CompareError(ValueError):
    """The logs do not hold one usable finished run per transport; the message names the file and the field."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Comparison:
    efa: dict[str, Any]
    tcp: dict[str, Any]
    sources: dict[str, Path] = field(default_factory=dict)
    """network -> the log file its summary came from."""
    same_hardware: bool = True

    @property
    def ratio(self) -> float:
        """EFA tokens/s over TCP tokens/s: how much faster the same job is on EFA."""
        return self.efa[_TOKENS] / self.tcp[_TOKENS]

    def as_dict(self) -> dict[str, Any]:
        return {
            "efa": self.efa,
            "tcp": self.tcp,
            "efa_over_tcp": self.ratio,
            "same_hardware": self.same_hardware,
            "logs": {k: str(v) for k, v in self.sources.items()},
        }

    def rows(self) -> list[tuple[str, str, str]]:
        def cell(run: dict[str, Any], key: str, fmt: str) -> str:
            value = run.get(key)
            return format(value, fmt) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"

        return [
            ("run", str(self.efa["name"]), str(self.tcp["name"])),
            ("hardware", describe_hardware(self.efa), describe_hardware(self.tcp)),
            ("tokens/s", cell(self.efa, _TOKENS, ",.0f"), cell(self.tcp, _TOKENS, ",.0f")),
            ("step time (s)", cell(self.efa, "time/step_s", ".3f"), cell(self.tcp, "time/step_s", ".3f")),
            ("MFU (%)", cell(self.efa, "throughput/mfu_pct", ".1f"), cell(self.tcp, "throughput/mfu_pct", ".1f")),
        ]


def _check(summary: object, path: Path) -> dict[str, Any]:
    """The summary when it can be compared; CompareError naming the file and the field when not."""
    if not isinstance(summary, dict):
        raise CompareError(f"{path}: a RAY_EFA_RUN_SUMMARY line does not hold a JSON object")
    for key in REQUIRED:
        if key not in summary:
            raise CompareError(
                f"{path}: the run summary of {summary.get('name', '(unnamed run)')!s} has no field {key!r}"
            )
    tokens = summary[_TOKENS]
    if isinstance(tokens, bool) or not isinstance(tokens, (int, float)) or not math.isfinite(tokens) or tokens <= 0:
        raise CompareError(
            f"{path}: the run summary of {summary['name']!s} has {_TOKENS}={tokens!r}; a finished run "
            "has a positive number of tokens per second"
        )
    if summary["network"] not in ("efa", "tcp"):
        raise CompareError(
            f"{path}: the run summary of {summary['name']!s} has network={summary['network']!r}; allowed: efa, tcp"
        )
    return summary


def compare_logs(paths: list[Path], *, allow_different_hardware: bool = False) -> Comparison:
    """The last run summary of each network found in the logs.

    Raises CompareError (naming the file and the field) unless both networks are there with valid summaries, and,
    unless `allow_different_hardware`, unless both ran on the same hardware (training.run_summary.hardware).
    Raises OSError for a file that cannot be read.
    """
    latest: dict[str, dict] = {}
    sources: dict[str, Path] = {}
    for path in paths:
        for summary in read_runs(Path(path)):  # a driver log, or a run folder's summary.json
            latest[summary["network"]] = summary
            sources[summary["network"]] = Path(path)
    missing = [n for n in ("efa", "tcp") if n not in latest]
    if missing:
        raise CompareError(
            f"no finished {' or '.join(missing)} run in {', '.join(map(str, paths))} "
            "(the driver prints a RAY_EFA_RUN_SUMMARY line at the end of each run)"
        )
    same = hardware(latest["efa"]) == hardware(latest["tcp"])
    if not same and not allow_different_hardware:
        raise CompareError(
            f"the runs used different hardware: efa on {describe_hardware(latest['efa'])} ({sources['efa']}), tcp on "
            f"{describe_hardware(latest['tcp'])} ({sources['tcp']}); the ratio would not be the transport's "
            "(--allow-different-hardware compares them anyway)"
        )
    differ = training_differences(latest["efa"], latest["tcp"])
    if differ:
        raise CompareError(
            "no transport ratio: the runs trained differently ("
            + "; ".join(f"{k}: efa {a!r}, tcp {b!r}" for k, (a, b) in differ.items())
            + f"; {sources['efa']}, {sources['tcp']}): their ratio would be of two jobs, not two transports. Run the "
            "comparison job `ray-efa manifests` writes (rayjob-tcp carries the EFA job's levers), or put the two runs "
            "side by side with `ray-efa compare --runs`"
        )
    problems = [
        p for n, want in (("efa", "efa"), ("tcp", "socket")) if (p := transport_problem(latest[n], want, sources[n]))
    ]
    if problems:
        raise CompareError("no transport ratio: " + "; ".join(problems))
    return Comparison(efa=latest["efa"], tcp=latest["tcp"], sources=sources, same_hardware=same)


def transport_problem(run: dict[str, Any], want: str, path: Path) -> str | None:
    """Why `run` cannot stand for transport `want` in a ratio (None when it can): it ran on one host (no network
    carried its traffic), its summary has no gate verdict (an older driver), or the gate did not prove `want`."""
    name = f"{run.get('name', '(unnamed run)')} ({path})"
    hosts = run.get("gate_hosts") or run.get("hosts", run.get("nodes"))
    if not isinstance(hosts, int) or hosts < 2:
        return f"{name} ran on {hosts if hosts is not None else 'an unknown number of'} host(s): one host exercises no network"
    if "transport" not in run:
        return f"{name} has no transport gate verdict in its summary (written by an older driver); rerun it"
    if run["transport"] is None:
        return f"{name}: the transport gate proved no transport (gate {run.get('gate_status', 'no-proof')})"
    if run["transport"] != want:
        return f"{name}: the gate proved {run['transport']}, not {want} (the same transport on both sides)"
    return None


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The run summaries at `path`: a driver log's RAY_EFA_RUN_SUMMARY lines, or a run folder's summary.json.
    CompareError for a folder without one; OSError for what cannot be read."""
    path = Path(path)
    if path.is_dir():
        summary = path / SUMMARY_FILE
        if not summary.is_file():
            raise CompareError(
                f"{path}: a folder without {SUMMARY_FILE}: not a finished run's folder (the driver "
                "writes it at the end of a run), nor a log file"
            )
        try:
            record = json.loads(summary.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise CompareError(f"{summary}: not JSON ({error.msg}, line {error.lineno})") from None
        return [_check(record, summary)]
    with open(path, encoding="utf-8", errors="replace") as lines:
        return [_check(summary, path) for summary in find_summaries(lines)]


_WHERE = ("network", "transport", "instance_type", "hosts", "devices", "device")


@dataclass(frozen=True, kw_only=True, slots=True)
class RunPair:
    """Two runs side by side: `b`'s throughput over `a`'s, and everything that differs between them. Not a transport
    ratio (compare_logs is), unless the only difference is the network and the gates proved each transport."""

    a: dict[str, Any]
    b: dict[str, Any]
    sources: tuple[Path, Path]

    @property
    def ratio(self) -> float:
        return self.b[_TOKENS] / self.a[_TOKENS]

    @property
    def differences(self) -> dict[str, tuple[Any, Any]]:
        """Where they ran and how they trained, where the two differ: field -> (a's, b's)."""
        out = {k: (self.a.get(k), self.b.get(k)) for k in _WHERE if self.a.get(k) != self.b.get(k)}
        out.update(training_differences(self.a, self.b))
        if not isinstance(self.a.get("training"), dict) or not isinstance(self.b.get("training"), dict):
            out["training"] = (
                "unknown" if not isinstance(self.a.get("training"), dict) else "recorded",
                "unknown" if not isinstance(self.b.get("training"), dict) else "recorded",
            )
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "b_over_a": self.ratio,
            "transport_ratio": False,
            "differences": {k: list(v) for k, v in self.differences.items()},
            "runs": [str(p) for p in self.sources],
        }

    def rows(self) -> list[tuple[str, str, str]]:
        def cell(run: dict[str, Any], key: str, fmt: str) -> str:
            value = run.get(key)
            return format(value, fmt) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"

        def lever(run: dict[str, Any], key: str) -> str:
            training = run.get("training")
            return str(training.get(key, "-")) if isinstance(training, dict) else "-"

        rows = [
            ("run", str(self.a["name"]), str(self.b["name"])),
            ("network", str(self.a.get("network")), str(self.b.get("network"))),
            ("hardware", describe_hardware(self.a), describe_hardware(self.b)),
            ("tokens/s", cell(self.a, _TOKENS, ",.0f"), cell(self.b, _TOKENS, ",.0f")),
            ("step time (s)", cell(self.a, "time/step_s", ".3f"), cell(self.b, "time/step_s", ".3f")),
            ("MFU (%)", cell(self.a, "throughput/mfu_pct", ".1f"), cell(self.b, "throughput/mfu_pct", ".1f")),
        ]
        own = [run.get("training", {}) for run in (self.a, self.b) if isinstance(run.get("training"), dict)]
        if any("train_function" in t for t in own):
            # functions of your own: what each was given, not the built-in function's levers (which it never ran)
            rows.append(("train function", lever(self.a, "train_function"), lever(self.b, "train_function")))
            configs = [(run.get("training") or {}).get("train_config") or {} for run in (self.a, self.b)]
            rows += [
                (
                    f"trainConfig.{k}",
                    json.dumps(configs[0][k]) if k in configs[0] else "-",
                    json.dumps(configs[1][k]) if k in configs[1] else "-",
                )
                for k in sorted(set(configs[0]) | set(configs[1]))
            ]
        else:
            rows += [(k.replace("_", " "), lever(self.a, k), lever(self.b, k)) for k in TRAINING_LEVERS]
        return rows


def compare_runs(a: Path, b: Path) -> RunPair:
    """The last run at `a` and the last at `b` (log files or run folders) side by side, whatever differs."""
    found = []
    for path in (a, b):
        runs = read_runs(path)
        if not runs:
            raise CompareError(
                f"no finished run in {path} (the driver prints a RAY_EFA_RUN_SUMMARY line at the end "
                "of each run, and writes summary.json into its run folder)"
            )
        found.append(runs[-1])
    return RunPair(a=found[0], b=found[1], sources=(Path(a), Path(b)))
