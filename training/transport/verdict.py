"""A TransportReport (what a set of NCCL logs says, per process) and its verdict: each process judged with its
likely cause, the job's verdict, its notes and its table. The rules are training.transport's docstring; the reasons
for each are in `Verdict`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ray_efa.core.pod_env import GATE_LOG_ENV, GATE_LOG_SUBSYSTEMS
from ray_efa.training import efa_counters
from ray_efa.training.transport.evidence import ProcessEvidence
from ray_efa.training.transport.lines import OTHER_PROVIDERS, hint_id, transport_kind

EXPECTS: tuple[str, ...] = ("efa", "ib", "socket")
"""Transports a verdict can expect: EFA through aws-ofi-nccl, InfiniBand verbs, NCCL's TCP Socket transport."""

EXIT_PASS, EXIT_CONTRADICTED, EXIT_NO_PROOF = 0, 1, 3

_LABEL = {
    "efa": "EFA (aws-ofi-nccl, libfabric provider efa)",
    "ib": "InfiniBand (NET/IB)",
    "socket": "TCP sockets (NET/Socket)",
}

_GATE_LOG = " ".join(f"{name}={value}" for name, value in GATE_LOG_ENV.items())
"""What the gate needs the NCCL log to be (core.pod_env.GATE_LOG_ENV): NCCL_DEBUG=INFO."""
MAX_NOTES = 5
"""The most WARN lines one process's evidence keeps, and notes a report gives (one more when it says there were more)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TransportReport:
    """What a set of NCCL logs says, per process; `verdict(expect)` judges it."""

    processes: tuple[ProcessEvidence, ...]
    lines: int
    nccl_lines: int
    info_lines: int
    warn_lines: int
    repeated: int
    nccl_versions: tuple[str, ...]
    warnings: tuple[str, ...]
    """The first few distinct NCCL WARN messages, for a human."""
    hints: tuple[str, ...]
    hint_expects: tuple[frozenset[str], ...]

    @property
    def multi_node(self) -> bool:
        """Whether any communicator in the logs spans nodes."""
        return any(p.multi_node for p in self.processes)

    @property
    def providers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(pr for p in self.processes for pr in p.providers))

    @property
    def max_nnodes(self) -> int:
        """The largest node count any communicator logged (0 where none logged one)."""
        return max((s.nnodes or 0 for p in self.processes for s in p.shapes), default=0)

    @property
    def host_names(self) -> tuple[str, ...]:
        """The distinct host names of NCCL's prefixes, sorted."""
        return tuple(sorted({p.host for p in self.processes if p.host}))

    @property
    def node_ips(self) -> tuple[str, ...]:
        """The distinct node IPs of Ray's prefixes, sorted."""
        return tuple(sorted({p.ip for p in self.processes if p.ip}))

    def job_hosts(self, hosts: int | None = None) -> tuple[int | None, str]:
        """How many hosts the job ran on, and how that is known ("2 hosts (given by the caller)", "3 hosts (host names
        a, b, c)"): the caller's `hosts`, else the most of NCCL's nNodes, the distinct NCCL host names and the distinct
        Ray node IPs; (None, "unknown") where nothing says 2 or more.

        Distinct host names mean distinct nodes to NCCL too: its host hash is the host name plus the boot id, so two
        pods on one machine talk through the network transport like two machines.
        """
        if hosts is not None:
            return hosts, f"{hosts} host{'s' if hosts != 1 else ''} (given by the caller)"
        names, ips, nnodes = self.host_names, self.node_ips, self.max_nnodes
        best = max(len(names), len(ips), nnodes)
        if best < 2:
            return None, "unknown"
        if nnodes == best:
            return best, f"{best} hosts (NCCL's nNodes {nnodes})"
        if len(names) == best:
            return best, f"{best} hosts (host names {_few(names)})"
        return best, f"{best} hosts (node IPs {_few(ips)})"

    def verdict(self, expect: str = "efa", *, hosts: int | None = None) -> Verdict:
        """Judge the logs against the expected transport ("efa", "ib" or "socket").

        `hosts` is how many hosts the job ran on, where the caller knows it (the driver does; `check-transport
        --hosts N`). 1 makes every process whose communicator shape was not logged single-node; 2 or more lets a
        non-expected network that a process chose contradict the expectation even without channel lines. It never
        makes a pass: that takes NCCL's own word (channel lines, or a chosen network on a communicator with nNodes > 1).
        """
        if expect not in EXPECTS:
            raise ValueError(f"expect must be one of {', '.join(EXPECTS)}, got {expect!r}")
        if hosts is not None and (isinstance(hosts, bool) or not isinstance(hosts, int) or hosts < 1):
            raise ValueError(f"hosts must be a whole number >= 1, got {hosts!r}")
        job = self.job_hosts(hosts)
        rows = tuple(sorted((_judge(p, self, expect, job=job, given=hosts) for p in self.processes), key=_row_order))
        return _verdict(self, expect, rows, job=job, given=hosts)

    def to_json(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "nccl_lines": self.nccl_lines,
            "info_lines": self.info_lines,
            "warn_lines": self.warn_lines,
            "repeated": self.repeated,
            "nccl_versions": list(self.nccl_versions),
            "multi_node": self.multi_node,
            "warnings": list(self.warnings),
            "processes": [_process_json(p) for p in self.processes],
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class ProcessVerdict:
    """One process judged against the expected transport."""

    evidence: ProcessEvidence
    status: str
    """"pass", "FAIL", "single-node" (chose a network no traffic used), "unproven" (crossed nodes, no transport
    line) or "no proof" (nothing about transport or shape)."""
    transports: tuple[str, ...]
    """The transports that count as evidence for this process (see transport_kind)."""
    cause: str | None
    basis: str | None = None
    cause_id: str | None = None
    """The cause as a short name: a hint's id ("ofi-init-failed"), "nccl-error", "provider-tcp", "chose-socket"..."""
    """Why the evidence counts: "traffic" (channel lines), "multi-node communicator" (a network chosen where nNodes >
    1), or, for a chosen network that can only contradict, "chosen on a job of 2 host names: a, b" or "chosen right
    after a plugin failure"."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """The gate's answer. Exit codes: 0 every process that crossed nodes used `expect` and none used another;
    1 some process used another transport (per-rank disagreement included); 3 nothing proves either way."""

    expect: str
    exit_code: int
    summary: str
    """One line for logs and CI."""
    rows: tuple[ProcessVerdict, ...]
    notes: tuple[str, ...]
    hosts: int | None = None
    """How many hosts the job ran on, where known (TransportReport.job_hosts)."""
    hosts_source: str = "unknown"
    """How that is known: "2 hosts (given by the caller)", "2 hosts (NCCL's nNodes 2)", "2 hosts (host names a, b)"."""
    counters: efa_counters.CounterVerdict | None = None
    """The EFA hardware counters' verdict, where snapshots were given (see `gate`)."""
    cause: str = ""
    """Why, as a short name (tests/training/fixtures/nccl/expected.csv records it): "traffic" or "multi-node
    communicator" for a pass; "nccl-error", a hint's id ("ofi-init-failed"), "provider-<name>", "chose-<transport>"
    for a failure; "provider-unknown", "missing-nodes", "missing-ranks", "init-incomplete", "single-node",
    "no-nccl-lines", "warn-only", "unproven", "no-transport-line" for no proof."""

    @property
    def status(self) -> str:
        return {EXIT_PASS: "pass", EXIT_CONTRADICTED: "fail"}.get(self.exit_code, "no-proof")

    @property
    def passed(self) -> bool:
        return self.exit_code == EXIT_PASS

    def render_table(self, width: int | None = None) -> str:
        """A fixed-width table, one row per process, then the notes.

        When the table is wider than `width` (a terminal or CI log of 80 columns), each process becomes a block of
        "field: value" lines instead, so that nothing is cut: the values are the same.
        """
        header = (
            "PROCESS",
            "RANKS",
            "nRanks/nNodes/localRanks",
            "NETWORK",
            "PLUGIN / PROVIDER",
            "CHANNELS",
            "VERDICT",
            "LIKELY CAUSE",
        )
        table = [header] + [_row_cells(r) for r in self.rows]
        if not self.rows:
            table.append(("(no NCCL process found)",) + ("",) * (len(header) - 1))
        widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row[:-1], widths)) + "  " + row[-1] for row in table]
        lines = [line.rstrip() for line in lines]
        lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * len(header[-1]))
        if width is not None and self.rows and max(map(len, lines)) > width:
            import textwrap

            lines = []
            for row in table[1:]:
                lines.append(f"{row[0]}  {row[-2]}")
                for name, value in (*zip(header[1:-2], row[1:-2]), (header[-1], row[-1])):
                    if value:  # wrapped at spaces only: a value (a number, a library name) is never split
                        lines += textwrap.wrap(
                            f"{name}: {value}",
                            width=max(20, width),
                            initial_indent="  ",
                            subsequent_indent="      ",
                            break_long_words=False,
                            break_on_hyphens=False,
                        )
        for note in self.notes:
            if width is None:
                lines.append(f"note: {note}")
            else:
                import textwrap

                lines += textwrap.wrap(
                    f"note: {note}",
                    width=max(20, width),
                    subsequent_indent="      ",
                    break_long_words=False,
                    break_on_hyphens=False,
                )
        if self.counters is not None and self.counters.nodes:
            lines += ["", self.counters.render_table(width)]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "expect": self.expect,
            "status": self.status,
            "exit_code": self.exit_code,
            "summary": self.summary,
            "notes": list(self.notes),
            "hosts": self.hosts,
            "hosts_source": self.hosts_source,
            "cause": self.cause,
            "counters": None if self.counters is None else self.counters.to_json(),
            "processes": [
                {
                    **_process_json(r.evidence),
                    "verdict": r.status,
                    "transports": list(r.transports),
                    "cause": r.cause,
                    "basis": r.basis,
                }
                for r in self.rows
            ],
        }


