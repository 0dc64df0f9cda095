"""`ray-efa submit`: run the train function with its code as a new RayJob on the cluster of the kube context.

The cluster side of the settings (ops.submit.DEPLOYED_KEYS: instance type and count, node labels, namespace,
reservation and placement, storagePath, region, ...) comes from the cluster itself: settings.json of the ConfigMap
the deployment's training job wrote (`<jobName>-settings` in namespace, else the one deployment's found in the
cluster, or the one --deployed NAMESPACE/JOB names). A local value left at its default, or from a context file (the
checkout's cdk.json describes its own deployment), takes the deployed one; a -c value that contradicts it is exit 2
naming the setting and both values, and so is a cluster with no deployed settings (saying how to name them). The rest (the train function, its code, trainConfig, network, the training
knobs) is the local settings'.

The job gets a unique name (jobName plus 5 random characters, or --name) and exactly the objects `ray-efa manifests`
writes for it (NetworkPolicy, ConfigMaps of the code, the settings and codeDir, the RayJob), created with the
kubeconfig's credentials. The command then follows it: each state of the RayJob, the submitter's log as it is
written (the driver's progress, summary and transport table), and at the end the gate's verdict and the job's exit
code, which is this command's: 0 trained and the transport proven, 1 failed, 2 the driver refused the settings,
3 the gate could not prove the transport. codeDir too large or binary for a ConfigMap ships as a zip under an s3://
storagePath (k8s.code_archive): uploaded with this machine's AWS credentials before the job is created, once per
content. A Ray cluster already in the namespace with workers holds the GPU nodes: it is named in a warning, since
the new job waits for it with its deadline counting. Before anything is created or uploaded, bad settings, a plan
that cannot fit, a trainFunction missing from codeDir, or code that cannot ship (too large for a ConfigMap without
an s3:// storagePath) are exit 2. Interrupting (Ctrl-C) stops the following, not the job: `ray-efa follow NAME`
picks it up again.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ray_efa.cli._common import (
    KubeconfigError,
    add_context_option,
    add_json_option,
    add_kube_options,
    check_or_exit,
    fail,
    follow_command,
    kube_api_client,
    kubectl_code_route,
    print_json,
    resolve_or_exit,
)

if TYPE_CHECKING:
    from ray_efa.core.settings import Settings
    from ray_efa.ops.submit import JobState

EXIT_FAILED = 1
FOLLOW_MARGIN_S = 900
"""How long past jobActiveDeadlineSeconds the command waits by default (image pulls, KubeRay's own status lag)."""


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="run the train function as a new RayJob on the deployed cluster and follow it",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument(
        "--name",
        help="the RayJob's name (a jobName: DNS-1035, at most 43 characters); default: jobName "
        "plus 5 random characters",
    )
    p.add_argument(
        "--deployed",
        metavar="NAMESPACE/JOB",
        help="the deployment's training job whose settings ConfigMap (JOB-settings) holds the cluster side "
        "of the settings (default: jobName in namespace, else the one deployment's in the cluster)",
    )
    add_kube_options(p)
    add_context_option(p)
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help=f"stop following after SECONDS (default: jobActiveDeadlineSeconds + {FOLLOW_MARGIN_S})",
    )
    p.add_argument("--poll", type=float, default=5.0, metavar="SECONDS", help=argparse.SUPPRESS)
    add_json_option(p)  # the log and progress then go to stderr, and stdout gets one JSON object at the end
    p.set_defaults(run=run)


def _s3_client(settings: Settings) -> Any:
    import boto3

    return boto3.client("s3", region_name=settings.cluster.region)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes:d}:{secs:02d}"


def run(args: argparse.Namespace) -> int:
    on_cluster = _settings_on_cluster(args)
    if isinstance(on_cluster, int):
        return on_cluster
    settings, api_client = on_cluster
    return _submit_and_follow(args, settings, api_client)


