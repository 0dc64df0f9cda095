"""training.reporting: every step's metrics are kept, reports are spaced by the controller's poll interval, and every
rank decides the same report steps (rank 0's clock, carried by the all-reduce)."""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ray_efa.core.pod_env import POLL_INTERVAL_ENV, RAY_DEFAULT_POLL_INTERVAL_S
from ray_efa.training.metrics import Meter, Throughput
from ray_efa.training.reporting import REPORT_SPACING, Reporter, poll_interval_s


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _reporter(clock, *, rank=0, world=1, report_every=1, min_interval_s=2.5, reduce=None, total=100):
    meter = Meter(
        throughput=Throughput(
            tokens_per_step_per_device=1000, world_size=world, flops_per_token=1.0, peak_flops_per_s=None
        ),
        total_steps=total,
        start_step=0,
        device=torch.device("cpu"),
        clock=clock,
    )
    kwargs = {"reduce": reduce} if reduce else {}
    return Reporter(
        meter=meter,
        report_every=report_every,
        rank=rank,
        world_size=world,
        device=torch.device("cpu"),
        min_interval_s=min_interval_s,
        clock=clock,
        **kwargs,
    )


def _run(reporter, clock, steps, step_s, *, save_at=()):
    """Steps of `step_s` seconds; returns the steps that reported."""
    reported = []
    for step in range(1, steps + 1):
        clock.now += step_s
        reporter.record(step, torch.tensor(10.0 - step / 10), lr=1e-3 * step)
        save = step in save_at
        if reporter.is_measure_step(step, save=save):
            _, report = reporter.measure(step, save=save)
            if report or save:
                reporter.reported()
                reported.append(step)
    return reported


def test_poll_interval_is_read_as_ray_train_reads_it():
    assert poll_interval_s({}) == RAY_DEFAULT_POLL_INTERVAL_S == 2.0
    assert poll_interval_s({POLL_INTERVAL_ENV: "0.5"}) == 0.5


def test_short_steps_report_at_most_once_per_spacing_and_keep_every_step():
    # GIVEN 0.2 s steps, a measure every step, and Ray's 2 s poll (reports at least 2.5 s apart)
    clock = Clock()
    reporter = _reporter(clock, min_interval_s=REPORT_SPACING * 2.0)
    # WHEN 40 steps run (8 s)
    reported = _run(reporter, clock, 40, 0.2)
    # THEN the first step reports, then one step in every 13 (2.6 s >= 2.5 s): never two within a poll interval
    assert reported == [1, 14, 27, 40]
    assert all(b - a >= 12.5 for a, b in zip(reported, reported[1:]))
    assert reporter.reports == 4
    # and every step has its own metrics: its loss, learning rate, time and tokens/s, in order
    assert [h["step"] for h in reporter.history] == list(range(1, 41))
    assert reporter.history[4]["loss"] == pytest.approx(9.5)
    assert reporter.history[4]["lr"] == pytest.approx(5e-3)
    assert reporter.history[4]["time/step_s"] == pytest.approx(0.2)
    assert reporter.history[4]["throughput/tokens_per_s_per_device"] == pytest.approx(1000 / 0.2)
    assert reporter.losses()[:2] == [(1, pytest.approx(9.9)), (2, pytest.approx(9.8))]


def test_long_steps_report_at_every_measure_step():
    clock = Clock()
    reporter = _reporter(clock, report_every=2, min_interval_s=2.5)
    # 3 s steps, a measure every 2 steps: every measure step is past the spacing, so each reports
    assert _run(reporter, clock, 8, 3.0) == [1, 2, 4, 6, 8]
    # the steps between measure steps still have their own entries, with their own step time
    assert [h["step"] for h in reporter.history] == list(range(1, 9))
    assert reporter.history[2]["time/step_s"] == pytest.approx(3.0)


def test_checkpoint_steps_always_report():
    clock = Clock()
    reporter = _reporter(clock, min_interval_s=100.0)
    assert _run(reporter, clock, 10, 0.1, save_at=(5, 10)) == [1, 5, 10]


