"""EFA hardware counters (training.efa_counters) on sysfs trees laid out as the efa driver lays them out, and the gate
that joins them with the NCCL logs (training.transport.gate)."""

from __future__ import annotations

import json

import pytest

from ray_efa.training import efa_counters
from ray_efa.training.efa_counters import (
    PORT_COUNTERS,
    CounterFileError,
    judge,
    load_snapshot,
    load_snapshots,
    read_sysfs,
    take_snapshot,
    write_snapshot,
)
from ray_efa.training.transport import EXIT_CONTRADICTED, EXIT_NO_PROOF, EXIT_PASS, Verdict, classify, gate
from tests.load_script import load_script
from tests.training.efa_sysfs import make_efa_sysfs, set_counter

GB = 10**9
HOSTS = ("ip-10-0-1-11", "ip-10-0-1-12")
# A healthy 2-node EFA job's NCCL lines, one process per node (as in test_transport.py)
A, B = f"{HOSTS[0]}:4100:4101 [0] NCCL INFO ", f"{HOSTS[1]}:4200:4201 [0] NCCL INFO "
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


def _node_run(
    tmp_path,
    host,
    *,
    moved_tx,
    moved_rx,
    devices=("rdmap16s27",),
    steps=100,
    per_step=1 * GB,
    before_values=None,
    run="02000000",
):
    """Before and after snapshots of one node whose devices' counters moved by moved_tx/moved_rx (split evenly)."""
    base = tmp_path / host
    start = before_values or {"tx_bytes": 5 * GB, "rx_bytes": 7 * GB, "tx_pkts": 1000}
    klass, dev = make_efa_sysfs(base, {d: dict(start) for d in devices})
    before = take_snapshot("before", run=run, root=klass, dev_root=dev, host=host)
    for d in devices:
        set_counter(klass, d, "tx_bytes", start["tx_bytes"] + moved_tx // len(devices))
        set_counter(klass, d, "rx_bytes", start["rx_bytes"] + moved_rx // len(devices))
    after = take_snapshot(
        "after", run=run, root=klass, dev_root=dev, host=host, steps=steps, predicted_bytes_per_step=per_step
    )
    return before, after, klass, dev


def _job(tmp_path, moved=(50 * GB, 50 * GB), **kw):
    snaps = []
    for host in HOSTS:
        before, after, *_ = _node_run(tmp_path, host, moved_tx=moved[0], moved_rx=moved[1], **kw)
        snaps += [before, after]
    return snaps


# -- reading sysfs -------------------------------------------------------------------------------------------------


def counters_of(verdict: Verdict) -> efa_counters.CounterVerdict:
    """The verdict's counters part, which every test here gives the gate."""
    assert verdict.counters is not None
    return verdict.counters


def test_every_efa_counter_of_every_efa_device_is_read_and_other_rdma_devices_are_not(tmp_path):
    # GIVEN two EFA devices (as on p4d) and a Mellanox device on the same host
    klass, _ = make_efa_sysfs(tmp_path, {"rdmap16s27": {"tx_bytes": 11}, "rdmap32s27": {"rx_bytes": 22}}, mlx5=True)
    # WHEN the tree is read
    seen = read_sysfs(klass)
    # THEN both EFA devices are there with every counter the efa driver defines, the mlx5 device and `lifespan` not
    assert sorted(seen.devices) == ["rdmap16s27", "rdmap32s27"]
    assert set(seen.devices["rdmap16s27"]["1"]) == set(PORT_COUNTERS)
    assert seen.devices["rdmap16s27"]["1"]["tx_bytes"] == 11 and seen.devices["rdmap32s27"]["1"]["rx_bytes"] == 22
    assert seen.guids["rdmap16s27"] == "0a1b:2c3d:4e5f:0000" and seen.problems == () and seen.unreadable == {}


def test_a_counter_that_is_not_a_number_is_a_problem_not_a_crash(tmp_path):
    klass, dev = make_efa_sysfs(tmp_path, {"rdmap16s27": {}})
    set_counter(klass, "rdmap16s27", "tx_bytes", "N/A")
    snap = take_snapshot("before", run="r", root=klass, dev_root=dev, host="h")
    assert "tx_bytes" not in snap.devices["rdmap16s27"]["1"]
    assert snap.problems == ("rdmap16s27 port 1: tx_bytes is not a number: 'N/A'",)


def test_a_missing_sysfs_tree_is_no_device(tmp_path):
    snap = take_snapshot("before", run="r", root=tmp_path / "none", dev_root=tmp_path / "none", host="h")
    assert snap.devices == {} and snap.uverbs == () and snap.problems == () and snap.unreadable == {}
    assert snap.not_visible is None and snap.job_devices == ()


def test_a_snapshot_round_trips_through_its_file(tmp_path):
    before, after, *_ = _node_run(tmp_path, "h1", moved_tx=1, moved_rx=2)
    path = write_snapshot(after, tmp_path / "out")
    assert efa_counters.is_counter_file(path) and efa_counters.is_written_snapshot(path)
    loaded = load_snapshot(path)
    assert loaded.devices == after.devices and loaded.steps == 100 and loaded.source == str(path)


# -- judging -------------------------------------------------------------------------------------------------------


def test_counters_that_moved_as_predicted_pass_on_every_node(tmp_path):
    # GIVEN 2 nodes whose EFA devices each sent and received 50 GB; 100 steps x 1 GB predicted each way
    verdict = judge(_job(tmp_path), "efa")
    # THEN each node passes at 50% of the prediction, and the counters alone prove EFA
    assert verdict.exit_code == 0
    assert [(n.host, n.sent_bytes, n.received_bytes, n.predicted_bytes, n.status) for n in verdict.nodes] == [
        (HOSTS[0], 50 * GB, 50 * GB, 100 * GB, "pass"),
        (HOSTS[1], 50 * GB, 50 * GB, 100 * GB, "pass"),
    ]
    table = verdict.render_table()
    assert "50.00 GB" in table and "100.00 GB (100 steps)" in table and "50%" in table


def test_bytes_are_summed_over_a_nodes_devices(tmp_path):
    verdict = judge(_job(tmp_path, devices=("rdmap16s27", "rdmap32s27", "rdmap48s27", "rdmap64s27")), "efa")
    assert {n.devices for n in verdict.nodes} == {4} and {n.sent_bytes for n in verdict.nodes} == {50 * GB}


def test_counters_far_below_the_prediction_fail_even_when_the_logs_pass(tmp_path):
    # GIVEN logs that prove EFA, but devices that moved 2 GB of the 100 GB predicted (the traffic went by TCP)
    snaps = _job(tmp_path, moved=(2 * GB, 2 * GB))
    verdict = gate(classify(EFA_JOB), "efa", counters=snaps)
    # THEN the job fails, naming the nodes and the shares
    assert verdict.exit_code == EXIT_CONTRADICTED
    assert verdict.summary.startswith("FAIL: EFA counters contradict: 2 of 2 nodes")
    assert "2.0% of the 100.00 GB predicted" in verdict.summary
    assert {n.status for n in counters_of(verdict).nodes} == {"LOW"}


def test_the_counters_prove_efa_where_the_logs_prove_nothing(tmp_path):
    verdict = gate(classify([]), "efa", counters=_job(tmp_path))
    assert verdict.exit_code == EXIT_PASS and verdict.summary.startswith("PASS: EFA counters prove it")


def test_counters_of_one_node_alone_never_pass(tmp_path):
    before, after, *_ = _node_run(tmp_path, HOSTS[0], moved_tx=50 * GB, moved_rx=50 * GB)
    assert judge([before, after], "efa").exit_code == 3
    assert gate(classify([]), "efa", hosts=2, counters=[before, after]).exit_code == EXIT_NO_PROOF


def test_without_a_prediction_the_counters_support_but_never_prove(tmp_path):
    # GIVEN a user's own train function: the after snapshots carry no step count or prediction
    snaps = _job(tmp_path, steps=None, per_step=None)
    verdict = judge(snaps, "efa")
    assert {n.status for n in verdict.nodes} == {"moved"} and verdict.exit_code == 3
    assert gate(classify(EFA_JOB), "efa", counters=snaps).exit_code == EXIT_PASS
    assert gate(classify([]), "efa", counters=snaps).exit_code == EXIT_NO_PROOF
    idle = judge(_job(tmp_path / "idle", moved=(1000, 1000), steps=None, per_step=None), "efa")
    assert {n.status for n in idle.nodes} == {"idle"} and idle.exit_code == 3


@pytest.mark.parametrize(
    "pod_devices, detail",
    [
        (0, "the pod was given no EFA device (no /dev/infiniband/uverbs*): request vpc.amazonaws.com/efa"),
        (None, "the node has no EFA device in /sys/class/infiniband"),
    ],
    ids=["no uverbs in the pod", "no device on the node"],
)
def test_no_efa_device_is_its_own_verdict(tmp_path, pod_devices, detail):
    if pod_devices is None:
        klass, dev = tmp_path / "sys", tmp_path / "dev"
    else:
        klass, dev = make_efa_sysfs(tmp_path, {"rdmap16s27": {}}, uverbs=pod_devices)
    snaps = [
        take_snapshot(phase, run="r", root=klass, dev_root=dev, host=h, steps=10, predicted_bytes_per_step=GB)
        for h in HOSTS
        for phase in ("before", "after")
    ]
    verdict = gate(classify(EFA_JOB), "efa", counters=snaps)
    assert verdict.exit_code == EXIT_CONTRADICTED
    assert {n.status for n in counters_of(verdict).nodes} == {"no EFA device"} and detail in verdict.summary
    # AND the TCP comparison run does not need one
    assert judge(snaps, "socket").exit_code != EXIT_CONTRADICTED


def test_efa_busy_in_a_tcp_run_fails_and_is_named_beside_the_socket_logs(tmp_path):
    snaps = _job(tmp_path)
    verdict = gate(classify(SOCKET_JOB), "socket", counters=snaps)
    assert verdict.exit_code == EXIT_CONTRADICTED
    assert {n.status for n in counters_of(verdict).nodes} == {"EFA moved"}
    assert any("NCCL logged Socket" in note and HOSTS[0] in note for note in verdict.notes)
    # AND the EFA-expected verdict of the same Socket logs names the devices that moved
    efa = gate(classify(SOCKET_JOB), "efa", counters=snaps)
    assert efa.exit_code == EXIT_CONTRADICTED and any("yet its EFA devices carried" in n for n in efa.notes)


# -- bad counters: a named verdict, never a pass ----------------------------------------------------------------


def test_a_counter_that_went_down_is_a_device_reset(tmp_path):
    before, after, klass, dev = _node_run(tmp_path, HOSTS[0], moved_tx=50 * GB, moved_rx=50 * GB)
    set_counter(klass, "rdmap16s27", "tx_pkts", 3)  # lower than the 1000 before
    after = take_snapshot(
        "after", run=before.run, root=klass, dev_root=dev, host=HOSTS[0], steps=100, predicted_bytes_per_step=GB
    )
    other = _job(tmp_path / "b")[2:]
    verdict = gate(classify(EFA_JOB), "efa", counters=[before, after, *other])
    assert verdict.exit_code == EXIT_NO_PROOF and "cannot be trusted" in verdict.summary
    assert (
        counters_of(verdict).nodes[0].status == "reset"
        and "tx_pkts went down (1000 -> 3)" in counters_of(verdict).nodes[0].detail
    )


def test_snapshots_of_different_devices_are_a_mismatch(tmp_path):
    before, _, *_ = _node_run(tmp_path / "a", HOSTS[0], moved_tx=0, moved_rx=0)
    _, after, *_ = _node_run(tmp_path / "b", HOSTS[0], moved_tx=GB, moved_rx=GB)
    after = efa_counters.Snapshot(
        **{**{f: getattr(after, f) for f in after.__slots__}, "guids": {"rdmap16s27": "ffff"}}
    )
    verdict = judge([before, after], "efa")
    assert verdict.nodes[0].status == "mismatch" and "node_guid" in verdict.nodes[0].detail and verdict.exit_code == 3


def test_a_missing_after_snapshot_or_counter_is_incomplete(tmp_path):
    before, after, klass, dev = _node_run(tmp_path, HOSTS[0], moved_tx=GB, moved_rx=GB)
    assert judge([before], "efa").nodes[0].status == "incomplete"
    assert judge([after], "efa").nodes[0].status == "incomplete"
    set_counter(klass, "rdmap16s27", "rx_bytes", "garbage")
    cut = take_snapshot(
        "after", run=before.run, root=klass, dev_root=dev, host=HOSTS[0], steps=1, predicted_bytes_per_step=1
    )
    node = judge([before, cut], "efa").nodes[0]
    assert node.status == "incomplete" and "rx_bytes is not a number" in node.detail


def test_counters_of_a_host_the_logs_do_not_name_are_foreign(tmp_path):
    snaps = _job(tmp_path)
    verdict = gate(classify([line for line in EFA_JOB if line.startswith(A)]), "efa", counters=snaps)
    foreign = [n for n in counters_of(verdict).nodes if n.status == "foreign"]
    assert [n.host for n in foreign] == [HOSTS[1]] and verdict.exit_code == EXIT_NO_PROOF


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "not JSON"),
        (
            '{"format": "ray-efa/efa-counters/1", "phase": "after", "run": "r", "host": "h", "time_s": 1, "devices": {"d": {"1": {"tx_bytes": "12"}}}}',
            "counter d/1/tx_bytes must be a whole number >= 0, got '12'",
        ),
        (
            '{"format": "ray-efa/efa-counters/1", "phase": "after", "run": "r", "host": "h", "time_s": 1, "devices": {"d": {"1": {"tx_bytes": -5}}}}',
            "must be a whole number >= 0, got -5",
        ),
        (
            '{"format": "ray-efa/efa-counters/1", "phase": "later", "run": "r", "host": "h", "time_s": 1, "devices": {}}',
            "phase must be",
        ),
        ('{"format": "something-else"}', "not an EFA counter snapshot"),
        (
            '{"format": "ray-efa/efa-counters/1", "phase": "after", "run": "r", "host": "h", "time_s": 1, "devices": {}, "job_devices": "d"}',
            "job_devices must be a list of device names or null, got 'd'",
        ),
        (
            '{"format": "ray-efa/efa-counters/1", "phase": "after", "run": "r", "host": "h", "time_s": 1, "devices": {}, "unreadable": {"d": 1}}',
            "unreadable must be an object of device -> reason",
        ),
        (
            '{"format": "ray-efa/efa-counters/1", "phase": "after", "run": "r", "host": "h", "time_s": 1, "dev',
            "not JSON",
        ),
    ],
    ids=["empty", "string value", "negative", "bad phase", "other format", "job devices", "unreadable", "cut short"],
)
def test_a_bad_counter_file_raises_naming_the_file(tmp_path, text, message):
    path = tmp_path / "efa-counters-h-after-1.json"
    path.write_text(text)
    with pytest.raises(CounterFileError) as raised:
        load_snapshots([tmp_path])
    assert raised.value.filename == str(path) and message in str(raised.value)


