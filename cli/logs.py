"""`ray-efa logs JOB`: a RayJob's log again, running or finished: its driver's (the submitter pod's: progress,
summary, the transport table), `--worker N` that of its worker pod N (0-based, by pod name), `--gate` only the
transport gate's verdict; `--follow` streams it until the pod ends.

Exit 0; 2 when there is no such RayJob or worker (naming it); with `--gate`, 3 when the log has no verdict (yet).
Read through the Kubernetes API (pods and pods/log, which the stack's researcher Role allows); it changes nothing.
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

EXIT_NO_VERDICT = 3
"""`--gate` on a log without the gate's verdict: what check-transport's 3 means, the logs prove nothing (yet)."""


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="print a RayJob's driver log (or a worker's, or the gate's verdict); --follow streams it",
        description=__doc__,
    )
    p.add_argument("job", metavar="JOB", help="the RayJob's name (`ray-efa jobs` lists them)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--worker", type=int, metavar="N", help="the log of worker pod N (0-based, by pod name)")
    which.add_argument("--gate", action="store_true", help="only the transport gate's verdict lines of the driver log")
    p.add_argument("--follow", "-f", action="store_true", help="stream the log until its pod ends")
    add_kube_options(p)
    add_context_option(p)  # the namespace comes from the settings
    add_json_option(p)  # one object: the log and the gate's lines (not with --follow)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    namespace = resolve_or_exit(args).settings.workload.namespace
    from ray_efa.ops.jobs import job_log
    from ray_efa.ops.submit import JobNotFound, SubmitError, gate_lines

    if args.follow and (args.gate or args.json):
        return fail(args, "logs", "--gate and --json print the log as it is: leave out --follow")
    if args.worker is not None and args.worker < 0:
        return fail(args, "logs", f"--worker: must be 0 or more, got {args.worker}")
    try:
        api_client = kube_api_client(args)
    except KubeconfigError as error:
        return fail(args, "logs", str(error))

    def printed(line: str) -> None:
        print(line, flush=True)

    try:
        log = job_log(
            api_client,
            namespace,
            args.job,
            worker=args.worker,
            follow=args.follow,
            on_line=printed if args.follow else None,
        )
    except JobNotFound as error:
        return fail(args, "logs", str(error))
    except SubmitError as error:
        return fail(args, "logs", str(error))
    if args.json:
        print_json(
            {
                "ray_job": args.job,
                "namespace": namespace,
                "worker": args.worker,
                "log": log,
                "transport_gate": gate_lines(log),
            }
        )
        return EXIT_NO_VERDICT if args.gate and not gate_lines(log) else 0
    if args.gate:
        lines = gate_lines(log)
        for line in lines:
            print(line)
        if not lines:
            print(
                f"ray-efa logs: no transport gate verdict in the driver log of RayJob {namespace}/{args.job} "
                "(still running, or the driver did not get that far)",
                file=sys.stderr,
            )
            return EXIT_NO_VERDICT
        return 0
    if not args.follow:
        if log:
            print(log, end="" if log.endswith("\n") else "\n")
        else:
            print(
                f"ray-efa logs: RayJob {namespace}/{args.job} has no {'worker' if args.worker is not None else 'driver'}"
                " log yet (its pod has not started)",
                file=sys.stderr,
            )
    return 0
