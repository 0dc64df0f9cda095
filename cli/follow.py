"""`ray-efa follow NAME`: follow a RayJob that is already there to its end, as `ray-efa submit` does after creating one.

For a run whose `submit` was interrupted (Ctrl-C, a closed laptop, a dropped connection), or one applied with
kubectl from `ray-efa manifests`: each state of the RayJob, the submitter's whole log (from its start, then as it is
written), and at the end the gate's verdict and the job's exit code, which is this command's: 0 trained and the
transport proven, 1 failed, 2 the driver refused the settings, 3 the gate could not prove the transport. A RayJob
that is not there is exit 2, naming it; one whose Ray pods have a failing init container (the code fetch, the pip
install) is exit 1 at once, naming the pod, the container, its exit code and last log lines (it would stay
Initializing until a deadline). It reads and never changes anything.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ray_efa.cli._common import (
    KubeconfigError,
    add_context_option,
    add_json_option,
    add_kube_options,
    fail,
    follow_command,
    kube_api_client,
    resolve_or_exit,
)
from ray_efa.cli.submit import EXIT_FAILED, FOLLOW_MARGIN_S


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="follow a RayJob already on the cluster to its end: states, log, the gate's verdict",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument("job", metavar="NAME", help="the RayJob's name (what `ray-efa submit` printed, or a jobName)")
    add_kube_options(p)
    add_context_option(p)  # the namespace (and the default timeout) come from the settings
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help=f"stop following after SECONDS (default: jobActiveDeadlineSeconds + {FOLLOW_MARGIN_S})",
    )
    p.add_argument("--poll", type=float, default=5.0, metavar="SECONDS", help=argparse.SUPPRESS)
    add_json_option(p)  # the log and progress then go to stderr, and stdout gets one JSON object at the end
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = resolve_or_exit(args).settings
    from ray_efa.cli.submit import follow_job, follow_timeout, print_outcome
    from ray_efa.ops.submit import JobNotFound, SubmitError

    namespace = settings.workload.namespace
    try:
        api_client = kube_api_client(args)
    except KubeconfigError as error:
        return fail(args, "follow", str(error))
    timeout = follow_timeout(args, settings)
    try:
        final, log = follow_job(args, api_client, namespace, args.job, timeout)
    except JobNotFound as error:
        return fail(args, "follow", str(error))
    except SubmitError as error:
        return fail(args, "follow", str(error), code=EXIT_FAILED)
    except KeyboardInterrupt:
        print(
            f"ray-efa follow: stopped following; the job keeps running: {follow_command(args.job, namespace)}",
            file=sys.stderr,
        )
        return 130
    return print_outcome(args, namespace, args.job, final, log, extra={})
