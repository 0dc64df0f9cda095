"""The transport gate: read NCCL INFO logs and prove which transport carried the traffic between nodes.

When the EFA userspace, the aws-ofi-nccl plugin and NCCL do not match, NCCL falls back to TCP sockets without an
error and the job finishes several times slower. NCCL_DEBUG=INFO is the only witness, so this module turns that log
into a verdict:

    report = classify_paths(["worker-a.log", "worker-b.log"])     # or classify(lines) on any iterable of lines
    verdict = report.verdict(expect="efa")                         # "efa", "ib" or "socket"
    print(verdict.render_table()); print(verdict.summary)
    sys.exit(verdict.exit_code)                                    # 0 pass, 1 contradicted, 3 proves nothing

The reader is streaming: it keeps a few counters and small sets per process (host:pid), never the lines, so its
memory does not grow with the log. It understands NCCL 2.4 to 2.29 (see the reference FACTS, "How NCCL says which
transport it used"), the aws-ofi-nccl names "AWS Libfabric" and "Libfabric", InfiniBand (IB, IBext_vN), and lines
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

Pure standard library: the driver imports it inside the training container, the CLI imports it outside.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import sys
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from ray_efa.core.network import GATE_LOG_ENV, GATE_LOG_SUBSYSTEMS, expected_transport, network_env
from ray_efa.training import efa_counters

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

EXPECTS: tuple[str, ...] = ("efa", "ib", "socket")
"""Transports a verdict can expect: EFA through aws-ofi-nccl, InfiniBand verbs, NCCL's TCP Socket transport."""

EXIT_PASS, EXIT_CONTRADICTED, EXIT_NO_PROOF = 0, 1, 3

_LABEL = {
    "efa": "EFA (aws-ofi-nccl, libfabric provider efa)",
    "ib": "InfiniBand (NET/IB)",
    "socket": "TCP sockets (NET/Socket)",
}

_GATE_LOG = " ".join(f"{name}={value}" for name, value in GATE_LOG_ENV.items())
"""What the gate needs the NCCL log to be (core.network.GATE_LOG_ENV): NCCL_DEBUG=INFO."""

# Bounds that keep memory flat whatever the input: a line longer than this is cut (NCCL's own lines are < 1 KiB),
# a process keeps at most this many distinct hints, and past this many processes the rest share one bucket
# ("(other processes)") whose evidence still counts, so no contradiction can be lost.
_MAX_LINE_CHARS = 16_384
_MAX_HINTS = 8
_MAX_PROCESSES = 65_536
_MAX_NOTES = 5
_MAX_HEADS = 4096
_OVERFLOW_KEY = "(other processes)"
_UNATTRIBUTED_KEY = "(unattributed)"

# ---------------------------------------------------------------------------------------------------------------
# Line patterns
# ---------------------------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# Ray's driver-side deduplication: the line of the latest source, then how many other sources printed it (numbers
# are ignored when comparing), and once per driver a note in parentheses.
_REPEATED = re.compile(r"\s*\[repeated (\d+)x across cluster\].*$")
_RAY_PREFIX = re.compile(r"\((?:[^()\s]+ )?pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^)\s,]+))?[^)]*\)")
_MPI_PREFIX = re.compile(r"\[\d+,(?P<rank>\d+)\]<std(?:out|err)>:")
# NCCL's levels as they follow its prefix; TRACE lines carry nothing the gate needs.
_LEVELS = ("NCCL INFO ", "NCCL WARN ", "NCCL ATTN ")
# NCCL's prefix: "[timestamp] host:pid:tid [cudaDev] NCCL INFO msg"; WARN lines put "file:line" or
# "func(args):line" between the device and the level. NCCL cuts the hostname at its first dot.
_HOST = re.compile(r"[^\s:\[\]()<>{}\"'=,\x1b]+")
_VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+\S*)")

