"""The training driver: checks the plan, runs train_func on a TorchTrainer, then gates the NCCL transport.

The RayJob runs exactly `python -m ray_efa.training.driver --settings /path/settings.json` from a working directory holding
core/ and training/; `--local` runs 2 CPU workers (gloo) on an in-process Ray cluster instead (with the local preset
when no settings file is given). Exit codes: 0 trained (and the transport proven, on the
cluster), 1 training failed or the gate failed, 2 bad settings or a plan that cannot fit, 3 the gate could not prove
the transport (cluster only; the local run uses no NCCL, so it cannot prove anything there and says so).

Ray Train v2 API (the default in ray 2.58): ScalingConfig, RunConfig(storage_path, FailureConfig(max_failures)).
A run with the same name and storagePath as an earlier one resumes from its latest checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from ray_efa.core import catalog, strategy
from ray_efa.core.settings import Problem, Settings, SettingsError
from ray_efa.training.local import LOCAL_PRESET, LOCAL_WORKERS
from ray_efa.training.network import JOB_POLL_INTERVAL_S, POLL_INTERVAL_ENV
from ray_efa.training.run_folder import SETTINGS_FILE, SUMMARY_FILE, VERDICT_FILE, RunFolder

__all__ = [
    "check_plan", "init_ray", "scaling_config", "run_config", "default_run_name", "fit", "transport_gate", "gate_exit_code",
    "run", "open_run_folder", "record_in_run_folder", "main", "EXIT_OK", "EXIT_FAILED", "EXIT_BAD_SETTINGS", "EXIT_UNPROVEN",
]

EXIT_OK, EXIT_FAILED, EXIT_BAD_SETTINGS, EXIT_UNPROVEN = 0, 1, 2, 3
# CPUs per GPU node left to Ray itself (the log collector, checkpoint uploads), not given to the training workers.
_RESERVED_CPUS_PER_NODE = 1


def check_plan(settings: Settings, *, local: bool) -> None:
    """Refuse, before Ray starts, a cluster run whose memory plan cannot fit or whose checkpoints have nowhere shared to go."""
    if local:
        return  # CPU workers: no GPU memory to plan, and one machine shares ~/ray_results
    problems: list[Problem] = []
    if settings.nodes.gpu_node_count > 1 and settings.workload.storage_path is None:
        problems.append(Problem(
            "storagePath", None,
            f"must be s3://... or a shared filesystem when gpuNodeCount is {settings.nodes.gpu_node_count}: every node's "
            "workers write checkpoint shards into it, and a restart may land on other nodes",
        ))
    try:
        strategy.check_fits(settings)
    except SettingsError as error:
        problems.extend(error.problems)
    if problems:
        raise SettingsError(problems)


def scaling_config(settings: Settings, *, local: bool, local_workers: int = LOCAL_WORKERS):
    """Local: CPU workers. Cluster: one worker per GPU, with that GPU's share of the worker pod's CPUs."""
    from ray.train import ScalingConfig

    if local:
        return ScalingConfig(num_workers=local_workers, use_gpu=False, resources_per_worker={"CPU": 1})
    instance = settings.nodes.gpu_instance
    pod = catalog.worker_pod_resources(instance)
    cpus = max(1, (pod.cpu - _RESERVED_CPUS_PER_NODE) // instance.gpus)
    return ScalingConfig(num_workers=settings.world_size, use_gpu=True, resources_per_worker={"CPU": cpus, "GPU": 1})


def run_config(settings: Settings, name: str):
    from ray.train import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig

    return RunConfig(
        name=name,
        storage_path=settings.workload.storage_path,  # None: Ray's default, ~/ray_results
        failure_config=FailureConfig(max_failures=settings.training.max_failures),
        checkpoint_config=CheckpointConfig(num_to_keep=None),
        logging_config=LoggingConfig(log_level="WARNING"),  # our progress lines, not one per ray.train.report
    )


def default_run_name(settings: Settings, *, local: bool) -> str:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    prefix = "local" if local else settings.cluster.cluster_name
    return f"{prefix}-{settings.training.model}-{stamp}"


def init_ray(*, local: bool) -> None:
    """Start the in-process local cluster, or connect to the running one; nothing if Ray is already up."""
    import ray

    if ray.is_initialized():
        return
    if local:
        # The workers inherit this process's environment: the repo root on their path lets them import core/ and
        # training/ without an install (a runtime_env would do the same, but costs fresh worker processes).
        root = str(Path(__file__).resolve().parent.parent)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        os.environ.setdefault(POLL_INTERVAL_ENV, "0.5")  # notice the end of training sooner
        os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")  # no spot nodes to watch on a laptop
        ray.init(
            num_cpus=max(os.cpu_count() or 1, LOCAL_WORKERS),  # room for the workers even on a 1-core machine
            include_dashboard=False,
            # Ray's own chatter off; without a dashboard the placement-group cleaner warns on every poll.
            logging_config=ray.LoggingConfig(log_level="ERROR"),
        )
    else:
        # The controller polls the workers' one-report queues this often (training.reporting); the RayJob's
        # runtime_env sets the same value, this covers `ray-efa train` run by hand on the head.
        os.environ.setdefault(POLL_INTERVAL_ENV, str(JOB_POLL_INTERVAL_S))
        ray.init(address="auto")


def fit(settings: Settings, *, local: bool, name: str | None = None, test_config: dict[str, Any] | None = None,
        local_workers: int = LOCAL_WORKERS):
    """Run train_func on a TorchTrainer; return the Ray Train Result (raises ray.train.TrainingFailedError)."""
    from ray.train.torch import TorchConfig, TorchTrainer

    from ray_efa.training.train import train_func

    init_ray(local=local)
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"settings": settings.to_context(), **(test_config or {})},
        torch_config=TorchConfig(backend="gloo" if local else "nccl"),
        scaling_config=scaling_config(settings, local=local, local_workers=local_workers),
        run_config=run_config(settings, name or default_run_name(settings, local=local)),
    )
    return trainer.fit()


def gate_exit_code(verdict_exit_code: int, *, local: bool) -> int:
    """The driver's exit code for a gate verdict: 'proves nothing' fails a cluster run, not a local one."""
    if local and verdict_exit_code == EXIT_UNPROVEN:
        return EXIT_OK
    return verdict_exit_code


