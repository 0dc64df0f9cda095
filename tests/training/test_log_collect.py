"""Collecting NCCL lines from every node's Ray worker logs: on files, and through a real local Ray cluster."""

from __future__ import annotations

import os
import sys

import pytest

from ray_efa.training.log_collect import collect_nccl_logs, read_nccl_lines
from ray_efa.training.transport import classify_paths

# -- reading a node's worker logs (no Ray needed) ------------------------------------------------------------------


def _worker_file(logs_dir, name: str, *lines: str) -> None:
    (logs_dir / name).write_text("".join(line + "\n" for line in lines))


def test_only_nccl_lines_of_the_requested_job_are_kept(tmp_path):
    # GIVEN one worker that served job 01000000, then another worker of job 02000000 (Ray's job markers)
    _worker_file(
        tmp_path,
        "worker-aa11-ffffffff-101.out",
        ":job_id:01000000",
        ":actor_name:RayTrainWorker",
        "h:101:102 [0] NCCL INFO Using network Socket",
        "step 1",
    )
    _worker_file(
        tmp_path,
        "worker-bb22-ffffffff-202.out",
        ":job_id:02000000",
        "h:202:203 [0] NCCL INFO Using network Libfabric",
        "loss 1.0",
    )
    # WHEN job 02000000's lines are read
    lines, files, truncated = read_nccl_lines(tmp_path, "02000000")
    # THEN only its NCCL line is there
    assert lines == ["h:202:203 [0] NCCL INFO Using network Libfabric"]
    assert (files, truncated) == (2, False)


def test_every_job_is_kept_when_no_job_is_given(tmp_path):
    _worker_file(tmp_path, "worker-aa11-ffffffff-101.out", ":job_id:01000000", "h:1:1 [0] NCCL INFO a")
    _worker_file(tmp_path, "worker-aa11-ffffffff-101.err", ":job_id:02000000", "h:1:1 [0] NCCL WARN b")
    assert sorted(read_nccl_lines(tmp_path, None)[0]) == ["h:1:1 [0] NCCL INFO a", "h:1:1 [0] NCCL WARN b"]


def test_rotated_files_are_read_oldest_first_and_inherit_the_job_marker(tmp_path):
    # GIVEN a worker stream rotated twice: the marker is only in the oldest file (.2)
    _worker_file(tmp_path, "worker-cc33-ffffffff-303.out.2", ":job_id:03000000", "h:3:3 [0] NCCL INFO first")
    _worker_file(tmp_path, "worker-cc33-ffffffff-303.out.1", "h:3:3 [0] NCCL INFO second")
    _worker_file(tmp_path, "worker-cc33-ffffffff-303.out", "h:3:3 [0] NCCL INFO third")
    # WHEN the job's lines are read
    lines = read_nccl_lines(tmp_path, "03000000")[0]
    # THEN all three count, in order
    assert [line.rsplit(" ", 1)[1] for line in lines] == ["first", "second", "third"]


def test_lines_before_any_marker_count_for_the_job_in_the_file_name(tmp_path):
    _worker_file(tmp_path, "worker-dd44-04000000-404.out", "h:4:4 [0] NCCL INFO early")
    assert read_nccl_lines(tmp_path, "04000000")[0] == ["h:4:4 [0] NCCL INFO early"]
    assert read_nccl_lines(tmp_path, "05000000")[0] == []


def test_other_ray_logs_are_not_read(tmp_path):
    _worker_file(tmp_path, "raylet.out", "h:9:9 [0] NCCL INFO Using network Socket")
    _worker_file(tmp_path, "python-core-worker-ee55_505.log", "h:9:9 [0] NCCL INFO Using network Socket")
    assert read_nccl_lines(tmp_path, None) == ([], 0, False)


def test_lines_beyond_the_cap_are_dropped_and_reported(tmp_path):
    _worker_file(tmp_path, "worker-ff66-ffffffff-606.out", *[f"h:6:6 [0] NCCL INFO line {i}" for i in range(10)])
    lines, _, truncated = read_nccl_lines(tmp_path, None, max_lines=4)
    assert len(lines) == 4 and truncated


# -- through a real local Ray cluster ------------------------------------------------------------------------------

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    # A cluster of its own ("local" never joins another on the machine), and a counter spool of its own: its job id
    # is 01000000 like the first job of every other local cluster, whose collector would read what this module spools.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_EFA_COUNTERS_DIR", str(tmp_path_factory.mktemp("counter-spool")))
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        yield
        ray.shutdown()