_USING_NETWORK = re.compile(r"Using network (?P<name>.+)")
_ASSIGNED = re.compile(r"Assigned NET plugin (?P<name>.+?) to comm")
_INITIALIZED = re.compile(r"Initialized NET plugin (?P<name>.+)")
_LOADED = re.compile(r"NET/Plugin ?: ?Loaded (?:net )?plugin (?P<name>.+?)(?: \(v\d+\))?\.?$")
_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (?P<provider>[^\s,(]+)")
_OFI_VERSION = re.compile(r"NET/OFI Initializing aws-ofi-nccl (?P<version>\S+)")
_COMM = re.compile(
    r"\bcomm (?:0x)?[0-9a-f]+ rank (?P<rank>\d+) nranks (?P<nranks>\d+)"
    r"(?: nnodes (?P<nnodes>\d+) localranks (?P<local>\d+))?",
    re.IGNORECASE,
)
# "Channel 00/0 : 3[3] -> 4[0] [send] via NET/Libfabric/0/GDRDMA"; old NCCL: "Ring 00 : 7 -> 8 [receive] via ...";
# the bracket after a rank is the CUDA device (new) or the bus id in hex (old).
_CHANNEL = re.compile(
    r"(?:Channel|Ring) \d+(?:/\d+)? ?: (?P<src>\d+)(?:\[[0-9a-fA-F]+\])? -> (?P<dst>\d+)(?:\[[0-9a-fA-F]+\])?"
    r"(?: \[(?P<dir>send|receive)\])? via (?P<via>.+)"
)
_NET_VIA = re.compile(r"NET/(?P<name>[^/]+?)(?:/|$)")
# "NET/Socket : Using [0]eth0:10.0.0.1<0>", "NET/IB : Using [0]mlx5_0:1/IB ; OOB ...": that transport initialized.
# NCCL up to 2.11 initializes Socket only when the plugin and IB both failed; later versions initialize it always.
_NET_INIT = re.compile(r"NET/(?:Socket|IB) ?: ?Using\b")

# Internal NCCL transports also print "Initialized NET plugin"; they are not plugins a user installs.
_INTERNAL_NETS = frozenset({"IB", "Socket"})


@dataclass(frozen=True, slots=True)
class _Hint:
    id: str
    """A short name for the cause (a verdict's `cause`, expected.csv's cause column)."""
    pattern: re.Pattern[str]
    expects: frozenset[str]
    """The expected transports for which this line explains a fallback (a missing OFI plugin is normal for IB)."""
    text: str
    example: str
    """A message the hint is for, as NCCL prints it after "NCCL INFO " or "NCCL WARN " (from a fixture, else from
    the source that prints it); a test checks that it gets through _HINT_WORDS and that this hint takes it."""


_EFA, _EFA_IB = frozenset({"efa"}), frozenset({"efa", "ib"})
_HINTS: tuple[_Hint, ...] = (
    _Hint("ofi-init-failed", re.compile(r"aws-ofi-nccl initialization failed|NET/OFI Initializing plugin failed"), _EFA,
          "aws-ofi-nccl failed to initialize (EFA userspace, libfabric and plugin do not match, "
          "or the pod has no EFA device: vpc.amazonaws.com/efa)",
          example="NET/OFI aws-ofi-nccl initialization failed"),
    # aws-ofi-nccl <= 1.5 (src/nccl_ofi_net.c, ofi_init in 1.1, nccl_net_ofi_init in 1.5): the plugin refuses any
    # libfabric provider but efa, and NCCL then falls back to its own transports.
    _Hint("ofi-only-efa", re.compile(r"NET/OFI Only EFA provider is supported"), _EFA,
          "aws-ofi-nccl found no efa provider (\"Only EFA provider is supported\": no EFA device in the pod, or "
          "FI_PROVIDER names another provider)",
          example="NET/OFI Only EFA provider is supported"),
    # "... supporting GPUDirect RDMA" is a normal retry on instances without GPUDirect RDMA (g5, g6, g6e). "NET/OFI
    # No eligible providers were found" is not a failure either: aws-ofi-nccl 1.14-1.21 logs it at INFO when its
    # RDMA protocol's probe finds no provider (nccl_ofi_rdma.cpp, nccl_net_ofi_rdma_init, fi_getinfo -FI_ENODATA),
    # then nccl_net_ofi_create_plugin (nccl_ofi_net.cpp) tries SENDRECV, which is what a healthy g6 runs on; only
    # "Unable to find a protocol that worked" (both failed) is.
    _Hint("ofi-no-provider", re.compile(r"Could not find any optimal provider(?! supporting GPUDirect)"
                                        r"|Couldn't find any optimal provider"
                                        r"|Unable to find a protocol that worked"), _EFA,
          "libfabric found no usable EFA provider (no EFA device in the pod: request vpc.amazonaws.com/efa; "
          "or FI_PROVIDER names a provider that is not installed)",
          example="NET/OFI Unable to find a protocol that worked.  Failing initialization."),
    _Hint("plugin-not-found", re.compile(r"NET/Plugin ?: ?Could not find:? (?P<what>.+?\.so(?:\.\d+)*)"), _EFA,
          "NCCL could not load the net plugin ({what}): aws-ofi-nccl is not installed or not on "
          "LD_LIBRARY_PATH, or NCCL_NET_PLUGIN names another library",
          example="NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin."),
    _Hint("no-plugin", re.compile(r"No plugin found \((?P<what>[^)]+)\)"), _EFA,
          "no NCCL net plugin was found ({what}), so NCCL used its internal IB/Socket transports",
          example="NET/Plugin : No plugin found (libnccl-net.so), using internal implementation"),
    # NCCL 2.12-2.18: "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : ...", then "No plugin found, using
    # internal implementation".
    _Hint("plugin-load-failed", re.compile(r"Plugin load \((?P<what>[^)]+)\) returned \d+"), _EFA,
          "NCCL could not load the net plugin ({what}), so NCCL used its internal IB/Socket transports",
          example="NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object "
                  "file: No such file or directory"),
    _Hint("no-plugin", re.compile(r"No plugin found, using internal"), _EFA,
          "no NCCL net plugin was found (libnccl-net.so), so NCCL used its internal IB/Socket transports",
          example="NET/Plugin : No plugin found, using internal implementation"),
    # NCCL 2.19+: the library loaded but exports no net API this NCCL can use (a plugin too old or too new).
    _Hint("plugin-symbols", re.compile(r"Failed to find ncclNetPlugin symbol \(>= ?v\d+\)"), _EFA,
          "the net plugin library exports no ncclNetPlugin API this NCCL supports (plugin and NCCL versions do "
          "not match), so NCCL used its internal IB/Socket transports",
          example="NET/Plugin: Failed to find ncclNetPlugin symbol (>= v5). ncclNetPlugin symbols v4 and lower are "
                  "not supported."),
    _Hint("no-net-plugin", re.compile(r"Failed to initialize any NET plugin"), _EFA_IB,
          "no NET plugin initialized (check NCCL_NET and NCCL_NET_PLUGIN)",
          example="Failed to initialize any NET plugin"),
    _Hint("net-not-found", re.compile(r"Error: network (?P<what>.+?) not found"), _EFA_IB,
          "NCCL_NET asks for network {what}, which no loaded plugin provides",
          example="Error: network AWS Libfabric not found."),
    _Hint("ib-no-device", re.compile(r"NET/IB ?: ?No device found"), frozenset({"ib"}),
          "NCCL found no InfiniBand device (NET/IB : No device found)",
          example="NET/IB : No device found."),
)


# Every hint pattern holds one of these words; one search skips the hint table on ordinary lines. A hint whose words
# are missing here would never fire: tests/training/test_transport.py checks that each hint's example gets through
# and that every line of the fixture logs a hint pattern matches does too.
_HINT_WORDS = re.compile(r"ould not|ouldn't|ailed|No |Only EFA|not found|Unable|returned")

# WARN lines of a plugin that failed while NCCL fell back to another transport: the job runs on (slowly), so these
# with the error returns around them are a fallback, not failed collectives.
_FALLBACK_WARN = re.compile(
    "|".join(h.pattern.pattern.replace("?P<what>", "") for h in _HINTS)
    + r"|Failed to initiali[sz]ed? (?:sendrecv|rdma) protocol|Creating new endpoint for domain .* failed"
    r"|Caught exception in (?:rdma|sendrecv)_init|NET/Plugin|Setting FI_|OFI fi_getinfo\(\) call failed"
)
# NCCLCHECK's trace of a failed call (checks.h: INFO "%s:%d -> %d", "-> %d (%s)", "-> %d [Async thread]"); 7 is
# ncclInProgress, the normal answer of a non-blocking communicator.
_RETURN = re.compile(r"(?P<loc>[\w./+-]+\.(?:cc|cpp|c|cu|h|hpp)):\d+ -> (?P<code>\d+)\b")
_NOT_ERRORS = frozenset({"0", "7"})
# Errors as PyTorch (ProcessGroupNCCL: "NCCL error in: ..., unhandled system error ...") and NCCL's ncclGetErrorString
# name them; torch prints them without NCCL's prefix, often after "[rankN]:".
_FATAL = re.compile(r"NCCL error|unhandled (?:system|cuda) error|nccl(?:Internal|System|UnhandledCuda|Remote)Error"
                    r"|ncclInvalid(?:Usage|Argument)")
_FATAL_WORDS = ("NCCL error", "nccl", "unhandled")
_TORCH_RANK = re.compile(r"\[rank(?P<rank>\d+)\]:")
# init.cc: "... comm %p rank %d nranks %d ... - Init START" (2.18+), "- Init COMPLETE" (2.4+), "- Abort COMPLETE".
_INIT_STATE = re.compile(r"\bcomm (?P<comm>\S+) rank (?P<rank>\d+) .*- "
                         r"(?P<state>Init START|Init COMPLETE|Abort COMPLETE)")
# aws-ofi-nccl <= 1.5 (src/nccl_ofi_net.c, ofi_init / nccl_net_ofi_init) logs this only where the selected provider
# is efa (IS_EFA_PROVIDER and no GPUDirect RDMA): it names the provider as surely as "Selected Provider is efa".
_FORCING_NDEV = "NET/OFI Forcing AWS OFI ndev"
# The libfabric providers aws-ofi-nccl runs on besides efa, for the summary's wording.
OTHER_PROVIDERS: tuple[str, ...] = ("tcp", "sockets", "verbs", "cxi", "shm", "psm3", "opx")


def transport_kind(network: str, providers: Iterable[str] = ()) -> set[str]:
    """The transports a NCCL network name stands for: "efa", "ib", "socket", "libfabric/<provider>", "libfabric"
    (aws-ofi-nccl on a provider nobody logged) or "other/<name>".

    aws-ofi-nccl calls itself "AWS Libfabric" (old) or "Libfabric" (new) whatever its libfabric provider is, and it
    runs on any of them (efa, tcp, sockets, verbs, cxi, shm, psm3, opx: nccl_ofi_ofiutils.cpp takes the first
    provider fi_getinfo returns that passes OFI_NCCL_PROVIDER / FI_PROVIDER), so only the provider decides: efa ->
    "efa", anything else -> "libfabric/<provider>", none logged -> "libfabric", which is not EFA evidence.
    """
    name = network.strip()
    lower = name.lower()
    if lower == "socket":
        return {"socket"}
    if lower.startswith("ib"):  # IB, IBext, IBext_v8...: NCCL's verbs transport or the HPC-X plugin
        return {"ib"}
    if "libfabric" in lower or lower.startswith("ofi") or lower == "aws ofi":
        kinds = {"efa" if p.split(";")[0].lower() == "efa" else f"libfabric/{p}" for p in providers}
        return kinds or {"libfabric"}
    return {f"other/{name}"}


# ---------------------------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class CommShape:
    """The shape of one communicator as NCCL logged it ("rank R nRanks N nNodes M localRanks L")."""

    nranks: int
    nnodes: int | None = None
    """None where the NCCL version does not log it (before about 2.9, and on "Init COMPLETE" lines)."""
    local_ranks: int | None = None

    def __str__(self) -> str:
        return f"{self.nranks}/{'?' if self.nnodes is None else self.nnodes}/{'?' if self.local_ranks is None else self.local_ranks}"


@dataclass(frozen=True, kw_only=True, slots=True)
class ProcessEvidence:
    """Everything the log says about one process (one NCCL host:pid)."""

    key: str
    """host:pid from NCCL's prefix; else ip:pid from Ray's prefix; else mpi-rank-N; else "(unattributed)"."""
    host: str | None
    """The host name NCCL printed (cut at its first dot), None where its prefix was lost."""
    ip: str | None
    """The node IP of Ray's "(Actor pid=N, ip=X)" prefix, where there was one."""
    ranks: tuple[int, ...]
    """Ranks of the largest communicator (or, for NCCL without comm lines, from its channel lines)."""
    shapes: tuple[CommShape, ...]
    networks: tuple[str, ...]
    """Networks chosen ("Using network X", "Assigned NET plugin X to comm"), in order of appearance."""
    plugins: tuple[str, ...]
    """External net plugins loaded ("NET/Plugin: Loaded net plugin X", "Initialized NET plugin X")."""
    providers: tuple[str, ...]
    """libfabric providers aws-ofi-nccl selected ("NET/OFI Selected provider is X")."""
    ofi_version: str | None
    channels: tuple[tuple[str, int], ...]
    """Channel transports and how many connections used each: ("NET/Libfabric", 16), ("P2P/CUMEM", 8)."""
    net_transports: tuple[str, ...]
    """NET names of channel lines (Libfabric, Socket, IB...): traffic that went through a network transport."""
    hints: tuple[str, ...]
    """Likely causes found in this process's lines (plugin not found, provider missing...)."""
    hint_expects: tuple[frozenset[str], ...]
    info_lines: int
    warn_lines: int
    repeated: int
    """Lines Ray folded into this process's lines ("[repeated Nx across cluster]")."""
    socket_net_initialized: bool = False
    """NCCL printed "NET/Socket : Using [0]eth0:..." (its Socket transport initialized)."""
    ib_net_initialized: bool = False
    """NCCL printed "NET/IB : Using [0]mlx5_0:1/IB ..." (its IB transport initialized)."""
    error: str | None = None
    """The first line that says a NCCL call of this process failed: a WARN (not a plugin fallback's) with NCCL's
    "file.cc:N -> code" returns, a "NCCL error ... unhandled system error" of PyTorch, or a communicator aborted
    before its init completed. None where none did."""
    incomplete_inits: tuple[str, ...] = ()
    """Communicators (their pointers) whose "Init START" was logged and no "Init COMPLETE"."""
    folded_comm_lines: int = 0
    """The most processes Ray folded into one of this process's communicator lines ("[repeated Nx across cluster]")."""

    @property
    def multi_node(self) -> bool | None:
        """True if a communicator of this process spans nodes, False if every one is known to stay on one node (nNodes
        1, or a single rank), else None."""
        nodes = [1 if s.nranks == 1 else s.nnodes for s in self.shapes]
        if any(n is not None and n > 1 for n in nodes):
            return True
        return False if nodes and all(n == 1 for n in nodes) else None


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
            "lines": self.lines, "nccl_lines": self.nccl_lines, "info_lines": self.info_lines,
            "warn_lines": self.warn_lines, "repeated": self.repeated, "nccl_versions": list(self.nccl_versions),
            "multi_node": self.multi_node, "warnings": list(self.warnings),
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
        header = ("PROCESS", "RANKS", "nRanks/nNodes/localRanks", "NETWORK", "PLUGIN / PROVIDER", "CHANNELS",
                  "VERDICT", "LIKELY CAUSE")
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
                        lines += textwrap.wrap(f"{name}: {value}", width=max(20, width), initial_indent="  ",
                                               subsequent_indent="      ", break_long_words=False,
                                               break_on_hyphens=False)
        for note in self.notes:
            if width is None:
                lines.append(f"note: {note}")
            else:
                import textwrap

                lines += textwrap.wrap(f"note: {note}", width=max(20, width), subsequent_indent="      ",
                                       break_long_words=False, break_on_hyphens=False)
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
                {**_process_json(r.evidence), "verdict": r.status, "transports": list(r.transports), "cause": r.cause,
                 "basis": r.basis}
                for r in self.rows
            ],
        }