def transport_gate(settings: Settings, *, local: bool, logs_dir: Path, run_folder: RunFolder | None = None) -> int:
    """Collect the workers' NCCL logs, classify them and judge them against the expected transport (the verdict also
    goes to the run folder's verdict.json)."""
    from ray_efa.core.output_dir import publish
    from ray_efa.training import efa_counters
    from ray_efa.training.log_collect import collect_nccl_logs, is_collected_file
    from ray_efa.training.network import expected_transport
    from ray_efa.training.transport import classify_paths, gate

    paths = publish(logs_dir, collect_nccl_logs, command="ray-efa train (NCCL logs and EFA counters of the transport gate)",
                    accept=is_collected_file)
    logs = [p for p in paths if not efa_counters.is_counter_file(p)]
    # The driver knows how many hosts the job ran on: a network every process chose then contradicts, even unlogged.
    hosts = 1 if local else settings.nodes.gpu_node_count
    unusable: efa_counters.CounterFileError | None = None
    try:  # the snapshots each node's local rank 0 took before and after training (none on the local gloo run)
        snapshots = efa_counters.load_snapshots([p for p in paths if efa_counters.is_counter_file(p)])
    except efa_counters.CounterFileError as error:
        unusable, snapshots = error, []
    verdict = gate(classify_paths(logs), expected_transport(settings.workload.network), hosts=hosts,
                   counters=None if local else snapshots)
    if unusable is not None and verdict.exit_code == EXIT_OK:  # a counter file we cannot read never lets a job pass
        verdict = dataclasses.replace(verdict, exit_code=EXIT_UNPROVEN, summary=(
            f"NO PROOF: an EFA counter snapshot cannot be used ({unusable}); the rest: {verdict.summary}"))
    print(verdict.render_table())
    print(f"transport gate: {verdict.summary} (logs: {logs_dir})")
    code = gate_exit_code(verdict.exit_code, local=local)
    record_in_run_folder(run_folder, VERDICT_FILE, {**verdict.to_json(), "table": verdict.render_table(),
                                                    "driver_exit_code": code})
    if local and verdict.exit_code == EXIT_UNPROVEN:
        print("transport gate: the local run talks gloo over loopback, not NCCL, so it proves nothing about EFA "
              "(exit 3); this passes locally and fails a cluster run")
    return code