def _judge(
    p: ProcessEvidence, report: TransportReport, expect: str, *, job: tuple[int | None, str], given: int | None
) -> ProcessVerdict:
    # A process that logged no provider shares the job's: Ray's deduplication keeps only one process's copy of
    # "Selected provider is efa" when every process printed the same line.
    providers = p.providers or report.providers
    seen: set[str] = set()
    for name in p.net_transports:
        seen |= transport_kind(name, providers)
    basis = "traffic" if seen else None
    multi = p.multi_node
    if multi is None and given == 1 and not report.multi_node:
        multi = False  # the caller ran the job on one host, and no communicator says otherwise
    # The chosen network counts only where the communicator spans nodes; a process whose shape was not logged (old
    # NCCL, or its comm line folded away by Ray) counts when the job spans nodes: the safe side is to not pass.
    if multi or (multi is None and (report.multi_node or p.net_transports)):
        for name in p.networks:
            seen |= transport_kind(name, providers)
        basis = basis or ("multi-node communicator" if p.networks else None)
    elif multi is None:
        # Where NCCL did not say its communicator spans nodes, a network it chose can still contradict (never
        # confirm) the expectation: when the job ran on several hosts, or when the plugin that carries the expected
        # transport failed just before (NCCL then falls back to Socket, and the job runs on, slowly).
        chosen: set[str] = set()
        for name in p.networks:
            chosen |= transport_kind(name, providers)
        failure = _plugin_failure(p, report, expect)
        if not chosen and not p.channels and failure and p.socket_net_initialized and not p.ib_net_initialized:
            chosen = {"socket"}  # NCCL <= 2.5 prints no "Using network": its Socket transport initialized instead
        wrong = chosen - {expect} - _unknown(expect)
        hosts, how = job
        if wrong and hosts is not None and hosts >= 2:
            seen, basis = wrong, f"chosen on a job of {how}"
        elif wrong and failure:
            seen, basis = wrong, "chosen right after a plugin failure"
    transports = tuple(sorted(seen))
    if p.error is not None:
        return ProcessVerdict(
            evidence=p,
            status="error",
            transports=transports,
            cause=f"a NCCL call failed: {p.error}",
            basis=basis,
            cause_id="nccl-error",
        )
    if wrong := seen - {expect} - _unknown(expect):
        cause_id, cause = _cause(p, report, expect, wrong, chose=bool(basis and basis.startswith("chosen")))
        return ProcessVerdict(
            evidence=p, status="FAIL", transports=transports, cause=cause, basis=basis, cause_id=cause_id
        )
    if seen - {expect}:
        return ProcessVerdict(
            evidence=p,
            status="provider unknown",
            transports=transports,
            basis=basis,
            cause="aws-ofi-nccl carried it, but no line of the job names its libfabric provider",
            cause_id="provider-unknown",
        )
    if seen:
        return ProcessVerdict(evidence=p, status="pass", transports=transports, cause=None, basis=basis)
    if multi:
        return ProcessVerdict(evidence=p, status="unproven", transports=(), cause=None)
    if multi is False:
        return ProcessVerdict(evidence=p, status="single-node", transports=(), cause=None)
    return ProcessVerdict(evidence=p, status="no proof", transports=(), cause=None)