# ---------------------------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------------------------


class _Process:
    """Mutable evidence of one process while the stream is read; every container is bounded."""

    __slots__ = ("key", "host", "ip", "comm_ranks", "chan_ranks", "shapes", "networks", "plugins", "providers",
                 "ofi_version", "channels", "nets", "hints", "info", "warn", "repeated", "socket_init", "ib_init",
                 "first_warn", "returns", "first_return", "fatal", "init_started", "init_done", "aborted", "folded")

    def __init__(self, key: str) -> None:
        self.key = key
        self.host: str | None = None
        self.ip: str | None = None
        self.socket_init = self.ib_init = False
        self.comm_ranks: dict[int, set[int]] = {}  # nranks -> ranks of this process in comms of that size
        self.chan_ranks: set[int] = set()
        self.shapes: dict[CommShape, None] = {}
        self.networks: dict[str, None] = {}
        self.plugins: dict[str, None] = {}
        self.providers: dict[str, None] = {}
        self.ofi_version: str | None = None
        self.channels: dict[str, int] = {}
        self.nets: dict[str, None] = {}
        self.hints: dict[str, frozenset[str]] = {}
        self.info = self.warn = self.repeated = 0
        self.first_warn: str | None = None  # the first WARN that is not a plugin fallback's
        self.returns = 0  # NCCLCHECK's "file.cc:N -> code" lines with an error code
        self.first_return: str | None = None
        self.fatal: str | None = None
        self.init_started: dict[str, int] = {}  # comm pointer -> rank, bounded
        self.init_done: set[str] = set()
        self.aborted: set[str] = set()
        self.folded = 0

    def freeze(self) -> ProcessEvidence:
        if self.comm_ranks:
            ranks = self.comm_ranks[max(self.comm_ranks)]
        else:
            ranks = self.chan_ranks
        # "Init START/COMPLETE" lines repeat a communicator's size without its node count: keep the fuller line.
        known = {s.nranks for s in self.shapes if s.nnodes is not None}
        shapes = tuple(s for s in self.shapes if s.nnodes is not None or s.nranks not in known)
        incomplete = tuple(c for c in self.init_started if c not in self.init_done)
        error = self.fatal
        if error is None and self.returns and self.first_warn is not None:
            error = f"{self.first_warn} (then {self.returns} error returns, first {self.first_return})"
        if error is None and any(c in self.aborted for c in incomplete):
            error = f"communicator {incomplete[0]} was aborted before its init completed"
        return ProcessEvidence(
            error=error, incomplete_inits=incomplete, folded_comm_lines=self.folded,
            key=self.key, host=self.host, ip=self.ip, ranks=tuple(sorted(ranks)), shapes=shapes, networks=tuple(self.networks),
            plugins=tuple(self.plugins), providers=tuple(self.providers), ofi_version=self.ofi_version,
            channels=tuple(sorted(self.channels.items(), key=lambda kv: (-kv[1], kv[0]))),
            net_transports=tuple(self.nets), hints=tuple(self.hints), hint_expects=tuple(self.hints.values()),
            info_lines=self.info, warn_lines=self.warn, repeated=self.repeated,
            socket_net_initialized=self.socket_init, ib_net_initialized=self.ib_init,
        )


