"""A real fine-tune on a real local Ray cluster (2 CPU workers, gloo) through Ray Data: saved weights and tokenizer
(tests/training/artifacts.py), a two-file parquet text set, a held-out split.

The first test runs the driver as the RayJob does, in a child process under a timeout: before the local cluster kept
CPUs for Ray Data, a dataset read there waited forever (Ray Train takes the workers' CPUs out of Ray Data's budget),
so a hang fails it instead of stalling the suite. The others share one Ray instance, on one xdist worker (their
group): a resumed run sees exactly the data an uninterrupted one sees, across an epoch boundary; a data set smaller
than one step says how small; every held-out row is evaluated, even one row for two ranks.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa.core.settings import Settings
from ray_efa.training import driver
from ray_efa.training.local import LOCAL_PRESET
from ray_efa.training.run_summary import find_summaries
from tests.training import artifacts
from tests.training.artifacts import returned

pytestmark = pytest.mark.ray

_HANG_BOUND_S = 600  # the whole child run, Ray's start included; it takes about a minute on an idle 2-core machine


@pytest.fixture(scope="module")
def texts():
    return artifacts.license_texts(120)


@pytest.fixture(scope="module")
def fine_tune_inputs(tmp_path_factory, texts):
    root = tmp_path_factory.mktemp("fine-tune")
    model = artifacts.save_model_folder(root / "model", texts)
    artifacts.write_parquet(root / "data", texts, files=2)
    return {"modelPath": str(model), "dataset": str(root / "data")}


def test_local_fine_tune_learns_and_reports_an_eval_loss(tmp_path, fine_tune_inputs):
    # GIVEN the local preset fine-tuning the saved model on the parquet set, 10% of its documents held out
    settings = {
        **LOCAL_PRESET,
        **fine_tune_inputs,
        "steps": 40,
        "checkpointEvery": 20,
        "evalFraction": 0.1,
        "evalEvery": 20,
        "storagePath": str(tmp_path / "results"),
    }
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(settings))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), os.getcwd()) if p)}
    env.pop("RAY_ADDRESS", None)
    # WHEN the driver runs it as `ray-efa train --local` does, with a bound on the whole run
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "ray_efa.training.driver",
                "--local",
                "--settings",
                str(path),
                "--name",
                "fine-tune",
                "--logs-dir",
                str(tmp_path / "nccl"),
            ],
            capture_output=True,
            text=True,
            timeout=_HANG_BOUND_S,
            env=env,
        )
    except subprocess.TimeoutExpired as expired:
        pytest.fail(
            f"the local fine-tune did not finish in {_HANG_BOUND_S} s (a starved Ray Data read hangs):\n"
            f"{(expired.stdout or b'')[-3000:]!r}"
        )
    # THEN it succeeds, having said what it loaded
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"model: loaded {fine_tune_inputs['modelPath']}: 377,984 parameters, stored float32" in done.stdout
    # with a falling loss and a finite eval loss, in the progress lines and in the run summary
    (summary,) = find_summaries(done.stdout.splitlines())
    assert summary["final_loss"] < 0.8 * summary["first_loss"]
    assert math.isfinite(summary["eval_loss"]) and summary["eval_step"] == 40
    assert summary["eval_perplexity"] == pytest.approx(math.exp(summary["eval_loss"]))
    assert summary["eval_loss"] < math.log(640)  # better than a uniform guess over the embeddings
    assert sum("| eval loss " in line for line in done.stdout.splitlines()) == 2  # steps 20 and 40


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")
        env.setenv("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
        env.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        driver.init_ray(local=True)
        yield
        ray.shutdown()


# 178 packed rows of 129 tokens: 89 per rank, 22 micro-batches of 4 per epoch. 30 steps cross into epoch 2, the
# checkpoint of step 24 lies inside it.
RESUME = {
    "model": "tiny",
    "steps": 30,
    "seqLen": 128,
    "microBatch": 4,
    "gradAccumulation": 1,
    "learningRate": 3e-3,
    "warmupSteps": 2,
    "checkpointEvery": 12,
    "reportEvery": 1,
    "maxFailures": 0,
    "preflight": False,
    "compile": False,
    "evalFraction": 0.1,
}


@pytest.mark.xdist_group("fine-tune-cluster")  # one Ray cluster for the module
def test_resumed_fine_tune_sees_the_uninterrupted_runs_data(ray_cluster, tmp_path, fine_tune_inputs):
    settings = Settings.from_context({**RESUME, **fine_tune_inputs, "storagePath": str(tmp_path)})
    # GIVEN an uninterrupted run, and the same run stopped after step 26 (its last checkpoint: step 24, epoch 2)
    whole = driver.fit(settings, local=True, name="whole")
    stopped = driver.fit(settings, local=True, name="resumed", test_config={"_faults": {"stop_after_step": 26}})
    assert max(dict(returned(stopped)["history"])) == 26
    # WHEN it is started again
    resumed = driver.fit(settings, local=True, name="resumed")
    # THEN it resumes at step 24, inside the second epoch, and every later step has the uninterrupted run's loss:
    # the same micro-batches, none repeated or skipped
    assert returned(resumed)["summary"]["start_step"] == 24
    expected = {step: loss for step, loss in dict(returned(whole)["history"]).items() if step > 24}
    assert dict(returned(resumed)["history"]) == pytest.approx(expected, rel=1e-5)
    assert returned(resumed)["summary"]["eval_loss"] == pytest.approx(returned(whole)["summary"]["eval_loss"], rel=1e-5)
    state = json.loads((tmp_path / "whole" / "checkpoint_000024" / "train_state.json").read_text())
    assert state == {
        "step": 24,
        "data": {"epoch": 1, "consumed": 2},
        "shape": {"world_size": 2, "micro_batch": 4, "seq_len": 128, "grad_accumulation": 1},
    }


@pytest.mark.xdist_group("fine-tune-cluster")  # one Ray cluster for the module
def test_a_run_resumed_at_another_split_continues_at_the_same_sample_and_a_changed_global_batch_is_refused(
    ray_cluster, tmp_path, fine_tune_inputs, capsys
):
    def settings(micro: int, accumulation: int) -> Settings:
        return Settings.from_context(
            {
                **RESUME,
                **fine_tune_inputs,
                "steps": 8,
                "checkpointEvery": 4,
                "microBatch": micro,
                "gradAccumulation": accumulation,
                "storagePath": str(tmp_path),
            }
        )

    # GIVEN a run of 2 x 2 micro-batches per rank and step (8 sequences a step on 2 ranks), stopped after step 6:
    # its last checkpoint, step 4, has consumed 8 micro-batches of 2 per rank
    stopped = driver.fit(settings(2, 2), local=True, name="reshaped", test_config={"_faults": {"stop_after_step": 6}})
    assert max(dict(returned(stopped)["history"])) == 6
    assert _train_state(tmp_path / "reshaped", 4)["data"] == {"epoch": 0, "consumed": 8}
    # (the settings.json that driver.run writes before it trains: what --resume compares)
    (tmp_path / "reshaped" / "settings.json").write_text(settings(2, 2).to_json())
    # WHEN it is resumed with 4 x 2 (16 sequences a step: another global batch, another learning-rate schedule)
    code = driver.run(settings(4, 2), local=True, name="reshaped", logs_dir=tmp_path / "nccl", resume=True)
    # THEN the workers refuse before a step, naming the setting and the split to reach, and the driver exits 2
    err = capsys.readouterr().err
    assert code == driver.EXIT_BAD_SETTINGS, err[-3000:]
    assert (
        "ray_efa.training.driver: invalid settings:\n  - globalBatchTokens: must be 1,024 tokens to resume this "
        "run: its steps were global batches of microBatch 2 x gradAccumulation 2 x 2 ranks of seqLen 128"
    ) in err
    assert "training failed" not in err
    assert sorted(p.name for p in (tmp_path / "reshaped").glob("checkpoint_0*")) == ["checkpoint_000004"]
    # WHEN it is resumed with one micro-batch of 4 instead (the same 8 sequences a step: auto may well do this on
    # another cluster)
    resumed = driver.fit(settings(4, 1), local=True, name="reshaped")
    # THEN it continues from step 4 at the same sample (its 32 samples per rank are 4 micro-batches of 4), and after
    # 4 more steps it stands where a run of 4 x 1 from the start stands: 8 micro-batches of 4 per rank, none trained
    # twice, none skipped (without the re-map it would have skipped to 8, and ended at 12)
    assert returned(resumed)["summary"]["start_step"] == 4
    assert returned(resumed)["optimizer_steps"] == 8
    assert _train_state(tmp_path / "reshaped", 8) == {
        "step": 8,
        "data": {"epoch": 0, "consumed": 8},
        "shape": {"world_size": 2, "micro_batch": 4, "seq_len": 128, "grad_accumulation": 1},
    }


def _train_state(run: Path, step: int) -> dict:
    return json.loads((run / f"checkpoint_{step:06d}" / "train_state.json").read_text())


@pytest.mark.xdist_group("fine-tune-cluster")  # one Ray cluster for the module
def test_a_data_set_smaller_than_one_step_says_how_many_tokens_it_has(ray_cluster, tmp_path, fine_tune_inputs, texts):
    import ray.train

    # GIVEN two short documents: fewer packed rows than the 2 x 4 one step needs
    artifacts.write_parquet(tmp_path / "small", [texts[0][:300], texts[1][:300]], files=1)
    settings = Settings.from_context(
        {
            **RESUME,
            **fine_tune_inputs,
            "dataset": str(tmp_path / "small"),
            "evalFraction": 0.0,
            "storagePath": str(tmp_path),
        }
    )
    # WHEN it trains THEN it fails, saying how many sequences and tokens the set holds and how many a step needs
    with pytest.raises(
        ray.train.TrainingFailedError,
        match=r"is too small: it holds \d sequences of seqLen \+ 1 = "
        r"129 tokens after packing \(\d+ tokens\), and one step "
        r"needs 8 \(1,032 tokens",
    ):
        driver.fit(settings, local=True, name="too-small")


@pytest.mark.xdist_group("fine-tune-cluster")  # one Ray cluster for the module
def test_an_eval_split_smaller_than_the_ranks_is_evaluated_whole(ray_cluster, tmp_path, fine_tune_inputs, texts):
    # GIVEN an evalDataset of one short document: one packed row of 129 tokens for two ranks (Ray Train's equal
    # split would give each rank none of it)
    artifacts.write_parquet(tmp_path / "held-out", [texts[0][:400]], files=1)
    settings = Settings.from_context(
        {
            **RESUME,
            **fine_tune_inputs,
            "steps": 2,
            "checkpointEvery": 0,
            "evalFraction": 0.0,
            "evalDataset": str(tmp_path / "held-out"),
            "storagePath": str(tmp_path),
        }
    )
    # WHEN it trains THEN the eval loss is that row's: its 128 target tokens, counted once
    summary = returned(driver.fit(settings, local=True, name="eval-one-row"))["summary"]
    assert (summary["eval_step"], summary["eval_tokens"]) == (2, 128)
    assert math.isfinite(summary["eval_loss"])


@pytest.mark.xdist_group("fine-tune-cluster")  # one Ray cluster for the module
def test_an_empty_eval_split_is_refused_before_training(ray_cluster, tmp_path, fine_tune_inputs, texts):
    from ray_efa.core.settings import SettingsError

    # GIVEN an evalDataset of a document shorter than one packed row of seqLen + 1 = 129 tokens
    artifacts.write_parquet(tmp_path / "held-out", [texts[0][:60]], files=1)
    settings = Settings.from_context(
        {
            **RESUME,
            **fine_tune_inputs,
            "evalFraction": 0.0,
            "evalDataset": str(tmp_path / "held-out"),
            "storagePath": str(tmp_path),
        }
    )
    # WHEN the driver builds the data sets THEN it refuses, naming evalDataset and why it is empty
    with pytest.raises(
        SettingsError,
        match=r"evalDataset: holds no held-out sequence of seqLen \+ 1 = 129 tokens "
        r"after packing",
    ):
        driver.fit(settings, local=True, name="eval-empty")
