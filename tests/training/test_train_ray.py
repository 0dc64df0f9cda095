"""train_func on a real local Ray cluster (2 CPU workers, gloo): the loss falls, a resumed run equals an
uninterrupted one, and a worker failure is recovered with no lost or repeated optimizer step.

One Ray instance for the module; every test uses the tiny model, the first the local preset's fine-tune of the tiny
model folder (training.tiny_model). About two minutes on 2 cores.
"""

import os

import pytest

from ray_efa.core.settings import Settings
from ray_efa.core.strategy import resolve
from ray_efa.training import driver, failure_policy

pytestmark = pytest.mark.ray

# Six steps, a checkpoint every two, a report every step: small enough to run four times in a test. One micro-batch a
# step (gradAccumulation 1): auto would split the default globalBatchTokens into thousands of tiny micro-batches.
SHORT = {
    "model": "tiny", "steps": 6, "seqLen": 32, "microBatch": 2, "gradAccumulation": 1, "learningRate": 1e-3,
    "warmupSteps": 2,
    "checkpointEvery": 2, "reportEvery": 1, "maxFailures": 1, "preflight": False,
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
    return dict(result.return_value["history"])


@pytest.fixture(scope="module")
def uninterrupted(storage):
    return driver.fit(_settings(storage), local=True, name="uninterrupted")


def test_local_preset_fine_tunes_below_the_unigram_baseline(storage, tmp_path_factory):
    import math

    import numpy as np

    from ray_efa.training.dataset import EVAL, ROW_COLUMN
    from ray_efa.training.inputs import driver_datasets
    from ray_efa.training.local import local_settings

    # GIVEN the --local settings with nothing else given (the tiny model folder, made in an empty model cache, with
    # 10% of its English paragraphs held out), with the all-reduce probe on
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_EFA_MODEL_CACHE", str(tmp_path_factory.mktemp("model-cache")))
        settings = local_settings().replace(storagePath=storage)
    assert settings.workload.preflight and settings.training.dataset is not None
    # WHEN it trains on 2 CPU workers
    result = driver.fit(settings, local=True, name="local-preset")
    summary = result.return_value["summary"]
    # THEN the loss falls from about ln(640) (a random model over the folder's 640 embeddings), over every step,
    # each applied once
    losses = _losses(result)
    assert losses[1] == pytest.approx(math.log(640), abs=0.15)
    assert losses[settings.training.steps] < 0.8 * losses[1]
    assert result.return_value["optimizer_steps"] == settings.training.steps
    # and the held-out loss, at steps 30 and 60, ends below the unigram baseline: context learned, not just which
    # tokens are common
    assert [(r["step"], math.isfinite(r["eval_loss"])) for r in result.return_value["step_metrics"]
            if "eval_loss" in r] == [(30, True), (60, True)]
    assert summary["eval_step"] == 60 and summary["dataset"] == settings.training.dataset
    assert summary["eval_loss"] < summary["eval_unigram_entropy"] < math.log(512)
    # the baseline is the entropy of every held-out target token, as counted here from the same eval split
    rows = np.concatenate([b[ROW_COLUMN] for b in driver_datasets(settings)[EVAL].iter_batches(
        batch_format="numpy")])
    counts = np.bincount(rows[:, 1:].reshape(-1))
    p = counts[counts > 0] / counts.sum()
    # every held-out row, once (none of the world-size remainder dropped)
    assert summary["eval_tokens"] == counts.sum()
    assert summary["eval_unigram_entropy"] == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-9)
    # and the checkpoints are where the settings say, one per checkpointEvery and one at the end
    assert [m["step"] for _, m in result.best_checkpoints] == [30, 60]
    assert result.checkpoint.path.startswith(storage)