class _Reader:
    """Folds lines into per-process evidence."""

    def __init__(self) -> None:
        self.processes: dict[str, _Process] = {}
        self.by_prefix: dict[tuple[str, str], _Process] = {}
        self.by_head: dict[str, _Process] = {}
        self.ray_alias: dict[tuple[str, str], str] = {}
        self.lines = self.nccl = self.info = self.warn = self.repeated = 0
        self.versions: dict[str, None] = {}
        self.warnings: dict[str, None] = {}

    def feed(self, line: str) -> None:
        self.lines += 1
        if "NCCL" not in line:  # the cheap test that skips almost every line of a training log
            if "nccl" in line and "Error" in line:  # "ncclInternalError: Internal check failed." of PyTorch
                self._fatal(line)
            return
        if len(line) > _MAX_LINE_CHARS:
            line = line[:_MAX_LINE_CHARS]
        if line[:1] == "{" or (line[:1].isspace() and line.lstrip().startswith("{")):
            line = _json_message(line)
        # str.find runs in C; a regex searched from every position of a long Ray-prefixed line costs ten times more.
        for level in _LEVELS:
            at = line.find(level)
            if at >= 0:
                break
        else:
            v = _VERSION.search(line)  # NCCL >= 2.2x prints its version line without the host prefix
            if v:
                self.versions.setdefault(v["version"], None)
            self._fatal(line)
            return
        self.nccl += 1
        msg = line[at + len(level):]
        if "\t" in msg:  # tab-separated exports carry more columns after the message
            msg = msg.split("\t", 1)[0]
        repeats = 0
        if "[repeated " in msg:
            r = _REPEATED.search(msg)
            if r:
                repeats = int(r.group(1))
                msg = msg[: r.start()]
        if "\x1b" in msg:
            msg = _ANSI.sub("", msg)
        msg = msg.strip()
        proc = self._process(line, at)
        proc.repeated += repeats
        self.repeated += repeats
        if level == "NCCL INFO ":
            self.info += 1
            proc.info += 1
        else:
            self.warn += 1
            proc.warn += 1
            if len(self.warnings) < _MAX_NOTES:
                self.warnings.setdefault(msg[:200], None)
            if proc.first_warn is None and not _FALLBACK_WARN.search(msg):
                proc.first_warn = f"NCCL WARN {msg[:300]}"
            if proc.fatal is None and _FATAL.search(msg):
                proc.fatal = f"NCCL WARN {msg[:300]}"
        if repeats and "comm " in msg and " rank " in msg:
            proc.folded = max(proc.folded, repeats)
        _parse_message(proc, msg, self.versions)

    def _fatal(self, line: str) -> None:
        """Record a line outside NCCL's format that names a failed NCCL call (PyTorch's "NCCL error in: ...")."""
        if len(line) > _MAX_LINE_CHARS:
            line = line[:_MAX_LINE_CHARS]
        f = _FATAL.search(line)
        if f is None:
            return
        proc = self._process(line, f.start())
        if proc.fatal is None:
            text = _ANSI.sub("", line).strip()
            rank = _TORCH_RANK.search(text)
            proc.fatal = (f"rank {rank['rank']}: " if rank else "") + text[:300]

    def _process(self, line: str, at: int) -> _Process:
        """The process of a line whose NCCL level starts at `at`: from NCCL's "host:pid:tid [dev] " prefix, else
        Ray's "(Actor pid=N, ip=X)", else mpirun's "[1,N]<stdout>:"."""
        head = line[:at]
        proc = self.by_head.get(head)  # most lines repeat a prefix seen before (same process, same thread)
        if proc is None:
            proc = self._resolve(line, at)
            if len(self.by_head) >= _MAX_HEADS:  # timestamped lines never repeat: keep the cache bounded
                self.by_head.clear()
            self.by_head[head] = proc
        return proc

    def _resolve(self, line: str, at: int) -> _Process:
        prefix = _nccl_prefix(line, at)
        proc = self.by_prefix.get(prefix) if prefix else None
        if proc is not None:
            return proc
        ray_at = line.find("pid=", 0, at)
        ray = _RAY_PREFIX.search(line, 0, at) if ray_at >= 0 else None
        if prefix is not None:
            key = f"{prefix[0]}:{prefix[1]}"
            if ray is not None:
                self.ray_alias[(ray["ip"] or "", ray["pid"])] = key
        elif ray is not None:
            ip = ray["ip"] or ""
            key = self.ray_alias.get((ip, ray["pid"])) or f"{ip or 'local'}:{ray['pid']}"
        elif (mpi := _MPI_PREFIX.search(line, 0, at)) is not None:
            key = f"mpi-rank-{mpi['rank']}"
        else:
            key = _UNATTRIBUTED_KEY
        proc = self.processes.get(key)
        if proc is None:
            if len(self.processes) >= _MAX_PROCESSES:
                key = _OVERFLOW_KEY
                proc = self.processes.get(key)
            if proc is None:
                proc = self.processes[key] = _Process(key)
        if proc.host is None and prefix is not None and proc.key != _OVERFLOW_KEY:
            proc.host = prefix[0]
        if proc.ip is None and ray is not None and ray["ip"] and proc.key != _OVERFLOW_KEY:
            proc.ip = ray["ip"]
        if prefix is not None and len(self.by_prefix) < _MAX_PROCESSES:
            self.by_prefix[prefix] = proc  # a process is resolved once; later lines find it by its prefix
        return proc

    def report(self) -> TransportReport:
        hints: dict[str, frozenset[str]] = {}
        for p in self.processes.values():
            for text, expects in p.hints.items():
                hints.setdefault(text, expects)
        return TransportReport(
            processes=tuple(p.freeze() for p in self.processes.values()),
            lines=self.lines, nccl_lines=self.nccl, info_lines=self.info, warn_lines=self.warn,
            repeated=self.repeated, nccl_versions=tuple(self.versions), warnings=tuple(self.warnings),
            hints=tuple(hints), hint_expects=tuple(hints.values()),
        )