def _plugin_failure(p: ProcessEvidence, report: TransportReport, expect: str) -> bool:
    """Whether this process, or another of the job, logged that the plugin which carries `expect` failed to load or
    initialize (a process's own failure lines are often folded away by Ray, or cut from an excerpt)."""
    return any(expect in e for e in p.hint_expects) or any(expect in e for e in report.hint_expects)


def _unknown(expect: str) -> set[str]:
    """Kinds that neither confirm nor contradict `expect`: aws-ofi-nccl on an unlogged provider may be EFA or not."""
    return {"libfabric"} if expect == "efa" else set()


def _cause(
    p: ProcessEvidence, report: TransportReport, expect: str, wrong: set[str], *, chose: bool = False
) -> tuple[str, str]:
    """The most likely reason a process used `wrong` instead of `expect` (its own log lines, the job's, or a guess),
    as (short name, text)."""
    for texts, expects, where in (
        (p.hints, p.hint_expects, ""),
        (report.hints, report.hint_expects, " (logged by another process)"),
    ):
        relevant = [t for t, e in zip(texts, expects) if expect in e]
        if relevant:
            return hint_id(relevant[0]), relevant[0] + where
    got = sorted(wrong)[0]
    if got == "socket":
        return "chose-socket", (
            "NCCL chose Socket with no plugin error logged: NCCL_NET=Socket or "
            "NCCL_NET_PLUGIN=none is set, or no net plugin is installed"
        )
    if got == "ib":
        return "chose-ib", "NCCL chose InfiniBand verbs, not the OFI plugin: check NCCL_NET_PLUGIN=ofi and NCCL_NET"
    if got.startswith("libfabric/"):
        provider = got.split("/", 1)[1]
        return (
            f"provider-{provider.split(';')[0].lower()}",
            f"aws-ofi-nccl ran on libfabric provider {provider}, not efa: check FI_PROVIDER=efa",
        )
    if got == "libfabric":
        return "chose-libfabric", "aws-ofi-nccl (provider not logged) carried the traffic, not the expected transport"
    if got == "efa":
        return "chose-efa", (
            f"EFA {'was chosen' if chose else 'carried the traffic'} although another transport was "
            "expected (the comparison run's NCCL_NET=Socket was not applied)"
        )
    return "chose-other", f"NCCL used network {got.split('/', 1)[-1]}"


