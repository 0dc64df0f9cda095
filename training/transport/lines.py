"""The NCCL lines the transport gate knows: the patterns of its prefixes and of the lines that name a network,
a plugin, a provider, a channel or a communicator, the hints (likely causes) that WARN lines carry, and the two
helpers that find NCCL's message in a line (a JSON log record's text, NCCL's prefix).

Patterns only; training.transport.parse folds the lines into evidence and training.transport.verdict judges it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
"""A terminal colour or cursor escape (Ray and kubectl colour their output): removed before matching."""
# Ray's driver-side deduplication: the line of the latest source, then how many other sources printed it (numbers
# are ignored when comparing), and once per driver a note in parentheses.
REPEATED = re.compile(r"\s*\[repeated (\d+)x across cluster\].*$")
RAY_PREFIX = re.compile(r"\((?:[^()\s]+ )?pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^)\s,]+))?[^)]*\)")
"""Ray's prefix of a worker's line, "(RayTrainWorker pid=123, ip=10.0.0.1)": the process it came from."""
MPI_PREFIX = re.compile(r"\[\d+,(?P<rank>\d+)\]<std(?:out|err)>:")
"""mpirun's --tag-output prefix, "[1,3]<stdout>:": the rank it came from."""
# NCCL's levels as they follow its prefix; TRACE lines carry nothing the gate needs.
LEVELS = ("NCCL INFO ", "NCCL WARN ", "NCCL ATTN ")
# NCCL's prefix: "[timestamp] host:pid:tid [cudaDev] NCCL INFO msg"; WARN lines put "file:line" or
# "func(args):line" between the device and the level. NCCL cuts the hostname at its first dot.
_HOST = re.compile(r"[^\s:\[\]()<>{}\"'=,\x1b]+")
VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+\S*)")
"""NCCL's version line ("NCCL version 2.27.5+cuda12.9"), once per process."""