def _json_message(line: str) -> str:
    """The message of a JSON log record (Fluent Bit / CloudWatch Container Insights, docker json-file)."""
    try:
        record = json.loads(line)
    except ValueError:
        return line
    if isinstance(record, dict):
        for field_name in ("log", "message", "msg", "MESSAGE"):
            value = record.get(field_name)
            if isinstance(value, str):
                return value.rstrip("\n")
    return line


def _nccl_prefix(line: str, at: int) -> tuple[str, str] | None:
    """(host, pid) of NCCL's "host:pid:tid [dev] " prefix before position `at`, or None. String scans, no regex
    search: this runs for every NCCL line."""
    bracket = line.rfind(" [", 0, at)
    if bracket < 0:
        return None
    close = line.find("] ", bracket, at + 1)
    if close < 0 or not line[bracket + 2:close].lstrip("-").isdigit():
        return None
    token = line[line.rfind(" ", 0, bracket) + 1:bracket]  # "host:pid:tid", perhaps after mpirun's "<stdout>:"
    parts = token.rsplit(":", 2)
    if len(parts) != 3 or not (parts[1].isdigit() and parts[2].isdigit()):
        return None
    host = parts[0]
    if not _HOST.fullmatch(host):
        found = _HOST.findall(host)
        if not found:
            return None
        host = found[-1]
    return host, parts[1]


def _parse_message(proc: _Process, msg: str, versions: dict[str, None]) -> None:
    """Update one process from one NCCL message (the text after "NCCL INFO " / "NCCL WARN ")."""
    if " via " in msg:
        c = _CHANNEL.match(msg)
        if c:
            via = c["via"].strip()
            proc.chan_ranks.add(int(c["dst"] if c["dir"] == "receive" else c["src"]))
            net = _NET_VIA.match(via)
            if net:
                name = net["name"].strip()
                proc.nets.setdefault(name, None)
                label = f"NET/{name}"
            else:
                label = via[:40]
            proc.channels[label] = proc.channels.get(label, 0) + 1
            return
    if msg.startswith("Using network "):
        if (u := _USING_NETWORK.match(msg)) is not None:
            proc.networks.setdefault(u["name"].strip(), None)
        return
    if msg.startswith("Assigned NET plugin "):
        a = _ASSIGNED.match(msg)
        if a:
            proc.networks.setdefault(a["name"].strip(), None)
        return
    if msg.startswith("Initialized NET plugin "):
        if (i := _INITIALIZED.match(msg)) is not None and i["name"].strip() not in _INTERNAL_NETS:
            proc.plugins.setdefault(i["name"].strip(), None)
        return
    if " -> " in msg and (r := _RETURN.match(msg)) is not None:
        if r["code"] not in _NOT_ERRORS:
            proc.returns += 1
            proc.first_return = proc.first_return or msg[:120]
        return
    if "COMPLETE" in msg or "Init START" in msg:
        if (state := _INIT_STATE.search(msg)) is not None and len(proc.init_started) < 1024:
            comm = state["comm"]
            if state["state"] == "Init START":
                proc.init_started.setdefault(comm, int(state["rank"]))
            elif state["state"] == "Init COMPLETE":
                proc.init_done.add(comm)
            else:
                proc.aborted.add(comm)
    if "comm " in msg and "rank " in msg:
        c = _COMM.search(msg)
        if c:
            nranks = int(c["nranks"])
            shape = CommShape(
                nranks=nranks,
                nnodes=int(c["nnodes"]) if c["nnodes"] else None,
                local_ranks=int(c["local"]) if c["local"] else None,
            )
            if len(proc.shapes) < 64:
                proc.shapes.setdefault(shape, None)
            ranks = proc.comm_ranks.setdefault(nranks, set())
            if len(ranks) < 4096:
                ranks.add(int(c["rank"]))
            return
    if msg.startswith("NCCL version"):
        v = _VERSION.match(msg)
        if v:
            versions.setdefault(v["version"], None)
        return
    if msg.startswith(("NET/Socket", "NET/IB")) and _NET_INIT.match(msg):
        if msg.startswith("NET/Socket"):
            proc.socket_init = True
        else:
            proc.ib_init = True
        return
    if msg.startswith("NET/OFI "):
        if (p := _PROVIDER.match(msg)) is not None:
            proc.providers.setdefault(p["provider"], None)
        elif msg.startswith(_FORCING_NDEV):
            proc.providers.setdefault("efa", None)
        elif (o := _OFI_VERSION.match(msg)) is not None:
            proc.ofi_version = o["version"]
    elif msg.startswith("NET/Plugin") and (loaded := _LOADED.match(msg)) is not None:
        name = loaded["name"].strip()
        if name not in _INTERNAL_NETS:
            proc.plugins.setdefault(name, None)
        return
    if len(proc.hints) < _MAX_HINTS and _HINT_WORDS.search(msg):
        for hint in _HINTS:
            h = hint.pattern.search(msg)
            if h:
                proc.hints.setdefault(hint.text.format(**h.groupdict()), hint.expects)
                break


