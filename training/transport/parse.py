"""Reading NCCL logs: fold the lines into evidence per process (host:pid), streaming, in bounded memory.

`classify(lines)` and `classify_paths(paths)` return a TransportReport (training.transport.verdict), whose
`verdict(expect)` judges it. The line patterns are training.transport.lines'.
"""

from __future__ import annotations

import gzip
import io
import sys
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from ray_efa.training.transport.evidence import CommShape, ProcessEvidence
from ray_efa.training.transport.lines import (
    ANSI,
    ASSIGNED,
    CHANNEL,
    COMM,
    FALLBACK_WARN,
    FATAL,
    FORCING_NDEV,
    HINT_WORDS,
    HINTS,
    INIT_STATE,
    INITIALIZED,
    INTERNAL_NETS,
    LEVELS,
    LOADED,
    MPI_PREFIX,
    NET_INIT,
    NET_VIA,
    NOT_ERRORS,
    OFI_VERSION,
    PROVIDER,
    RAY_PREFIX,
    REPEATED,
    RETURN,
    TORCH_RANK,
    USING_NETWORK,
    VERSION,
    json_message,
    nccl_prefix,
)
from ray_efa.training.transport.verdict import MAX_NOTES, TransportReport

# Bounds that keep memory flat whatever the input: a line longer than this is cut (NCCL's own lines are < 1 KiB),
# a process keeps at most this many distinct hints, and past this many processes the rest share one bucket
# ("(other processes)") whose evidence still counts, so no contradiction can be lost.
_MAX_LINE_CHARS = 16_384
_MAX_HINTS = 8
_MAX_PROCESSES = 65_536
_MAX_HEADS = 4096
_OVERFLOW_KEY = "(other processes)"
_UNATTRIBUTED_KEY = "(unattributed)"


class _Process:
    """Mutable evidence of one process while the stream is read; every container is bounded."""

    __slots__ = (
        "key",
        "host",
        "ip",
        "comm_ranks",
        "chan_ranks",
        "shapes",
        "networks",
        "plugins",
        "providers",
        "ofi_version",
        "channels",
        "nets",
        "hints",
        "info",
        "warn",
        "repeated",
        "socket_init",
        "ib_init",
        "first_warn",
        "returns",
        "first_return",
        "fatal",
        "init_started",
        "init_done",
        "aborted",
        "folded",
    )

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
            error=error,
            incomplete_inits=incomplete,
            folded_comm_lines=self.folded,
            key=self.key,
            host=self.host,
            ip=self.ip,
            ranks=tuple(sorted(ranks)),
            shapes=shapes,
            networks=tuple(self.networks),
            plugins=tuple(self.plugins),
            providers=tuple(self.providers),
            ofi_version=self.ofi_version,
            channels=tuple(sorted(self.channels.items(), key=lambda kv: (-kv[1], kv[0]))),
            net_transports=tuple(self.nets),
            hints=tuple(self.hints),
            hint_expects=tuple(self.hints.values()),
            info_lines=self.info,
            warn_lines=self.warn,
            repeated=self.repeated,
            socket_net_initialized=self.socket_init,
            ib_net_initialized=self.ib_init,
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
            line = json_message(line)
        # str.find runs in C; a regex searched from every position of a long Ray-prefixed line costs ten times more.
        for level in LEVELS:
            at = line.find(level)
            if at >= 0:
                break
        else:
            v = VERSION.search(line)  # NCCL >= 2.2x prints its version line without the host prefix
            if v:
                self.versions.setdefault(v["version"], None)
            self._fatal(line)
            return
        self.nccl += 1
        msg = line[at + len(level) :]
        if "\t" in msg:  # tab-separated exports carry more columns after the message
            msg = msg.split("\t", 1)[0]
        repeats = 0
        if "[repeated " in msg:
            r = REPEATED.search(msg)
            if r:
                repeats = int(r.group(1))
                msg = msg[: r.start()]
        if "\x1b" in msg:
            msg = ANSI.sub("", msg)
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
            if len(self.warnings) < MAX_NOTES:
                self.warnings.setdefault(msg[:200], None)
            if proc.first_warn is None and not FALLBACK_WARN.search(msg):
                proc.first_warn = f"NCCL WARN {msg[:300]}"
            if proc.fatal is None and FATAL.search(msg):
                proc.fatal = f"NCCL WARN {msg[:300]}"
        if repeats and "comm " in msg and " rank " in msg:
            proc.folded = max(proc.folded, repeats)
        _parse_message(proc, msg, self.versions)

    def _fatal(self, line: str) -> None:
        """Record a line outside NCCL's format that names a failed NCCL call (PyTorch's "NCCL error in: ...")."""
        if len(line) > _MAX_LINE_CHARS:
            line = line[:_MAX_LINE_CHARS]
        f = FATAL.search(line)
        if f is None:
            return
        proc = self._process(line, f.start())
        if proc.fatal is None:
            text = ANSI.sub("", line).strip()
            rank = TORCH_RANK.search(text)
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
        prefix = nccl_prefix(line, at)
        proc = self.by_prefix.get(prefix) if prefix else None
        if proc is not None:
            return proc
        ray_at = line.find("pid=", 0, at)
        ray = RAY_PREFIX.search(line, 0, at) if ray_at >= 0 else None
        if prefix is not None:
            key = f"{prefix[0]}:{prefix[1]}"
            if ray is not None:
                self.ray_alias[(ray["ip"] or "", ray["pid"])] = key
        elif ray is not None:
            ip = ray["ip"] or ""
            key = self.ray_alias.get((ip, ray["pid"])) or f"{ip or 'local'}:{ray['pid']}"
        elif (mpi := MPI_PREFIX.search(line, 0, at)) is not None:
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
            lines=self.lines,
            nccl_lines=self.nccl,
            info_lines=self.info,
            warn_lines=self.warn,
            repeated=self.repeated,
            nccl_versions=tuple(self.versions),
            warnings=tuple(self.warnings),
            hints=tuple(hints),
            hint_expects=tuple(hints.values()),
        )


