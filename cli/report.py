"""`ray-efa report RUN`: charts and an HTML page from a run folder (local or s3://), its gaps named.

RUN is the run folder `<storagePath>/<run name>` (the driver prints it at the end: "run folder: ..."). The report
holds PNG charts (loss, throughput and MFU, step time against core.perf's prediction, memory against the device's
capacity, learning rate and gradient norm) and index.html with them inline, the run summary, the transport gate's
verdict and the settings. Exit 0 written (a partial history is reported with its gaps named); 2 no such folder, no
metrics history, unreadable storage, or an output folder that may not be written; 4 matplotlib is not installed.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from ray_efa.cli._common import add_json_option, fail, missing_plots_extra, print_json


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="charts and an HTML page of a training run, from its run folder (local or s3://)",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument(
        "run_folder", metavar="RUN", help="the run folder: <storagePath>/<run name>, a local path or s3://..."
    )
    p.add_argument("--out", type=Path, help="where the report goes: a folder of its own (default: reports/<run name>)")
    add_json_option(p)
    p.set_defaults(run=run)


def default_out(run_uri: str) -> Path:
    return Path("reports") / (run_uri.rstrip("/").rsplit("/", 1)[-1] or "run")


def run(args: argparse.Namespace) -> int:
    if (code := missing_plots_extra("report")) is not None:
        return code
    from ray_efa.core.output_dir import OutputDirError, check_output_dir
    from ray_efa.ops.report import ReportError, read_run, write_report

    out = args.out or default_out(args.run_folder)
    try:
        check_output_dir(out)  # before reading (S3 can be slow): a refused folder costs nothing
        records = read_run(args.run_folder)
        files = write_report(records, out)
    except (ReportError, OutputDirError) as error:
        return fail(args, "report", str(error))
    except OSError as error:
        return fail(args, "report", f"cannot write {out}: {error.strerror or error}")
    first, last = records.history[0]["step"], records.history[-1]["step"]
    index = next(p for p in files if p.name == "index.html")
    if args.json:
        print_json(
            {
                "run": records.uri,
                "name": records.name,
                "reports": len(records.history),
                "first_step": first,
                "last_step": last,
                "notes": records.notes,
                "files": [str(p) for p in files],
                "index": str(index),
            }
        )
        return 0
    print(f"report of {records.name}: {len(records.history)} reports, steps {first}..{last}")
    for note in records.notes:
        print(f"  note: {note}")
    for path in files:
        print(f"  {path}")
    print(f"open {index}")
    return 0