def _row_order(r: ProcessVerdict) -> tuple[int, str]:
    return (min(r.evidence.ranks) if r.evidence.ranks else 1 << 30, r.evidence.key)


def _verdict(
    report: TransportReport,
    expect: str,
    rows: tuple[ProcessVerdict, ...],
    *,
    job: tuple[int | None, str] = (None, "unknown"),
    given: int | None = None,
) -> Verdict:
    label = _LABEL[expect]
    errors = [r for r in rows if r.status == "error"]
    failed = [r for r in rows if r.status == "FAIL"]
    passed = [r for r in rows if r.status == "pass"]
    unknown = [r for r in rows if r.status == "provider unknown"]
    unproven = [r for r in rows if r.status == "unproven"]
    notes = _notes(report, expect, unproven, given=given)

    def verdict(code: int, summary: str, cause: str) -> Verdict:
        return Verdict(
            expect=expect,
            exit_code=code,
            summary=summary,
            rows=rows,
            notes=notes,
            hosts=job[0],
            hosts_source=job[1],
            cause=cause,
        )

    if errors:  # whatever the channels say: a call that failed means the traffic did not run over them
        first = errors[0]
        summary = (
            f"FAIL: NCCL calls failed in {len(errors)} of {len(rows)} processes, so the collectives did not run "
            f"as their channels say; first error, {process_name(first)}: {first.evidence.error}"
        )
        if failed:
            summary += (
                f"; {len(failed)} processes also used "
                f"{', '.join(sorted({_short(t) for r in failed for t in r.transports if t != expect}))}"
            )
        return verdict(EXIT_CONTRADICTED, summary, "nccl-error")
    if failed:
        seen = sorted({_short(t) for r in failed for t in r.transports if t != expect and t not in _unknown(expect)})
        chose_only = all(r.basis and r.basis.startswith("chosen") for r in failed)
        verb = "chose" if chose_only else "used"
        who = ", ".join(process_name(r) for r in failed[:4]) + (
            f" and {len(failed) - 4} more" if len(failed) > 4 else ""
        )
        summary = (
            f"FAIL: expected {label}, but {len(failed)} of {len(rows)} processes {verb} {', '.join(seen)} "
            f"({who}); likely cause: {failed[0].cause}"
        )
        if chose_only:
            summary += f" (no channel line shows the traffic; the network counts because it was {failed[0].basis})"
        groups = _disagreement(rows, expect)
        if len(groups) > 1:
            summary += "; the processes disagree: " + "; ".join(groups)
        return verdict(EXIT_CONTRADICTED, summary, failed[0].cause_id or "contradicted")
    if unknown:
        who = ", ".join(process_name(r) for r in unknown[:4]) + (
            f" and {len(unknown) - 4} more" if len(unknown) > 4 else ""
        )
        return verdict(
            EXIT_NO_PROOF,
            (
                f"NO PROOF: {len(unknown)} of {len(rows)} processes sent through aws-ofi-nccl ({who}), but no line of the "
                'job names its libfabric provider ("NET/OFI Selected provider is efa"): the plugin runs on '
                f"{', '.join(OTHER_PROVIDERS)} as well, so the logs alone do not prove {label} (the nodes' EFA counters "
                "can)"
            ),
            "provider-unknown",
        )
    if passed:
        gap = _missing(report, rows, job, given)
        if gap is not None:
            return verdict(EXIT_NO_PROOF, f"NO PROOF: {gap[1]}; {label} is not proven for them", gap[0])
        incomplete = [r for r in rows if r.evidence.incomplete_inits]
        if incomplete:
            r = incomplete[0]
            return verdict(
                EXIT_NO_PROOF,
                (
                    f"NO PROOF: {len(incomplete)} processes started a communicator's init and never logged its Init "
                    f"COMPLETE (first {process_name(r)}, comm {r.evidence.incomplete_inits[0]}): the job hung or failed in init, "
                    "or the log is cut"
                ),
                "init-incomplete",
            )
        ranks = sorted({rank for r in passed for rank in r.evidence.ranks})
        nodes = max((s.nnodes for r in passed for s in r.evidence.shapes if s.nnodes), default=None)
        where = f"{nodes} nodes" if nodes else "nodes"
        summary = (
            f"PASS: all {len(passed)} processes whose traffic crossed {where} used {label}"
            + (f" (ranks {_ranges(ranks)})" if ranks else "")
            + "; none used another transport"
        )
        return verdict(
            EXIT_PASS, summary, "traffic" if any(r.basis == "traffic" for r in passed) else "multi-node communicator"
        )
    cause, why = _why_nothing(report, rows, job)
    return verdict(EXIT_NO_PROOF, f"NO PROOF: {why}; {label} is neither confirmed nor contradicted", cause)


