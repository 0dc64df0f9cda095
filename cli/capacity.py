"""`ray-efa capacity`: which AZs can launch the GPU nodes (offerings, vCPU quota, placement score, optional probe)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from ray_efa.cli._common import (
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    add_context_option,
    add_json_option,
    add_request_timeout_option,
    fail,
    print_json,
    resolve_or_exit,
    unreachable_message,
)

if TYPE_CHECKING:
    from rich.console import Console

    from ray_efa.ops.capacity import CapacityReport, CapacityRequest

EXIT_INTERRUPTED = 130


def register(add_parser: Callable[..., argparse.ArgumentParser], name: str) -> None:
    p = add_parser(
        name,
        help="check which AZs of a region can launch the GPU nodes: offerings, vCPU quota, placement score",
        description=__doc__,
    )
    p.add_argument("--region", help="AWS region (default: the region setting)")
    p.add_argument("--instance-type", help="EFA GPU instance type (default: the gpuInstanceType setting)")
    p.add_argument("--count", type=int, help="instances needed in one AZ (default: the gpuNodeCount setting)")
    p.add_argument(
        "--probe",
        action="store_true",
        help="also create a real targeted capacity reservation for --count instances in each offered AZ and cancel it "
        "at once (billed for the seconds it exists; always cancelled, also on Ctrl-C)",
    )
    p.add_argument(
        "--write-context",
        action="store_true",
        help='store the recommended AZ as gpuAvailabilityZone in the app\'s cdk.json (its "context"), for the next '
        "`cdk deploy`; outside an app directory, print the `-c` flag to pass instead",
    )
    add_request_timeout_option(p, "AWS (botocore retries as configured: AWS_MAX_ATTEMPTS)")
    add_context_option(p)
    add_json_option(p)
    p.set_defaults(run=run)


def _fail(args: argparse.Namespace, message: str, problems: list[dict] | None = None, code: int = 1) -> int:
    return fail(args, "capacity", message, code=code, problems=problems)


def run(args: argparse.Namespace) -> int:
    parsed = _parse(args)
    if isinstance(parsed, int):
        return parsed
    request, catalog_vcpus = parsed
    return _check(args, request, catalog_vcpus)


def _parse(args: argparse.Namespace) -> tuple[CapacityRequest, int] | int:
    """The parse step: the request (region, type, count, the settings' reservation) and the catalog's vCPUs of the
    type; else EXIT_USAGE, naming each bad argument."""
    from ray_efa.core import catalog, regions

    settings = resolve_or_exit(args).settings
    region = args.region or settings.cluster.region
    instance_type = args.instance_type or settings.nodes.gpu_instance_type
    count = settings.nodes.gpu_node_count if args.count is None else args.count

    problems = []
    instance = None
    if not regions.is_valid_region(region):
        problems.append({"key": "--region", "value": region, "message": "must be a region name like us-east-2"})
    try:
        instance = (
            settings.nodes.gpu_instance
            if instance_type == settings.nodes.gpu_instance_type
            else catalog.gpu_instance(instance_type)
        )
    except catalog.CatalogError as error:
        problems.append({"key": "--instance-type", "value": instance_type, "message": str(error)})
    if count < 1:
        hint = (
            " (gpuNodeCount is 0, scaled to zero: pass the count you will come back with)" if args.count is None else ""
        )
        problems.append({"key": "--count", "value": count, "message": f"must be >= 1{hint}"})
    if args.write_context and region != settings.cluster.region:
        problems.append(
            {
                "key": "--region",
                "value": region,
                "message": (
                    f"must equal the region setting ({settings.cluster.region}) with --write-context: the stored AZ must be "
                    "in the region the stack deploys to (set the region setting first)"
                ),
            }
        )
    if problems or instance is None:  # no instance means a problem was recorded for it
        return _fail(args, "invalid arguments", problems, EXIT_USAGE)

    from ray_efa.ops.capacity import CapacityRequest

    # The reservation of the settings, checked where the nodes would launch (the settings' GPU AZ and type).
    reservation = settings.nodes.capacity_reservation_id
    return CapacityRequest(
        region=region,
        instance_type=instance_type,
        count=count,
        probe=args.probe,
        reservation_id=reservation if region == settings.cluster.region else None,
        reservation_zone=settings.gpu_availability_zone if reservation else None,
        capacity_block=settings.nodes.capacity_reservation_type == "capacity-block",
    ), instance.vcpus


def _check(args: argparse.Namespace, request: CapacityRequest, catalog_vcpus: int) -> int:
    """The act step: ask AWS (and probe, with --probe), store the recommended AZ (--write-context), print."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError
    from rich.console import Console

    from ray_efa.ops.capacity import CancelFailed, check_capacity, render_capacity

    region, instance_type, count = request.region, request.instance_type, request.count
    session = boto3.Session(region_name=region)
    progress = Console(stderr=True)
    bounded = Config(connect_timeout=args.request_timeout, read_timeout=args.request_timeout)
    ec2 = session.client("ec2", config=bounded)
    try:
        with progress.status(f"checking capacity for {count} x {instance_type} in {region}") as spinner:
            report = check_capacity(
                request,
                ec2=ec2,
                service_quotas=session.client("service-quotas", config=bounded),
                catalog_vcpus=catalog_vcpus,
                status=spinner.update,
            )
    except CancelFailed as error:
        return _fail(args, str(error))
    except KeyboardInterrupt:  # ProbeInterrupted too: by then every probe reservation has been cancelled
        _fail(args, "interrupted; no probe reservation was left behind")
        return EXIT_INTERRUPTED
    except (ClientError, BotoCoreError) as error:
        # most calls go to EC2 (the first one too: an endpoint that refuses or is not there fails there)
        message = unreachable_message(error, endpoint=ec2.meta.endpoint_url)
        if message is not None:
            return _fail(args, message, code=EXIT_UNREACHABLE)
        return _fail(args, f"AWS call failed: {error}")

    written = flags = None
    if args.write_context:
        stored = _write_context(args, report, progress)
        if isinstance(stored, int):
            return stored
        written, flags = stored

    if args.json:
        print_json({**report.as_dict(), "context_written": written, "context_flags": flags})
    else:
        console = Console()
        render_capacity(report, console)
        if written:
            console.print(
                f'Wrote gpuAvailabilityZone={report.recommended_zone} to {written} (its "context"; the same as {flags})'
            )
    return 0 if report.ok else 1


def _write_context(
    args: argparse.Namespace, report: CapacityReport, progress: Console
) -> tuple[str | None, str | None] | int:
    """--write-context: the recommended AZ into the app's cdk.json (the file written, and the `-c` flag that does the
    same), or the flag alone outside an app; the exit code where the AZ gives bad settings or the file cannot be
    written."""
    from ray_efa.core.context import parse_overrides, resolve_settings
    from ray_efa.core.settings import SettingsError

    zone = report.recommended_zone
    if not report.ok:
        progress.print("[yellow]--write-context: nothing written, no AZ is usable with the current quota[/]")
        return None, None
    try:  # the stored value must give valid settings, before anything is written
        resolve_settings({**parse_overrides(args.context), "gpuAvailabilityZone": zone})
    except SettingsError as error:
        return _fail(
            args,
            "the recommended AZ does not give valid settings; nothing written",
            [{"key": p.key, "value": p.value, "message": p.message} for p in error.problems],
            EXIT_USAGE,
        )
    from ray_efa.ops.cdk_context import ContextFileError, app_config_file, context_flags, write_context

    flags = context_flags({"gpuAvailabilityZone": zone})
    if app_config_file() is None:  # no app here: nothing to write into, the flag does the same
        progress.print(
            f"--write-context: no cdk.json in this directory or above; pass {flags} to cdk and ray-efa", soft_wrap=True
        )
        return None, flags
    try:
        return str(write_context({"gpuAvailabilityZone": zone})), flags
    except (ContextFileError, OSError) as error:
        return _fail(args, str(error))
