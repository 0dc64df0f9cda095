"""`ray-efa demo` (`make demo`): the whole product on this machine, no cloud and no credentials needed.

1. plan       what `cdk deploy` would build and what it costs (settings, instances, EFA, pods, memory per GPU)
2. synth      both CDK stacks, checked by cdk-nag, into cdk.out/
3. manifests  the KubeRay Namespace, RayCluster and RayJobs as YAML, into dist/
4. train      the FSDP train function on an embedded Ray cluster (2 CPU workers, gloo, the local preset): a fine-tune
              of the tiny model folder (training.tiny_model, in the model cache) on English text with a held-out
              eval loss and its unigram baseline, then the NCCL transport verdict on what those workers logged
5. report     the local run's charts and HTML page (`ray-efa report` of its run folder), into reports/demo/
`-c key=value` changes the settings of steps 1-3 (as with `cdk -c`); step 4 always uses the local preset on top.
--cdk-out, --dist and --report follow the safe-output rule of core.output_dir: all are checked before step 1, and a
folder holding files ray-efa did not write is refused (exit 2; a cloud assembly `cdk synth` wrote counts as the CDK's
own).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from ray_efa.cli._common import (
    add_context_option,
    fail,
    missing_plots_extra,
    missing_train_extra,
    resolve_local_or_exit,
    resolve_or_exit,
)

ROOT = Path(__file__).resolve().parent.parent


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="plan, synthesize the stacks, write the manifests and train locally (make demo)",
        description=(__doc__ or "").partition("\n")[0],
    )
    p.add_argument(
        "--cdk-out",
        type=Path,
        default=ROOT / "cdk.out",
        help="where the CloudFormation goes: a folder of its own (default: cdk.out)",
    )
    p.add_argument(
        "--dist", type=Path, default=ROOT / "dist", help="where the manifests go: a folder of its own (default: dist)"
    )
    p.add_argument(
        "--report",
        type=Path,
        default=ROOT / "reports" / "demo",
        help="where the local run's report goes: a folder of its own (default: reports/demo)",
    )
    add_context_option(p)
    p.set_defaults(run=run)


_ASSEMBLY_FILES = ("manifest.json", "tree.json", "cdk.out", "validation-report.json", "synth.lock", "read.lock")


def is_cloud_assembly_entry(entry: Path) -> bool:
    """An entry `cdk synth` writes into a cloud assembly (cdk.out): demo may replace these though it did not record them."""
    folder = entry.parent
    if not ((folder / "cdk.out").is_file() and (folder / "manifest.json").is_file()):
        return False  # not a cloud assembly: nothing in it is the CDK's
    name = entry.name
    return (
        name in _ASSEMBLY_FILES
        or name.startswith("asset.")
        or name.endswith((".template.json", ".assets.json", ".metadata.json"))
    )


def _synth(settings, cdk_out: Path) -> list[tuple[str, int]]:
    """Both stacks, as `cdk synth` makes them (cdk.json's feature flags included); (stack, resources) per stack."""
    import aws_cdk as cdk

    from ray_efa.core.output_dir import publish
    from ray_efa.infra.app import build_stacks, feature_flags

    stacks: list[tuple[str, int]] = []

    def synth(staging: Path) -> None:
        app = cdk.App(outdir=str(staging), context=feature_flags())
        build_stacks(app, settings)
        assembly = app.synth()  # raises on any unacknowledged cdk-nag finding
        stacks.extend((s.stack_name, len(s.template["Resources"])) for s in assembly.stacks)

    publish(cdk_out, synth, command="ray-efa demo --cdk-out", accept=is_cloud_assembly_entry)
    return stacks


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ray_efa.core.output_dir import OutputDirError, check_output_dir
    from ray_efa.ops.plan import build_plan, render_plan

    # steps 4 and 5 train and draw: say what is missing before steps 1-3 take a minute
    if (code := missing_train_extra("demo") or missing_plots_extra("demo")) is not None:
        return code
    console = Console()
    # every settings problem at once (a plan that cannot fit included: the synth would refuse it), exit 2, before
    # anything is written
    resolved = resolve_or_exit(args, require_fit=True)
    settings = resolved.settings
    try:  # both output folders before any step: a refused folder must not cost a synthesis
        check_output_dir(args.cdk_out, accept=is_cloud_assembly_entry)
        check_output_dir(args.dist)
        check_output_dir(args.report)
    except OutputDirError as error:
        return fail(args, "demo", str(error))
    results: list[tuple[str, str, float]] = []

    def step(title: str) -> float:
        console.rule(f"[bold]{title}")
        return time.perf_counter()

    started = step("1/5 plan: what `cdk deploy` would build")
    plan = build_plan(resolved)
    render_plan(plan, console)
    results.append(
        ("plan", "fits GPU memory" if plan.fits else "does NOT fit GPU memory", time.perf_counter() - started)
    )

    started = step("2/5 synth: both CDK stacks, with cdk-nag")
    with console.status("synthesizing (jsii starts node; a few seconds)"):
        stacks = _synth(settings, args.cdk_out)
    for name, resources in stacks:
        console.print(f"  {name}: {resources} resources -> {args.cdk_out}/{name}.template.json")
    console.print("  cdk-nag AwsSolutions: no unacknowledged findings")
    results.append(("synth", ", ".join(f"{n} ({r})" for n, r in stacks), time.perf_counter() - started))

    started = step("3/5 manifests: the KubeRay workload as YAML")
    from ray_efa.k8s.dist import storage_warning, write_manifests

    files = write_manifests(settings, args.dist)
    for f in files:
        console.print(f"  {f}")
    if warning := storage_warning(settings):
        console.print(f"  [yellow]note:[/yellow] {warning}")
    results.append(("manifests", f"{len(files)} files in {args.dist}", time.perf_counter() - started))

    started = step("4/5 train: FSDP on an embedded Ray cluster (2 CPU workers), then the transport gate")
    from ray_efa.training import driver

    local = resolve_local_or_exit(args, "demo").settings
    name = driver.default_run_name(local, local=True)
    code = driver.run(local, local=True, name=name)
    results.append(
        (
            "train + gate",
            "ok (the gate cannot prove EFA on CPU: see above)" if code == 0 else f"exit {code}",
            time.perf_counter() - started,
        )
    )

    started = step("5/5 report: the local run's charts and HTML page")
    results.append(
        ("report", _report(driver.open_run_folder(local, name), args.report, console), time.perf_counter() - started)
    )

    table = Table(title="ray-efa demo")
    for column in ("step", "result", "seconds"):
        table.add_column(column)
    for name, result, seconds in results:
        table.add_row(name, result, f"{seconds:.1f}")
    console.print(table)
    console.print(
        f"Next: [bold]npx cdk deploy --all[/bold] (USD {plan.cost.total:.2f}/h), then "
        f"[bold]{settings.teardown_commands[0]}[/bold] first when done."
    )
    return code if plan.fits else 1


def _report(folder, out: Path, console) -> str:
    """`ray-efa report` of the local run's folder into `out`; the result cell of the summary table."""
    from ray_efa.core.output_dir import OutputDirError
    from ray_efa.ops.report import ReportError, read_run, write_report

    if folder is None:
        return "no run folder to report"
    try:
        records = read_run(folder.uri)
        files = write_report(records, out)
    except (ReportError, OutputDirError, OSError) as error:
        console.print(f"  [yellow]no report:[/yellow] {error}", highlight=False)
        return "no report (see above)"
    for note in records.notes:
        console.print(f"  note: {note}", highlight=False)
    index = next(p for p in files if p.name == "index.html")
    console.print(f"  {len(files) - 1} charts and {index}", highlight=False)
    console.print(
        f"  [bold]open {index}[/bold] (a cluster run's: ray-efa report <storagePath>/<run name>)", highlight=False
    )
    return str(index)