def _parse_message(proc: _Process, msg: str, versions: dict[str, None]) -> None:
    """Update one process from one NCCL message (the text after "NCCL INFO " / "NCCL WARN ")."""
    if " via " in msg and _parse_channel(proc, msg):
        return
    if _parse_network_choice(proc, msg):
        return
    if " -> " in msg and (r := RETURN.match(msg)) is not None:
        if r["code"] not in NOT_ERRORS:
            proc.returns += 1
            proc.first_return = proc.first_return or msg[:120]
        return
    if "COMPLETE" in msg or "Init START" in msg:
        _parse_init_state(proc, msg)
    if "comm " in msg and "rank " in msg and _parse_comm_shape(proc, msg):
        return
    if msg.startswith("NCCL version"):
        v = VERSION.match(msg)
        if v:
            versions.setdefault(v["version"], None)
        return
    if _parse_transport_init(proc, msg):
        return
    if len(proc.hints) < _MAX_HINTS and HINT_WORDS.search(msg):
        for hint in HINTS:
            h = hint.pattern.search(msg)
            if h:
                proc.hints.setdefault(hint.text.format(**h.groupdict()), hint.expects)
                break


def _parse_channel(proc: _Process, msg: str) -> bool:
    """A channel line ("Channel 00/0 : 0[0] -> 8[0] [send] via NET/..."): its peer rank and transport; False if not
    one."""
    c = CHANNEL.match(msg)
    if not c:
        return False
    via = c["via"].strip()
    proc.chan_ranks.add(int(c["dst"] if c["dir"] == "receive" else c["src"]))
    net = NET_VIA.match(via)
    if net:
        name = net["name"].strip()
        proc.nets.setdefault(name, None)
        label = f"NET/{name}"
    else:
        label = via[:40]
    proc.channels[label] = proc.channels.get(label, 0) + 1
    return True


def _parse_network_choice(proc: _Process, msg: str) -> bool:
    """The network NCCL chose and the plugins it initialized; False if the message is none of those."""
    if msg.startswith("Using network "):
        if (u := USING_NETWORK.match(msg)) is not None:
            proc.networks.setdefault(u["name"].strip(), None)
        return True
    if msg.startswith("Assigned NET plugin "):
        a = ASSIGNED.match(msg)
        if a:
            proc.networks.setdefault(a["name"].strip(), None)
        return True
    if msg.startswith("Initialized NET plugin "):
        if (i := INITIALIZED.match(msg)) is not None and i["name"].strip() not in INTERNAL_NETS:
            proc.plugins.setdefault(i["name"].strip(), None)
        return True
    return False


def _parse_init_state(proc: _Process, msg: str) -> None:
    """A communicator's Init START / Init COMPLETE / abort (at most 1024 communicators a process)."""
    if (state := INIT_STATE.search(msg)) is not None and len(proc.init_started) < 1024:
        comm = state["comm"]
        if state["state"] == "Init START":
            proc.init_started.setdefault(comm, int(state["rank"]))
        elif state["state"] == "Init COMPLETE":
            proc.init_done.add(comm)
        else:
            proc.aborted.add(comm)


def _parse_comm_shape(proc: _Process, msg: str) -> bool:
    """A communicator's shape (ranks, nodes, local ranks) and this process's rank in it; False if not one."""
    c = COMM.search(msg)
    if not c:
        return False
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
    return True


def _parse_transport_init(proc: _Process, msg: str) -> bool:
    """NET/Socket, NET/IB, NET/OFI (provider, version) and NET/Plugin lines; False where the message may still be a
    hint (every NET/OFI line, or no such line)."""
    if msg.startswith(("NET/Socket", "NET/IB")) and NET_INIT.match(msg):
        if msg.startswith("NET/Socket"):
            proc.socket_init = True
        else:
            proc.ib_init = True
        return True
    if msg.startswith("NET/OFI "):
        if (p := PROVIDER.match(msg)) is not None:
            proc.providers.setdefault(p["provider"], None)
        elif msg.startswith(FORCING_NDEV):
            proc.providers.setdefault("efa", None)
        elif (o := OFI_VERSION.match(msg)) is not None:
            proc.ofi_version = o["version"]
        return False
    if msg.startswith("NET/Plugin") and (loaded := LOADED.match(msg)) is not None:
        name = loaded["name"].strip()
        if name not in INTERNAL_NETS:
            proc.plugins.setdefault(name, None)
        return True
    return False


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
            raise LogReadError(
                f"{path}: corrupt or truncated compressed log ({error or type(error).__name__})", path
            ) from None
