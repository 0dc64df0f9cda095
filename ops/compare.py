"""The EFA-versus-TCP comparison: the same training job run once per transport, and the throughput ratio."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ray_efa.training.run_summary import find_summaries

__all__ = ["CompareError", "Comparison", "compare_logs"]

_TOKENS = "throughput/tokens_per_s"


class CompareError(ValueError):
    """The logs do not hold one finished run per transport."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Comparison:
    efa: dict
    tcp: dict

    @property
    def ratio(self) -> float:
        """EFA tokens/s over TCP tokens/s: how much faster the same job is on EFA."""
        return self.efa[_TOKENS] / self.tcp[_TOKENS]

    def as_dict(self) -> dict:
        return {"efa": self.efa, "tcp": self.tcp, "efa_over_tcp": self.ratio}

    def rows(self) -> list[tuple[str, str, str]]:
        def cell(run: dict, key: str, fmt: str) -> str:
            return format(run[key], fmt) if key in run else "-"

        return [
            ("run", self.efa["name"], self.tcp["name"]),
            ("hardware", f"{self.efa['nodes']} x {self.efa['instance_type']}", f"{self.tcp['nodes']} x {self.tcp['instance_type']}"),
            ("tokens/s", cell(self.efa, _TOKENS, ",.0f"), cell(self.tcp, _TOKENS, ",.0f")),
            ("step time (s)", cell(self.efa, "time/step_s", ".3f"), cell(self.tcp, "time/step_s", ".3f")),
            ("MFU (%)", cell(self.efa, "throughput/mfu_pct", ".1f"), cell(self.tcp, "throughput/mfu_pct", ".1f")),
        ]


def compare_logs(paths: list[Path]) -> Comparison:
    """The last run summary of each network found in the logs; raises CompareError unless both networks are there."""
    latest: dict[str, dict] = {}
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as lines:
            for summary in find_summaries(lines):
                latest[summary["network"]] = summary
    missing = [n for n in ("efa", "tcp") if n not in latest]
    if missing:
        raise CompareError(f"no finished {' or '.join(missing)} run in {', '.join(map(str, paths))} "
                           "(the driver prints a RAY_EFA_RUN_SUMMARY line at the end of each run)")
    hardware = {(r["instance_type"], r["nodes"]) for r in latest.values()}
    if len(hardware) > 1:
        raise CompareError(f"the runs used different hardware {sorted(hardware)}: the ratio would not be the transport's")
    return Comparison(efa=latest["efa"], tcp=latest["tcp"])