def test_a_folder_without_snapshots_is_an_error(tmp_path):
    with pytest.raises(CounterFileError, match="holds no efa-counters"):
        load_snapshots([tmp_path])


def test_the_spool_is_per_run_and_read_back_newest_last(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_EFA_COUNTERS_DIR", str(tmp_path))
    before, after, *_ = _node_run(tmp_path / "t", "h1", moved_tx=1, moved_rx=1, run="0a000000")
    write_snapshot(after, efa_counters.spool_dir("0a000000"))
    write_snapshot(before, efa_counters.spool_dir("0a000000"))
    write_snapshot(before, efa_counters.spool_dir("0b000000"))
    names = [name for name, _ in efa_counters.read_spool("0a000000")]
    assert len(names) == 2 and all(n.startswith("efa-counters-h1-") for n in names)
    assert json.loads(efa_counters.read_spool("0a000000")[0][1])["run"] == "0a000000"
    assert efa_counters.read_spool("ffffffff") == []


def test_the_prediction_is_core_perfs_inter_node_bytes():
    from ray_efa.core.settings import Settings
    from ray_efa.core.strategy import choose

    settings = Settings.from_context({})
    expected = sum(c.wire_gb for c in choose(settings).prediction.collectives if c.link == "inter") * 1e9
    assert efa_counters.predicted_bytes_per_step(settings) == pytest.approx(expected) and expected > 0


# -- what a pod sees: counters that cannot be read are never zero ---------------------------------------------------


def _pod_view_job(tmp_path, **kw):
    """Before and after snapshots of both nodes, read from a pod's own /sys: compat devices without hw_counters."""
    snaps = []
    for host in HOSTS:
        klass, dev = make_efa_sysfs(tmp_path / host, {"rdmap16s27": {}}, hw_counters=False)
        snaps += [
            take_snapshot(
                phase, run="r", root=klass, dev_root=dev, host=host, steps=100, predicted_bytes_per_step=GB, **kw
            )
            for phase in ("before", "after")
        ]
    return snaps


def test_a_pods_own_sysfs_shows_no_counters_and_says_so(tmp_path):
    # GIVEN the tree a pod's /sys shows: the device's compat copy, its port without hw_counters
    klass, dev = make_efa_sysfs(tmp_path, {"rdmap16s27": {}}, hw_counters=False)
    snap = take_snapshot("after", run="r", root=klass, dev_root=dev, host="h")
    # THEN the device is named as not visible, with the reason; it is not a device that counted nothing
    assert snap.devices == {} and snap.job_devices == ("rdmap16s27",)
    assert "port 1 has no hw_counters" in snap.unreadable["rdmap16s27"]
    assert "compat copy" in snap.unreadable["rdmap16s27"] and "setup_port" in snap.unreadable["rdmap16s27"]


def test_counters_not_visible_on_both_nodes_leave_the_logs_verdict_standing(tmp_path):
    snaps = _pod_view_job(tmp_path)
    verdict = judge(snaps, "efa")
    # THEN neither node is LOW: both are "not visible", which fails nothing and proves nothing
    assert {n.status for n in verdict.nodes} == {"not visible"} and not verdict.failed and verdict.exit_code == 3
    assert verdict.summary.startswith("EFA counters not readable on 2 of 2 nodes")
    detail = verdict.nodes[0].detail
    assert "no hw_counters" in detail and "/host/sys/class/infiniband" in detail and "--devices" in detail
    # AND the healthy EFA job passes on its logs, with a note; logs that prove nothing still prove nothing
    efa = gate(classify(EFA_JOB), "efa", counters=snaps)
    assert efa.exit_code == EXIT_PASS and efa.summary.startswith("PASS: all")
    assert any(
        n.startswith("EFA counters not readable on 2 of 2 nodes") and "the logs' verdict stands" in n for n in efa.notes
    )
    assert gate(classify([]), "efa", counters=snaps).exit_code == EXIT_NO_PROOF
    # AND the TCP comparison run is not failed by counters it cannot read
    assert gate(classify(SOCKET_JOB), "socket", counters=snaps).exit_code == EXIT_PASS


def test_a_denied_listing_is_not_visible_not_no_device(tmp_path):
    # GIVEN /sys/class/infiniband whose listing the kernel refuses. Root ignores chmod 000 on a temporary tree, so the
    # reader's filesystem seam (efa_counters.Filesystem) raises the EACCES the kernel would; the rest is the real tree.
    import errno

    klass, dev = make_efa_sysfs(tmp_path, {"rdmap16s27": {"tx_bytes": 1}})

    def listdir(path):
        if path == klass:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return efa_counters.LOCAL.listdir(path)

    denied = efa_counters.Filesystem(listdir=listdir)
    snaps = [
        take_snapshot(phase, run="r", root=klass, dev_root=dev, host=h, fs=denied, steps=1, predicted_bytes_per_step=GB)
        for h in HOSTS
        for phase in ("before", "after")
    ]
    assert snaps[0].not_visible == f"cannot list {klass}: Permission denied" and snaps[0].devices == {}
    # THEN each node is "not visible", naming the listing, and the logs decide
    verdict = gate(classify(EFA_JOB), "efa", counters=snaps)
    assert {n.status for n in counters_of(verdict).nodes} == {"not visible"}
    assert f"cannot list {klass}: Permission denied" in counters_of(verdict).nodes[0].detail
    assert verdict.exit_code == EXIT_PASS
    # AND a pod given no EFA device is still failed: its /dev/infiniband says so whatever sysfs hides
    for uverbs in dev.iterdir():
        uverbs.unlink()
    bare = [
        take_snapshot(phase, run="r", root=klass, dev_root=dev, host=h, fs=denied)
        for h in HOSTS
        for phase in ("before", "after")
    ]
    assert {n.status for n in judge(bare, "efa").nodes} == {"no EFA device"} and judge(bare, "efa").exit_code == 1


@pytest.mark.parametrize(
    "break_it, says",
    [
        ("deny", "cannot read {hw}/tx_bytes: Permission denied"),
        ("remove", "port 1 has no rx_bytes in {hw}"),
    ],
    ids=["tx_bytes refused", "no rx_bytes"],
)
def test_a_required_counter_that_cannot_be_read_is_named_not_missing(tmp_path, break_it, says):
    import errno

    klass, dev = make_efa_sysfs(tmp_path, {"rdmap16s27": {}})
    hw = klass / "rdmap16s27" / "ports" / "1" / "hw_counters"

    def read(path):
        if path == hw / "tx_bytes":  # the seam: root reads a chmod 000 file (see the test above)
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return efa_counters.LOCAL.read(path)

    fs = efa_counters.Filesystem(read=read) if break_it == "deny" else efa_counters.LOCAL
    if break_it == "remove":
        (hw / "rx_bytes").unlink()
    snaps = [
        take_snapshot(phase, run="r", root=klass, dev_root=dev, host=h, fs=fs)
        for h in HOSTS
        for phase in ("before", "after")
    ]
    node = judge(snaps, "efa").nodes[0]
    assert node.status == "not visible" and says.format(hw=hw) in node.detail and "counter missing" not in node.detail


def test_an_optional_counter_refused_is_a_problem_of_a_device_still_judged(tmp_path):
    import errno

    klass, dev = make_efa_sysfs(tmp_path, {"rdmap16s27": {}})

    def read(path):
        if path.name == "retrans_pkts":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return efa_counters.LOCAL.read(path)

    snap = take_snapshot("before", run="r", root=klass, dev_root=dev, host="h", fs=efa_counters.Filesystem(read=read))
    assert "tx_bytes" in snap.devices["rdmap16s27"]["1"] and "retrans_pkts" not in snap.devices["rdmap16s27"]["1"]
    assert snap.problems == ("rdmap16s27 port 1: cannot read retrans_pkts: Permission denied",)


def test_a_uverbs_device_that_names_no_device_makes_the_node_not_visible(tmp_path):
    klass, dev = make_efa_sysfs(tmp_path, {"rdmap16s27": {}})
    (klass.parent / "infiniband_verbs" / "uverbs0" / "ibdev").unlink()
    snap = take_snapshot("after", run="r", root=klass, dev_root=dev, host="h")
    assert snap.job_devices is None and snap.not_visible is not None
    assert snap.not_visible.startswith("cannot tell which device /dev/infiniband/uverbs0 is")


# -- only the job's devices -----------------------------------------------------------------------------------------

TWO = ("rdmap16s27", "rdmap32s27")


def _shared_node_job(tmp_path, *, moved: dict[str, int], mine: str = TWO[0], devices=None):
    """Both nodes hold two EFA devices, one per job; this job's pods hold `mine` (or the snapshot names `devices`)."""
    snaps = []
    for host in HOSTS:
        start = {"tx_bytes": 5 * GB, "rx_bytes": 7 * GB}
        klass, dev = make_efa_sysfs(
            tmp_path / host, {d: dict(start) for d in TWO}, pod_devices=() if devices is not None else (mine,)
        )
        kw = {"root": klass, "dev_root": dev, "host": host, "devices": devices}
        snaps.append(take_snapshot("before", run="r", **kw))
        for name, amount in moved.items():
            set_counter(klass, name, "tx_bytes", start["tx_bytes"] + amount)
            set_counter(klass, name, "rx_bytes", start["rx_bytes"] + amount)
        snaps.append(take_snapshot("after", run="r", steps=100, predicted_bytes_per_step=GB, **kw))
    return snaps


def test_the_pods_uverbs_name_the_devices_it_is_judged_by(tmp_path):
    klass, dev = make_efa_sysfs(tmp_path, {d: {} for d in TWO}, pod_devices=(TWO[1],))
    snap = take_snapshot("before", run="r", root=klass, dev_root=dev, host="h")
    assert snap.uverbs == ("uverbs1",) and snap.job_devices == (TWO[1],) and sorted(snap.devices) == list(TWO)


def test_another_jobs_traffic_on_the_node_does_not_pass_a_job_whose_own_device_was_idle(tmp_path):
    # GIVEN this job's device idle (its NCCL fell back to TCP) while the other job's device on each node carried 50 GB
    snaps = _shared_node_job(tmp_path, moved={TWO[0]: 1000, TWO[1]: 50 * GB})
    # THEN the gate judges this job's device alone: LOW, a failure (the node's sum would have passed it)
    verdict = gate(classify(EFA_JOB), "efa", counters=snaps)
    assert verdict.exit_code == EXIT_CONTRADICTED
    assert {(n.status, n.devices, n.sent_bytes) for n in counters_of(verdict).nodes} == {("LOW", 1, 1000)}
    # AND the same node with this job's device busy passes, whatever the other device did
    busy = judge(_shared_node_job(tmp_path / "busy", moved={TWO[0]: 50 * GB, TWO[1]: 0}), "efa")
    assert busy.exit_code == 0 and {n.sent_bytes for n in busy.nodes} == {50 * GB}


def test_a_snapshot_from_the_host_side_judges_the_devices_it_was_given(tmp_path):
    # GIVEN snapshots taken outside the job's pods (no uverbs of the job there), naming the job's device
    snaps = _shared_node_job(tmp_path, moved={TWO[0]: 1000, TWO[1]: 50 * GB}, devices=[TWO[0]])
    assert snaps[0].uverbs == () and snaps[0].job_devices == (TWO[0],)
    # THEN no "no EFA device in the pod": the named device is judged, and it stayed idle
    assert {n.status for n in judge(snaps, "efa").nodes} == {"LOW"}


def test_a_job_device_the_tree_does_not_show_is_not_visible(tmp_path):
    snaps = _shared_node_job(tmp_path, moved={}, devices=["rdmap99s27"])
    node = judge(snaps, "efa").nodes[0]
    assert node.status == "not visible" and "the job's device rdmap99s27 is not in" in node.detail


def test_a_snapshot_of_an_older_version_is_judged_over_every_device(tmp_path):
    # GIVEN snapshot files written before the job's devices and the unreadable ones were recorded
    folder = tmp_path / "old"
    folder.mkdir()
    for index, snap in enumerate(_job(tmp_path)):
        data = snap.to_json()
        for key in ("job_devices", "unreadable", "not_visible", "sysfs"):
            del data[key]
        (folder / f"efa-counters-{snap.host}-{snap.phase}-{index}.json").write_text(json.dumps(data))
    # THEN they load, every device counts, and they pass as they did
    verdict = judge(load_snapshots([folder]), "efa")
    assert verdict.exit_code == 0 and {n.devices for n in verdict.nodes} == {1}


def test_the_job_reads_the_hosts_view_where_the_pod_mounts_it(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_EFA_SYSFS_ROOT", raising=False)
    monkeypatch.setattr(efa_counters, "HOST_SYS", tmp_path / "host" / "sys")
    assert efa_counters.default_sysfs_root() == efa_counters.SYSFS_ROOT  # not mounted: the pod's own view
    (tmp_path / "host" / "sys" / "class" / "infiniband").mkdir(parents=True)
    assert efa_counters.default_sysfs_root() == tmp_path / "host" / "sys" / "class" / "infiniband"
    monkeypatch.setenv("RAY_EFA_SYSFS_ROOT", str(tmp_path / "mine"))
    assert efa_counters.default_sysfs_root() == tmp_path / "mine"


# -- the committed snapshot fixtures and the CLI -----------------------------------------------------------------

COUNTERS = __import__("pathlib").Path(__file__).parent / "fixtures" / "efa_counters"
EFA_LOG = COUNTERS.parent / "nccl" / "synthetic" / "efa_g6_2node_nccl2.29.log"


def test_the_counter_fixtures_equal_what_their_generator_writes(tmp_path):
    module = load_script(COUNTERS / "make_counters.py")
    for case in module.CASES:
        written = [write_snapshot(s, tmp_path / case) for s in module.snapshots(case, tmp_path / "work")]
        expected = {p.name: p.read_text() for p in written}
        committed = {p.name: p.read_text() for p in (COUNTERS / case).glob("*.json")}
        assert committed == expected, f"{case}: rerun tests/training/fixtures/efa_counters/make_counters.py"


@pytest.mark.parametrize(
    "case, expect, code, says",
    [
        ("g6_2node_efa", "efa", 0, "EFA counters prove it"),
        ("g6_2node_efa", "socket", 1, "EFA counters contradict"),
        ("g6_2node_tcp_fallback", "efa", 1, "EFA carried 0.0% of the 206.31 GB predicted"),
        ("g6_2node_tcp_fallback", "socket", 1, "expected TCP sockets"),
        ("g6_2node_device_reset", "efa", 3, "tx_bytes went down"),
        (
            "g6_2node_pod_view",
            "efa",
            0,
            "EFA counters not readable on 2 of 2 nodes (ip-10-0-1-1: rdmap16s27 port 1 has no hw_counters",
        ),
        ("g6_2node_pod_view", "socket", 1, "expected TCP sockets"),
    ],
)
def test_check_transport_judges_logs_and_counters_together(case, expect, code, says, capsys, monkeypatch):
    from ray_efa.cli import check_transport

    monkeypatch.delenv("COLUMNS", raising=False)
    assert check_transport.main(["--expect", expect, "--counters", str(COUNTERS / case), str(EFA_LOG)]) == code
    out = capsys.readouterr().out
    assert says in out and "EFA hardware counters during training" in out


def test_counter_files_among_the_logs_are_recognised_by_name(capsys):
    from ray_efa.cli import check_transport

    files = sorted(str(p) for p in (COUNTERS / "g6_2node_tcp_fallback").glob("*.json"))
    assert check_transport.main(["--json", str(EFA_LOG), *files]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["counter_files"] == files and data["logs"] == [str(EFA_LOG)]
    assert [n["status"] for n in data["counters"]["nodes"]] == ["LOW", "LOW"]
    assert data["counters"]["nodes"][0]["sent_bytes"] == 1_812_480


def test_counters_alone_are_enough_to_judge(capsys):
    from ray_efa.cli import check_transport

    assert check_transport.main(["--counters", str(COUNTERS / "g6_2node_efa")]) == 0
    assert "PASS: EFA counters prove it" in capsys.readouterr().out


def test_predicted_bytes_from_the_command_line_override_the_snapshots(capsys):
    from ray_efa.cli import check_transport

    # 461 GB each way predicted: the 231 GB measured is 50%, still a pass; 10 TB: 2%, a failure
    assert check_transport.main(["--predicted-bytes", "4.61e11", "--counters", str(COUNTERS / "g6_2node_efa")]) == 0
    assert check_transport.main(["--predicted-bytes", "1e13", "--counters", str(COUNTERS / "g6_2node_efa")]) == 1
    capsys.readouterr()


@pytest.mark.parametrize(
    "make_bad, message",
    [
        (lambda tmp: (tmp / "efa-counters-x.json", '{"format": "ray-efa/efa-counters/1", "pha'), "not JSON"),
        (lambda tmp: (tmp / "empty-dir", None), "holds no efa-counters-*.json snapshot"),
        (lambda tmp: (tmp / "missing-dir", "gone"), "no such file"),
    ],
    ids=["cut short", "empty folder", "missing"],
)
def test_a_bad_counter_path_is_exit_2_naming_it(tmp_path, capsys, make_bad, message):
    from ray_efa.cli import check_transport

    path, text = make_bad(tmp_path)
    if text is None:
        path.mkdir()
    elif text != "gone":
        path.write_text(text)
    assert check_transport.main(["--counters", str(path), str(EFA_LOG)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err and err.count("\n") == 1


def test_the_snapshot_command_writes_what_check_transport_reads(tmp_path, capsys):
    # GIVEN a node of a torchrun job (no Ray), its EFA tree, and the command run before and after training
    klass, dev = make_efa_sysfs(tmp_path / "node", {"rdmap16s27": {"tx_bytes": 1, "rx_bytes": 2}})
    out = tmp_path / "counters"
    roots = ["--sysfs-root", str(klass), "--dev-root", str(dev)]
    assert efa_counters.main(["snapshot", "--phase", "before", "--out", str(out), *roots]) == 0
    set_counter(klass, "rdmap16s27", "tx_bytes", 1 + 3 * GB)
    set_counter(klass, "rdmap16s27", "rx_bytes", 2 + 3 * GB)
    assert (
        efa_counters.main(
            [
                "snapshot",
                "--phase",
                "after",
                "--out",
                str(out),
                *roots,
                "--steps",
                "3",
                "--predicted-bytes-per-step",
                "1e9",
            ]
        )
        == 0
    )
    assert "wrote " in capsys.readouterr().out
    # THEN the two files pair up as this node's training: 3 GB each way, all of the prediction
    (node,) = judge(load_snapshots([out]), "efa").nodes
    assert (node.sent_bytes, node.received_bytes, node.predicted_bytes, node.status) == (3 * GB, 3 * GB, 3e9, "pass")


def test_the_snapshot_command_refuses_a_negative_step_count(tmp_path, capsys):
    assert efa_counters.main(["snapshot", "--phase", "after", "--out", str(tmp_path), "--steps", "-1"]) == 2
    assert "--steps must be >= 0, got -1" in capsys.readouterr().err


def test_the_gate_pages_example_is_what_check_transport_prints(monkeypatch, capsys):
    # GIVEN the example on the gate's reference page (docs/transport-gate.md)
    from ray_efa.cli import check_transport

    page = (COUNTERS.parents[3] / "docs" / "transport-gate.md").read_text()
    block = page.split("$ COLUMNS=80 ray-efa check-transport --counters", 1)[1].split("```", 1)[0]
    shown = block.split("\n", 2)[2].rstrip("\n")  # after the two lines of the command
    # WHEN the same command runs at 80 columns
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(COUNTERS.parents[3])
    assert (
        check_transport.main(
            [
                "--counters",
                "tests/training/fixtures/efa_counters/g6_2node_tcp_fallback",
                "tests/training/fixtures/nccl/synthetic/efa_g6_2node_nccl2.29.log",
            ]
        )
        == 1
    )
    out = capsys.readouterr().out
    # THEN the page shows its real output, from the counters' table to the verdict
    assert out[out.index("EFA hardware counters") :].rstrip("\n") == shown


def test_a_node_of_an_attempt_ray_train_restarted_away_from_is_not_judged(tmp_path):
    # GIVEN attempt 1 on nodes a and b (b died: a before snapshot only), attempt 2 on a and c, which finished
    stale = _node_run(tmp_path / "b", "node-b", moved_tx=0, moved_rx=0)[0]
    stale = efa_counters.Snapshot(**{**{f: getattr(stale, f) for f in stale.__slots__}, "time_s": stale.time_s - 600})
    finished = [
        s
        for host in ("node-a", "node-c")
        for s in _node_run(tmp_path / host, host, moved_tx=50 * GB, moved_rx=50 * GB)[:2]
    ]
    verdict = judge([stale, *finished], "efa")
    # THEN b is "superseded", a and c prove EFA
    assert [(n.host, n.status) for n in verdict.nodes] == [
        ("node-a", "pass"),
        ("node-b", "superseded"),
        ("node-c", "pass"),
    ]
    assert verdict.exit_code == 0
    # AND a before-only node as recent as the others is still incomplete: it never passes
    fresh = _node_run(tmp_path / "d", "node-d", moved_tx=0, moved_rx=0)[0]
    assert judge([fresh, *finished], "efa").exit_code == 3


def test_check_transport_fails_a_job_whose_device_idled_beside_a_busy_one(tmp_path, capsys):
    # GIVEN the shared nodes' snapshots as the job wrote them, and the job's EFA logs
    from ray_efa.cli import check_transport

    folder = tmp_path / "counters"
    for snap in _shared_node_job(tmp_path / "nodes", moved={TWO[0]: 1000, TWO[1]: 50 * GB}):
        write_snapshot(snap, folder)
    log = tmp_path / "nccl.log"
    log.write_text("\n".join(EFA_JOB) + "\n")
    # THEN the CLI fails it (exit 1), on this job's device alone
    assert check_transport.main(["--counters", str(folder), str(log)]) == 1
    out = capsys.readouterr().out
    assert "FAIL: EFA counters contradict: 2 of 2 nodes" in out and "EFA carried 0.0% of the 100.00 GB" in out


def test_the_snapshot_command_names_the_jobs_devices_from_the_host_side(tmp_path):
    # GIVEN a host shell: the node's two devices, no uverbs of the job, and the job's device named with --devices
    klass, dev = make_efa_sysfs(tmp_path / "node", {d: {} for d in TWO}, uverbs=0)
    out = tmp_path / "counters"
    assert (
        efa_counters.main(
            [
                "snapshot",
                "--phase",
                "before",
                "--out",
                str(out),
                "--sysfs-root",
                str(klass),
                "--dev-root",
                str(dev),
                "--devices",
                TWO[1],
            ]
        )
        == 0
    )
    (snap,) = load_snapshots([out])
    assert snap.job_devices == (TWO[1],) and snap.uverbs == () and snap.sysfs == str(klass)


def test_the_two_host_folders_the_workers_mount_are_enough_to_read_the_counters(tmp_path):
    # GIVEN the host's tree, and only what the worker pods mount of it (k8s.cluster_spec.host_sysfs_parts): its
    # class/infiniband and devices folders under host/sys, links kept (so each device's driver link dangles there)
    import shutil

    klass, dev = make_efa_sysfs(tmp_path / "node", {"rdmap16s27": {"tx_bytes": 3, "rx_bytes": 4}})
    mounted = tmp_path / "host" / "sys"
    for folder in efa_counters.HOST_SYS_FOLDERS:
        shutil.copytree(klass.parents[1] / folder, mounted / folder, symlinks=True)
    assert not (mounted / "class" / "infiniband" / "rdmap16s27" / "device" / "driver").exists()
    # WHEN the worker snapshots them (its uverbs map from its own /sys, which needs no host view)
    snap = take_snapshot(
        "after",
        run="r",
        root=mounted / "class" / "infiniband",
        dev_root=dev,
        verbs_root=klass.parent / "infiniband_verbs",
        host="h",
    )
    # THEN the device and its counters are read
    assert snap.unreadable == {} and snap.job_devices == ("rdmap16s27",)
    assert (snap.devices["rdmap16s27"]["1"]["tx_bytes"], snap.devices["rdmap16s27"]["1"]["rx_bytes"]) == (3, 4)