def _settings_on_cluster(args: argparse.Namespace) -> tuple[Settings, Any] | int:
    """The parse step: the local settings on the deployed cluster's (its settings ConfigMap), checked as the cluster
    would, and the API client; else the exit code, after saying why."""
    resolved = resolve_or_exit(args, require_code=True)  # exit 2 before any request: bad settings, trainFunction
    settings = resolved.settings
    from ray_efa.core.settings import SettingsError

    if args.name is not None:
        try:
            settings.replace(jobName=args.name)  # checked now; submission names the job
        except SettingsError as error:
            return fail(args, "submit", f"--name: {error.problems[0].message}, got {args.name!r}")
    if args.deployed is not None and args.deployed.count("/") != 1:
        return fail(
            args,
            "submit",
            f"--deployed: must be NAMESPACE/JOB (the deployment's training job, e.g. "
            f"research/train-efa), got {args.deployed!r}",
        )
    try:
        api_client = kube_api_client(args)
    except KubeconfigError as error:
        return fail(args, "submit", str(error))

    from ray_efa.ops.submit import NoDeployedSettings, SubmitError, deployed_settings, on_deployed_cluster

    namespace, job = (
        args.deployed.split("/")
        if args.deployed is not None
        else (settings.workload.namespace, settings.workload.job_name)
    )
    try:
        deployed = deployed_settings(api_client, namespace, job, exact=args.deployed is not None)
    except NoDeployedSettings as error:
        return fail(args, "submit", str(error))
    except SubmitError as error:
        return fail(args, "submit", str(error), code=EXIT_FAILED)
    try:
        settings, problems = on_deployed_cluster(settings, deployed, sources=resolved.sources)
    except SettingsError as error:  # the deployed values with the local ones break a rule across settings
        return fail(
            args,
            "submit",
            f"the local settings on the cluster of {deployed.source} are not valid together",
            problems=[{"key": p.key, "value": p.value, "message": p.message} for p in error.problems],
        )
    if problems:
        return fail(
            args,
            "submit",
            f"the local settings contradict the cluster's, as deployed ({deployed.source})",
            problems=[{"key": p.key, "value": p.value, "message": p.message} for p in problems],
        )
    _say(
        f"cluster: {settings.nodes.gpu_node_count} x {settings.nodes.gpu_instance_type} in namespace "
        f"{settings.workload.namespace}, {settings.cluster.region} (from {deployed.source})"
    )
    check_or_exit(args, settings, resolved.app_dir, require_fit=True)  # exit 2: the plan on the deployed nodes
    try:  # what the driver would refuse on the cluster, minutes after the pods started: refused here
        from ray_efa.training.driver import check_plan

        check_plan(settings, local=False)
    except SettingsError as error:
        print(f"ray-efa: {error}", file=sys.stderr)
        return 2
    return settings, api_client