@ray.remote(num_cpus=0)
class FakeTrainWorker:
    """Prints what NCCL prints, on stdout (INFO) and stderr, the way a Ray Train worker's NCCL would."""

    def speak(self, network: str) -> int:
        pid = os.getpid()
        print(f"test-node:{pid}:{pid + 1} [0] NCCL INFO Using network {network}", flush=True)
        print(
            f"test-node:{pid}:{pid + 1} [0] NCCL INFO comm 0x1 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0",
            flush=True,
        )
        print(
            f"test-node:{pid}:{pid + 1} [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/{network}/0",
            flush=True,
        )
        print("step 1 loss 12.0", flush=True)
        print(f"test-node:{pid}:{pid + 1} [0] net.cc:1 NCCL WARN stderr line", file=sys.stderr, flush=True)
        return pid


@pytest.mark.ray
@pytest.mark.xdist_group("ray-log-collect")  # local_ray: one cluster for the module
def test_collect_writes_one_file_per_node_with_this_jobs_nccl_lines(local_ray, tmp_path):
    # GIVEN a worker process of this job that printed NCCL lines on stdout and stderr
    worker = FakeTrainWorker.remote()
    pid = ray.get(worker.speak.remote("Socket"))
    # WHEN the driver collects the NCCL logs
    paths = collect_nccl_logs(tmp_path)
    # THEN there is one file for the one node, with that worker's NCCL lines and nothing else of it
    assert len(paths) == len(ray.nodes()) == 1
    text = paths[0].read_text()
    assert f"test-node:{pid}:{pid + 1} [0] NCCL INFO Using network Socket" in text
    assert "NCCL WARN stderr line" in text
    assert "step 1 loss" not in text
    # AND the classifier reads the collected file as that process's evidence
    report = classify_paths(paths)
    assert [p.key for p in report.processes] == [f"test-node:{pid}"]
    assert report.verdict("socket").exit_code == 0
    ray.kill(worker)


@pytest.mark.ray
@pytest.mark.xdist_group("ray-log-collect")  # local_ray: one cluster for the module
def test_collect_leaves_out_other_jobs(local_ray, tmp_path):
    # GIVEN NCCL lines printed by this job's worker
    worker = FakeTrainWorker.remote()
    ray.get(worker.speak.remote("Libfabric"))
    # WHEN the collection asks for another job's lines
    paths = collect_nccl_logs(tmp_path, job_id="7f000000")
    # THEN the node's file holds its header only, which proves nothing
    assert len(paths) == 1
    assert all(line.startswith("#") for line in paths[0].read_text().splitlines())
    assert classify_paths(paths).verdict("efa").exit_code == 3
    ray.kill(worker)


def test_collect_needs_a_ray_driver(monkeypatch, tmp_path):
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(RuntimeError, match=r"call ray.init\(\) first"):
        collect_nccl_logs(tmp_path)


@pytest.mark.ray
@pytest.mark.xdist_group("ray-log-collect")  # local_ray: one cluster for the module
def test_collect_brings_the_nodes_spooled_efa_counter_snapshots_beside_the_logs(local_ray, tmp_path):
    # GIVEN this job's before and after snapshots spooled on the node, of a tree laid out as the efa driver does
    from ray_efa.training import efa_counters
    from tests.training.efa_sysfs import make_efa_sysfs, set_counter

    job = ray.get_runtime_context().get_job_id()
    klass, dev = make_efa_sysfs(tmp_path / "node", {"rdmap16s27": {"tx_bytes": 10, "rx_bytes": 20}})
    spool = efa_counters.spool_dir(job)
    before = efa_counters.write_snapshot(efa_counters.take_snapshot("before", run=job, root=klass, dev_root=dev), spool)
    set_counter(klass, "rdmap16s27", "tx_bytes", 10 + 4 * 10**9)
    after = efa_counters.write_snapshot(efa_counters.take_snapshot("after", run=job, root=klass, dev_root=dev), spool)
    try:
        # WHEN the driver collects
        out = tmp_path / "out"
        logs = collect_nccl_logs(out)
        # THEN the snapshots are written beside the node's log (not in the returned log list), and load as they were
        written = sorted(p for p in out.iterdir() if efa_counters.is_counter_file(p))
        assert len(written) == 2 and all(efa_counters.is_written_snapshot(p) for p in written)
        assert not any(efa_counters.is_counter_file(p) for p in logs)
        node = efa_counters.judge(efa_counters.load_snapshots([out]), "efa").nodes[0]
        assert node.sent_bytes == 4 * 10**9 and node.received_bytes == 0
    finally:
        before.unlink()
        after.unlink()
