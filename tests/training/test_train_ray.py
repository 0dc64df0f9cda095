"""train_func on a real local Ray cluster (2 CPU workers, gloo): a resumed run equals an uninterrupted one, and a
worker failure is recovered with no lost or repeated optimizer step; what is not retried fails once.

One Ray instance for the module, on one xdist worker (the module's xdist group: a test on the other worker would
start a second cluster); every test uses the tiny model. That the local preset learns (the loss falls, the
held-out loss ends below the unigram baseline) is tests/cli/test_demo.py's, on the run `make demo` makes; that the
held-out split is evaluated whole, tests/training/test_train_cli.py's.
"""

import os

import pytest

from ray_efa.core.settings import Settings
from ray_efa.core.strategy import resolve
from ray_efa.training import driver, failure_policy
from tests.training.artifacts import returned

pytestmark = [pytest.mark.ray, pytest.mark.xdist_group("ray-uninterrupted")]  # one uninterrupted run, one cluster

# Six steps, a checkpoint every two, a report every step: small enough to run four times in a test. One micro-batch a
# step (gradAccumulation 1): auto would split the default globalBatchTokens into thousands of tiny micro-batches.
# Eager (compile off, as the local preset runs): inductor's C++ build costs each run about 6 s on a 2-core machine,
# and what these tests prove (resume, retries) does not depend on it. One run compiles, so that the cluster's default
# (compiled decoder layers) still trains in a Ray worker here (test_a_fault_beyond_max_failures_fails_the_run); that
# compiled layers keep their checkpoint keys is tests/training/test_parallelize.py's.
SHORT = {
    "model": "tiny",
    "compile": False,
    "steps": 6,
    "seqLen": 32,
    "microBatch": 2,
    "gradAccumulation": 1,
    "learningRate": 1e-3,
    "warmupSteps": 2,
    "checkpointEvery": 2,
    "reportEvery": 1,
    "maxFailures": 1,
    "preflight": False,
}


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    import ray

    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")  # notice finished and failed workers quickly
        # the local driver sets these for its workers; the context puts this process's values back afterwards
        env.setenv("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
        env.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        driver.init_ray(local=True)
        yield
        ray.shutdown()


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("ray_results"))


def _settings(storage, **context):
    return Settings.from_context({**SHORT, "storagePath": storage, **context})


def _losses(result):
    return dict(returned(result)["history"])


@pytest.fixture(scope="module")
def uninterrupted(storage):
    return driver.fit(_settings(storage), local=True, name="uninterrupted")


def test_resumed_run_equals_uninterrupted(storage, uninterrupted):
    # GIVEN a run stopped after step 3, between its checkpoints at steps 2 and 4
    stopped = driver.fit(
        _settings(storage), local=True, name="resumed", test_config={"_faults": {"stop_after_step": 3}}
    )
    assert max(_losses(stopped)) == 3
    # WHEN the same run (same name and storage) is started again
    resumed = driver.fit(_settings(storage), local=True, name="resumed")
    # THEN it continues from the step-2 checkpoint, and every step from 3 on has the uninterrupted run's loss
    assert returned(resumed)["summary"]["start_step"] == 2
    expected = {step: loss for step, loss in _losses(uninterrupted).items() if step >= 3}
    assert _losses(resumed) == pytest.approx(expected, rel=1e-6)
    assert returned(resumed)["optimizer_steps"] == 6
    # and the run folder's history is one run's: cut back to the step-2 checkpoint, then the resumed attempt's steps
    # (each step once), as TensorBoard shows them
    folder = os.path.join(storage, "resumed")
    assert [r["step"] for r in _history(folder)] == [1, 2, 3, 4, 5, 6]
    assert [r["loss"] for r in _history(folder)][2:] == pytest.approx([_losses(resumed)[s] for s in range(3, 7)])
    assert _tensorboard(folder, "loss") == pytest.approx(
        {**{s: v for s, v in _losses(stopped).items() if s < 3}, **_losses(resumed)}, rel=1e-6
    )


def _history(folder):
    import json

    with open(os.path.join(folder, "metrics.jsonl")) as lines:
        return [json.loads(line) for line in lines]


