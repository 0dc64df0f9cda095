"""What the NCCL log says about one process (ProcessEvidence) and one of its communicators (CommShape): what
training.transport.parse reads and training.transport.verdict judges.
"""

from __future__ import annotations

from dataclasses import dataclass


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
