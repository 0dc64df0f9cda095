"""`ray-efa manifests`: write the KubeRay workload as plain YAML (one file per chart, in apply order) for kubectl."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ray_efa.cli._common import add_context_option, add_json_option, resolve_or_exit

EXIT_FAILED = 1


def register(add_parser, name: str) -> None:
    p = add_parser(name, help="write the Namespace, RayCluster and RayJob manifests as YAML for kubectl")
    p.add_argument("--out", type=Path, default=Path("dist"), help="output directory, replaced as a whole (default: dist)")
    add_context_option(p)
    add_json_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # bad settings or a plan that cannot fit the GPUs: every problem printed, exit 2, nothing written
    settings = resolve_or_exit(args, require_fit=True).settings
    from ray_efa.k8s.code_bundle import ManifestError  # cdk8s starts jsii: import only when the command runs
    from ray_efa.k8s.dist import storage_warning, write_manifests
    from ray_efa.k8s.names import RAY_CLUSTER_NAME, ray_job_name

    try:
        files = write_manifests(settings, args.out)
    except ManifestError as error:
        if args.json:
            print(json.dumps({"error": str(error)}))
        else:
            print(f"ray-efa: {error}", file=sys.stderr)
        return EXIT_FAILED
    namespace = settings.workload.namespace
    if args.json:
        print(json.dumps({"files": [str(f) for f in files], "namespace": namespace,
                          "rayCluster": RAY_CLUSTER_NAME, "rayJob": ray_job_name(settings.workload.network)}))
        return 0
    warning = storage_warning(settings)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"wrote {len(files)} files to {args.out}/ (apply in this order; each Ray object takes every GPU node):")
    for f in files:
        print(f"  {args.out / f.name}")
    first, job = files[0].name, next(f.name for f in files if f.name.endswith(f"rayjob-{settings.workload.network}.yaml"))
    print("train:")
    print(f"  kubectl apply -f {args.out / first} -f {args.out / job}")
    print(f"  kubectl -n {namespace} get rayjob {ray_job_name(settings.workload.network)} -w   # Complete, or Failed (gate)")
    return 0