@pytest.mark.xdist_group("ray-uninterrupted")  # one uninterrupted run for the four
def test_resumed_run_equals_uninterrupted(storage, uninterrupted):
    # GIVEN a run stopped after step 3, between its checkpoints at steps 2 and 4
    stopped = driver.fit(_settings(storage), local=True, name="resumed", test_config={"_faults": {"stop_after_step": 3}})
    assert max(_losses(stopped)) == 3
    # WHEN the same run (same name and storage) is started again
    resumed = driver.fit(_settings(storage), local=True, name="resumed")
    # THEN it continues from the step-2 checkpoint, and every step from 3 on has the uninterrupted run's loss
    assert resumed.return_value["summary"]["start_step"] == 2
    expected = {step: loss for step, loss in _losses(uninterrupted).items() if step >= 3}
    assert _losses(resumed) == pytest.approx(expected, rel=1e-6)
    assert resumed.return_value["optimizer_steps"] == 6
    # and the run folder's history is one run's: cut back to the step-2 checkpoint, then the resumed attempt's steps
    # (each step once), as TensorBoard shows them
    folder = os.path.join(storage, "resumed")
    assert [r["step"] for r in _history(folder)] == [1, 2, 3, 4, 5, 6]
    assert [r["loss"] for r in _history(folder)][2:] == pytest.approx([_losses(resumed)[s] for s in range(3, 7)])
    assert _tensorboard(folder, "loss") == pytest.approx({**{s: v for s, v in _losses(stopped).items() if s < 3},
                                                          **_losses(resumed)}, rel=1e-6)


def _history(folder):
    import json

    with open(os.path.join(folder, "metrics.jsonl")) as lines:
        return [json.loads(line) for line in lines]


def _tensorboard(folder, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(os.path.join(folder, "tensorboard"))
    events.Reload()
    return {e.step: e.value for e in events.Scalars(tag)}


@pytest.mark.xdist_group("ray-uninterrupted")  # one uninterrupted run for the four
def test_the_run_trains_the_levers_the_plan_decided(storage, uninterrupted):
    # GIVEN the uninterrupted run's settings, sharding and gradReduceDtype at auto (decided once, by resolve)
    decided = resolve(_settings(storage)).training
    summary = uninterrupted.return_value["summary"]
    # THEN the built-in ran the decided reduction dtype and batch shape
    assert (summary["grad_reduce_dtype"], summary["micro_batch"], summary["grad_accumulation"]) == (
        decided.grad_reduce_dtype, decided.micro_batch, decided.grad_accumulation)
    # and the decided sharding on the ranks Ray started: both local ranks share one node, so hsdp has nothing to
    # replicate across and runs as plain FSDP
    assert decided.sharding in ("fsdp", "hsdp") and (summary["sharding"], summary["replicas"]) == ("fsdp", 1)


@pytest.mark.xdist_group("ray-uninterrupted")  # one uninterrupted run for the four
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


@pytest.mark.xdist_group("ray-uninterrupted")  # one uninterrupted run for the four
def test_worker_failure_restarts_without_lost_or_repeated_steps(storage, uninterrupted, capfd):
    # GIVEN rank 1's process ending right after optimizer step 5 (its step-4 checkpoint is saved), and maxFailures 1
    faults = {"_faults": {"exit_at_step": 5, "raise_on_rank": 1}}
    # WHEN the run is trained
    result = driver.fit(_settings(storage), local=True, name="fault", test_config=faults)
    # THEN Ray Train restarted the worker group from the step-4 checkpoint and the run completed
    assert result.error is None
    assert result.return_value["summary"]["start_step"] == 4
    # with step 5 redone from the checkpoint (the failed attempt's step 5 is lost with its workers) and step 6 once:
    # AdamW's own counter, restored from the checkpoint, has seen exactly 6 steps
    assert result.return_value["optimizer_steps"] == 6
    # and the losses are the uninterrupted run's
    assert _losses(result) == pytest.approx({5: _losses(uninterrupted)[5], 6: _losses(uninterrupted)[6]}, rel=1e-6)
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
    # GIVEN maxFailures 0 and a lost worker
    import ray.train

    settings = _settings(storage, maxFailures=0)
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
    settings = _settings(storage, trainFunction="tests.training.user_functions:fit_and_raise_two_part_error",
                         trainConfig=f'{{"marks": "{marks}"}}')
    # WHEN it runs
    with pytest.raises(ray.train.TrainingFailedError) as raised:
        driver.fit(settings, local=True, name="user-error")
    # THEN no rank ran the function twice: not retried as a lost worker
    ranks = [p.name.split("-")[0] for p in marks.iterdir()]
    assert ranks and len(ranks) == len(set(ranks)), sorted(p.name for p in marks.iterdir())
    # and the error names the exception, its message and where it came from
    assert "TwoPartError: the data is bad" in str(raised.value)
    assert not any(failure_policy.is_worker_loss(e) for e in raised.value.worker_failures.values())
    # and the function got the sharding and reduction dtype the plan decided, never "auto"
    decided = resolve(settings).training
    assert {p.read_text() for p in marks.iterdir()} == {f"{decided.sharding} {decided.grad_reduce_dtype}"}
