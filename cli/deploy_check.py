"""`ray-efa deploy-check`: before `cdk deploy`, refuse a deploy that would kill a running RayJob, bring back one you
deleted, or run the DRA drivers next to the device plugins.

Give it what `cdk diff` prints for the same settings (`npx cdk diff -c ... 2>&1 | ray-efa deploy-check --diff -`):
it reads which nodes roll as the stacks' job guards will judge it (their changed properties; a node group no guard
covers whenever the diff touches it), which RayJob manifests are re-applied or deleted and whether the device stack changes, then asks the Kubernetes API which
RayJobs are active and which GPU nodes are up. Exit 0: deploy; 1: refused, with the reasons (on a terminal it asks
first, and --yes accepts the reasons that may be accepted: a switch of deviceAllocation with GPU nodes up never is);
2: bad usage or an unreadable diff. Without --diff any active RayJob refuses: any deploy may roll the nodes. It reads
and never changes anything.
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

EXIT_REFUSED = 1
"""The deploy would disrupt what runs (the thing checked is not so)."""


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="before `cdk deploy`: refuse one that would kill a running RayJob, re-create a deleted "
        "one or run DRA drivers next to the device plugins",
        description=__doc__,
    )
    p.add_argument("--diff", metavar="FILE", help="the output of `npx cdk diff` for the deploy ('-': standard input)")
    p.add_argument("--yes", action="store_true", help="accept what may be accepted without asking")
    add_kube_options(p)
    add_context_option(p)
    add_json_option(p)
    p.set_defaults(run=run)


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as file:
        return file.read()


def run(args: argparse.Namespace) -> int:
    settings = resolve_or_exit(args).settings
    from ray_efa.ops.deploy_check import check_deploy, read_cluster, read_diff

    diff = None
    if args.diff is not None:
        try:
            text = _read(args.diff)
        except (OSError, UnicodeDecodeError) as error:
            return fail(args, "deploy-check", f"cannot read --diff {args.diff}: {error}")
        if "Stack " not in text:
            return fail(
                args,
                "deploy-check",
                f"--diff {args.diff} is not the output of `cdk diff` (no 'Stack ' line); "
                "cdk diff writes to standard error: `npx cdk diff 2>&1 | ray-efa "
                "deploy-check --diff -`",
            )
        diff = read_diff(text)
    try:
        api_client = kube_api_client(args)
    except KubeconfigError as error:
        return fail(args, "deploy-check", str(error))
    state = read_cluster(api_client, settings)
    findings = check_deploy(diff, state, settings)
    accepted = False
    if findings and all(f.overridable for f in findings):
        accepted = args.yes or (not args.json and sys.stdin.isatty() and args.diff != "-" and _ask(findings))
    ok = not findings or accepted
    if args.json:
        print_json(
            {
                "ok": ok,
                "accepted": bool(findings) and accepted,
                "findings": [{"id": f.id, "message": f.message, "overridable": f.overridable} for f in findings],
                "active_jobs": state.active_jobs,
                "gpu_nodes": len(state.gpu_nodes),
                "diff_read": diff is not None,
            }
        )
    elif not findings:
        active = ", ".join(state.active_jobs) or "none"
        print(f"ray-efa deploy-check: go ahead (active RayJobs: {active}; GPU nodes up: {len(state.gpu_nodes)})")
    for finding in findings:
        print(
            f"ray-efa deploy-check: {'accepted' if accepted else 'refused'}: {finding.id}: {finding.message}",
            file=sys.stderr,
        )
    return 0 if ok else EXIT_REFUSED


def _ask(findings: list) -> bool:
    for finding in findings:
        print(f"- {finding.message}", file=sys.stderr)
    try:
        answer = input("Deploy anyway? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")