def _missing(
    report: TransportReport, rows: tuple[ProcessVerdict, ...], job: tuple[int | None, str], given: int | None
) -> tuple[str, str] | None:
    """("missing-nodes" | "missing-ranks", why) where the logs lack nodes or ranks the job had, else None.

    The job's size comes from the caller (`hosts`, which the driver knows) and from NCCL itself ("comm ... rank R
    nRanks N nNodes M"); a node or rank that logged nothing may have used any transport, so no pass without it.
    Ray's driver view folds identical lines of other processes ("[repeated Nx across cluster]"): ranks it folded into
    a communicator line count as present (their identity is lost, which a note says), nodes never do.
    """
    largest = max((s.nranks for p in report.processes for s in p.shapes), default=0)
    if largest >= 2:  # every rank of the largest communicator logged: every node that ran one is there
        present = {
            rank
            for r in rows
            for rank in r.evidence.ranks
            if not r.evidence.shapes or max(s.nranks for s in r.evidence.shapes) == largest
        }
        absent = sorted(set(range(largest)) - present)
        folded = sum(p.folded_comm_lines for p in report.processes)
        if absent and len(absent) > folded:
            nodes = f" on {report.max_nnodes} nodes" if report.max_nnodes > 1 else ""
            return "missing-ranks", (
                f"NCCL's communicator has {largest} ranks{nodes}, but ranks {_ranges(absent)} "
                f"logged nothing here (the logs hold ranks {_ranges(sorted(present)) or 'none'}: "
                "a node's log not given, or a collector that timed out)"
            )
        return None
    # No communicator shape logged (NCCL before 2.9 prints none with nNodes): the hosts the caller named must appear.
    # Host names can undercount nodes (NCCL_HOSTID), never overcount them.
    names, ips = report.host_names, report.node_ips
    seen = names if len(names) >= len(ips) else ips
    expected = given or 0
    if expected >= 2 and len(seen) < expected:
        have = f"{len(seen)} ({_few(seen)})" if seen else "no host name or node IP"
        return "missing-nodes", (
            f"the job ran on {expected} hosts ({job[1]}), but the logs hold lines of {have}: "
            f"{expected - len(seen)} host{'s' if expected - len(seen) > 1 else ''}' lines are "
            "missing (a log not given, or a collector that timed out)"
        )
    return None