def _submit_and_follow(args: argparse.Namespace, settings: Settings, api_client: Any) -> int:
    """The act step: upload the code where it ships as a zip, create the job's objects, follow it to the end."""
    from ray_efa.ops.submit import SubmitError

    archive, problem = kubectl_code_route(settings)
    if problem is not None:
        return fail(args, "submit", problem)
    code_uri = archive.uri if archive is not None else None

    from ray_efa.k8s.code_bundle import ManifestError
    from ray_efa.ops.submit import (
        cleanup_command,
        create_objects,
        gpu_holders,
        mark_submitted,
        own_by_job,
        submission,
        submitter_identity,
        submitter_name,
    )

    try:
        settings, objects = submission(settings, job_name=args.name, code_archive_uri=code_uri)
    except ManifestError as error:
        return fail(args, "submit", str(error))
    name, namespace = objects[-1]["metadata"]["name"], settings.workload.namespace

    if archive is not None:
        from botocore.exceptions import BotoCoreError

        from ray_efa.ops.code_upload import CodeUploadError, upload_code_archive

        try:
            uploaded = upload_code_archive(_s3_client(settings), archive)
        except CodeUploadError as error:
            return fail(args, "submit", str(error), code=EXIT_FAILED)
        except BotoCoreError as error:  # the client itself: a profile that does not exist, a broken config
            return fail(args, "submit", f"cannot upload the code to {archive.uri}: {error}", code=EXIT_FAILED)
        _say(f"codeDir ({archive.describe()}) {'uploaded to' if uploaded else 'is already at'} {archive.uri}")

    timeout = follow_timeout(args, settings)
    function = settings.training.train_function
    try:
        holders, unlisted = gpu_holders(api_client, namespace)
        deadline = settings.workload.job_active_deadline_seconds
        for holder in holders:
            _say(
                f"warning: {holder} holds the GPU nodes: the workers of {name} wait until it is gone, and its "
                f"jobActiveDeadlineSeconds ({deadline} s) counts from now"
            )
        if unlisted:
            _say(
                f"note: cannot list the Ray clusters of {namespace} to see whether one holds the GPU nodes: {unlisted}"
            )
        objects = mark_submitted(objects, submitter_name(api_client))
        job_uid = create_objects(api_client, objects, submitted_by=submitter_identity())
        unowned = (
            own_by_job(api_client, objects, job_uid)
            if job_uid
            else ["every object (the RayJob came back without a uid)"]
        )
        for problem in unowned:
            _say(f"warning: could not make RayJob {name} the owner of {problem}; the clean up line names it")
        owned = not unowned
        _say(
            f"submitted RayJob {namespace}/{name}: {function} on {settings.nodes.gpu_node_count} x "
            f"{settings.nodes.gpu_instance_type} over {settings.workload.network} ({len(objects)} objects)"
        )
        final, log = follow_job(args, api_client, namespace, name, timeout)
    except SubmitError as error:
        return fail(args, "submit", str(error), code=EXIT_FAILED)
    except KeyboardInterrupt:
        _say(f"ray-efa submit: stopped following; the job keeps running: {follow_command(name, namespace)}")
        return 130
    cleanup = cleanup_command(objects, owned=owned)
    code = print_outcome(args, namespace, name, final, log, extra={"code_archive": code_uri, "cleanup": cleanup})
    if not args.json:
        _say(
            f"clean up: {cleanup}"
            + (" (its ConfigMaps and NetworkPolicy go with it: the RayJob owns them)" if owned else "")
            + (
                f"; the code zip {code_uri} stays: it is named by its content, for every job of the same code"
                if code_uri
                else ""
            )
        )
    return code


def follow_timeout(args: argparse.Namespace, settings: Settings) -> float:
    """--timeout, else the job's own deadline plus FOLLOW_MARGIN_S."""
    return args.timeout if args.timeout is not None else settings.workload.job_active_deadline_seconds + FOLLOW_MARGIN_S


def follow_job(
    args: argparse.Namespace, api_client: Any, namespace: str, name: str, timeout: float
) -> tuple[JobState, str]:
    """Follow RayJob `name` to its end as `submit` and `follow` show it: each state on stderr, the submitter's log on
    stdout (stderr with --json). SubmitError as ops.submit.follow raises it."""
    from ray_efa.ops.submit import follow

    return follow(
        api_client,
        namespace,
        name,
        timeout_s=timeout,
        poll_s=args.poll,
        on_state=lambda state, elapsed: _say(f"[{_elapsed(elapsed)}] RayJob {name}: {state.describe()}"),
        on_line=lambda line: print(line, file=sys.stderr if args.json else sys.stdout, flush=True),
    )


def print_outcome(
    args: argparse.Namespace, namespace: str, name: str, final: JobState, log: str, *, extra: dict[str, Any]
) -> int:
    """The end of a followed job: its state, the gate's verdict, Ray's message when it failed and the exit code; with
    --json one object with them, the run summary and `extra`. Returns the job's exit code."""
    from ray_efa.ops.submit import gate_lines, job_exit_code

    code = job_exit_code(final)
    if args.json:
        from ray_efa.training.run_summary import find_summaries

        summaries = find_summaries(log.splitlines())
        print_json(
            {
                "ray_job": name,
                "namespace": namespace,
                "deployment_status": final.deployment,
                "job_status": final.job,
                "exit_code": code,
                "transport_gate": gate_lines(log),
                "run_summary": summaries[-1] if summaries else None,
                **extra,
            }
        )
        return code
    print(f"RayJob {namespace}/{name}: {final.describe()}")
    for line in gate_lines(log) or ["transport gate: no verdict in the submitter's log (did the driver start?)"]:
        print(line)
    if final.status.get("message") and code != 0:
        print(f"message: {' '.join(str(final.status['message']).split())[:500]}")
    print(f"exit code {code}")
    return code
