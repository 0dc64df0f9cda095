"""`ray-efa verify`: after `cdk deploy`, check the cluster against the plan (nodes, device plugins, operator, Ray)."""

from __future__ import annotations

import argparse
import json
import sys

from ray_efa.cli._common import EXIT_USAGE, add_json_option, resolve_or_exit


def register(add_parser, name: str) -> None:
    p = add_parser(
        name, help="check the deployed cluster: GPU nodes Ready with GPU and EFA allocatable, device plugins, KubeRay",
        description=__doc__,
    )
    p.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", dest="kube_context", metavar="NAME", help="kubeconfig context (default: the current one)")
    # Settings overrides: -c only, because --context is the kubeconfig context here, as in kubectl.
    p.add_argument("-c", dest="context", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting, as with `cdk -c` (repeatable)")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="repeat the checks every 10 s until all pass or SECONDS have passed (default: check once)")
    add_json_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = resolve_or_exit(args).settings
    if args.wait < 0:
        print(f"ray-efa verify: --wait must be >= 0 seconds, got {args.wait}", file=sys.stderr)
        return EXIT_USAGE

    from kubernetes import config
    from rich.console import Console

    from ray_efa.ops.verify import Expectations, render_verify, verify_until

    try:
        api_client = config.new_client_from_config(config_file=args.kubeconfig, context=args.kube_context)
    except (config.ConfigException, OSError) as error:
        where = args.kubeconfig or "the default kubeconfig"
        print(f"ray-efa verify: cannot load {where}"
              f"{' context ' + args.kube_context if args.kube_context else ''}: {error} "
              "(for EKS: aws eks update-kubeconfig --name CLUSTER --region REGION)", file=sys.stderr)
        return EXIT_USAGE

    expected = Expectations.from_settings(settings)
    with Console(stderr=True).status("verifying the cluster") as spinner:
        report = verify_until(api_client, expected, timeout_s=args.wait, status=spinner.update)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        render_verify(report, Console())
    if not report.ok:
        print(f"ray-efa verify: failed: {', '.join(c.id for c in report.failed)}", file=sys.stderr)
    return 0 if report.ok else 1