def _read_lines(stream: IO[str]) -> Iterator[str]:
    """Lines of a text stream, each cut at _MAX_LINE_CHARS, so a pathological line cannot fill memory."""
    readline = stream.readline
    skipping = False
    while chunk := readline(_MAX_LINE_CHARS):
        if not skipping:
            yield chunk
        skipping = len(chunk) >= _MAX_LINE_CHARS and not chunk.endswith("\n")


def classify(lines: Iterable[str]) -> TransportReport:
    """Read NCCL log lines (any mix of processes, prefixes and files) into a report. Streaming: memory stays flat."""
    reader = _Reader()
    feed = reader.feed
    for line in lines:
        feed(line)
    return reader.report()


class LogReadError(OSError):
    """A log file opened but could not be read to the end (a truncated or corrupt .gz)."""

    def __init__(self, message: str, path: Path):
        super().__init__(message)
        self.strerror: str | None = message
        self.filename: str = str(path)


def classify_paths(paths: Iterable[str | Path]) -> TransportReport:
    """Read NCCL logs from files ("-" is stdin; *.gz is decompressed) into one report.

    Raises OSError (FileNotFoundError, PermissionError, IsADirectoryError, LogReadError for a truncated or corrupt
    .gz) for a path that cannot be read: unreadable input is never evidence for or against a transport.
    """
    return classify(_lines_of_paths(paths))


def _lines_of_paths(paths: Iterable[str | Path]) -> Iterator[str]:
    for path in paths:
        if str(path) == "-":
            buffer = getattr(sys.stdin, "buffer", None)
            if buffer is None:  # a replaced sys.stdin (tests, embedding) is already text
                yield from _read_lines(sys.stdin)
                continue
            stream = io.TextIOWrapper(buffer, encoding="utf-8", errors="replace")
            try:
                yield from _read_lines(stream)
            finally:
                stream.detach()  # leave sys.stdin open
            continue
        path = Path(path)
        opener = gzip.open if path.suffix == ".gz" else open
        try:
            with opener(path, "rt", encoding="utf-8", errors="replace") as stream:
                yield from _read_lines(stream)
        except (EOFError, zlib.error, gzip.BadGzipFile) as error:
            # A truncated or corrupt .gz is unreadable input, never evidence: callers treat it like any OSError.
            raise LogReadError(f"{path}: corrupt or truncated compressed log ({error or type(error).__name__})",
                               path) from None


# ---------------------------------------------------------------------------------------------------------------
# Judging
# ---------------------------------------------------------------------------------------------------------------


def _judge(p: ProcessEvidence, report: TransportReport, expect: str, *, job: tuple[int | None, str],
           given: int | None) -> ProcessVerdict:
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
        return ProcessVerdict(evidence=p, status="error", transports=transports, cause=f"a NCCL call failed: {p.error}",
                              basis=basis, cause_id="nccl-error")
    if wrong := seen - {expect} - _unknown(expect):
        cause_id, cause = _cause(p, report, expect, wrong, chose=bool(basis and basis.startswith("chosen")))
        return ProcessVerdict(evidence=p, status="FAIL", transports=transports, cause=cause, basis=basis,
                              cause_id=cause_id)
    if seen - {expect}:
        return ProcessVerdict(evidence=p, status="provider unknown", transports=transports, basis=basis,
                              cause="aws-ofi-nccl carried it, but no line of the job names its libfabric provider",
                              cause_id="provider-unknown")
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


_HINT_TEXTS = tuple((re.compile(re.escape(h.text).replace(re.escape("{what}"), ".+")), h.id) for h in _HINTS)


def _hint_id(text: str) -> str:
    """The id of the hint whose text this is (hints are kept as their formatted text)."""
    return next((hint_id for pattern, hint_id in _HINT_TEXTS if pattern.fullmatch(text)), "hint")


def _cause(p: ProcessEvidence, report: TransportReport, expect: str, wrong: set[str], *,
           chose: bool = False) -> tuple[str, str]:
    """The most likely reason a process used `wrong` instead of `expect` (its own log lines, the job's, or a guess),
    as (short name, text)."""
    for texts, expects, where in ((p.hints, p.hint_expects, ""),
                                  (report.hints, report.hint_expects, " (logged by another process)")):
        relevant = [t for t, e in zip(texts, expects) if expect in e]
        if relevant:
            return _hint_id(relevant[0]), relevant[0] + where
    got = sorted(wrong)[0]
    if got == "socket":
        return "chose-socket", ("NCCL chose Socket with no plugin error logged: NCCL_NET=Socket or "
                                "NCCL_NET_PLUGIN=none is set, or no net plugin is installed")
    if got == "ib":
        return "chose-ib", "NCCL chose InfiniBand verbs, not the OFI plugin: check NCCL_NET_PLUGIN=ofi and NCCL_NET"
    if got.startswith("libfabric/"):
        provider = got.split("/", 1)[1]
        return (f"provider-{provider.split(';')[0].lower()}",
                f"aws-ofi-nccl ran on libfabric provider {provider}, not efa: check FI_PROVIDER=efa")
    if got == "libfabric":
        return "chose-libfabric", "aws-ofi-nccl (provider not logged) carried the traffic, not the expected transport"
    if got == "efa":
        return "chose-efa", (f"EFA {'was chosen' if chose else 'carried the traffic'} although another transport was "
                             "expected (the comparison run's NCCL_NET=Socket was not applied)")
    return "chose-other", f"NCCL used network {got.split('/', 1)[-1]}"


def _row_order(r: ProcessVerdict) -> tuple[int, str]:
    return (min(r.evidence.ranks) if r.evidence.ranks else 1 << 30, r.evidence.key)


