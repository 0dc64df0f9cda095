"""`ray-efa manifests`: write the KubeRay workload as plain YAML (one file per chart, in apply order) for kubectl.

The output folder must be a folder of its own: new, empty, or one an earlier run wrote (its record,
.ray-efa-output.json, lists the files). With codeDir, the code ships in a ConfigMap beside the job; code too large or
binary for one ships as a zip under an s3:// storagePath: written into the folder as code-<hash>.zip, with the
`aws s3 cp` line that puts it where the pods fetch it (nothing here talks to AWS). Without an s3:// storagePath such
code is exit 2, naming codeDir and storagePath; so is a multi-node job without storagePath, whose RayJobs would refuse
to train, unless --allow-no-storage. Exit 0 written, 1 the manifests cannot be built, 2 bad settings, code
that cannot ship, or an output folder that may not be written (nothing is written then).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ray_efa.cli._common import (
    add_context_option,
    add_json_option,
    fail,
    follow_command,
    kubectl_code_route,
    print_json,
    resolve_or_exit,
)

EXIT_FAILED = 1


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="write the Namespace, RayCluster and RayJob manifests as YAML for kubectl",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("dist"),
        help="output folder: new, empty, or written by ray-efa before; only its own files are replaced (default: dist)",
    )
    p.add_argument(
        "--allow-no-storage",
        action="store_true",
        help="write the jobs of a multi-node run without storagePath (they refuse to train until it is set)",
    )
    add_context_option(p)
    add_json_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # bad settings or a plan that cannot fit the GPUs: every problem printed, exit 2, nothing written
    settings = resolve_or_exit(args, require_fit=True).settings
    from ray_efa.core.output_dir import OutputDirError, check_output_dir

    try:
        check_output_dir(args.out)  # before jsii starts: a refused folder costs nothing
    except OutputDirError as error:
        return fail(args, "manifests", str(error))

    from ray_efa.core.settings import shared_storage_problem

    storage = shared_storage_problem(
        settings.nodes.gpu_node_count, settings.workload.storage_path, settings.cluster_stack_name
    )
    if storage is not None and not args.allow_no_storage:  # jobs that would refuse to train, minutes after apply
        return fail(args, "manifests", f"storagePath {storage.message}; or --allow-no-storage to write them anyway")
    archive, problem = kubectl_code_route(settings)
    if problem is not None:
        return fail(args, "manifests", problem)

    from ray_efa.k8s.code_bundle import ManifestError  # cdk8s starts jsii: import only when the command runs
    from ray_efa.k8s.dist import storage_warning, write_manifests
    from ray_efa.k8s.names import RAY_CLUSTER_NAME, ray_job_of

    try:
        files = write_manifests(settings, args.out, code_archive=archive)
    except ManifestError as error:
        return fail(args, "manifests", str(error), code=EXIT_FAILED)
    except (OutputDirError, OSError) as error:
        return fail(args, "manifests", f"cannot write {args.out}: {error}")
    namespace = settings.workload.namespace
    upload = None  # codeDir's zip: where it is, where the pods fetch it, how it gets there
    if archive is not None:
        zipped = args.out / archive.file_name
        upload = {"file": str(zipped), "uri": archive.uri, "command": f"aws s3 cp {zipped} {archive.uri}"}
    if args.json:
        print_json(
            {
                "files": [str(f) for f in files],
                "out": str(args.out),
                "namespace": namespace,
                "ray_cluster": RAY_CLUSTER_NAME,
                "ray_job": ray_job_of(settings),
                "code_archive": upload,
            }
        )
        return 0
    warning = storage_warning(settings)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"wrote {len(files)} manifests to {args.out}/ (apply in this order; each Ray object takes every GPU node):")
    for f in files:
        print(f"  {args.out / f.name}")
    if archive is not None:
        print(
            f"and codeDir as {args.out / archive.file_name} ({archive.describe()}), which the pods fetch from "
            f"{archive.uri}"
        )
    first, job = (
        files[0].name,
        next(f.name for f in files if f.name.endswith(f"rayjob-{settings.workload.network}.yaml")),
    )
    print("train:")
    if upload is not None:
        print(f"  {upload['command']}   # first: where every Ray pod fetches codeDir")
    print(f"  kubectl apply -f {args.out / first} -f {args.out / job}")
    print(f"  kubectl -n {namespace} get rayjob {ray_job_of(settings)} -w   # Complete, or Failed (gate)")
    print(
        f"  {follow_command(ray_job_of(settings), namespace)}   # or: its states, log and the gate's verdict; exit "
        "code = the job's"
    )
    return 0
