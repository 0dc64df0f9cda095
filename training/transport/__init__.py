"""The transport gate: read NCCL INFO logs and prove which transport carried the traffic between nodes.

When the EFA userspace, the aws-ofi-nccl plugin and NCCL do not match, NCCL falls back to TCP sockets without an
error and the job finishes several times slower. NCCL_DEBUG=INFO is the only witness, so this module turns that log
into a verdict:

    report = classify_paths(["worker-a.log", "worker-b.log"])     # or classify(lines) on any iterable of lines
    verdict = report.verdict(expect="efa")                         # "efa", "ib" or "socket"
    print(verdict.render_table()); print(verdict.summary)
    sys.exit(verdict.exit_code)                                    # 0 pass, 1 contradicted, 3 proves nothing

The reader is streaming: it keeps a few counters and small sets per process (host:pid), never the lines, so its
memory does not grow with the log. It understands NCCL 2.4 to 2.29 (docs/transport-gate.md: the lines it reads,
per version), the aws-ofi-nccl names "AWS Libfabric" and "Libfabric", InfiniBand (IB, IBext_vN), and lines
wrapped by Ray ("(RayTrainWorker pid=N, ip=X)", colours, "[repeated Nx across cluster]"), mpirun ("[1,N]<stdout>:"),
CloudWatch and kubelet timestamps, and JSON log records ({"log": ...}).

Rules (the reason for each is in `Verdict`):
- Evidence of a process is the NET transport of its channel lines ("via NET/Libfabric/0"), and the network it chose
  ("Using network X", "Assigned NET plugin X to comm") when its communicator spans nodes.
- A single-node process that merely chose a network ("Using network Socket" is printed even when no byte uses it)
  proves nothing and contradicts nothing. NET channels on one node (P2P and SHM disabled) do count: traffic used them.
- Where NCCL did not log a communicator's shape, a network a process chose still contradicts (never confirms) the
  expectation when the job spans 2+ hosts (nNodes, distinct host names, or the caller's `hosts`), or when the plugin
  of the expected transport failed just before (aws-ofi-nccl init failed, no provider, libnccl-net missing).
- A Libfabric network is EFA only with the provider efa logged by the process or the job; without one it proves
  nothing (aws-ofi-nccl runs on tcp, sockets, verbs... too). A failed NCCL call (a WARN with NCCL's "-> code"
  returns, PyTorch's "NCCL error", an aborted init) fails the verdict whatever the channels say. Missing ranks of
  the largest communicator, or fewer hosts than the caller's `hosts`, or an init never completed, keep a pass away.
- Pass only when at least one process proves the expected transport and no process shows another one. An empty log,
  a WARN-only log or a single-node job proves nothing (exit 3); a gate must treat 3 as "not passed".
- `gate(report, expect, counters=snapshots)` adds the EFA hardware counters (training.efa_counters) as a second
  witness: they can fail a job whose logs pass, prove one whose logs prove nothing, or keep a pass from happening.

Pure standard library: the driver imports it inside the training container, the CLI imports it outside. The gate
is in five files, each importing only those before it: training.transport.lines (the NCCL lines it knows),
training.transport.evidence (what the log says about a process), training.transport.verdict (the report, the verdicts
and their causes), training.transport.parse (reading the logs) and this one (the whole gate, with the EFA counters),
which exports the public names of all five.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ray_efa.core.pod_env import expected_transport, network_env
from ray_efa.training import efa_counters
from ray_efa.training.transport.evidence import CommShape, ProcessEvidence
from ray_efa.training.transport.lines import transport_kind
from ray_efa.training.transport.parse import LogReadError, classify, classify_paths
from ray_efa.training.transport.verdict import (
    EXIT_CONTRADICTED,
    EXIT_NO_PROOF,
    EXIT_PASS,
    EXPECTS,
    ProcessVerdict,
    TransportReport,
    Verdict,
    process_name,
)

__all__ = [
    "EXPECTS",
    "EXIT_PASS",
    "EXIT_CONTRADICTED",
    "EXIT_NO_PROOF",
    "CommShape",
    "ProcessEvidence",
    "ProcessVerdict",
    "TransportReport",
    "Verdict",
    "classify",
    "classify_paths",
    "LogReadError",
    "transport_kind",
    "network_env",
    "gate",
    "with_counters",
    "expected_transport",
]


def gate(
    report: TransportReport,
    expect: str = "efa",
    *,
    hosts: int | None = None,
    counters: Iterable[efa_counters.Snapshot] | None = None,
    predicted_bytes: float | None = None,
) -> Verdict:
    """The whole gate: the logs' verdict, then the EFA counters' where snapshots are given (None: the logs alone).

    Counters that contradict (EFA expected and under 10% of the predicted bytes, no EFA device, EFA busy in a TCP run)
    fail the job even when the logs pass; counters that cannot be trusted (partial, reset, of another node) keep a
    pass from happening; counters that match the prediction on every node prove EFA when the logs prove nothing.
    """
    verdict = report.verdict(expect, hosts=hosts)
    if counters is None:
        return verdict
    judged = efa_counters.judge(
        counters, expect, predicted_bytes=predicted_bytes, log_hosts=report.host_names, hosts=verdict.hosts
    )
    return with_counters(verdict, judged)


def with_counters(verdict: Verdict, counters: efa_counters.CounterVerdict) -> Verdict:
    """The logs' verdict joined with the counters' (see `gate`)."""
    notes = list(verdict.notes) + list(counters.notes)
    for node in counters.nodes:  # the device says it carried traffic while NCCL's processes there said Socket
        socket_rows = [r for r in verdict.rows if r.evidence.host == node.host and "socket" in r.transports]
        least = min(node.sent_bytes or 0, node.received_bytes or 0)
        if socket_rows and least >= max(efa_counters.MIN_SHARE * (node.predicted_bytes or 0), 64 << 20):
            notes.append(
                f"{node.host}: NCCL logged Socket ({process_name(socket_rows[0])}), yet its EFA devices carried "
                f"{least:,} bytes each way during training: another process used EFA, or the logs and the "
                "counters are not of the same run"
            )
    if not counters.nodes:
        notes.append("no EFA counter snapshots were given: the logs alone decide")
        return replace(verdict, notes=tuple(notes), counters=counters)
    logs, own = verdict.exit_code, counters.exit_code
    if own == EXIT_CONTRADICTED:
        code = EXIT_CONTRADICTED
        summary = f"FAIL: {counters.summary}" + (
            f"; the logs: {verdict.summary}" if logs != EXIT_CONTRADICTED else f"; and {verdict.summary}"
        )
    elif logs == EXIT_CONTRADICTED:
        code, summary = EXIT_CONTRADICTED, f"{verdict.summary}; {counters.summary}"
    elif logs == EXIT_PASS and counters.bad:
        code = EXIT_NO_PROOF
        summary = f"NO PROOF: the logs pass, but the EFA counters cannot be trusted: {counters.summary}"
    elif logs == EXIT_PASS:
        code, summary = EXIT_PASS, f"{verdict.summary}; {counters.summary}"
    elif own == EXIT_PASS:
        code, summary = EXIT_PASS, f"PASS: {counters.summary} (the logs alone: {verdict.summary})"
    else:
        code, summary = EXIT_NO_PROOF, f"{verdict.summary}; {counters.summary}"
    return replace(verdict, exit_code=code, summary=summary, notes=tuple(notes), counters=counters)
