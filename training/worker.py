"""What every Ray Train worker runs: the settings' train function, between the project's checks.

    train_loop(config)              TorchTrainer(train_loop, train_loop_config=train_loop_config(settings, ...))
        before_training(run)        the bandwidth preflight (fail before step 1 on a slow inter-node path), then
                                    each node's EFA counters (training.efa_counters: the gate's second witness)
        function(config)            trainFunction (the built-in train_func, or yours), imported by name
        after_training(run)         each node's EFA counters again (the built-in takes its own, with its steps)

Every ray.train.report of a function of yours also goes to the run's metrics history (training.history: metrics.jsonl
and TensorBoard events in the run folder, by its "step" metric or else the report's index), as the built-in's do.

Ray Train has joined the workers into a torch.distributed process group (NCCL on GPU, gloo on CPU) before
train_loop runs. The function is imported in the worker from codeDir (put first on sys.path) or from the installed
packages; it is never pickled, so its module needs to import only where it runs.

What the function gets, `config`: every key of the trainConfig setting at the top level (as Ray Train's own
train_loop_config), plus "settings", the resolved settings as context values (camelCase keys, JSON types;
`Settings.from_context(config["settings"])` rebuilds the typed object), with every auto lever decided as the plan
decided it (core.strategy.resolve): microBatch and gradAccumulation are ints, precision "bf16" or "fp8",
activationCheckpointing a bool, the values `ray-efa plan` shows and the built-in runs. It may take no argument instead. What it
reports last with ray.train.report is the run summary's metrics; its rank 0 return value is Result.return_value.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ray_efa.core.settings import Settings
from ray_efa.core.strategy import resolve
from ray_efa.core.user_code import split_function
from ray_efa.training.history import CHECKPOINT_KEY, LAST_CHECKPOINT, open_history

__all__ = [
    "WRAPPER_KEY",
    "WorkerRun",
    "train_loop",
    "train_loop_config",
    "load_train_function",
    "before_training",
    "after_training",
    "crossing",
]

WRAPPER_KEY = "_ray_efa"
"""The config key of the wrapper's own values (removed before the function sees the config)."""

# The probe on CPU (gloo over loopback): small sizes, so that the local run spends a second on it, not a minute.
_PROBE_CPU = {"sizes_bytes": (64 << 10, 1 << 20, 8 << 20), "iters": 3}


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerRun:
    """One worker's view of the run, for the checks before and after training."""

    settings: Settings
    rank: int
    world_size: int
    local_world_size: int
    device: Any
    """The worker's torch.device."""


