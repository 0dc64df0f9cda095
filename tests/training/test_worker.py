"""The per-worker wrapper and the driver's handling of any train function, without a cluster: what the function's
config holds, how it is imported, what the run summary says, how runs are named."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from ray_efa.core.settings import Settings
from ray_efa.core.strategy import choose, resolve
from ray_efa.training import driver, train, worker
from ray_efa.training.local import LOCAL_WORKERS
from ray_efa.training.loss import inductor_options


def test_the_function_gets_train_config_keys_and_the_settings():
    settings = Settings.from_context({"trainConfig": '{"lr": 0.01, "layers": [4, 4]}', "seed": 7})
    config = worker.train_loop_config(settings, code_dir="/code", extra={"_faults": {"raise_at_step": 2}})
    user = {k: v for k, v in config.items() if k != worker.WRAPPER_KEY}
    decided = resolve(settings)
    assert user == {"lr": 0.01, "layers": [4, 4], "settings": decided.to_context(), "_faults": {"raise_at_step": 2}}
    assert Settings.from_context(user["settings"]) == decided
    assert config[worker.WRAPPER_KEY] == {"train_function": "ray_efa.training.train:train_func", "code_dir": "/code"}


@pytest.mark.parametrize(
    "cluster",
    [
        {},
        {"gpuInstanceType": "p5.48xlarge", "gpuNodeCount": 4},
        {"gpuInstanceType": "p5.4xlarge", "gpuNodeCount": 1, "compile": False},
    ],
)
def test_a_function_of_yours_gets_the_levers_the_plan_decided(cluster):
    """The defaults leave microBatch, gradAccumulation, precision and activationCheckpointing at auto; the config a
    trainFunction of yours gets holds what core.strategy.resolve decided (the built-in's values), never "auto"."""
    settings = Settings.from_context({**cluster, "trainFunction": "my_pkg.train:fit"})
    assert set(settings.training.undecided) == {
        "microBatch",
        "gradAccumulation",
        "precision",
        "activationCheckpointing",
    }
    assert (settings.training.sharding, settings.training.grad_reduce_dtype) == ("auto", "auto")
    got = worker.train_loop_config(settings, code_dir=None)["settings"]
    t = resolve(settings).training
    assert (got["microBatch"], got["gradAccumulation"], got["precision"], got["activationCheckpointing"]) == (
        t.micro_batch,
        t.grad_accumulation,
        t.precision,
        t.activation_checkpointing,
    )
    # sharding and the reduction dtype too: the plan's choice for that shape (core.strategy.choose), not "auto"
    chosen = choose(settings)
    assert (got["sharding"], got["gradReduceDtype"]) == (chosen.strategy, chosen.reduce_dtype)
    assert got["sharding"] in ("fsdp", "hsdp") and got["gradReduceDtype"] in ("fp32", "bf16")
    assert type(got["microBatch"]) is int and type(got["gradAccumulation"]) is int
    assert got["precision"] in ("bf16", "fp8") and type(got["activationCheckpointing"]) is bool
    # the split the function would run is the plan's: micro batch x seqLen x accumulation x ranks near globalBatchTokens
    tokens = got["microBatch"] * got["seqLen"] * got["gradAccumulation"] * settings.world_size
    assert abs(tokens - got["globalBatchTokens"]) <= 0.05 * got["globalBatchTokens"]
    assert Settings.from_context(got).training.undecided == ()  # the typed object rebuilt from it is decided too
    # what the user set is kept
    own = Settings.from_context(
        {
            **cluster,
            "microBatch": 3,
            "gradAccumulation": 2,
            "precision": "bf16",
            "activationCheckpointing": True,
            "sharding": "fsdp",
            "gradReduceDtype": "bf16",
        }
    )
    kept = worker.train_loop_config(own, code_dir=None)["settings"]
    assert (
        kept["microBatch"],
        kept["gradAccumulation"],
        kept["precision"],
        kept["activationCheckpointing"],
        kept["sharding"],
        kept["gradReduceDtype"],
    ) == (3, 2, "bf16", True, "fsdp", "bf16")


GPU = torch.device("cuda", 0)  # a device object only: nothing runs on it


@pytest.mark.parametrize(
    ("levers", "world", "local_world", "expected"),
    [
        # (strategy, replicas, bf16 wire, FSDP2's reduction dtype)
        (
            {"sharding": "hsdp", "gradReduceDtype": "bf16", "gradAccumulation": 4},
            8,
            4,
            ("hsdp", 2, True, torch.float32),
        ),
        (
            {"sharding": "hsdp", "gradReduceDtype": "bf16", "gradAccumulation": 1},
            8,
            4,
            ("hsdp", 2, False, torch.bfloat16),
        ),
        (
            {"sharding": "fsdp", "gradReduceDtype": "fp32", "gradAccumulation": 4},
            8,
            4,
            ("fsdp", 1, False, torch.float32),
        ),
        (
            {"sharding": "fsdp", "gradReduceDtype": "bf16", "gradAccumulation": 1},
            8,
            4,
            ("fsdp", 1, False, torch.bfloat16),
        ),
        # hsdp planned for 2 nodes, but Ray started every rank on one: nothing to replicate across
        (
            {"sharding": "hsdp", "gradReduceDtype": "fp32", "gradAccumulation": 4},
            4,
            4,
            ("fsdp", 1, False, torch.float32),
        ),
        (
            {"sharding": "hsdp", "gradReduceDtype": "fp32", "gradAccumulation": 4},
            12,
            4,
            ("hsdp", 3, False, torch.float32),
        ),
    ],
)
def test_the_built_in_runs_the_sharding_and_reduction_it_is_handed(levers, world, local_world, expected):
    # GIVEN settings as the driver hands them (resolved: the levers set keep their value)
    t = resolve(Settings.from_context({"gpuNodeCount": 2, **levers})).training
    # WHEN the built-in turns them into its FSDP2 plan on `world` ranks of `local_world` per node
    strategy, plan = train.parallel_plan(t, GPU, world, local_world)
    # THEN it runs them as they are, adapting only the replicas to the nodes present
    assert plan.mixed_precision is not None
    assert (strategy, plan.replicas, plan.bf16_wire, plan.mixed_precision.reduce_dtype) == expected


@pytest.mark.parametrize("cluster", [{}, {"gpuInstanceType": "p5.48xlarge", "gpuNodeCount": 4}, {"gpuNodeCount": 1}])
def test_the_built_in_runs_what_the_plan_decided_at_auto(cluster):
    # GIVEN sharding and gradReduceDtype at auto, resolved as the driver resolves them
    settings = Settings.from_context(cluster)
    t = resolve(settings).training
    chosen = choose(settings)
    # WHEN the built-in makes its plan on the settings' ranks
    strategy, plan = train.parallel_plan(t, GPU, settings.world_size, settings.nodes.gpu_instance.gpus)
    # THEN it runs the plan's choice (hsdp: one replica per node)
    assert strategy == chosen.strategy
    assert plan.replicas == (settings.nodes.gpu_node_count if chosen.strategy == "hsdp" else 1)
    wire = chosen.reduce_dtype == "bf16" and int(t.grad_accumulation) > 1
    assert plan.bf16_wire == wire and plan.mixed_precision is not None
    assert plan.mixed_precision.reduce_dtype == (
        torch.bfloat16 if chosen.reduce_dtype == "bf16" and not wire else torch.float32
    )


@pytest.mark.parametrize(
    ("context", "tuned"), [({}, True), ({"compileTuning": False}, False), ({"compileTuning": "false"}, False)]
)
def test_compile_tuning_reaches_the_compiled_layers(context, tuned):
    # GIVEN compileTuning as a user sets it (-c gives strings) or leaves it
    t = resolve(Settings.from_context({"gpuNodeCount": 1, **context})).training
    # WHEN the built-in makes its plan
    _, plan = train.parallel_plan(t, GPU, 1, 1)
    # THEN torch.compile is asked for inductor's coordinate-descent tuning exactly when the setting is on
    assert plan.tune_kernels is tuned
    assert inductor_options(plan.tune_kernels) == ({"coordinate_descent_tuning": True} if tuned else {})


def test_the_built_in_refuses_settings_nobody_resolved():
    t = Settings.from_context(
        {"microBatch": 1, "gradAccumulation": 1, "precision": "bf16", "activationCheckpointing": False}
    ).training
    with pytest.raises(ValueError, match="sharding and gradReduceDtype must be decided first"):
        train.parallel_plan(t, GPU, 8, 4)


def test_functions_are_imported_from_code_dir_first(tmp_path, monkeypatch):
    (tmp_path / "my_train_mod.py").write_text(
        "def fit(config):\n    return config['x'] * 2\n\ndef bare():\n    return 1\n"
    )
    monkeypatch.setattr(sys, "path", list(sys.path))
    fit = worker.load_train_function("my_train_mod:fit", str(tmp_path))
    assert sys.path[0] == str(tmp_path)
    assert worker._call(fit, {"x": 3}) == 6
    assert worker._call(worker.load_train_function("my_train_mod:bare", str(tmp_path)), {"x": 3}) == 1  # no argument
    with pytest.raises(TypeError, match="is not a function"):
        worker.load_train_function("my_train_mod:nothing", str(tmp_path))


def test_a_functions_summary_is_what_it_reported_and_where_it_ran():
    metrics = {"loss": 0.4, "epoch": 3, "note": "ok", "tensor": object(), "flag": True}
    local = driver.reported_summary(metrics, Settings(), local=True)
    assert local == {
        "loss": 0.4,
        "epoch": 3,
        "note": "ok",
        "flag": True,
        "devices": LOCAL_WORKERS,
        "hosts": 1,
        "device": "cpu",
    }
    cluster = driver.reported_summary(
        None, Settings.from_context({"gpuInstanceType": "p5.48xlarge", "gpuNodeCount": 4}), local=False
    )
    assert (cluster["devices"], cluster["hosts"], cluster["device"]) == (32, 4, "H100")  # the catalog's name


def test_the_unwrapped_result_holds_the_functions_return_value_and_last_report():
    from ray.train import Result

    raw = Result(
        metrics=None,
        checkpoint=None,
        error=None,
        path="/tmp/run",
        return_value={"return_value": {"losses": [1.0]}, "reported": {"loss": 0.5}},
    )
    result = driver._unwrapped(raw)
    assert result.return_value == {"losses": [1.0]} and result.metrics == {"loss": 0.5}
    # a report with a checkpoint keeps Ray's own metrics when the function never reported through the wrapper
    kept = driver._unwrapped(
        Result(
            metrics={"a": 1},
            checkpoint=None,
            error=None,
            path="/p",
            return_value={"return_value": None, "reported": None},
        )
    )
    assert kept.metrics == {"a": 1} and kept.return_value is None


def test_run_names_follow_the_job_name_and_the_function():
    own = Settings.from_context({"trainFunction": "pkg.train:fit_model", "jobName": "mlp-exp"})
    assert driver.default_run_name(own, local=False).startswith("ray-train-mlp-exp-fit_model-")
    assert driver.default_run_name(own, local=True).startswith("local-mlp-exp-fit_model-")
    assert driver.default_run_name(Settings(), local=True).startswith("local-qwen2.5-1.5b-")


def test_the_report_recorder_passes_every_call_through_and_keeps_the_last(monkeypatch):
    import ray.train

    seen = []
    monkeypatch.setattr(ray.train, "report", lambda metrics, *a, **k: seen.append(metrics))
    with worker._ReportRecorder() as recorder:
        ray.train.report({"loss": 2.0})
        ray.train.report({"loss": 1.0}, None)
    assert recorder.last == {"loss": 1.0} and seen == [{"loss": 2.0}, {"loss": 1.0}]
    ray.train.report({"after": True})
    assert recorder.last == {"loss": 1.0}  # uninstalled on exit


def test_the_import_root_is_the_folder_above_ray_efa(tmp_path):
    # GIVEN an installed layout: site-packages/ray_efa/__init__.py, training/driver.py below it
    site = tmp_path / "site-packages"
    (site / "ray_efa" / "training").mkdir(parents=True)
    (site / "ray_efa" / "__init__.py").write_text("")
    # THEN the workers get site-packages on their path (where `import ray_efa` works), not site-packages/ray_efa
    assert driver._import_root(str(site / "ray_efa" / "__init__.py")) == str(site)
    # and in this checkout, the folder whose ray_efa/ holds the links
    assert (Path(driver._import_root()) / "ray_efa" / "__init__.py").is_file()


def test_an_exception_pickle_cannot_rebuild_crosses_as_a_user_code_error_naming_it():
    from ray_efa.core.settings import Problem, SettingsError
    from tests.training.user_functions import TwoPartError

    # GIVEN an exception whose class takes a second argument: Ray could not rebuild it on the controller
    sent = worker.crossing(TwoPartError("the data is bad", 7))
    # THEN the worker sends a UserCodeError naming its class, message and why
    assert isinstance(sent, worker.UserCodeError)
    assert str(sent).startswith("tests.training.user_functions.TwoPartError: the data is bad (re-raised")
    assert "missing 1 required positional argument: 'code'" in str(sent)
    # and exceptions that cross are sent as they are, the settings' refusals with their problems
    plain = ValueError("bad shape")
    assert worker.crossing(plain) is plain
    refusal = SettingsError([Problem("globalBatchTokens", 8, "must be 16 to resume this run")])
    assert worker.crossing(refusal) is refusal
    import pickle

    assert pickle.loads(pickle.dumps(refusal)).problems == refusal.problems