def _disagreement(rows: tuple[ProcessVerdict, ...], expect: str) -> list[str]:
    """One "<transport>: <processes with hosts and ranks>" group per transport the processes showed, where they differ."""
    groups: dict[str, list[ProcessVerdict]] = {}
    for r in rows:
        if r.transports:
            groups.setdefault(", ".join(_short(t) for t in r.transports), []).append(r)
    out = []
    for name, members in sorted(groups.items(), key=lambda kv: (kv[0] != _short(expect), kv[0])):
        hosts = sorted({m.evidence.host or m.evidence.ip or m.evidence.key for m in members})
        ranks = sorted({rank for m in members for rank in m.evidence.ranks})
        out.append(
            f"{name} on {len(members)} process{'es' if len(members) > 1 else ''} (host{'s' if len(hosts) > 1 else ''} "
            f"{_few(hosts)}" + (f", ranks {_ranges(ranks)}" if ranks else "") + ")"
        )
    return out


def _few(names: Iterable[str], limit: int = 4) -> str:
    names = list(names)
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _why_nothing(
    report: TransportReport, rows: tuple[ProcessVerdict, ...], job: tuple[int | None, str] = (None, "unknown")
) -> tuple[str, str]:
    """(short name, why) of a verdict that proves nothing."""
    if report.nccl_lines == 0:
        return "no-nccl-lines", (
            f"no NCCL lines in {report.lines} lines (is {_GATE_LOG} set, and is this the workers' log?)"
        )
    if report.info_lines == 0:
        return "warn-only", f"only NCCL WARN lines ({report.warn_lines}), no INFO lines (NCCL_DEBUG=WARN?)"
    statuses = {r.status for r in rows}
    if statuses == {"single-node"}:
        return "single-node", (
            "single-node job: its traffic never used the network (a chosen network such as Socket proves nothing here)"
        )
    if "unproven" in statuses:
        n = sum(r.status == "unproven" for r in rows)
        return "unproven", (
            f"{n} processes span nodes but logged no channel or network line (log truncated, or "
            f"NCCL_DEBUG_SUBSYS without {'/'.join(GATE_LOG_SUBSYSTEMS)}?)"
        )
    hosts, how = job
    if hosts is not None and hosts >= 2 and any(r.evidence.networks for r in rows):
        return "no-transport-line", (
            f"the job spans {how} and its processes chose a network, but no channel line or "
            "nNodes shows that traffic crossed them (the job stopped before connecting, or "
            "the log is cut)"
        )
    return "no-transport-line", (
        "no line says which transport carried traffic between nodes (no channel, network or communicator lines)"
    )