def run(settings: Settings, *, local: bool, name: str | None = None, logs_dir: Path | None = None) -> int:
    """Check, train, print the summary, gate the transport; the process exit code."""
    try:
        check_plan(settings, local=local)
    except SettingsError as error:
        print(f"ray_efa.training.driver: {error}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    from ray_efa.core.output_dir import OutputDirError, check_output_dir
    from ray_efa.training.log_collect import is_collected_file

    name = name or default_run_name(settings, local=local)
    try:  # the gate's log folder, before Ray starts: a refused folder must not cost a training run
        check_output_dir(_logs_dir(logs_dir, name), accept=is_collected_file)
    except OutputDirError as error:
        print(f"ray_efa.training.driver: --logs-dir: {error}", file=sys.stderr)
        return EXIT_BAD_SETTINGS

    import ray.train

    from ray_efa.training.metrics import format_summary
    from ray_efa.training.run_summary import LOCAL, summary_line, summary_record

    try:
        init_ray(local=local)
    except ConnectionError as error:  # `ray-efa train` without --local, away from the cluster
        print(f"ray_efa.training.driver: no Ray cluster to join (address auto): {error} Run it as the cluster's RayJob, "
              "or locally with --local.", file=sys.stderr)
        return EXIT_FAILED
    folder = open_run_folder(settings, name)
    record_in_run_folder(folder, SETTINGS_FILE, settings.to_json().encode())
    try:
        result = fit(settings, local=local, name=name)
    except ray.train.TrainingFailedError as error:
        print(f"training failed: {error}", file=sys.stderr)
        _diagnose_transport(settings, local=local, logs_dir=_logs_dir(logs_dir, name), run_folder=folder)
        _say_report(folder)
        return EXIT_FAILED
    outcome = result.return_value or {}
    if "summary" in outcome:
        print(format_summary(outcome["summary"], title=f"training summary: {name}"))
        # A local run names this machine, never the settings' cluster: compare must not take it for a cluster run.
        where = {"name": name, "network": settings.workload.network, "summary": outcome["summary"],
                 "instance_type": LOCAL if local else settings.nodes.gpu_instance_type,
                 "nodes": 1 if local else settings.nodes.gpu_node_count}
        print(summary_line(**where), flush=True)
        record_in_run_folder(folder, SUMMARY_FILE, summary_record(**where))
    if result.checkpoint is not None:
        print(f"last checkpoint: {result.checkpoint.path}")
    code = transport_gate(settings, local=local, logs_dir=_logs_dir(logs_dir, name), run_folder=folder)
    _say_report(folder)
    return code


def open_run_folder(settings: Settings, name: str) -> RunFolder | None:
    """The run's folder (Ray Train's storage path / run name); None, said, when its filesystem cannot be opened."""
    try:
        return RunFolder.of(settings.workload.storage_path, name)
    except Exception as error:  # noqa: BLE001 - pyarrow's errors for a bad URI or missing credentials vary
        print(f"ray_efa.training.driver: cannot open the run folder {settings.workload.storage_path}/{name}: {error}; "
              "no settings, summary or verdict will be kept there", file=sys.stderr)
        return None


def record_in_run_folder(folder: RunFolder | None, file: str, data: bytes | dict) -> None:
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
        return Settings.from_context(LOCAL_PRESET)
    raise SettingsError([Problem("--settings", None, "is required without --local (the RayJob passes settings.json)")])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ray_efa.training.driver", description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--settings", help="settings JSON (Settings.to_json()); with --local, default: the local preset")
    parser.add_argument("--local", action="store_true", help=f"{LOCAL_WORKERS} CPU workers on an in-process Ray cluster")
    parser.add_argument("--name", help="Ray Train run name; reusing one resumes its latest checkpoint")
    parser.add_argument("--logs-dir", type=Path, help="where the NCCL logs are collected for the transport gate")
    args = parser.parse_args(argv)
    try:
        settings = _settings_from_args(args)
    except (ValueError, OSError) as error:  # SettingsError and bad JSON are ValueErrors
        print(f"ray_efa.training.driver: {error}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    return run(settings, local=args.local, name=args.name, logs_dir=args.logs_dir)


if __name__ == "__main__":
    sys.exit(main())