def _gloo_worker(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    clock = Clock()
    reporter = _reporter(clock, rank=rank, world=world, min_interval_s=1.0)
    reported = []
    for step in range(1, 21):
        clock.now += 0.3 if rank == 0 else 0.05 * step  # rank 1's clock alone would report at other steps
        reporter.record(step, torch.tensor(float(rank + step)), lr=0.0)
        _, report = reporter.measure(step, save=False)
        if report:
            reporter.reported()
            reported.append(step)
    out.put((rank, reported, reporter.losses()))
    dist.destroy_process_group()


def test_two_gloo_ranks_agree_on_the_report_steps_through_one_all_reduce():
    # GIVEN 2 real gloo ranks whose clocks disagree
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    procs = [ctx.Process(target=_gloo_worker, args=(rank, 2, port, out)) for rank in range(2)]
    for p in procs:
        p.start()
    results = {rank: (reported, losses) for rank, reported, losses in (out.get(timeout=120) for _ in procs)}
    for p in procs:
        p.join(timeout=60)
    # THEN they report at the same steps, rank 0's (0.3 s steps, 1 s apart: every 4th), and see the same mean losses
    assert results[0][0] == results[1][0] == [1, 5, 9, 13, 17]
    assert results[0][1] == results[1][1]
    assert results[0][1][0] == (1, pytest.approx(1.5))  # (0 + 1) + (1 + 1), over 2 ranks


class _Log:
    def __init__(self):
        self.steps = []

    def log(self, metrics, step):
        self.steps.append(step)


def test_one_call_a_step_measures_evaluates_checkpoints_and_reports_when_due():
    # GIVEN 6 steps of 1 s (past the 0.5 s spacing: every measure step may report), a measure every 2 steps, a
    # checkpoint every 3 and an evaluation after step 4, with what train_func hands the reporter recorded
    clock = Clock()
    events = []
    reporter = _reporter(clock, report_every=2, min_interval_s=0.5, total=6)
    reporter.checkpoint_every = 3
    reporter.save = lambda metrics, step: events.append(("save", step, "eval_loss" in metrics))
    reporter.report = lambda metrics: events.append(("report", int(metrics["step"]), "eval_loss" in metrics))
    reporter.eval_due = lambda step: step == 4
    reporter.evaluate = lambda: {"eval_loss": 1.5, "eval_perplexity": 4.5}
    reporter.after_record = lambda step: events.append(("recorded", step, False))
    reporter.log, reporter.say = _Log(), lambda line: events.append(("say", int(line.split()[1].split("/")[0]), False))
    # WHEN each step makes its one call
    for step in range(1, 7):
        clock.now += 1.0
        reporter.step(step, torch.tensor(2.0), lr=1e-3)
    # THEN the hook sees each step first; a progress line at every measure step (the first, every 2nd, checkpoints,
    # the evaluation); checkpoints at 3 and 6 carry their report, plain reports elsewhere; step 4's report has its
    # evaluation; nothing else happens between measure steps
    assert [e for e in events if e[0] != "recorded"] == [
        ("say", 1, False),
        ("report", 1, False),
        ("say", 2, False),
        ("report", 2, False),
        ("say", 3, False),
        ("save", 3, False),
        ("say", 4, False),
        ("report", 4, True),
        ("say", 6, False),
        ("save", 6, False),
    ]
    assert [e[1] for e in events if e[0] == "recorded"] == [1, 2, 3, 4, 5, 6]
    assert events.index(("recorded", 3, False)) < events.index(("save", 3, False))
    # and the history got every step once, in order, the evaluation kept for the summary
    assert reporter.log.steps == [1, 2, 3, 4, 5, 6]
    assert reporter.last_eval == {"eval_loss": 1.5, "eval_perplexity": 4.5, "eval_step": 4} and reporter.reports == 5
    assert reporter.history[3]["eval_loss"] == 1.5


def test_an_evaluation_due_between_measure_steps_runs_at_its_step():
    # GIVEN a measure every 5 steps and an evaluation due after step 3 (not a measure step of its own)
    clock = Clock()
    reporter = _reporter(clock, report_every=5, min_interval_s=0.5, total=10)
    reporter.report = lambda metrics: None
    reporter.eval_due = lambda step: step == 3
    reporter.evaluate = lambda: {"eval_loss": 1.25}
    # WHEN 5 steps run
    for step in range(1, 6):
        clock.now += 1.0
        reporter.step(step, torch.tensor(2.0), lr=1e-3)
    # THEN step 3 measured and evaluated: its evaluation is kept, on its own step's entry
    assert reporter.last_eval == {"eval_loss": 1.25, "eval_step": 3}
    assert reporter.history[2]["step"] == 3 and reporter.history[2]["eval_loss"] == 1.25


def test_a_checkpoint_saves_seconds_are_not_counted_as_the_next_step():
    # GIVEN 1 s steps, a checkpoint every 2 steps whose save takes 10 s
    clock = Clock()
    reporter = _reporter(clock, report_every=1, min_interval_s=0.5, total=4)
    reporter.checkpoint_every = 2

    def save(metrics, step):
        clock.now += 10.0

    reporter.save = save
    reporter.report = lambda metrics: None
    # WHEN 4 steps run
    for step in range(1, 5):
        clock.now += 1.0
        reporter.step(step, torch.tensor(2.0), lr=1e-3)
    # THEN every step, the one after the save too, took its own 1 s (history and the meter's step time alike)
    assert [entry["time/step_s"] for entry in reporter.history] == pytest.approx([1.0] * 4)
    assert reporter.meter.last["time/step_s"] == pytest.approx(1.0)
    assert reporter.meter.summary()["time/step_s"] == pytest.approx(1.0)


def test_a_resumed_run_measures_its_first_step_and_times_each_step_from_the_resume():
    # GIVEN a run resumed after step 15 of 30 (Meter and Reporter start at step 15), 1 s steps, a measure every 10
    clock = Clock()
    meter = Meter(
        throughput=Throughput(
            tokens_per_step_per_device=1000, world_size=1, flops_per_token=1.0, peak_flops_per_s=None
        ),
        total_steps=30,
        start_step=15,
        device=torch.device("cpu"),
        clock=clock,
    )
    reporter = Reporter(
        meter=meter, report_every=10, rank=0, world_size=1, device=torch.device("cpu"), min_interval_s=0.5, clock=clock
    )
    lines, reports = [], []
    reporter.say, reporter.report = lines.append, reports.append
    # WHEN steps 16 to 20 run
    for step in range(16, 21):
        clock.now += 1.0
        reporter.step(step, torch.tensor(3.0), lr=1e-3)
    # THEN step 16, the resumed run's first, is a measure step: its progress line and report come at once (as step 1's
    # do in a fresh run), then step 20's
    assert [int(r["step"]) for r in reports] == [16, 20] and len(lines) == 2
    # and every step took its own 1 s, from the resume on (not from step 0)
    assert [h["step"] for h in reporter.history] == [16, 17, 18, 19, 20]
    assert [h["time/step_s"] for h in reporter.history] == pytest.approx([1.0] * 5)
    summary = meter.summary()
    assert summary["first_step"] == 16 and summary["start_step"] == 15
    assert summary["time/step_s"] == pytest.approx(1.0)