def _notes(
    report: TransportReport, expect: str, unproven: list[ProcessVerdict], *, given: int | None = None
) -> tuple[str, ...]:
    notes = [f"plugin/provider problem logged: {t}" for t, e in zip(report.hints, report.hint_expects) if expect in e]
    if given is not None:
        nnodes, names = report.max_nnodes, report.host_names
        if given == 1 and (nnodes > 1 or len(names) > 1):
            notes.append(
                f"the caller said 1 host, but NCCL saw {max(nnodes, len(names))} (nNodes or host names): "
                "pods with their own host names, or NCCL_HOSTID, make one machine several nodes to NCCL"
            )
        elif given > 1 and report.processes and max(nnodes, len(names)) < given:
            notes.append(
                f"the caller said {given} hosts, but the logs show {max(nnodes, len(names), 1)}: "
                "are the other nodes' logs missing?"
            )
    if unproven:
        notes.append(
            f"{len(unproven)} processes span nodes without a transport line ({', '.join(r.evidence.key for r in unproven[:4])})"
        )
    if report.repeated:
        notes.append(
            f"Ray folded {report.repeated} lines of other processes into '[repeated Nx across cluster]'; "
            "their transport equals the line shown, but their identity is lost (read the workers' own logs)"
        )
    if report.warn_lines and not notes:
        notes.append(f"{report.warn_lines} NCCL WARN lines, first: {report.warnings[0]}")
    return tuple(notes[: MAX_NOTES + 1])


def _short(kind: str) -> str:
    """A transport kind as a person reads it: "socket" -> "Socket", "libfabric/tcp" -> "libfabric provider tcp"."""
    if kind.startswith("libfabric/"):
        return f"libfabric provider {kind.split('/', 1)[1]}"
    if kind.startswith("other/"):
        return f"network {kind.split('/', 1)[1]}"
    if kind == "libfabric":
        return "aws-ofi-nccl (libfabric provider not logged)"
    return {"efa": "EFA", "ib": "InfiniBand", "socket": "Socket"}[kind]


def process_name(r: ProcessVerdict) -> str:
    """A process as the summary names it: its key (host:pid, ...) and, where known, its ranks ("ip-10-0-1-5:1234 ranks
    0-3,8")."""
    ranks = r.evidence.ranks
    return f"{r.evidence.key} rank{'s' if len(ranks) > 1 else ''} {_ranges(ranks)}" if ranks else r.evidence.key


def _ranges(values: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8] -> "0-3,8"."""
    out: list[str] = []
    values = sorted(values)
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(out)


def _row_cells(r: ProcessVerdict) -> tuple[str, ...]:
    p = r.evidence
    plugin = ", ".join(p.plugins) or "-"
    if p.ofi_version:
        plugin += f" (aws-ofi-nccl {p.ofi_version})"
    provider = ", ".join(p.providers) or "-"
    channels = ", ".join(f"{label} x{n}" for label, n in p.channels) or "-"
    shapes = ", ".join(str(s) for s in sorted(p.shapes, key=lambda s: -s.nranks)[:2]) or "-"
    return (
        p.key,
        _ranges(p.ranks) or "-",
        shapes,
        ", ".join(p.networks) or "-",
        f"{plugin} / {provider}",
        channels,
        r.status,
        r.cause or "",
    )


def _process_json(p: ProcessEvidence) -> dict[str, Any]:
    return {
        "process": p.key,
        "host": p.host,
        "ip": p.ip,
        "ranks": list(p.ranks),
        "comms": [{"n_ranks": s.nranks, "n_nodes": s.nnodes, "local_ranks": s.local_ranks} for s in p.shapes],
        "multi_node": p.multi_node,
        "networks": list(p.networks),
        "plugins": list(p.plugins),
        "providers": list(p.providers),
        "ofi_version": p.ofi_version,
        "channels": dict(p.channels),
        "net_transports": list(p.net_transports),
        "hints": list(p.hints),
        "info_lines": p.info_lines,
        "warn_lines": p.warn_lines,
        "repeated": p.repeated,
    }