def _verdict(report: TransportReport, expect: str, rows: tuple[ProcessVerdict, ...], *,
             job: tuple[int | None, str] = (None, "unknown"), given: int | None = None) -> Verdict:
    label = _LABEL[expect]
    errors = [r for r in rows if r.status == "error"]
    failed = [r for r in rows if r.status == "FAIL"]
    passed = [r for r in rows if r.status == "pass"]
    unknown = [r for r in rows if r.status == "provider unknown"]
    unproven = [r for r in rows if r.status == "unproven"]
    notes = _notes(report, expect, unproven, given=given)

    def verdict(code: int, summary: str, cause: str) -> Verdict:
        return Verdict(expect=expect, exit_code=code, summary=summary, rows=rows, notes=notes, hosts=job[0],
                       hosts_source=job[1], cause=cause)

    if errors:  # whatever the channels say: a call that failed means the traffic did not run over them
        first = errors[0]
        summary = (f"FAIL: NCCL calls failed in {len(errors)} of {len(rows)} processes, so the collectives did not run "
                   f"as their channels say; first error, {_who(first)}: {first.evidence.error}")
        if failed:
            summary += (f"; {len(failed)} processes also used "
                        f"{', '.join(sorted({_short(t) for r in failed for t in r.transports if t != expect}))}")
        return verdict(EXIT_CONTRADICTED, summary, "nccl-error")
    if failed:
        seen = sorted({_short(t) for r in failed for t in r.transports if t != expect and t not in _unknown(expect)})
        chose_only = all(r.basis and r.basis.startswith("chosen") for r in failed)
        verb = "chose" if chose_only else "used"
        who = ", ".join(_who(r) for r in failed[:4]) + (f" and {len(failed) - 4} more" if len(failed) > 4 else "")
        summary = (f"FAIL: expected {label}, but {len(failed)} of {len(rows)} processes {verb} {', '.join(seen)} "
                   f"({who}); likely cause: {failed[0].cause}")
        if chose_only:
            summary += f" (no channel line shows the traffic; the network counts because it was {failed[0].basis})"
        groups = _disagreement(rows, expect)
        if len(groups) > 1:
            summary += "; the processes disagree: " + "; ".join(groups)
        return verdict(EXIT_CONTRADICTED, summary, failed[0].cause_id or "contradicted")
    if unknown:
        who = ", ".join(_who(r) for r in unknown[:4]) + (f" and {len(unknown) - 4} more" if len(unknown) > 4 else "")
        return verdict(EXIT_NO_PROOF, (
            f"NO PROOF: {len(unknown)} of {len(rows)} processes sent through aws-ofi-nccl ({who}), but no line of the "
            "job names its libfabric provider (\"NET/OFI Selected provider is efa\"): the plugin runs on "
            f"{', '.join(OTHER_PROVIDERS)} as well, so the logs alone do not prove {label} (the nodes' EFA counters "
            "can)"), "provider-unknown")
    if passed:
        gap = _missing(report, rows, job, given)
        if gap is not None:
            return verdict(EXIT_NO_PROOF, f"NO PROOF: {gap[1]}; {label} is not proven for them", gap[0])
        incomplete = [r for r in rows if r.evidence.incomplete_inits]
        if incomplete:
            r = incomplete[0]
            return verdict(EXIT_NO_PROOF, (
                f"NO PROOF: {len(incomplete)} processes started a communicator's init and never logged its Init "
                f"COMPLETE (first {_who(r)}, comm {r.evidence.incomplete_inits[0]}): the job hung or failed in init, "
                "or the log is cut"), "init-incomplete")
        ranks = sorted({rank for r in passed for rank in r.evidence.ranks})
        nodes = max((s.nnodes for r in passed for s in r.evidence.shapes if s.nnodes), default=None)
        where = f"{nodes} nodes" if nodes else "nodes"
        summary = (f"PASS: all {len(passed)} processes whose traffic crossed {where} used {label}"
                   + (f" (ranks {_ranges(ranks)})" if ranks else "") + "; none used another transport")
        return verdict(EXIT_PASS, summary, "traffic" if any(r.basis == "traffic" for r in passed) else
                       "multi-node communicator")
    cause, why = _why_nothing(report, rows, job)
    return verdict(EXIT_NO_PROOF, f"NO PROOF: {why}; {label} is neither confirmed nor contradicted", cause)


def _missing(report: TransportReport, rows: tuple[ProcessVerdict, ...], job: tuple[int | None, str],
             given: int | None) -> tuple[str, str] | None:
    """("missing-nodes" | "missing-ranks", why) where the logs lack nodes or ranks the job had, else None.

    The job's size comes from the caller (`hosts`, which the driver knows) and from NCCL itself ("comm ... rank R
    nRanks N nNodes M"); a node or rank that logged nothing may have used any transport, so no pass without it.
    Ray's driver view folds identical lines of other processes ("[repeated Nx across cluster]"): ranks it folded into
    a communicator line count as present (their identity is lost, which a note says), nodes never do.
    """
    largest = max((s.nranks for p in report.processes for s in p.shapes), default=0)
    if largest >= 2:  # every rank of the largest communicator logged: every node that ran one is there
        present = {rank for r in rows for rank in r.evidence.ranks
                   if not r.evidence.shapes or max(s.nranks for s in r.evidence.shapes) == largest}
        absent = sorted(set(range(largest)) - present)
        folded = sum(p.folded_comm_lines for p in report.processes)
        if absent and len(absent) > folded:
            nodes = f" on {report.max_nnodes} nodes" if report.max_nnodes > 1 else ""
            return "missing-ranks", (f"NCCL's communicator has {largest} ranks{nodes}, but ranks {_ranges(absent)} "
                                     f"logged nothing here (the logs hold ranks {_ranges(sorted(present)) or 'none'}: "
                                     "a node's log not given, or a collector that timed out)")
        return None
    # No communicator shape logged (NCCL before 2.9 prints none with nNodes): the hosts the caller named must appear.
    # Host names can undercount nodes (NCCL_HOSTID), never overcount them.
    names, ips = report.host_names, report.node_ips
    seen = names if len(names) >= len(ips) else ips
    expected = given or 0
    if expected >= 2 and len(seen) < expected:
        have = f"{len(seen)} ({_few(seen)})" if seen else "no host name or node IP"
        return "missing-nodes", (f"the job ran on {expected} hosts ({job[1]}), but the logs hold lines of {have}: "
                                 f"{expected - len(seen)} host{'s' if expected - len(seen) > 1 else ''}' lines are "
                                 "missing (a log not given, or a collector that timed out)")
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
        out.append(f"{name} on {len(members)} process{'es' if len(members) > 1 else ''} (host{'s' if len(hosts) > 1 else ''} "
                   f"{_few(hosts)}" + (f", ranks {_ranges(ranks)}" if ranks else "") + ")")
    return out


