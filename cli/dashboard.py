"""`ray-efa dashboard [JOB]`: the Ray dashboard of a job's Ray cluster (or of the one in the namespace) on this
machine: a port-forward through the Kubernetes API server to the head's port 8265, every request carrying the Ray
token KubeRay made for the cluster. Prints the local URL (`--open` opens it in the browser) and forwards until
Ctrl-C, which ends it with exit 130 and one line.

Exit 2 when there is no such RayJob, or no or several Ray clusters without JOB; 1 when the API server refuses the
token's Secret or the port-forward (the stack's researcher Role grants neither: a cluster admin's credentials do).
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


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name, help="open the Ray dashboard of a job (port-forward with the Ray token) until Ctrl-C", description=__doc__
    )
    p.add_argument(
        "job",
        metavar="JOB",
        nargs="?",
        help="the RayJob whose Ray cluster to show (default: the one Ray cluster in the namespace)",
    )
    p.add_argument(
        "--port", type=int, default=8265, metavar="PORT", help="the local port (default 8265; 0: any free one)"
    )
    p.add_argument("--open", action="store_true", help="open the URL in the browser")
    add_kube_options(p)
    add_context_option(p)  # the namespace comes from the settings
    add_json_option(p)  # the URL as one JSON object on stdout, then it forwards as without
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    namespace = resolve_or_exit(args).settings.workload.namespace
    from ray_efa.ops.dashboard import DashboardForward, DashboardRefused, dashboard_target, ray_token
    from ray_efa.ops.submit import JobNotFound, SubmitError

    if not 0 <= args.port <= 65535:
        return fail(args, "dashboard", f"--port: must be between 0 and 65535, got {args.port}")
    try:
        api_client = kube_api_client(args)
    except KubeconfigError as error:
        return fail(args, "dashboard", str(error))
    try:
        target = dashboard_target(api_client, namespace, args.job)
        token = ray_token(api_client, target)
        forward = DashboardForward(api_client, target, token, port=args.port)
    except JobNotFound as error:
        return fail(args, "dashboard", str(error))
    except DashboardRefused as error:
        return fail(args, "dashboard", str(error), code=1)
    except SubmitError as error:
        return fail(args, "dashboard", str(error))
    except OSError as error:  # the local port is taken
        return fail(
            args,
            "dashboard",
            f"--port {args.port}: cannot listen on 127.0.0.1:{args.port}: "
            f"{error.strerror or error} (--port 0 takes any free one)",
        )
    with forward:
        try:
            forward.check()
        except DashboardRefused as error:
            return fail(args, "dashboard", str(error), code=1)
        except SubmitError as error:
            return fail(args, "dashboard", str(error), code=1)
        auth = "with the Ray token" if token else "no Ray token (the cluster runs without token auth)"
        if args.json:
            print_json(
                {
                    "url": forward.url,
                    "namespace": namespace,
                    "ray_cluster": target.cluster,
                    "head_pod": target.pod_name,
                    "token": bool(token),
                }
            )
            sys.stdout.flush()
        else:
            print(f"Ray dashboard of {namespace}/{target.cluster} ({auth}): {forward.url}", flush=True)
        print("forwarding until Ctrl-C", file=sys.stderr, flush=True)
        if args.open:
            import webbrowser

            webbrowser.open(forward.url)
        try:
            forward.serve_forever()
        except KeyboardInterrupt:
            print(f"ray-efa dashboard: stopped forwarding {forward.url}", file=sys.stderr)
            return 130
    return 0
