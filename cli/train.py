"""`ray-efa train`: run the training job, on the existing Ray cluster or locally with `--local`.

It runs trainFunction (default the built-in train_func; `-c trainFunction=my_pkg.train:train_func -c
codeDir=path/to/src` runs yours), through the driver: preflight, the function, the NCCL logs and the transport gate.
`--local` starts an in-process Ray cluster with 2 CPU workers (gloo) and applies the local preset
(training/local.py: the tiny model, 60 steps) as a settings layer below `-c`, so `-c steps=10` still wins; with no
modelPath, dataset or dataPoolSize of yours it fine-tunes the tiny model folder of the model cache (made on first use
from the installed packages' English license texts, as `ray-efa tiny-model DIR` makes one) with a held-out split. Without
it, the command connects to the running cluster (address auto) with one worker per GPU, after the memory planner
has accepted the plan. Bad settings and plans that cannot fit end here, with exit code 2, before Ray starts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ray_efa.cli._common import add_context_option, fail, missing_train_extra, resolve_local_or_exit, resolve_or_exit
from ray_efa.training.run_folder import run_name_problem


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="train: on the Ray cluster, or locally on CPU with --local",
        description=(__doc__ or "").partition("\n")[0],
    )
    p.add_argument(
        "--local",
        action="store_true",
        help="in-process Ray cluster, 2 CPU workers (gloo), a tiny model fine-tuned on English text: the whole loop "
        "in about a minute",
    )
    p.add_argument(
        "--name",
        help="Ray Train run name under storagePath; the name of an existing run folder is "
        "refused (exit 2) unless --resume",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run --name from its latest checkpoint; refused if its settings differ",
    )
    p.add_argument("--logs-dir", type=Path, help="where to collect the NCCL logs for the transport gate")
    add_context_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # first: a name that is a path would put the run, and the tiny model made below, where nobody asked
    if args.name is not None and (problem := run_name_problem(args.name)) is not None:
        return fail(args, "train", f"--name {problem}, got {args.name!r}")
    if (code := missing_train_extra("train")) is not None:
        return code
    # exits 2 on bad settings, or a trainFunction that is not in codeDir, before Ray starts
    settings = (
        resolve_local_or_exit(args, "train", require_code=True)
        if args.local
        else resolve_or_exit(args, require_code=True)
    ).settings

    if args.resume and not args.name:
        print("ray-efa train: --resume needs --name, the run to continue", file=sys.stderr)
        return 2
    # The first line within seconds: importing torch and Ray alone takes several on a laptop.
    print("[ray-efa] loading torch and Ray" + (" for a local run" if args.local else ""), flush=True)
    from ray_efa.training import driver

    return driver.run(settings, local=args.local, name=args.name, logs_dir=args.logs_dir, resume=args.resume)