def _few(names: Iterable[str], limit: int = 4) -> str:
    names = list(names)
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _why_nothing(report: TransportReport, rows: tuple[ProcessVerdict, ...],
                 job: tuple[int | None, str] = (None, "unknown")) -> tuple[str, str]:
    """(short name, why) of a verdict that proves nothing."""
    if report.nccl_lines == 0:
        return "no-nccl-lines", (f"no NCCL lines in {report.lines} lines (is {_GATE_LOG} set, and is this the "
                                 "workers' log?)")
    if report.info_lines == 0:
        return "warn-only", f"only NCCL WARN lines ({report.warn_lines}), no INFO lines (NCCL_DEBUG=WARN?)"
    statuses = {r.status for r in rows}
    if statuses == {"single-node"}:
        return "single-node", ("single-node job: its traffic never used the network (a chosen network such as Socket "
                               "proves nothing here)")
    if "unproven" in statuses:
        n = sum(r.status == "unproven" for r in rows)
        return "unproven", (f"{n} processes span nodes but logged no channel or network line (log truncated, or "
                            f"NCCL_DEBUG_SUBSYS without {'/'.join(GATE_LOG_SUBSYSTEMS)}?)")
    hosts, how = job
    if hosts is not None and hosts >= 2 and any(r.evidence.networks for r in rows):
        return "no-transport-line", (f"the job spans {how} and its processes chose a network, but no channel line or "
                                     "nNodes shows that traffic crossed them (the job stopped before connecting, or "
                                     "the log is cut)")
    return "no-transport-line", ("no line says which transport carried traffic between nodes (no channel, network or "
                                 "communicator lines)")


def _notes(report: TransportReport, expect: str, unproven: list[ProcessVerdict], *,
           given: int | None = None) -> tuple[str, ...]:
    notes = [f"plugin/provider problem logged: {t}" for t, e in zip(report.hints, report.hint_expects) if expect in e]
    if given is not None:
        nnodes, names = report.max_nnodes, report.host_names
        if given == 1 and (nnodes > 1 or len(names) > 1):
            notes.append(f"the caller said 1 host, but NCCL saw {max(nnodes, len(names))} (nNodes or host names): "
                         "pods with their own host names, or NCCL_HOSTID, make one machine several nodes to NCCL")
        elif given > 1 and report.processes and max(nnodes, len(names)) < given:
            notes.append(f"the caller said {given} hosts, but the logs show {max(nnodes, len(names), 1)}: "
                         "are the other nodes' logs missing?")
    if unproven:
        notes.append(f"{len(unproven)} processes span nodes without a transport line ({', '.join(r.evidence.key for r in unproven[:4])})")
    if report.repeated:
        notes.append(f"Ray folded {report.repeated} lines of other processes into '[repeated Nx across cluster]'; "
                     "their transport equals the line shown, but their identity is lost (read the workers' own logs)")
    if report.warn_lines and not notes:
        notes.append(f"{report.warn_lines} NCCL WARN lines, first: {report.warnings[0]}")
    return tuple(notes[: _MAX_NOTES + 1])


def _short(kind: str) -> str:
    """A transport kind as a person reads it: "socket" -> "Socket", "libfabric/tcp" -> "libfabric provider tcp"."""
    if kind.startswith("libfabric/"):
        return f"libfabric provider {kind.split('/', 1)[1]}"
    if kind.startswith("other/"):
        return f"network {kind.split('/', 1)[1]}"
    if kind == "libfabric":
        return "aws-ofi-nccl (libfabric provider not logged)"
    return {"efa": "EFA", "ib": "InfiniBand", "socket": "Socket"}[kind]


def _who(r: ProcessVerdict) -> str:
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
    return (p.key, _ranges(p.ranks) or "-", shapes, ", ".join(p.networks) or "-", f"{plugin} / {provider}",
            channels, r.status, r.cause or "")


def _process_json(p: ProcessEvidence) -> dict[str, Any]:
    return {
        "process": p.key, "host": p.host, "ip": p.ip, "ranks": list(p.ranks),
        "comms": [{"n_ranks": s.nranks, "n_nodes": s.nnodes, "local_ranks": s.local_ranks} for s in p.shapes],
        "multi_node": p.multi_node, "networks": list(p.networks), "plugins": list(p.plugins),
        "providers": list(p.providers), "ofi_version": p.ofi_version, "channels": dict(p.channels),
        "net_transports": list(p.net_transports), "hints": list(p.hints), "info_lines": p.info_lines,
        "warn_lines": p.warn_lines, "repeated": p.repeated,
    }


# ---------------------------------------------------------------------------------------------------------------
# Logs and counters together
# ---------------------------------------------------------------------------------------------------------------


def gate(report: TransportReport, expect: str = "efa", *, hosts: int | None = None,
         counters: Iterable[efa_counters.Snapshot] | None = None, predicted_bytes: float | None = None) -> Verdict:
    """The whole gate: the logs' verdict, then the EFA counters' where snapshots are given (None: the logs alone).

    Counters that contradict (EFA expected and under 10% of the predicted bytes, no EFA device, EFA busy in a TCP run)
    fail the job even when the logs pass; counters that cannot be trusted (partial, reset, of another node) keep a
    pass from happening; counters that match the prediction on every node prove EFA when the logs prove nothing.
    """
    verdict = report.verdict(expect, hosts=hosts)
    if counters is None:
        return verdict
    judged = efa_counters.judge(counters, expect, predicted_bytes=predicted_bytes, log_hosts=report.host_names,
                                hosts=verdict.hosts)
    return with_counters(verdict, judged)


def with_counters(verdict: Verdict, counters: efa_counters.CounterVerdict) -> Verdict:
    """The logs' verdict joined with the counters' (see `gate`)."""
    notes = list(verdict.notes) + list(counters.notes)
    for node in counters.nodes:  # the device says it carried traffic while NCCL's processes there said Socket
        socket_rows = [r for r in verdict.rows if r.evidence.host == node.host and "socket" in r.transports]
        least = min(node.sent_bytes or 0, node.received_bytes or 0)
        if socket_rows and least >= max(efa_counters.MIN_SHARE * (node.predicted_bytes or 0), 64 << 20):
            notes.append(f"{node.host}: NCCL logged Socket ({_who(socket_rows[0])}), yet its EFA devices carried "
                         f"{least:,} bytes each way during training: another process used EFA, or the logs and the "
                         "counters are not of the same run")
    if not counters.nodes:
        notes.append("no EFA counter snapshots were given: the logs alone decide")
        return replace(verdict, notes=tuple(notes), counters=counters)
    logs, own = verdict.exit_code, counters.exit_code
    if own == EXIT_CONTRADICTED:
        code = EXIT_CONTRADICTED
        summary = (f"FAIL: {counters.summary}" + (f"; the logs: {verdict.summary}" if logs != EXIT_CONTRADICTED
                                                  else f"; and {verdict.summary}"))
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