def _tensorboard(folder, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(os.path.join(folder, "tensorboard"))
    events.Reload()
    return {e.step: e.value for e in events.Scalars(tag)}


def test_the_run_trains_the_levers_the_plan_decided(storage, uninterrupted):
    # GIVEN the uninterrupted run's settings, sharding and gradReduceDtype at auto (decided once, by resolve)
    decided = resolve(_settings(storage)).training
    summary = returned(uninterrupted)["summary"]
    # THEN the built-in ran the decided reduction dtype and batch shape
    assert (summary["grad_reduce_dtype"], summary["micro_batch"], summary["grad_accumulation"]) == (
        decided.grad_reduce_dtype,
        decided.micro_batch,
        decided.grad_accumulation,
    )
    # and the decided sharding on the ranks Ray started: both local ranks share one node, so hsdp has nothing to
    # replicate across and runs as plain FSDP
    assert decided.sharding in ("fsdp", "hsdp") and (summary["sharding"], summary["replicas"]) == ("fsdp", 1)


def test_every_report_is_kept_in_the_run_folder_and_as_tensorboard_events(storage, uninterrupted):
    # GIVEN the uninterrupted run (a report every step) WHEN its run folder is read
    folder = os.path.join(storage, "uninterrupted")
    history = _history(folder)
    # THEN metrics.jsonl has one record per report with the loss, lr, gradient norm, tokens/s, step time and memory
    assert [r["step"] for r in history] == [1, 2, 3, 4, 5, 6]
    assert {r["step"]: r["loss"] for r in history} == pytest.approx(_losses(uninterrupted), rel=1e-6)
    for record in history:
        for key in ("lr", "grad_norm", "throughput/tokens_per_s", "time/step_s", "memory/peak_rss_gib", "wall_time"):
            assert record[key] > 0, key
    # and TensorBoard's reader finds the same losses and gradient norms in the run folder's event files
    assert _tensorboard(folder, "loss") == pytest.approx(_losses(uninterrupted), rel=1e-6)
    assert _tensorboard(folder, "grad_norm") == pytest.approx({r["step"]: r["grad_norm"] for r in history}, rel=1e-6)


def test_worker_failure_restarts_without_lost_or_repeated_steps(storage, uninterrupted, capfd):
    # GIVEN rank 1's process ending right after optimizer step 5 (its step-4 checkpoint is saved), and maxFailures 1
    faults = {"_faults": {"exit_at_step": 5, "raise_on_rank": 1}}
    # WHEN the run is trained
    result = driver.fit(_settings(storage), local=True, name="fault", test_config=faults)
    # THEN Ray Train restarted the worker group from the step-4 checkpoint and the run completed
    assert result.error is None
    assert returned(result)["summary"]["start_step"] == 4
    # with step 5 redone from the checkpoint (the failed attempt's step 5 is lost with its workers) and step 6 once:
    # AdamW's own counter, restored from the checkpoint, has seen exactly 6 steps
    assert returned(result)["optimizer_steps"] == 6
    # and the losses are the uninterrupted run's
    assert _losses(result) == pytest.approx({5: _losses(uninterrupted)[5], 6: _losses(uninterrupted)[6]}, rel=1e-6)
    assert result.best_checkpoints is not None
    assert [m["step"] for _, m in result.best_checkpoints] == [2, 4, 6]
    # and the retry was said, in one line
    retries = [line for line in capfd.readouterr().out.splitlines() if "worker lost (" in line]
    assert len(retries) == 1 and "retrying from the last checkpoint, attempt 2 of 2" in retries[0], retries


def test_an_exception_of_the_code_is_not_retried(storage):
    # GIVEN rank 1 raising after step 5 and maxFailures 1: a retry from the step-4 checkpoint would run through
    import ray.train

    # WHEN it trains, THEN the run fails at once with the exception (an exception of the code fails again)
    with pytest.raises(ray.train.TrainingFailedError, match="injected fault at step 5 on rank 1"):
        driver.fit(_settings(storage), local=True, name="code-error", test_config={"_faults": {"raise_at_step": 5}})


def test_a_fault_beyond_max_failures_fails_the_run(storage):
    # GIVEN maxFailures 0 and a lost worker, in a run of compiled decoder layers (the cluster's default)
    import ray.train

    settings = _settings(storage, maxFailures=0, compile=True)
    # WHEN it trains, THEN fit raises Ray Train's error for the lost worker
    with pytest.raises(ray.train.WorkerGroupError) as raised:
        driver.fit(settings, local=True, name="fault-fatal", test_config={"_faults": {"exit_at_step": 5}})
    assert any(failure_policy.is_worker_loss(e) for e in raised.value.worker_failures.values()), raised.value
    assert os.path.isdir(os.path.join(storage, "fault-fatal"))


def test_an_exception_ray_cannot_rebuild_is_not_retried_and_names_itself(storage, tmp_path):
    import ray.train

    # GIVEN a function of yours whose exception class takes a required second argument (Ray Train cannot unpickle it
    # on the controller: before, the failed health check counted as a lost worker and the run went again), with
    # maxFailures 1
    marks = tmp_path / "marks"
    marks.mkdir()
    settings = _settings(
        storage,
        trainFunction="tests.training.user_functions:fit_and_raise_two_part_error",
        trainConfig=f'{{"marks": "{marks}"}}',
    )
    # WHEN it runs
    with pytest.raises(ray.train.TrainingFailedError) as raised:
        driver.fit(settings, local=True, name="user-error")
    # THEN no rank ran the function twice: not retried as a lost worker
    ranks = [p.name.split("-")[0] for p in marks.iterdir()]
    assert ranks and len(ranks) == len(set(ranks)), sorted(p.name for p in marks.iterdir())
    # and the error names the exception, its message and where it came from
    assert "TwoPartError: the data is bad" in str(raised.value)
    assert isinstance(raised.value, ray.train.WorkerGroupError), raised.value  # the user's error came from a worker
    assert not any(failure_policy.is_worker_loss(e) for e in raised.value.worker_failures.values())
    # and the function got the sharding and reduction dtype the plan decided, never "auto"
    decided = resolve(settings).training
    assert {p.read_text() for p in marks.iterdir()} == {f"{decided.sharding} {decided.grad_reduce_dtype}"}