def train_loop_config(
    settings: Settings, *, code_dir: str | None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The TorchTrainer's train_loop_config: trainConfig's keys, "settings" (every auto lever decided), `extra` (test
    hooks), the wrapper's."""
    return {
        **settings.training.train_config,
        # decided here, once, on the driver: a function of yours reads the ints and bools the plan chose, not "auto"
        "settings": resolve(settings).to_context(),
        **(extra or {}),
        WRAPPER_KEY: {"train_function": settings.training.train_function, "code_dir": code_dir},
    }


def load_train_function(spec: str, code_dir: str | None) -> Callable[..., Any]:
    """Import `module:function` (from code_dir first, when given) and return the function."""
    if code_dir and code_dir not in sys.path:
        sys.path.insert(0, code_dir)
    module_name, name = split_function(spec)
    function = getattr(importlib.import_module(module_name), name, None)
    if not callable(function):
        raise TypeError(f"trainFunction {spec}: {module_name}.{name} is not a function")
    return function


class UserCodeError(RuntimeError):
    """The function cannot be imported or run for a reason in its own code or packages, said with the fix."""


def crossing(error: BaseException) -> BaseException:
    """`error` as the worker raises it to Ray Train: itself, or when pickle cannot rebuild it (as Ray must, on the
    controller: an exception class whose __init__ takes other arguments than its args) a UserCodeError naming it, so
    that the run fails with the code's error, once, not with a failed health check."""
    import pickle

    from ray.cloudpickle.cloudpickle_fast import dumps  # what Ray serializes a worker's exception with

    try:
        pickle.loads(dumps(error))
    except Exception as why:  # noqa: BLE001 - whatever the class's pickling raises
        kind = type(error)
        return UserCodeError(
            f"{kind.__module__}.{kind.__qualname__}: {error} (re-raised as UserCodeError, its "
            f"traceback above: Ray cannot rebuild this exception on the controller: "
            f"{type(why).__name__}: {why})"
        )
    return error


def missing_module_hint(spec: str, error: ModuleNotFoundError) -> str:
    """What a ModuleNotFoundError in a function of yours means, and the setting that fixes it."""
    return (
        f"trainFunction {spec}: {error} on the workers: add the package that provides {error.name!r} to the "
        "pipPackages setting (the cluster's workers install it), or install it here for --local"
    )


def _say(text: str) -> None:
    """Write a line to stdout, past Ray Train's print patch (which would also log it, showing it twice)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def before_training(run: WorkerRun) -> None:
    """Before the function: the all-reduce bandwidth probe (preflight setting), which raises PreflightError on every
    rank when the inter-node path is slower than the floor."""
    import torch.distributed as dist

    from ray_efa.core.preflight_floor import preflight_floor
    from ray_efa.training import efa_counters, preflight

    if run.settings.workload.preflight and dist.is_initialized():
        results = preflight.allreduce_probe(**({} if run.device.type == "cuda" else _PROBE_CPU), device=run.device)
        floor = preflight_floor(run.settings)  # the job's network's floor: TCP is never held to EFA's
        if run.rank == 0:
            _say(preflight.format_probe_table(results))
            _say(f"preflight floor ({floor.network}): {floor.floor_gb_s:g} GB/s at 1 GiB between nodes; {floor.source}")
        inter_node = run.local_world_size < run.world_size
        preflight.record_probe(results)  # the measured link, for the run summary (ray-efa calibrate)
        preflight.check_busbw(results, floor_gbps=floor.floor_gb_s, inter_node=inter_node, network=floor.network)
    efa_counters.snapshot_ray_worker("before")  # each node's EFA counters, after the preflight: the gate's 2nd witness


def after_training(run: WorkerRun) -> None:
    """After the function returned, on every worker (not after a failure): each node's EFA counters again. The
    built-in function takes this snapshot itself, with its step count, so that the gate can compare the bytes with
    core.perf's prediction; for a function of yours the prediction is unknown and the counters support the logs."""
    from ray_efa.training import efa_counters

    if not run.settings.training.builtin:
        efa_counters.snapshot_ray_worker("after")


def _call(function: Callable[..., Any], config: dict[str, Any]) -> Any:
    try:
        takes_config = bool(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # a builtin or C function: give it the config, as Ray Train would
        takes_config = True
    return function(config) if takes_config else function()


class _ReportRecorder:
    """Keeps the metrics of the last ray.train.report call while installed (as ray.train.report).

    Ray Train v2's Result.metrics holds only the metrics reported with the latest checkpoint
    (ray/train/v2/_internal/execution/controller/controller.py, _build_result), so a function that reports without
    checkpoints would leave the run summary empty; this records every call, hands it to `on_report` (metrics, the
    call's 1-based index) and passes it on unchanged.
    """

    def __init__(self, on_report: Callable[[dict[str, Any], int, bool], None] | None = None) -> None:
        self.last: dict[str, Any] | None = None
        self.calls = 0
        self._on_report = on_report

    def __enter__(self) -> _ReportRecorder:
        import ray.train

        self._original = ray.train.report

        def report(metrics: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            self.last = dict(metrics)
            self.calls += 1
            if self._on_report is not None:
                checkpoint = kwargs.get("checkpoint", args[0] if args else None)
                self._on_report(self.last, self.calls, checkpoint is not None)
            return self._original(metrics, *args, **kwargs)

        ray.train.report = report
        return self

    def __exit__(self, *_: object) -> None:
        import ray.train

        ray.train.report = self._original


def _quiet_report_log() -> None:
    """Ray Train logs every report at INFO, one line per rank per call; the function's own logging is left alone."""
    import logging

    try:
        module = importlib.import_module("ray.train.v2._internal.execution.context")
    except ImportError:  # another Ray layout: its chatter stays
        return
    logging.getLogger(module.__file__).setLevel(logging.WARNING)  # that module's logger is named by its file


def _drop_error_echo(record: object) -> bool:
    return not str(getattr(record, "msg", "")).startswith("Error in training function")


def _quiet_error_echo() -> None:
    """Ray Train logs an exception of the function in the worker ("Error in training function", with its
    traceback), and the driver's TrainingFailedError carries the same traceback: the driver prints it, once."""
    import logging

    util = logging.getLogger("ray.train.v2._internal.util")  # construct_user_exception_with_traceback's logger
    if _drop_error_echo not in util.filters:
        util.addFilter(_drop_error_echo)


def train_loop(config: dict[str, Any]) -> dict[str, Any]:
    """The per-worker loop of every run: before_training, the function, after_training.

    Returns {"return_value": what the function returned, "reported": the metrics of its last ray.train.report};
    training.driver.fit unwraps it into the Result (return_value, metrics).
    """
    import ray.train
    import ray.train.torch

    wrapper = config[WRAPPER_KEY]
    user_config = {key: value for key, value in config.items() if key != WRAPPER_KEY}
    context = ray.train.get_context()
    run = WorkerRun(
        settings=Settings.from_context(config["settings"]),
        rank=context.get_world_rank(),
        world_size=context.get_world_size(),
        local_world_size=context.get_local_world_size(),
        device=ray.train.torch.get_device(),
    )
    _quiet_report_log()
    _quiet_error_echo()
    # A function of yours gets the built-in's metrics history (metrics.jsonl and TensorBoard in the run folder, rank 0),
    # one record per report; the built-in keeps its own, by optimizer step.
    # A rerun under the same name resumes after the last report that carried a checkpoint, or starts a fresh history.
    history = (
        None
        if run.settings.training.builtin
        else open_history(0, LAST_CHECKPOINT if ray.train.get_checkpoint() is not None else None)
    )

    def record(metrics: dict[str, Any], index: int, checkpointed: bool) -> None:
        if history is not None:
            step = metrics.get("step")
            history.log(
                {**metrics, **({CHECKPOINT_KEY: True} if checkpointed else {})},
                step if isinstance(step, int) and not isinstance(step, bool) else index,
            )

    try:
        with _ReportRecorder(record) as reports:  # installed before the import: `from ray.train import report` too
            try:
                function = load_train_function(wrapper["train_function"], wrapper["code_dir"])
            except ModuleNotFoundError as error:
                raise UserCodeError(missing_module_hint(wrapper["train_function"], error)) from error
            except SyntaxError as error:  # Ray's failure text may keep only the message: say where it is
                raise UserCodeError(
                    f"trainFunction {wrapper['train_function']}: syntax error in {error.filename}, "
                    f"line {error.lineno}: {error.msg}"
                ) from error
            before_training(run)
            try:
                value = _call(function, user_config)
            except ModuleNotFoundError as error:
                raise UserCodeError(missing_module_hint(wrapper["train_function"], error)) from error
            except Exception as error:
                if (sent := crossing(error)) is not error:
                    raise sent from error
                raise
    finally:
        if history is not None:
            history.close()
    after_training(run)
    return {"return_value": value, "reported": reports.last}
