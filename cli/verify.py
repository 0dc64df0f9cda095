"""`ray-efa verify`: after `cdk deploy`, check the cluster against the plan (nodes, device plugins, operator, Ray)."""

from __future__ import annotations

import argparse
import math
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
        name,
        help="check the deployed cluster: GPU nodes Ready with GPU and EFA allocatable, device plugins, KubeRay",
        description=__doc__,
    )
    add_kube_options(p)  # -c/--context is for settings, as in every subcommand (kubectl's --context is this)
    add_context_option(p)
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="repeat the checks every 10 s until all pass or SECONDS have passed (default: check once)",
    )
    add_json_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    names = [c for c in args.context if "=" not in c]
    if names:  # `verify --context NAME` named the kubeconfig context before --kube-context existed
        return fail(
            args,
            "verify",
            f"-c/--context takes KEY=VALUE settings, got {names[0]!r}; for the kubeconfig "
            f"context use --kube-context {names[0]}",
        )
    settings = resolve_or_exit(args).settings
    if not math.isfinite(args.wait) or args.wait < 0:
        return fail(args, "verify", f"--wait must be a number of seconds >= 0, got {args.wait}")

    from rich.console import Console

    from ray_efa.ops.verify import Expectations, render_verify, verify_until

    try:
        api_client = kube_api_client(args)
    except KubeconfigError as error:
        return fail(args, "verify", str(error))

    expected = Expectations.from_settings(settings)
    with Console(stderr=True).status("verifying the cluster") as spinner:
        report = verify_until(api_client, expected, timeout_s=args.wait, status=spinner.update)
    if args.json:
        print_json(report.as_dict())
    else:
        render_verify(report, Console())
    if not report.ok:
        print(f"ray-efa verify: failed: {', '.join(c.id for c in report.failed)}", file=sys.stderr)
    return 0 if report.ok else 1