# The lines that name the network NCCL chose (Using network, Assigned/Initialized/Loaded NET plugin), the libfabric
# provider aws-ofi-nccl selected and aws-ofi-nccl's version.
USING_NETWORK = re.compile(r"Using network (?P<name>.+)")
ASSIGNED = re.compile(r"Assigned NET plugin (?P<name>.+?) to comm")
INITIALIZED = re.compile(r"Initialized NET plugin (?P<name>.+)")
LOADED = re.compile(r"NET/Plugin ?: ?Loaded (?:net )?plugin (?P<name>.+?)(?: \(v\d+\))?\.?$")
PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (?P<provider>[^\s,(]+)")
OFI_VERSION = re.compile(r"NET/OFI Initializing aws-ofi-nccl (?P<version>\S+)")
COMM = re.compile(
    r"\bcomm (?:0x)?[0-9a-f]+ rank (?P<rank>\d+) nranks (?P<nranks>\d+)"
    r"(?: nnodes (?P<nnodes>\d+) localranks (?P<local>\d+))?",
    re.IGNORECASE,
)
"""A communicator's rank, size and (2.18+) node count and local ranks, from its init line."""
# "Channel 00/0 : 3[3] -> 4[0] [send] via NET/Libfabric/0/GDRDMA"; old NCCL: "Ring 00 : 7 -> 8 [receive] via ...";
# the bracket after a rank is the CUDA device (new) or the bus id in hex (old).
CHANNEL = re.compile(
    r"(?:Channel|Ring) \d+(?:/\d+)? ?: (?P<src>\d+)(?:\[[0-9a-fA-F]+\])? -> (?P<dst>\d+)(?:\[[0-9a-fA-F]+\])?"
    r"(?: \[(?P<dir>send|receive)\])? via (?P<via>.+)"
)
NET_VIA = re.compile(r"NET/(?P<name>[^/]+?)(?:/|$)")
"""CHANNEL's `via` part: the NET transport a channel crosses nodes on (no NET/: inside the node, P2P or SHM)."""
# "NET/Socket : Using [0]eth0:10.0.0.1<0>", "NET/IB : Using [0]mlx5_0:1/IB ; OOB ...": that transport initialized.
# NCCL up to 2.11 initializes Socket only when the plugin and IB both failed; later versions initialize it always.
NET_INIT = re.compile(r"NET/(?:Socket|IB) ?: ?Using\b")

# Internal NCCL transports also print "Initialized NET plugin"; they are not plugins a user installs.
INTERNAL_NETS = frozenset({"IB", "Socket"})


@dataclass(frozen=True, slots=True)
class Hint:
    """A likely cause of a fallback: the WARN/INFO line that shows it and the text the verdict gives for it."""

    id: str
    """A short name for the cause (a verdict's `cause`, expected.csv's cause column)."""
    pattern: re.Pattern[str]
    expects: frozenset[str]
    """The expected transports for which this line explains a fallback (a missing OFI plugin is normal for IB)."""
    text: str
    example: str
    """A message the hint is for, as NCCL prints it after "NCCL INFO " or "NCCL WARN " (from a fixture, else from
    the source that prints it); a test checks that it gets through HINT_WORDS and that this hint takes it."""


_EFA, _EFA_IB = frozenset({"efa"}), frozenset({"efa", "ib"})
# The hints, first match wins: training.transport.parse looks for them in WARN lines, training.transport.verdict
# names the first as the likely cause of a fallback.
HINTS: tuple[Hint, ...] = (
    Hint(
        "ofi-init-failed",
        re.compile(r"aws-ofi-nccl initialization failed|NET/OFI Initializing plugin failed"),
        _EFA,
        "aws-ofi-nccl failed to initialize (EFA userspace, libfabric and plugin do not match, "
        "or the pod has no EFA device: vpc.amazonaws.com/efa)",
        example="NET/OFI aws-ofi-nccl initialization failed",
    ),
    # aws-ofi-nccl <= 1.5 (src/nccl_ofi_net.c, ofi_init in 1.1, nccl_net_ofi_init in 1.5): the plugin refuses any
    # libfabric provider but efa, and NCCL then falls back to its own transports.
    Hint(
        "ofi-only-efa",
        re.compile(r"NET/OFI Only EFA provider is supported"),
        _EFA,
        'aws-ofi-nccl found no efa provider ("Only EFA provider is supported": no EFA device in the pod, or '
        "FI_PROVIDER names another provider)",
        example="NET/OFI Only EFA provider is supported",
    ),
    # "... supporting GPUDirect RDMA" is a normal retry on instances without GPUDirect RDMA (g5, g6, g6e). "NET/OFI
    # No eligible providers were found" is not a failure either: aws-ofi-nccl 1.14-1.21 logs it at INFO when its
    # RDMA protocol's probe finds no provider (nccl_ofi_rdma.cpp, nccl_net_ofi_rdma_init, fi_getinfo -FI_ENODATA),
    # then nccl_net_ofi_create_plugin (nccl_ofi_net.cpp) tries SENDRECV, which is what a healthy g6 runs on; only
    # "Unable to find a protocol that worked" (both failed) is.
    Hint(
        "ofi-no-provider",
        re.compile(
            r"Could not find any optimal provider(?! supporting GPUDirect)"
            r"|Couldn't find any optimal provider"
            r"|Unable to find a protocol that worked"
        ),
        _EFA,
        "libfabric found no usable EFA provider (no EFA device in the pod: request vpc.amazonaws.com/efa; "
        "or FI_PROVIDER names a provider that is not installed)",
        example="NET/OFI Unable to find a protocol that worked.  Failing initialization.",
    ),
    Hint(
        "plugin-not-found",
        re.compile(r"NET/Plugin ?: ?Could not find:? (?P<what>.+?\.so(?:\.\d+)*)"),
        _EFA,
        "NCCL could not load the net plugin ({what}): aws-ofi-nccl is not installed or not on "
        "LD_LIBRARY_PATH, or NCCL_NET_PLUGIN names another library",
        example="NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.",
    ),
    Hint(
        "no-plugin",
        re.compile(r"No plugin found \((?P<what>[^)]+)\)"),
        _EFA,
        "no NCCL net plugin was found ({what}), so NCCL used its internal IB/Socket transports",
        example="NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
    ),
    # NCCL 2.12-2.18: "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : ...", then "No plugin found, using
    # internal implementation".
    Hint(
        "plugin-load-failed",
        re.compile(r"Plugin load \((?P<what>[^)]+)\) returned \d+"),
        _EFA,
        "NCCL could not load the net plugin ({what}), so NCCL used its internal IB/Socket transports",
        example="NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object "
        "file: No such file or directory",
    ),
    Hint(
        "no-plugin",
        re.compile(r"No plugin found, using internal"),
        _EFA,
        "no NCCL net plugin was found (libnccl-net.so), so NCCL used its internal IB/Socket transports",
        example="NET/Plugin : No plugin found, using internal implementation",
    ),
    # NCCL 2.19+: the library loaded but exports no net API this NCCL can use (a plugin too old or too new).
    Hint(
        "plugin-symbols",
        re.compile(r"Failed to find ncclNetPlugin symbol \(>= ?v\d+\)"),
        _EFA,
        "the net plugin library exports no ncclNetPlugin API this NCCL supports (plugin and NCCL versions do "
        "not match), so NCCL used its internal IB/Socket transports",
        example="NET/Plugin: Failed to find ncclNetPlugin symbol (>= v5). ncclNetPlugin symbols v4 and lower are "
        "not supported.",
    ),
    Hint(
        "no-net-plugin",
        re.compile(r"Failed to initialize any NET plugin"),
        _EFA_IB,
        "no NET plugin initialized (check NCCL_NET and NCCL_NET_PLUGIN)",
        example="Failed to initialize any NET plugin",
    ),
    Hint(
        "net-not-found",
        re.compile(r"Error: network (?P<what>.+?) not found"),
        _EFA_IB,
        "NCCL_NET asks for network {what}, which no loaded plugin provides",
        example="Error: network AWS Libfabric not found.",
    ),
    Hint(
        "ib-no-device",
        re.compile(r"NET/IB ?: ?No device found"),
        frozenset({"ib"}),
        "NCCL found no InfiniBand device (NET/IB : No device found)",
        example="NET/IB : No device found.",
    ),
)


# Every hint pattern holds one of these words; one search skips the hint table on ordinary lines. A hint whose words
# are missing here would never fire: tests/training/test_transport.py checks that each hint's example gets through
# and that every line of the fixture logs a hint pattern matches does too.
HINT_WORDS = re.compile(r"ould not|ouldn't|ailed|No |Only EFA|not found|Unable|returned")

# WARN lines of a plugin that failed while NCCL fell back to another transport: the job runs on (slowly), so these
# with the error returns around them are a fallback, not failed collectives.
FALLBACK_WARN = re.compile(
    "|".join(h.pattern.pattern.replace("?P<what>", "") for h in HINTS)
    # the protocol's name as aws-ofi-nccl prints it: lowercase up to 1.17, PROTOCOL's "RDMA"/"SENDRECV" in 1.18-1.21
    + r"|Failed to initiali[sz]ed? (?i:sendrecv|rdma) protocol|Creating new endpoint for domain .* failed"
    r"|Caught exception in (?:rdma|sendrecv)_init|NET/Plugin|Setting FI_|OFI fi_getinfo\(\) call failed"
)
# NCCLCHECK's trace of a failed call (checks.h: INFO "%s:%d -> %d", "-> %d (%s)", "-> %d [Async thread]"); 7 is
# ncclInProgress, the normal answer of a non-blocking communicator.
RETURN = re.compile(r"(?P<loc>[\w./+-]+\.(?:cc|cpp|c|cu|h|hpp)):\d+ -> (?P<code>\d+)\b")
NOT_ERRORS = frozenset({"0", "7"})
"""RETURN codes that are not errors: ncclSuccess (0) and ncclInProgress (7)."""
# Errors as PyTorch (ProcessGroupNCCL: "NCCL error in: ..., unhandled system error ...") and NCCL's ncclGetErrorString
# name them; torch prints them without NCCL's prefix, often after "[rankN]:".
FATAL = re.compile(
    r"NCCL error|unhandled (?:system|cuda) error|nccl(?:Internal|System|UnhandledCuda|Remote)Error"
    r"|ncclInvalid(?:Usage|Argument)"
)
_FATAL_WORDS = ("NCCL error", "nccl", "unhandled")
TORCH_RANK = re.compile(r"\[rank(?P<rank>\d+)\]:")
"""PyTorch's "[rank3]:" prefix of a line it prints for a rank."""
# init.cc: "... comm %p rank %d nranks %d ... - Init START" (2.18+), "- Init COMPLETE" (2.4+), "- Abort COMPLETE".
INIT_STATE = re.compile(
    r"\bcomm (?P<comm>\S+) rank (?P<rank>\d+) .*- "
    r"(?P<state>Init START|Init COMPLETE|Abort COMPLETE)"
)
# aws-ofi-nccl <= 1.5 (src/nccl_ofi_net.c, ofi_init / nccl_net_ofi_init) logs this only where the selected provider
# is efa (IS_EFA_PROVIDER and no GPUDirect RDMA): it names the provider as surely as "Selected Provider is efa".
FORCING_NDEV = "NET/OFI Forcing AWS OFI ndev"
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


def json_message(line: str) -> str:
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


def nccl_prefix(line: str, at: int) -> tuple[str, str] | None:
    """(host, pid) of NCCL's "host:pid:tid [dev] " prefix before position `at`, or None. String scans, no regex
    search: this runs for every NCCL line."""
    bracket = line.rfind(" [", 0, at)
    if bracket < 0:
        return None
    close = line.find("] ", bracket, at + 1)
    if close < 0 or not line[bracket + 2 : close].lstrip("-").isdigit():
        return None
    token = line[line.rfind(" ", 0, bracket) + 1 : bracket]  # "host:pid:tid", perhaps after mpirun's "<stdout>:"
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


_HINT_TEXTS = tuple((re.compile(re.escape(h.text).replace(re.escape("{what}"), ".+")), h.id) for h in HINTS)


def hint_id(text: str) -> str:
    """The id of the hint whose text this is (hints are kept as their formatted text)."""
    return next((id_ for pattern, id_ in _HINT_TEXTS if pattern.fullmatch(text)), "hint")
