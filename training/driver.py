"""The training driver: checks the plan, runs the train function on a TorchTrainer, then gates the NCCL transport.

The function is trainFunction (default the built-in train_func), imported by name in each worker from codeDir;
each worker runs it inside training.worker.train_loop (the bandwidth preflight before it). After it: the NCCL logs
of every worker, the transport gate, and the run summary (RAY_EFA_RUN_SUMMARY): the built-in's own summary, or for
a function of yours what it reported last (Result.metrics) and where it ran.

The RayJob runs exactly `python -m ray_efa.training.driver --settings /path/settings.json` from a working directory holding
core/ and training/; `--local` runs 2 CPU workers (gloo) on an in-process Ray cluster instead (with the local preset
when no settings file is given). Exit codes: 0 trained (and the transport proven, on the
cluster), 1 training failed or the gate failed, 2 bad settings, a plan that cannot fit, or a run that cannot resume
with these settings (the workers' refusal, before a step), 3 the gate could not prove
the transport (cluster only; the local run uses no NCCL, so it cannot prove anything there and says so).

Ray Train v2 API (the default in ray 2.58): ScalingConfig, RunConfig(storage_path, FailureConfig(max_failures)).
A run with the same name and storagePath as an earlier one is refused (exit 2, nothing written) unless `--resume`,
which continues it from its latest checkpoint with the same settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray_efa
from ray_efa.core import catalog, strategy
from ray_efa.core.model_source import model_label
from ray_efa.core.pod_env import JOB_POLL_INTERVAL_S, POLL_INTERVAL_ENV
from ray_efa.core.settings import DEFAULT_JOB_NAME, Problem, Settings, SettingsError, shared_storage_problem
from ray_efa.core.user_code import check_user_code, missing_imports, split_function
from ray_efa.training.local import LOCAL_WORKERS, local_settings
from ray_efa.training.run_folder import (
    GATE_LOGS_FILE,
    SETTINGS_FILE,
    SUMMARY_FILE,
    VERDICT_FILE,
    RunFolder,
    run_name_problem,
)

if TYPE_CHECKING:
    from ray.train import Result, RunConfig, ScalingConfig

    from ray_efa.training.transport import Verdict

__all__ = [
    "check_plan",
    "init_ray",
    "scaling_config",
    "run_config",
    "default_run_name",
    "fit",
    "transport_gate",
    "gate_exit_code",
    "reported_summary",
    "run",
    "describe_data",
    "open_run_folder",
    "claim_run_folder",
    "record_in_run_folder",
    "main",
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_BAD_SETTINGS",
    "EXIT_UNPROVEN",
]

EXIT_OK, EXIT_FAILED, EXIT_BAD_SETTINGS, EXIT_UNPROVEN = 0, 1, 2, 3
EXIT_INTERRUPTED = 130
"""Ctrl-C: 128 + SIGINT, what a shell reports (docs/commands.md)."""
# CPUs per GPU node left to Ray itself (the log collector, checkpoint uploads), not given to the training workers.
_RESERVED_CPUS_PER_NODE = 1
# CPUs per node kept for the Ray Data tasks that read, tokenize and pack `dataset` (Ray Train excludes the workers'
# resources from Ray Data's budget, so a data path with no CPU of its own would wait forever).
DATA_CPUS_PER_NODE = 4
LOCAL_DATA_CPUS = 2
"""Logical CPUs the local cluster adds for Ray Data beside its LOCAL_WORKERS training workers."""


def check_plan(settings: Settings, *, local: bool) -> None:
    """Refuse, before Ray starts: a trainFunction that is not in codeDir, and a model or data set that cannot be read
    (training.inputs.check_inputs), both runs; then a cluster run whose memory plan cannot fit (the built-in
    function's: core.strategy.check_fits), whose checkpoints have nowhere shared to go, or whose local paths no pod can
    read."""
    from ray_efa.core.model_source import pod_path_problems
    from ray_efa.training.inputs import check_inputs

    check_user_code(settings)
    check_inputs(settings)
    if local:
        return  # CPU workers: no GPU memory to plan, and one machine shares ~/ray_results
    problems: list[Problem] = pod_path_problems(settings)
    if (
        storage := shared_storage_problem(
            settings.nodes.gpu_node_count, settings.workload.storage_path, settings.cluster_stack_name
        )
    ) is not None:
        problems.append(storage)
    try:
        strategy.check_fits(settings)
    except SettingsError as error:
        problems.extend(error.problems)
    if problems:
        raise SettingsError(problems)


def scaling_config(settings: Settings, *, local: bool, local_workers: int = LOCAL_WORKERS) -> ScalingConfig:
    """Local: CPU workers. Cluster: one worker per GPU, with that GPU's share of the worker pod's CPUs."""
    from ray.train import ScalingConfig

    if local:
        return ScalingConfig(num_workers=local_workers, use_gpu=False, resources_per_worker={"CPU": 1})
    instance = settings.nodes.gpu_instance
    pod = catalog.worker_pod_resources(instance)
    reserved = _RESERVED_CPUS_PER_NODE + (DATA_CPUS_PER_NODE if settings.training.dataset is not None else 0)
    cpus = max(1, (pod.cpu - reserved) // instance.gpus)
    return ScalingConfig(num_workers=settings.world_size, use_gpu=True, resources_per_worker={"CPU": cpus, "GPU": 1})


def run_config(settings: Settings, name: str) -> RunConfig:
    from ray.train import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig

    from ray_efa.training.progress import ReportLines

    return RunConfig(
        name=name,
        storage_path=settings.workload.storage_path,  # None: Ray's default, ~/ray_results
        failure_config=FailureConfig(max_failures=settings.training.max_failures),
        checkpoint_config=CheckpointConfig(num_to_keep=None),
        logging_config=LoggingConfig(log_level="WARNING"),  # our progress lines, not one per ray.train.report
        # a function of your own prints nothing of ours: a line per ray.train.report it makes (training.progress)
        callbacks=[] if settings.training.builtin else [ReportLines()],
    )


GENERIC_FUNCTION_NAMES = frozenset(
    {"train_func", "train_loop_per_worker", "train_loop", "train_fn", "train", "main", "fit", "run"}
)
"""Names Ray Train's documentation and most functions use (train_func above all): they tell no two runs apart."""


def function_label(spec: str) -> str:
    """What names a run of trainFunction `spec`: the function's name ("pkg.train:fit_mlp" -> fit_mlp), or where a
    conventional name says nothing (GENERIC_FUNCTION_NAMES), its module ("own_training.train:train_func" ->
    own_training.train)."""
    module, function = split_function(spec)
    return module if function in GENERIC_FUNCTION_NAMES else function


def default_run_name(settings: Settings, *, local: bool) -> str:
    """<where>[-<jobName>]-<what>-<UTC time>: where is "local" or the cluster, what the model (modelPath's name, or
    the preset) of the built-in function, or your function's name; jobName when it is not the default, so that side-by-side jobs differ."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    prefix = "local" if local else settings.cluster.cluster_name
    if settings.workload.job_name != DEFAULT_JOB_NAME:
        prefix += f"-{settings.workload.job_name}"
    t = settings.training
    what = (model_label(t.model_path) if t.model_path else t.model) if t.builtin else function_label(t.train_function)
    what = "".join(c if c.isalnum() or c in "-_." else "-" for c in what)  # hf://org/name: no "/" in a run name
    return f"{prefix}-{what}-{stamp}"


def _import_root(package_init: str | None = None) -> str:
    """The folder that holds the ray_efa package (`package_init` is its __init__.py): the checkout (whose ray_efa/
    links the top-level folders), or site-packages in an install (not site-packages/ray_efa, where `import ray_efa`
    would fail)."""
    return str(Path(package_init or str(ray_efa.__file__)).parent.parent.resolve())


def init_ray(*, local: bool, code_dir: str | None = None) -> None:
    """Start the in-process local cluster, or connect to the running one; nothing if Ray is already up.

    `code_dir` (codeDir) goes on this process's path and, locally, on the workers' PYTHONPATH (on the cluster the
    pods' PYTHONPATH has it), so that tasks your function starts import your code too.
    """
    import ray

    if code_dir and code_dir not in sys.path:
        sys.path.insert(0, code_dir)  # results and reports that hold your classes unpickle here
    if ray.is_initialized():
        return
    if local:
        # The workers inherit this process's environment: the folder above ray_efa on their path lets them import
        # it without an install (a runtime_env would do the same, but costs fresh worker processes).
        paths = (_import_root(), code_dir, os.environ.get("PYTHONPATH"))
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        os.environ.setdefault(POLL_INTERVAL_ENV, "0.5")  # notice the end of training sooner
        os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")  # no spot nodes to watch on a laptop
        # print() in a worker would also go to Ray Train's log, which the driver shows too: every line twice.
        os.environ.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")
        # The run's own cluster: address "local" starts one and never joins another Ray on this machine (a
        # RAY_ADDRESS in the environment, or a running `ray start`); then RAY_ADDRESS names it, for what the run
        # starts (ray/_private/worker.py, init: "local" always starts a new local instance).
        os.environ.pop("RAY_ADDRESS", None)
        ray.init(
            address="local",
            # Room for the workers even on a 1-core machine, and CPUs of its own for Ray Data: Ray Train takes the
            # workers' CPUs out of Ray Data's budget, and with none left a dataset read would wait forever.
            num_cpus=max(os.cpu_count() or 1, LOCAL_WORKERS) + LOCAL_DATA_CPUS,
            include_dashboard=False,
            # Ray's own chatter off; without a dashboard the placement-group cleaner warns on every poll.
            logging_config=ray.LoggingConfig(log_level="ERROR"),
        )
    else:
        # The controller polls the workers' one-report queues this often (training.reporting); the RayJob's
        # runtime_env sets the same value, this covers `ray-efa train` run by hand on the head.
        os.environ.setdefault(POLL_INTERVAL_ENV, str(JOB_POLL_INTERVAL_S))
        ray.init(address="auto")


def fit(
    settings: Settings,
    *,
    local: bool,
    name: str | None = None,
    test_config: dict[str, Any] | None = None,
    local_workers: int = LOCAL_WORKERS,
    datasets: dict[str, Any] | None = None,
) -> Result:
    """Run trainFunction on a TorchTrainer (each worker through training.worker.train_loop); return the Ray Train
    Result (raises ray.train.TrainingFailedError). `datasets`: Ray Data datasets for the TorchTrainer (the function
    reads its shard with ray.train.get_dataset_shard(name))."""
    from ray.train.torch import TorchConfig, TorchTrainer

    from ray_efa.training.worker import train_loop, train_loop_config

    code_dir = check_user_code(settings).code_dir
    code_path = str(code_dir) if code_dir is not None else None
    init_ray(local=local, code_dir=code_path)
    dataset_config = None
    if datasets is None and settings.training.dataset is not None:  # Ray Data: each rank streams its shard
        from ray_efa.training.dataset import data_config
        from ray_efa.training.inputs import driver_datasets

        datasets, dataset_config = driver_datasets(settings), data_config()
    trainer = _trainer_class(TorchTrainer)(
        train_loop,
        train_loop_config=train_loop_config(settings, code_dir=code_path, extra=test_config),
        torch_config=TorchConfig(backend="gloo" if local else "nccl"),
        scaling_config=scaling_config(settings, local=local, local_workers=local_workers),
        run_config=run_config(settings, name or default_run_name(settings, local=local)),
        datasets=datasets,
        dataset_config=dataset_config,
    )
    return _unwrapped(trainer.fit())


def _trainer_class(base: type[Any]) -> type[Any]:
    """The TorchTrainer whose controller retries lost workers only (training.failure_policy): Ray Train 2.58 builds
    its DefaultFailurePolicy in fit() with no setting to replace it, so the controller's arguments are swapped here."""
    from ray_efa.training.failure_policy import RetryLostWorkersPolicy

    class Trainer(base):
        def _initialize_and_run_controller(self, **controller_init_kwargs: Any) -> Any:
            policy = RetryLostWorkersPolicy(self.run_config.failure_config)
            return super()._initialize_and_run_controller(**{**controller_init_kwargs, "failure_policy": policy})

        def _register_sigint_handler(self, controller: Any) -> None:
            # Ray Train's own handler aborts the run and leaves the driver to end in the controller's error (exit 1,
            # tracebacks); this one aborts it the same way, then ends fit() with KeyboardInterrupt (driver.run: 130).
            import signal

            import ray
            import ray.exceptions

            def interrupted(signum: int, frame: Any) -> None:
                signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C during the abort: at once
                try:
                    ray.get(controller.abort.remote())  # the workers stop; what the run folder holds stays
                except ray.exceptions.RayError:
                    pass
                raise KeyboardInterrupt

            signal.signal(signal.SIGINT, interrupted)

    return Trainer


def _unwrapped(result: Any) -> Any:
    """The Result as the function left it: its own return value, and as metrics what it reported last (Ray Train v2
    keeps only the metrics of the last checkpoint; training.worker records every report)."""
    outcome = result.return_value
    if not (isinstance(outcome, dict) and set(outcome) == {"return_value", "reported"}):
        return result
    metrics = outcome["reported"] if outcome["reported"] is not None else result.metrics
    return dataclasses.replace(result, return_value=outcome["return_value"], metrics=metrics)


def reported_summary(
    metrics: dict[str, Any] | None, settings: Settings, *, local: bool, local_workers: int = LOCAL_WORKERS
) -> dict[str, Any]:
    """The run summary of a function of yours: what it reported last (Result.metrics; JSON scalars only) and where it
    ran (devices, hosts, device), as the built-in's summary says it."""
    values = {
        key: value
        for key, value in (metrics or {}).items()
        if isinstance(value, (bool, int, float, str)) or value is None
    }
    if local:
        where = {"devices": local_workers, "hosts": 1, "device": "cpu"}
    else:
        instance = settings.nodes.gpu_instance
        device = instance.gpu.name if instance.gpu is not None else instance.name
        where = {"devices": settings.world_size, "hosts": settings.nodes.gpu_node_count, "device": device}
    return {**values, **where}


def gate_exit_code(verdict_exit_code: int, *, local: bool) -> int:
    """The driver's exit code for a gate verdict: 'proves nothing' fails a cluster run, not a local one."""
    if local and verdict_exit_code == EXIT_UNPROVEN:
        return EXIT_OK
    return verdict_exit_code


def nodes_without_logs(logs: list[Path], gpu_nodes: int) -> str | None:
    """Why the collected logs cannot prove the job: fewer files with NCCL lines than the job's GPU nodes (a node whose
    collector timed out or died has no file, training.log_collect.collect_nccl_logs), else None."""
    from ray_efa.training.transport import classify_paths

    with_lines = [p for p in logs if classify_paths([p]).nccl_lines]
    if len(with_lines) >= gpu_nodes:
        return None
    have = ", ".join(p.name for p in with_lines) or "none"
    return (
        f"NCCL lines were collected from {len(with_lines)} of the job's {gpu_nodes} GPU nodes ({have}): the "
        "other nodes' logs are missing (their collector timed out, or the node died), and their transport is "
        "unknown"
    )


def transport_gate(
    settings: Settings,
    *,
    local: bool,
    logs_dir: Path,
    run_folder: RunFolder | None = None,
    verdicts: list[Verdict] | None = None,
) -> int:
    """Collect the workers' NCCL logs, classify them and judge them against the expected transport (the verdict also
    goes to the run folder's verdict.json, and is appended to `verdicts` for the run summary)."""
    from ray_efa.core.output_dir import publish
    from ray_efa.core.pod_env import expected_transport
    from ray_efa.training import efa_counters
    from ray_efa.training.log_collect import collect_nccl_logs, is_collected_file
    from ray_efa.training.transport import classify_paths, gate

    paths = publish(
        logs_dir,
        collect_nccl_logs,
        command="ray-efa train (NCCL logs and EFA counters of the transport gate)",
        accept=is_collected_file,
    )
    logs = [p for p in paths if not efa_counters.is_counter_file(p)]
    # The driver knows how many hosts the job ran on: a network every process chose then contradicts, even unlogged.
    hosts = 1 if local else settings.nodes.gpu_node_count
    unusable: efa_counters.CounterFileError | None = None
    try:  # the snapshots each node's local rank 0 took before and after training (none on the local gloo run)
        snapshots = efa_counters.load_snapshots([p for p in paths if efa_counters.is_counter_file(p)])
    except efa_counters.CounterFileError as error:
        unusable, snapshots = error, []
    verdict = gate(
        classify_paths(logs),
        expected_transport(settings.workload.network),
        hosts=hosts,
        counters=None if local else snapshots,
    )
    missing = None if local else nodes_without_logs(logs, hosts)
    if missing is not None and verdict.exit_code == EXIT_OK:  # every node's logs, or no proof
        verdict = dataclasses.replace(
            verdict,
            exit_code=EXIT_UNPROVEN,
            cause="missing-nodes",
            summary=f"NO PROOF: {missing}; the rest: {verdict.summary}",
        )
    if unusable is not None and verdict.exit_code == EXIT_OK:  # a counter file we cannot read never lets a job pass
        verdict = dataclasses.replace(
            verdict,
            exit_code=EXIT_UNPROVEN,
            summary=(f"NO PROOF: an EFA counter snapshot cannot be used ({unusable}); the rest: {verdict.summary}"),
        )
    if verdicts is not None:
        verdicts.append(verdict)
    print(verdict.render_table())
    print(f"transport gate: {verdict.summary} (logs: {logs_dir})")
    code = gate_exit_code(verdict.exit_code, local=local)
    if run_folder is not None:
        # The evidence with the verdict: logs_dir is in the head pod's /tmp and goes with the RayCluster.
        record_in_run_folder(run_folder, GATE_LOGS_FILE, archive_files(paths))
    record_in_run_folder(
        run_folder, VERDICT_FILE, {**verdict.to_json(), "table": verdict.render_table(), "driver_exit_code": code}
    )
    if local and verdict.exit_code == EXIT_UNPROVEN:
        print(
            "transport gate: the local run talks gloo over loopback, not NCCL, so it proves nothing about EFA "
            "(exit 3); this passes locally and fails a cluster run"
        )
    return code


_RESUME_MAY_CHANGE = frozenset({"microBatch", "gradAccumulation"})
"""Training settings a resumed run may change: the split of the global batch (the workers refuse another global
batch: training.checkpoint.remap_train_state)."""


def claim_run_folder(settings: Settings, name: str, *, resume: bool) -> RunFolder | None:
    """The run's folder, once it is known that this run may write it: new, or with `resume` an earlier run of the same
    settings (said, with the checkpoint it continues from). SettingsError, before anything is written, for an existing
    folder without `resume` (a second run would restore the first one's checkpoint, report its numbers as its own and
    replace its settings.json), for `resume` with no folder, and for `resume` with other settings than the folder's."""
    folder = open_run_folder(settings, name)
    if folder is None:
        return None
    exists = folder.exists()
    if not exists and resume:
        raise SettingsError(
            [
                Problem(
                    "--resume",
                    None,
                    f"there is no run folder {folder.uri} to resume: leave --resume out to start the run",
                )
            ]
        )
    if not exists:
        return folder
    if not resume:
        raise SettingsError(
            [
                Problem(
                    "--name",
                    name,
                    (
                        f"the run folder {folder.uri} exists (an earlier run of that name): nothing in it is changed. Give a new "
                        "--name, or add --resume to continue that run with the same settings"
                    ),
                )
            ]
        )
    recorded = folder.read_bytes(SETTINGS_FILE)
    try:
        before = Settings.from_json(recorded.decode()).to_context() if recorded is not None else None
    except (ValueError, UnicodeDecodeError) as error:
        raise SettingsError(
            [
                Problem(
                    "--resume",
                    None,
                    f"{folder.uri}/{SETTINGS_FILE} cannot be read ({error}): nothing says what the run trained with",
                )
            ]
        ) from None
    if before is None:
        raise SettingsError(
            [
                Problem(
                    "--resume",
                    None,
                    f"{folder.uri} holds no {SETTINGS_FILE}: nothing says what the run trained with; give a new --name",
                )
            ]
        )
    now = settings.to_context()
    # What the run trains is the training section; where it runs (cluster, nodes, network) may change, and so may the
    # split of its global batch, which the workers check against the checkpoint (training.checkpoint).
    keys = {info.alias for info in type(settings.training).model_fields.values() if info.alias} - _RESUME_MAY_CHANGE
    changed = sorted(k for k in keys if before.get(k) != now.get(k))
    if changed:
        shown = "; ".join(f"{k}: {before.get(k)!r} then, {now.get(k)!r} now" for k in changed)
        raise SettingsError(
            [
                Problem(
                    "--resume",
                    None,
                    (
                        f"{folder.uri} was trained with other settings ({shown}): a resumed run continues the same run. Resume "
                        "with its settings, or give a new --name"
                    ),
                )
            ]
        )
    checkpoint = folder.latest_checkpoint()
    print(
        f"resuming {folder.uri} from " + (f"{checkpoint}" if checkpoint else "its start (no checkpoint yet)"),
        flush=True,
    )
    return folder


def progress(what: str) -> None:
    """One line of what the run is doing now, before its first step (Ray starting, the workers loading the model):
    minutes can pass in silence otherwise."""
    print(f"[ray-efa] {what}", flush=True)


def _refusals_before_ray(
    settings: Settings, *, local: bool, name: str | None, logs_dir: Path | None, resume: bool
) -> tuple[str, RunFolder | None] | None:
    """(run name, run folder) once everything refused before Ray starts is not: the plan and inputs (check_plan), the
    train function's imports, the run name, the gate's log folder, an earlier run of that name; else None, said."""
    from ray_efa.core.output_dir import OutputDirError, check_output_dir
    from ray_efa.training.log_collect import is_collected_file

    name = name or default_run_name(settings, local=local)
    try:
        check_plan(settings, local=local)
        # the function runs on this machine's Python (its workers'): an import it lacks is found now, not in every
        # worker after Ray started (submit checks no imports: the pods install pipPackages this machine may lack)
        if problems := missing_imports(check_user_code(settings)):
            raise SettingsError(problems)
        if (problem := run_name_problem(name)) is not None:  # it names the run folder and the gate's log folder
            raise SettingsError([Problem("--name", name, problem)])
        # the gate's log folder, before Ray starts: a refused folder must not cost a training run
        check_output_dir(_logs_dir(logs_dir, name), accept=is_collected_file)
        # an earlier run of this name: refused, or resumed with its settings
        return name, claim_run_folder(settings, name, resume=resume)
    except SettingsError as error:
        print(f"ray_efa.training.driver: {error}", file=sys.stderr)
    except OutputDirError as error:
        print(f"ray_efa.training.driver: --logs-dir: {error}", file=sys.stderr)
    return None


def run(
    settings: Settings, *, local: bool, name: str | None = None, logs_dir: Path | None = None, resume: bool = False
) -> int:
    """Check, train, print the summary, gate the transport; the process exit code."""
    if (claimed := _refusals_before_ray(settings, local=local, name=name, logs_dir=logs_dir, resume=resume)) is None:
        return EXIT_BAD_SETTINGS
    name, folder = claimed
    import ray.train

    from ray_efa.training.run_summary import LOCAL, gate_fields, summary_line, summary_record, training_levers

    try:
        code_dir = check_user_code(settings).code_dir  # checked by check_plan above
        progress("starting a local Ray cluster (2 CPU workers, about 10 s)" if local else "joining the Ray cluster")
        init_ray(local=local, code_dir=str(code_dir) if code_dir is not None else None)
    except ConnectionError as error:  # `ray-efa train` without --local, away from the cluster
        print(
            f"ray_efa.training.driver: no Ray cluster to join (address auto): {error} Run it as the cluster's RayJob, "
            "or locally with --local.",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if not resume:  # a resumed run's settings.json is the same settings already
        record_in_run_folder(folder, SETTINGS_FILE, settings.to_json().encode())
    if (data := describe_data(settings)) is not None:
        print(data)
    function = settings.training.train_function
    progress(
        f"starting the workers: they load {settings.training.model_path or settings.training.preset.name + ' (built)'}"
        + (" and compile it" if settings.training.compile else "")
        + ", then train"
        if settings.training.builtin
        else f"starting the workers, which run {function}"
    )
    try:
        result = fit(settings, local=local, name=name)
    except KeyboardInterrupt:  # Ctrl-C: one line, and how to go on from the last checkpoint
        again = f"ray-efa train{' --local' if local else ''} --name {name} --resume"
        kept = f"{folder.uri} keeps its history and checkpoints" if folder is not None else "its checkpoints stay"
        print(
            f"ray-efa train: interrupted; {kept}: continue with {again} (and the same -c settings)",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_INTERRUPTED
    except SettingsError as error:  # found while building the data sets (an eval split smaller than the ranks)
        print(f"ray_efa.training.driver: {error}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    except ray.train.TrainingFailedError as error:
        if (refusal := _settings_refusal(error)) is not None:  # e.g. a resume at another global batch
            print(f"ray_efa.training.driver: {refusal}", file=sys.stderr)
            _say_report(folder)
            return EXIT_BAD_SETTINGS
        print(f"training failed: {error}", file=sys.stderr)
        _say_not_retried(error, settings)
        _diagnose_transport(settings, local=local, logs_dir=_logs_dir(logs_dir, name), run_folder=folder)
        _say_report(folder)
        return EXIT_FAILED
    summary = _print_summary(result, settings, name=name, local=local)
    # A local run names this machine, never the settings' cluster: compare must not take it for a cluster run.
    where = {
        "name": name,
        "network": settings.workload.network,
        "summary": summary,
        "instance_type": LOCAL if local else settings.nodes.gpu_instance_type,
        "nodes": 1 if local else settings.nodes.gpu_node_count,
    }
    if result.checkpoint is not None:
        print(f"last checkpoint: {result.checkpoint.path}")
    verdicts: list[Verdict] = []
    code = transport_gate(
        settings, local=local, logs_dir=_logs_dir(logs_dir, name), run_folder=folder, verdicts=verdicts
    )
    # After the gate: the summary carries what the gate proved, so that compare compares transports, not labels.
    where["summary"] = {
        **summary,
        **gate_fields(verdicts[0] if verdicts else None),
        "training": training_levers(settings),
    }
    print(summary_line(**where), flush=True)
    record_in_run_folder(folder, SUMMARY_FILE, summary_record(**where))
    _say_report(folder)
    return code


def _print_summary(result: Result, settings: Settings, *, name: str, local: bool) -> dict[str, Any]:
    """Print what the run's Result says and return its summary: the built-in function's own, or for a function of
    yours what it reported last, and where it ran."""
    from ray_efa.training.metrics import format_summary

    outcome = result.return_value
    if isinstance(outcome, dict) and "summary" in outcome:  # the built-in function's own summary
        summary = outcome["summary"]
        print(format_summary(summary, title=f"training summary: {name}"))
        return summary
    summary = reported_summary(result.metrics, settings, local=local)
    reported = ", ".join(f"{k}={v}" for k, v in sorted((result.metrics or {}).items())) or "nothing"
    print(f"{settings.training.train_function} finished: {name}; reported last: {reported}")
    if not result.metrics:
        print(
            f"ray_efa.training.driver: warning: {settings.training.train_function} returned without calling "
            "ray.train.report: no metrics, no history, nothing for ray-efa report to chart",
            file=sys.stderr,
        )
    return summary


def describe_data(settings: Settings) -> str | None:
    """The line naming what the built-in function trains and evaluates on; None for a function of yours."""
    t = settings.training
    if not t.builtin:
        return None
    if t.dataset is None:
        pool = f"a pool of {t.data_pool_size} sequences per rank" if t.data_pool_size else "fresh every step"
        return f"data: random tokens ({pool}, nothing held out)"
    held = (
        f", {t.eval_fraction:g} of its documents held out"
        if t.eval_fraction
        else f", held out: {t.eval_dataset}"
        if t.eval_dataset
        else ", nothing held out"
    )
    return f"data: {t.dataset}{held}"


def open_run_folder(settings: Settings, name: str) -> RunFolder | None:
    """The run's folder (Ray Train's storage path / run name); None, said, when its filesystem cannot be opened."""
    try:
        return RunFolder.of(settings.workload.storage_path, name)
    except Exception as error:  # noqa: BLE001 - pyarrow's errors for a bad URI or missing credentials vary
        print(
            f"ray_efa.training.driver: cannot open the run folder {settings.workload.storage_path}/{name}: {error}; "
            "no settings, summary or verdict will be kept there",
            file=sys.stderr,
        )
        return None


def archive_files(paths: list[Path]) -> bytes:
    """`paths` as a gzipped tar of their names alone (one folder's files: the gate's), in name order, timestamps
    zeroed: the same files make the same bytes."""
    import gzip
    import io
    import tarfile

    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as zipped, tarfile.open(fileobj=zipped, mode="w") as tar:
        for path in sorted(paths, key=lambda p: p.name):
            info = tar.gettarinfo(str(path), arcname=path.name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with path.open("rb") as file:
                tar.addfile(info, file)
    return buffer.getvalue()


def record_in_run_folder(folder: RunFolder | None, file: str, data: bytes | dict[str, Any]) -> None:
    """Write one of the files `ray-efa report` reads into the run folder; a storage error is said, never fatal."""
    if folder is None:
        return
    try:
        if isinstance(data, bytes):
            folder.write_bytes(file, data)
        else:
            folder.write_json(file, data)
    except Exception as error:  # noqa: BLE001 - the run's outcome matters more than its record
        print(f"ray_efa.training.driver: cannot write {file} into {folder.uri}: {error}", file=sys.stderr)


def _settings_refusal(error: Exception) -> SettingsError | None:
    """The settings' refusal a worker raised (the checkpoint's run cannot resume with these settings:
    training.checkpoint.remap_train_state), when that is why the run failed; else None."""
    from ray.train import WorkerGroupError

    from ray_efa.training.failure_policy import code_errors

    raised = code_errors(error) if isinstance(error, WorkerGroupError) else {}
    return next((e for _, e in sorted(raised.items()) if isinstance(e, SettingsError)), None)


def _say_not_retried(error: Exception, settings: Settings) -> None:
    """After an exception of the code: why maxFailures did not retry it (training.failure_policy)."""
    from ray.train import WorkerGroupError

    from ray_efa.training.failure_policy import code_errors

    raised = code_errors(error) if isinstance(error, WorkerGroupError) else {}
    if raised:
        rank, first = min(raised.items())
        print(
            f"not retried: {type(first).__name__} on rank {rank} is an exception of "
            f"{settings.training.train_function}, which would fail the same way again (maxFailures "
            f"{settings.training.max_failures} retries lost workers and nodes only)",
            file=sys.stderr,
        )


def _say_report(folder: RunFolder | None) -> None:
    if folder is not None:
        print(f"run folder: {folder.uri} (charts: ray-efa report {folder.uri})")


def _logs_dir(logs_dir: Path | None, name: str) -> Path:
    return logs_dir or Path(tempfile.gettempdir()) / "ray-efa-nccl-logs" / name


def _diagnose_transport(settings: Settings, *, local: bool, logs_dir: Path, run_folder: RunFolder | None) -> None:
    """After a failed run, the gate's table still says which transport NCCL used (a slow fallback fails the preflight)."""
    try:
        transport_gate(settings, local=local, logs_dir=logs_dir, run_folder=run_folder)
    except Exception as error:  # noqa: BLE001 - the training failure is the error to report, not this one
        print(f"transport gate: could not read the NCCL logs after the failure: {error}", file=sys.stderr)


def _settings_from_args(args: argparse.Namespace) -> Settings:
    if args.settings is not None:
        return Settings.from_json(Path(args.settings).read_text())
    if args.local:
        return local_settings()
    raise SettingsError([Problem("--settings", None, "is required without --local (the RayJob passes settings.json)")])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ray_efa.training.driver", description=(__doc__ or "").partition("\n")[0]
    )
    parser.add_argument(
        "--settings", help="settings JSON (Settings.to_json()); with --local, default: the local preset"
    )
    parser.add_argument(
        "--local", action="store_true", help=f"{LOCAL_WORKERS} CPU workers on an in-process Ray cluster"
    )
    parser.add_argument("--name", help="Ray Train run name; an existing run's name is refused unless --resume")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run --name from its latest checkpoint, with the settings it was run with",
    )
    parser.add_argument("--logs-dir", type=Path, help="where the NCCL logs are collected for the transport gate")
    args = parser.parse_args(argv)
    try:
        settings = _settings_from_args(args)
    except (ValueError, OSError) as error:  # SettingsError and bad JSON are ValueErrors
        print(f"ray_efa.training.driver: {error}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    return run(settings, local=args.local, name=args.name, logs_dir=args.logs_dir, resume=args.resume)


if __name__ == "__main__":
    sys.exit(main())
