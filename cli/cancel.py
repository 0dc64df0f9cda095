"""`ray-efa cancel JOB`: delete a RayJob, after asking (`--yes` does not ask); its Ray cluster (which the RayJob owns),
that cluster's pods (freeing the GPU nodes) and the ConfigMaps and NetworkPolicy the job owns go with it.

Exit 0 deleted; 1 not deleted: you answered no, or the API server refused (a researcher of the stack deletes only the
RayJobs they submitted; other credentials may read RayJobs but not delete them); 2 no such RayJob (naming it), or no
terminal to ask on without `--yes`.
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
    kube_api_client,
    print_json,
    resolve_or_exit,
)

EXIT_NOT_CANCELLED = 1


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name, help="delete a RayJob and so its Ray cluster (asks first; --yes does not)", description=__doc__
    )
    p.add_argument("job", metavar="JOB", help="the RayJob's name (`ray-efa jobs` lists them)")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask")
    add_kube_options(p)
    add_context_option(p)  # the namespace comes from the settings
    add_json_option(p)
    p.set_defaults(run=run)


def _confirmed(question: str) -> bool:
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def run(args: argparse.Namespace) -> int:
    namespace = resolve_or_exit(args).settings.workload.namespace
    from ray_efa.ops.jobs import JobDeleteRefused, cancel_job
    from ray_efa.ops.submit import JobNotFound, SubmitError, job_state

    try:
        api_client = kube_api_client(args)
    except KubeconfigError as error:
        return fail(args, "cancel", str(error))
    try:
        state = job_state(api_client, namespace, args.job)
    except JobNotFound as error:
        return fail(args, "cancel", f"{error}; nothing deleted")
    except SubmitError as error:
        return fail(args, "cancel", str(error), code=EXIT_NOT_CANCELLED)
    if not args.yes:
        if not sys.stdin.isatty():
            return fail(
                args,
                "cancel",
                f"RayJob {namespace}/{args.job} is {state.describe()}: pass --yes to delete it "
                "without a terminal to ask on; nothing deleted",
            )
        if not _confirmed(f"delete RayJob {namespace}/{args.job} ({state.describe()}) and its Ray cluster?"):
            print("ray-efa cancel: nothing deleted", file=sys.stderr)
            return EXIT_NOT_CANCELLED
    try:
        was = cancel_job(api_client, namespace, args.job)
    except JobNotFound as error:
        return fail(args, "cancel", str(error))
    except JobDeleteRefused as error:
        return fail(
            args,
            "cancel",
            f"{error}. The stack's researchers (infra/researcher_access.py) delete only the RayJobs they submitted "
            f"(its admission policy), other credentials may have no delete on rayjobs in {namespace} at all; "
            f"ask a cluster admin (adminPrincipalArns) to run `ray-efa cancel {args.job}` or "
            f"`kubectl -n {namespace} delete rayjob {args.job}`",
            code=EXIT_NOT_CANCELLED,
        )
    except SubmitError as error:
        return fail(args, "cancel", str(error), code=EXIT_NOT_CANCELLED)
    if args.json:
        print_json({"ray_job": args.job, "namespace": namespace, "deleted": True, "was": was})
    else:
        print(
            f"deleted RayJob {namespace}/{args.job} (was {was}); its Ray cluster and pods go with it "
            "(the RayJob owns them)"
        )
    return 0
