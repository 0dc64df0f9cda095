"""The NCCL transport classifier and its verdicts: exit codes, prefixes, processes, old formats, IB, memory."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import tracemalloc

import pytest

from ray_efa.training.transport import (
    EXIT_CONTRADICTED,
    EXIT_NO_PROOF,
    EXIT_PASS,
    EXPECTS,
    classify,
    classify_paths,
    transport_kind,
)

# A minimal healthy 2-node EFA job seen from two processes, one per node (NCCL 2.29 patterns).
A, B = "ip-10-0-1-11:4100:4101 [0] NCCL INFO ", "ip-10-0-1-12:4200:4201 [0] NCCL INFO "
A2 = "ip-10-0-1-11:4101:4102 [1] NCCL INFO "  # a second process on the first node
EFA_JOB = [
    A + "NET/OFI Selected provider is efa, fabric is efa (found 1 nics)",
    A + "Using network Libfabric",
    A + "comm 0x55d0 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
    B + "NET/OFI Selected provider is efa, fabric is efa (found 1 nics)",
    B + "Using network Libfabric",
    B + "comm 0x55d1 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
    A + "Channel 00/0 : 0[0] -> 1[0] [send] via NET/Libfabric/0",
    B + "Channel 00/0 : 0[0] -> 1[0] [receive] via NET/Libfabric/0",
]
SOCKET_JOB = [line.replace("Libfabric", "Socket") for line in EFA_JOB if "NET/OFI" not in line]


def verdict_of(lines, expect="efa"):
    return classify(lines).verdict(expect)


# -- exit codes ------------------------------------------------------------------------------------------------


def test_pass_when_every_process_that_crossed_nodes_used_efa():
    # GIVEN a 2-node job whose both processes chose Libfabric on provider efa and sent over NET/Libfabric
    # WHEN judged against EFA
    verdict = verdict_of(EFA_JOB)
    # THEN it passes, and the summary says how many processes proved it
    assert verdict.exit_code == EXIT_PASS
    assert verdict.summary.startswith("PASS: all 2 processes whose traffic crossed 2 nodes used EFA")


def test_fail_names_the_process_its_ranks_the_transport_and_the_cause():
    # GIVEN a 2-node job that fell back to Socket after NCCL could not load the OFI plugin
    lines = [A + "NET/Plugin: Could not find: ofi libnccl-net-ofi.so", *SOCKET_JOB]
    # WHEN judged against EFA
    verdict = verdict_of(lines)
    # THEN it fails, naming host:pid, rank, what was used and why
    assert verdict.exit_code == EXIT_CONTRADICTED
    assert "ip-10-0-1-11:4100 rank 0" in verdict.summary
    assert "used Socket" in verdict.summary
    assert "could not load the net plugin (ofi libnccl-net-ofi.so)" in verdict.summary
    assert {r.status for r in verdict.rows} == {"FAIL"}


def test_a_single_socket_channel_among_efa_ones_fails():
    # GIVEN an EFA job where one extra connection of one process went over NET/Socket
    lines = [*EFA_JOB, B + "Channel 01/0 : 0[0] -> 1[0] [receive] via NET/Socket/0"]
    # WHEN judged against EFA
    verdict = verdict_of(lines)
    # THEN it is never a pass
    assert verdict.exit_code == EXIT_CONTRADICTED
    assert "ip-10-0-1-12:4200" in verdict.summary


def test_per_rank_disagreement_fails_for_either_expectation():
    # GIVEN node 1 on EFA and node 2 fallen back to Socket
    lines = EFA_JOB[:3] + [
        B + "Using network Socket",
        B + "comm 0x55d1 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0",
    ]
    # WHEN judged against EFA and against Socket
    # THEN both fail: each names the processes that disagree
    efa, socket = verdict_of(lines, "efa"), verdict_of(lines, "socket")
    assert efa.exit_code == socket.exit_code == EXIT_CONTRADICTED
    assert "ip-10-0-1-12:4200" in efa.summary and "ip-10-0-1-11:4100" not in efa.summary
    assert "ip-10-0-1-11:4100" in socket.summary


@pytest.mark.parametrize(
    "lines", [[], [""], ["step 1 loss 12.0", "(RayTrainWorker pid=1) ready"]], ids=["empty", "blank", "no NCCL lines"]
)
def test_no_proof_without_nccl_lines(lines):
    # GIVEN input with no NCCL line
    verdict = verdict_of(lines)
    # THEN it proves nothing (3), never a pass
    assert verdict.exit_code == EXIT_NO_PROOF
    assert "no NCCL lines" in verdict.summary


def test_no_proof_for_a_warn_only_log():
    # GIVEN only WARN lines (NCCL_DEBUG=WARN), even ones about the OFI plugin failing
    lines = [
        "",
        "[2026-11-29 18:44:12] ip-10-0-1-11:4100:4101 [0] net.cc:12 NCCL WARN NET/OFI aws-ofi-nccl initialization failed",
    ]
    verdict = verdict_of(lines)
    # THEN it proves nothing, and the summary says why
    assert verdict.exit_code == EXIT_NO_PROOF
    assert "only NCCL WARN lines" in verdict.summary


@pytest.mark.parametrize("expect", EXPECTS)
def test_single_node_using_network_socket_neither_proves_nor_contradicts(expect):
    # GIVEN one node: NCCL prints "Using network Socket" though all traffic stays on P2P
    lines = [
        A + "NET/Plugin: Could not find: ofi libnccl-net-ofi.so",
        A + "Using network Socket",
        A + "comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0",
        A + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
        B.replace("12:4200", "11:4101") + "comm 0x2 rank 1 nRanks 2 nNodes 1 localRanks 2 localRank 1",
    ]
    # WHEN judged against any transport
    verdict = verdict_of(lines, expect)
    # THEN it proves nothing
    assert verdict.exit_code == EXIT_NO_PROOF
    assert "single-node job" in verdict.summary
    assert {r.status for r in verdict.rows} == {"single-node"}


def test_net_channels_on_one_node_do_count():
    # GIVEN one node with P2P and SHM disabled, so its ranks really talk through NET/Socket
    lines = [
        A + "Using network Socket",
        A + "comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0",
        A + "Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0",
        A2 + "comm 0x2 rank 1 nRanks 2 nNodes 1 localRanks 2 localRank 1",
        A2 + "Channel 00/0 : 0[0] -> 1[1] [receive] via NET/Socket/0",
    ]
    # THEN EFA is contradicted and Socket proven
    assert verdict_of(lines, "efa").exit_code == EXIT_CONTRADICTED
    assert verdict_of(lines, "socket").exit_code == EXIT_PASS


def test_a_multi_node_process_without_transport_lines_is_unproven():
    # GIVEN only communicator lines of a 2-node job (NCCL_DEBUG_SUBSYS without NET, or a truncated log)
    verdict = verdict_of([line for line in EFA_JOB if " comm " in line])
    # THEN nothing is proven
    assert verdict.exit_code == EXIT_NO_PROOF
    assert {r.status for r in verdict.rows} == {"unproven"}


def test_unknown_expect_is_rejected_with_the_allowed_values():
    with pytest.raises(ValueError, match=r"expect must be one of efa, ib, socket, got 'tcp'"):
        classify(EFA_JOB).verdict("tcp")


# -- prefixes --------------------------------------------------------------------------------------------------

PREFIXES = {
    "raw": lambda line: line,
    "ray": lambda line: f"(RayTrainWorker pid={line.split(':')[1]}, ip=10.0.1.11) {line}",
    "ray colour": lambda line: f"\x1b[36m(RayTrainWorker pid={line.split(':')[1]}, ip=10.0.1.11)\x1b[0m {line}",
    "ray repeated": lambda line: (
        f"(RayTrainWorker pid=1, ip=10.0.1.9) {line}\x1b[2m [repeated 7x across cluster]\x1b[0m"
    ),
    "mpirun": lambda line: f"[1,3]<stdout>:{line}",
    "cloudwatch": lambda line: f"2026-11-29T18:44:12.123Z {line}",
    "aws logs tail": lambda line: f"2026-11-29T18:44:12.123000+00:00 ray-worker/abc {line}",
    "kubelet cri": lambda line: f"2026-11-29T18:44:12.123456789Z stdout F {line}",
    "python logging time": lambda line: f"2026-11-29 18:44:12,123 {line}",
    "nccl timestamp": lambda line: f"[2026-11-29 18:44:12] {line}",
    "tab-separated export": lambda line: f"EVENTS\t1764441852123\tray-worker\t{line}\t1764441852999",
    "json record": lambda line: json.dumps({"log": line + "\n", "stream": "stdout"}),
}


@pytest.mark.parametrize("style", PREFIXES)
def test_every_prefix_style_is_read_and_keyed_by_host_pid(style):
    # GIVEN the healthy EFA job with every line wrapped in one prefix style
    wrap = PREFIXES[style]
    report = classify(wrap(line) for line in EFA_JOB)
    # THEN the processes are the NCCL host:pid, and the verdict passes
    assert sorted(p.key for p in report.processes) == ["ip-10-0-1-11:4100", "ip-10-0-1-12:4200"]
    assert report.verdict("efa").exit_code == EXIT_PASS


def test_ray_repeated_count_is_recorded_and_stripped_from_the_network_name():
    # GIVEN Ray's folded line with its once-per-driver note
    line = (
        A + "Using network Libfabric\x1b[2m [repeated 7x across cluster] (Ray deduplicates logs by default. "
        "Set RAY_DEDUP_LOGS=0 to disable log deduplication.)\x1b[0m"
    )
    report = classify([line])
    # THEN the network is Libfabric and the 7 hidden copies are counted
    assert report.processes[0].networks == ("Libfabric",)
    assert report.repeated == 7


def test_lines_without_an_nccl_prefix_fall_back_to_rays_pid_and_ip():
    # GIVEN a process whose NCCL prefix was lost but whose Ray prefix remains, and one that has both
    lines = [
        "(RayTrainWorker pid=77, ip=10.0.1.13) NCCL INFO Using network Socket",
        "(RayTrainWorker pid=88, ip=10.0.1.14) host-d:88:90 [0] NCCL INFO Using network Libfabric",
        "(RayTrainWorker pid=88, ip=10.0.1.14) NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/Libfabric/0",
    ]
    keys = sorted(p.key for p in classify(lines).processes)
    # THEN the first is keyed ip:pid and the second's unprefixed line joins its host:pid
    assert keys == ["10.0.1.13:77", "host-d:88"]


def test_interleaved_processes_of_one_file_are_kept_apart():
    # GIVEN four processes' lines interleaved line by line, two of them on Socket
    lines = []
    for i in range(4):
        net = "Socket" if i >= 2 else "Libfabric"
        lines += [
            f"node-{i // 2}:{500 + i}:{600 + i} [{i % 2}] NCCL INFO Channel 00/0 : {i}[0] -> {(i + 1) % 4}[0] [send] via NET/{net}/0"
        ]
    report = classify(lines)
    verdict = report.verdict("efa")
    # THEN each process has only its own transport, and exactly the Socket ones fail
    assert {p.key: p.net_transports for p in report.processes} == {
        "node-0:500": ("Libfabric",),
        "node-0:501": ("Libfabric",),
        "node-1:502": ("Socket",),
        "node-1:503": ("Socket",),
    }
    assert [r.evidence.key for r in verdict.rows if r.status == "FAIL"] == ["node-1:502", "node-1:503"]


def test_several_files_and_stdin_of_one_job_merge(tmp_path, monkeypatch):
    # GIVEN node 1's lines in a file, node 2's gzipped, and nothing else on stdin
    (tmp_path / "a.log").write_text("\n".join(line for line in EFA_JOB if line.startswith(A)) + "\n")
    with gzip.open(tmp_path / "b.log.gz", "wt") as f:
        f.write("\n".join(line for line in EFA_JOB if line.startswith(B)) + "\n")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    # WHEN read together
    report = classify_paths([tmp_path / "a.log", str(tmp_path / "b.log.gz"), "-"])
    # THEN both processes are there and the job passes
    assert len(report.processes) == 2
    assert report.verdict().exit_code == EXIT_PASS


def test_stdin_is_read_when_the_path_is_a_dash(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(SOCKET_JOB)))
    assert classify_paths(["-"]).verdict("socket").exit_code == EXIT_PASS


def test_a_missing_file_raises_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        classify_paths([tmp_path / "nope.log"])


def test_an_overlong_line_is_cut_and_the_next_line_still_read(tmp_path):
    # GIVEN a 5 MB line without NCCL content, then a real NCCL line
    path = tmp_path / "big.log"
    path.write_text("x" * 5_000_000 + "NCCL INFO junk\n" + "\n".join(EFA_JOB) + "\n")
    # WHEN read
    report = classify_paths([path])
    # THEN the long line did not swallow the next ones
    assert report.verdict().exit_code == EXIT_PASS


# -- NCCL versions and networks ------------------------------------------------------------------------------------


def test_nccl_2_4_ring_lines_with_the_old_aws_libfabric_name_pass():
    # GIVEN NCCL 2.4: no "Using network" line, "Ring" connection lines and an old comm line without nNodes
    lines = [
        "p4d-1:10:10 [0] NCCL INFO NET/OFI Selected Provider is efa",
        "p4d-1:10:11 [0] NCCL INFO Ring 00 : 15 -> 0 [receive] via NET/AWS Libfabric/0",
        "p4d-1:10:11 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC",
        "p4d-1:10:10 [0] NCCL INFO comm 0x7f00 rank 0 nranks 16 cudaDev 0 nvmlDev 0 - Init COMPLETE",
    ]
    report = classify(lines)
    # THEN the receive line counts for rank 0, the shape has no node count, and rank 0 used EFA
    (p,) = report.processes
    assert p.ranks == (0,) and p.shapes[0].nnodes is None
    assert dict(p.channels) == {"NET/AWS Libfabric": 1, "P2P/IPC": 1}
    verdict = report.verdict("efa")
    assert verdict.rows[0].status == "pass"
    # BUT the communicator has 16 ranks and 15 logged nothing: no pass without them
    assert verdict.exit_code == EXIT_NO_PROOF and verdict.cause == "missing-ranks"
    assert "ranks 1-15 logged nothing" in verdict.summary


def test_receive_lines_belong_to_the_destination_rank_and_send_lines_to_the_source():
    lines = [
        A + "Channel 00/0 : 7[3] -> 8[0] [receive] via NET/Socket/0",
        B + "Channel 00/0 : 8[0] -> 9[1] [send] via NET/Socket/0",
    ]
    assert {p.key: p.ranks for p in classify(lines).processes} == {"ip-10-0-1-11:4100": (8,), "ip-10-0-1-12:4200": (8,)}


@pytest.mark.parametrize(
    "network, expect, code",
    [
        ("IB", "ib", EXIT_PASS),
        ("IBext_v8", "ib", EXIT_PASS),
        ("IB", "efa", EXIT_CONTRADICTED),
        ("IBext_v8", "socket", EXIT_CONTRADICTED),
        ("AWS Libfabric", "efa", EXIT_NO_PROOF),
        ("Libfabric", "ib", EXIT_CONTRADICTED),
        ("Libfabric", "socket", EXIT_CONTRADICTED),
    ],
)
def test_infiniband_and_libfabric_names(network, expect, code):
    # GIVEN a 2-node job on the named network (without aws-ofi-nccl's provider line: Libfabric alone is no EFA)
    lines = [line.replace("Libfabric", network) for line in EFA_JOB if "NET/OFI" not in line]
    # THEN it passes exactly the matching expectation
    assert verdict_of(lines, expect).exit_code == code


def test_old_nccl_bootstrap_net_socket_line_is_not_socket_traffic():
    # GIVEN an IB job whose NCCL printed "NET/Socket : Using [0]ib0" during bootstrap
    lines = [
        A + "NET/Socket : Using [0]ib0:10.1.0.1<0>",
        *[line.replace("Libfabric", "IB") for line in EFA_JOB if "OFI" not in line],
    ]
    # THEN the job proves IB and does not count as Socket
    assert verdict_of(lines, "ib").exit_code == EXIT_PASS
    assert verdict_of(lines, "socket").exit_code == EXIT_CONTRADICTED
    assert all("socket" not in r.transports for r in verdict_of(lines, "ib").rows)


def test_libfabric_on_the_tcp_provider_is_not_efa():
    lines = [
        line.replace("provider is efa, fabric is efa", "provider is tcp, fabric is 10.0.0.0/16") for line in EFA_JOB
    ]
    verdict = verdict_of(lines)
    assert verdict.exit_code == EXIT_CONTRADICTED
    assert "libfabric provider tcp" in verdict.summary
    assert "FI_PROVIDER=efa" in (verdict.rows[0].cause or "")


def test_a_process_without_a_provider_line_shares_the_jobs_provider():
    # GIVEN Ray's deduplication kept "Selected provider is efa" for node 1 only
    lines = [line for line in EFA_JOB if not (line.startswith(B) and "NET/OFI" in line)]
    assert verdict_of(lines).exit_code == EXIT_PASS


def test_the_gpudirect_retry_on_g6_is_not_reported_as_a_cause():
    # GIVEN aws-ofi-nccl's normal retry on an instance without GPUDirect RDMA
    lines = [A + "NET/OFI Could not find any optimal provider supporting GPUDirect RDMA", *EFA_JOB]
    report = classify(lines)
    # THEN it is no hint, and the job passes without notes about providers
    assert report.hints == ()
    assert report.verdict().exit_code == EXIT_PASS


def test_new_nccl_plugin_lines_record_the_plugin_and_the_chosen_network():
    lines = [
        A + "NET/Plugin: Loaded net plugin Libfabric (v10)",
        A + "Initialized NET plugin Libfabric",
        A + "Initialized NET plugin Socket",
        A + "Assigned NET plugin Libfabric to comm",
        A + "NET/OFI Initializing aws-ofi-nccl 1.20.0",
    ]
    (p,) = classify(lines).processes
    assert p.plugins == ("Libfabric",)  # the internal Socket transport is not a plugin
    assert p.networks == ("Libfabric",)
    assert p.ofi_version == "1.20.0"


def test_the_cause_is_guessed_when_the_log_has_no_plugin_error():
    verdict = verdict_of(SOCKET_JOB)
    assert "NCCL_NET=Socket or NCCL_NET_PLUGIN=none" in (verdict.rows[0].cause or "")


@pytest.mark.parametrize(
    "name, providers, kinds",
    [
        ("Socket", (), {"socket"}),
        ("IB", (), {"ib"}),
        ("IBext_v11", (), {"ib"}),
        ("Libfabric", (), {"libfabric"}),
        ("AWS Libfabric", ("efa",), {"efa"}),
        ("Libfabric", ("tcp;ofi_rxm",), {"libfabric/tcp;ofi_rxm"}),
        ("Libfabric", ("efa", "tcp"), {"efa", "libfabric/tcp"}),
        ("UCX", (), {"other/UCX"}),
    ],
)
def test_transport_kind(name, providers, kinds):
    assert transport_kind(name, providers) == kinds


# -- output ------------------------------------------------------------------------------------------------------


def test_the_table_has_a_row_per_process_with_its_columns():
    verdict = verdict_of([A + "NET/Plugin: Could not find: ofi libnccl-net-ofi.so", *SOCKET_JOB])
    table = verdict.render_table().splitlines()
    assert table[0].split()[:3] == ["PROCESS", "RANKS", "nRanks/nNodes/localRanks"]
    row = next(line for line in table if line.startswith("ip-10-0-1-11:4100"))
    for cell in ("2/2/1", "Socket", "NET/Socket x1", "FAIL", "libnccl-net-ofi.so"):
        assert cell in row


def test_to_json_is_plain_json_with_the_verdict_per_process():
    data = json.loads(json.dumps(verdict_of(EFA_JOB).to_json()))
    assert data["status"] == "pass" and data["exit_code"] == 0 and data["expect"] == "efa"
    assert [(p["process"], p["verdict"], p["transports"]) for p in data["processes"]] == [
        ("ip-10-0-1-11:4100", "pass", ["efa"]),
        ("ip-10-0-1-12:4200", "pass", ["efa"]),
    ]


# -- memory --------------------------------------------------------------------------------------------------------


def _pool() -> list[str]:
    """Lines of a 16-process job: two thirds NCCL channel lines, the rest noise."""
    lines = []
    for i in range(960):
        proc = i % 16
        host = f"ip-10-0-1-{proc // 8}:{4000 + proc}:{4001 + proc} [{proc % 8}] NCCL INFO "
        lines.append(
            host + f"Channel {i % 32:02d}/0 : {proc}[0] -> {(proc + 1) % 16}[0] [send] via NET/Libfabric/0"
            if i % 3
            else f"step {i} loss 1.0"
        )
    return lines


def _peak_bytes(n: int) -> int:
    pool = _pool()  # built before tracing, so only the classifier's own allocations are measured
    tracemalloc.start()
    try:
        classify(itertools.islice(itertools.cycle(pool), n))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_stays_flat_as_the_log_grows():
    # GIVEN the same job's log at 5k and at 50k lines
    # WHEN each is classified under tracemalloc
    small, large = _peak_bytes(5_000), _peak_bytes(50_000)
    # THEN ten times the lines costs no more memory (within noise) and stays small
    assert large < small * 1.5 + 64 * 1024
    assert large < 2 * 1024 * 1024


def test_processes_past_the_bound_share_one_bucket_whose_evidence_still_counts(monkeypatch):
    # GIVEN room for two processes only, and a third that used Socket
    monkeypatch.setattr("ray_efa.training.transport.parse._MAX_PROCESSES", 2)
    lines = [*EFA_JOB, "node-z:999:1000 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/Socket/0"]
    verdict = verdict_of(lines)
    # THEN the third lands in "(other processes)" and the job still fails
    assert verdict.exit_code == EXIT_CONTRADICTED
    assert [r.evidence.key for r in verdict.rows if r.status == "FAIL"] == ["(other processes)"]


def test_the_prefix_cache_stays_correct_when_it_is_full(monkeypatch):
    # GIVEN a tiny prefix cache and timestamped lines, so that every line has a new prefix
    monkeypatch.setattr("ray_efa.training.transport.parse._MAX_HEADS", 2)
    lines = [f"2026-11-29T18:44:{i:02d}.000Z {line}" for i, line in enumerate(EFA_JOB)]
    report = classify(lines)
    # THEN each line still reaches its own process
    assert {p.key: p.info_lines for p in report.processes} == {"ip-10-0-1-11:4100": 4, "ip-10-0-1-12:4200": 4}


# -- expert verdicts: multi-host jobs, plugin failures, disagreement -----------------------------------------------

CHOSE_SOCKET = [A + "Using network Socket", B + "Using network Socket"]  # two hosts, no comm or channel line


def test_socket_chosen_by_every_process_of_a_two_host_job_is_a_contradiction():
    # GIVEN processes on two hosts that chose Socket, with no channel or nNodes line (NCCL_DEBUG_SUBSYS, a cut log)
    verdict = verdict_of(CHOSE_SOCKET)
    # THEN EFA is contradicted, naming the hosts that make it a multi-host job
    assert verdict.exit_code == EXIT_CONTRADICTED
    assert "2 of 2 processes chose Socket" in verdict.summary
    assert "2 hosts (host names ip-10-0-1-11, ip-10-0-1-12)" in verdict.summary
    assert {r.basis for r in verdict.rows} == {"chosen on a job of 2 hosts (host names ip-10-0-1-11, ip-10-0-1-12)"}
    assert verdict.hosts == 2


@pytest.mark.parametrize("expect", ["socket", "efa"])
def test_a_chosen_network_alone_never_passes(expect):
    # GIVEN two hosts that chose the expected network but logged no channel line and no nNodes
    lines = CHOSE_SOCKET if expect == "socket" else [line.replace("Socket", "Libfabric") for line in CHOSE_SOCKET]
    # THEN it proves nothing: a pass takes NCCL's own word that traffic crossed nodes
    assert verdict_of(lines, expect).exit_code == EXIT_NO_PROOF
    assert classify(lines).verdict(expect, hosts=8).exit_code == EXIT_NO_PROOF


def test_the_caller_says_how_many_hosts_the_job_had():
    # GIVEN one process's log that chose Socket (the other host's log is not given)
    lines = CHOSE_SOCKET[:1]
    report = classify(lines)
    # THEN alone it proves nothing; told the job had 2 hosts, it is a contradiction; told 1, a single-node job
    assert report.verdict("efa").exit_code == EXIT_NO_PROOF
    two = report.verdict("efa", hosts=2)
    assert two.exit_code == EXIT_CONTRADICTED and "2 hosts (given by the caller)" in two.summary
    one = report.verdict("efa", hosts=1)
    assert one.exit_code == EXIT_NO_PROOF and {r.status for r in one.rows} == {"single-node"}


@pytest.mark.parametrize(
    "failure, cause",
    [
        ("NET/OFI aws-ofi-nccl initialization failed", "aws-ofi-nccl failed to initialize"),
        ("NET/OFI Initializing plugin failed", "aws-ofi-nccl failed to initialize"),
        ("NET/OFI Could not find any optimal provider", "libfabric found no usable EFA provider"),
        (
            "NET/Plugin: Could not find: ofi libnccl-net-ofi.so",
            "could not load the net plugin (ofi libnccl-net-ofi.so)",
        ),
        (
            "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file",
            "could not load the net plugin (libnccl-net.so)",
        ),
        ("NET/Plugin : No plugin found, using internal implementation", "no NCCL net plugin was found"),
        (
            "NET/Plugin: Failed to find ncclNetPlugin symbol (>= v5). ncclNetPlugin symbols v4 and lower are not supported.",
            "exports no ncclNetPlugin API this NCCL supports",
        ),
    ],
    ids=["ofi init", "plugin init", "no provider", "no libnccl-net-ofi", "plugin load", "no plugin", "old symbols"],
)
def test_socket_chosen_right_after_a_plugin_failure_is_a_contradiction_naming_the_failure(failure, cause):
    # GIVEN one process (shape unknown) whose plugin failed, then NCCL chose Socket
    lines = [A + failure, A + "NET/Socket : Using [0]eth0:10.0.1.11<0>", A + "Using network Socket"]
    verdict = verdict_of(lines)
    # THEN EFA is contradicted, and the cause is the failure
    assert verdict.exit_code == EXIT_CONTRADICTED
    assert cause in verdict.rows[0].cause
    assert "chosen right after a plugin failure" in verdict.summary
    # AND it never proves Socket
    assert verdict_of(lines, "socket").exit_code == EXIT_NO_PROOF


def test_a_plugin_failure_on_a_known_single_node_job_proves_nothing():
    # GIVEN the fallback on one node (nNodes 1), or on a job the caller ran on one host
    lines = [A + "NET/OFI aws-ofi-nccl initialization failed", A + "Using network Socket"]
    shaped = lines + [A + "comm 0x1 rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0"]
    # THEN it proves nothing about the network, and the note still names the failure
    for verdict in (verdict_of(shaped), classify(lines).verdict("efa", hosts=1)):
        assert verdict.exit_code == EXIT_NO_PROOF
        assert any("aws-ofi-nccl failed to initialize" in n for n in verdict.notes)


def test_a_one_rank_communicator_is_single_node():
    lines = [
        A + "NET/Plugin : No plugin found, using internal implementation",
        A + "Using network Socket",
        A + "comm 0x55f0 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 30 commId 0x43 - Init START",
    ]
    assert verdict_of(lines).exit_code == EXIT_NO_PROOF
    assert classify(lines).processes[0].multi_node is False


def test_old_nccl_socket_initialized_after_a_missing_plugin_is_socket():
    # GIVEN NCCL 2.4, which prints no "Using network": no plugin, no IB device, then its Socket transport initialized
    lines = [
        A + "NET/Plugin : No plugin found (libnccl-net.so).",
        A + "NET/IB : No device found.",
        A + "NET/Socket : Using [0]eth0:10.0.1.11<0>",
    ]
    # THEN EFA is contradicted: Socket is the network NCCL fell back to
    verdict = verdict_of(lines)
    assert verdict.exit_code == EXIT_CONTRADICTED and verdict.rows[0].transports == ("socket",)
    # AND where IB initialized too (the bootstrap socket of an IB job), nothing is inferred
    assert verdict_of([*lines, A + "NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.1.0.1<0>"]).exit_code == EXIT_NO_PROOF


def test_processes_that_disagree_are_named_with_their_hosts_and_ranks():
    # GIVEN node 1 on EFA (nNodes 2, channels) and node 2 choosing Socket after its plugin failed
    lines = [
        *EFA_JOB[:3],
        EFA_JOB[6],
        B + "NET/Plugin: Could not find: ofi libnccl-net-ofi.so",
        B + "Using network Socket",
    ]
    verdict = verdict_of(lines)
    # THEN it fails, and the summary groups the processes by transport with their hosts and ranks
    assert verdict.exit_code == EXIT_CONTRADICTED
    assert "the processes disagree: EFA on 1 process (host ip-10-0-1-11, ranks 0)" in verdict.summary
    assert "Socket on 1 process (host ip-10-0-1-12)" in verdict.summary


def test_the_collnet_and_versioned_symbol_probes_are_not_failures():
    # NCCL probes newer plugin symbols first and aws-ofi-nccl has no CollNet: both lines are normal
    lines = [
        A + "NET/Plugin: Failed to find ncclCollNetPlugin_v8 symbol.",
        A + "NET/Plugin: Failed to find ncclNetPlugin_v7 symbol.",
    ]
    assert classify(lines).hints == ()


def test_the_caller_hosts_that_contradict_nccl_are_noted():
    verdict = classify(EFA_JOB).verdict("efa", hosts=1)
    assert verdict.exit_code == EXIT_PASS  # NCCL's nNodes 2 and its channels win over the caller's claim
    assert any("the caller said 1 host, but NCCL saw 2" in n for n in verdict.notes)


@pytest.mark.parametrize("hosts", [0, -1, True, 1.5, "2"])
def test_a_bad_host_count_is_rejected(hosts):
    with pytest.raises(ValueError, match="hosts must be a whole number >= 1"):
        classify(EFA_JOB).verdict("efa", hosts=hosts)


def test_the_rdma_probe_of_a_healthy_g6_gets_no_provider_note():
    # GIVEN aws-ofi-nccl 1.20's RDMA probe finding no provider at INFO, then SENDRECV on efa (nccl_ofi_rdma.cpp)
    lines = [A + "NET/OFI No eligible providers were found", A + "NET/OFI Using transport protocol SENDRECV", *EFA_JOB]
    verdict = verdict_of(lines)
    # THEN it passes with no note about a plugin or provider problem
    assert verdict.exit_code == EXIT_PASS
    assert not any("provider problem" in n for n in verdict.notes)


def test_two_hosts_given_and_one_hosts_old_lines_never_pass():
    # GIVEN NCCL 2.4 lines (no communicator shape) of one host of a job the caller ran on 2
    lines = [
        "p4d-1:10:10 [0] NCCL INFO NET/OFI Selected Provider is efa",
        "p4d-1:10:11 [0] NCCL INFO Ring 00 : 15 -> 0 [receive] via NET/AWS Libfabric/0",
    ]
    verdict = classify(lines).verdict("efa", hosts=2)
    # THEN it proves nothing, naming the host it has
    assert verdict.exit_code == EXIT_NO_PROOF and verdict.cause == "missing-nodes"
    assert "lines of 1 (p4d-1)" in verdict.summary
    # AND without the caller's count, the same lines pass (nothing says the job had more hosts)
    assert classify(lines).verdict("efa").exit_code == EXIT_PASS


def test_a_warn_and_error_returns_fail_whatever_the_channels_say():
    lines = [
        *EFA_JOB,
        B.replace("NCCL INFO ", "transport/net.cc:1 NCCL WARN ") + "NET/OFI Unable to register memory "
        "(type = 2) for device 0. RC: -22, Error: Invalid argument",
        B + "transport/net.cc:829 -> 2",
    ]
    verdict = verdict_of(lines)
    assert verdict.exit_code == EXIT_CONTRADICTED and verdict.cause == "nccl-error"
    assert "ip-10-0-1-12:4200 rank 1" in verdict.summary and "Unable to register memory" in verdict.summary
    # AND the returns of a plugin that failed while NCCL fell back (in-progress 7 included) are no failed collective
    fallback = [
        *EFA_JOB,
        A.replace("NCCL INFO ", "x:1 NCCL WARN ") + "NET/OFI aws-ofi-nccl initialization failed",
        A + "net.cc:56 -> 2",
        B + "init.cc:9 -> 7",
    ]
    assert verdict_of(fallback).cause != "nccl-error"


# -- the hint pre-filter: a hint whose words HINT_WORDS lacks would never fire -----------------------------------

from ray_efa.training.transport import lines as _lines  # noqa: E402


@pytest.mark.parametrize("index", range(len(_lines.HINTS)), ids=[h.id for h in _lines.HINTS])
def test_every_hint_example_gets_through_the_pre_filter_and_names_its_cause(index):
    hint = _lines.HINTS[index]
    # GIVEN the message the hint is for: this hint is the first that matches it, and the pre-filter finds one of its
    # words inside what the pattern matched (not in the rest of the line, which another message need not have)
    assert next(h for h in _lines.HINTS if h.pattern.search(hint.example)) is hint
    match = hint.pattern.search(hint.example)
    assert match and _lines.HINT_WORDS.search(match.group(0)), (
        f"HINT_WORDS has no word of {hint.id}'s pattern: {match and match.group(0)!r}"
    )
    # WHEN a process logs it and then falls back to Socket
    expect = "efa" if "efa" in hint.expects else "ib"
    lines = [A + hint.example, A + "NET/Socket : Using [0]eth0:10.0.1.11<0>", A + "Using network Socket"]
    (row,) = verdict_of(lines, expect).rows
    # THEN the verdict's cause is this hint
    assert row.cause_id == hint.id, row.cause


def test_every_fixture_line_a_hint_matches_gets_through_the_pre_filter():
    from pathlib import Path

    logs = [p for p in (Path(__file__).parent / "fixtures" / "nccl").rglob("*") if p.is_file() and p.suffix != ".md"]
    matched = [
        line
        for path in logs
        for line in path.read_text(errors="replace").splitlines()
        if any(h.pattern.search(line) for h in _lines.HINTS)
    ]
    assert len(matched) > 10  # the corpus holds hint lines at all
    assert [line for line in matched if not _lines.HINT_WORDS.search(line)] == []
    # ...and the pre-filter saves the hint table most lines: it passes few of the corpus's lines
    lines = [line for path in logs for line in path.read_text(errors="replace").splitlines()]
    assert sum(1 for line in lines if _lines.HINT_WORDS.search(line)) < len(lines) / 5
