"""Plain YAML for kubectl users: every chart of `build_manifests`, one file per chart, written all or nothing."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import cdk8s

from ray_efa.core.settings import Settings
from ray_efa.k8s.workload import build_manifests

__all__ = ["write_manifests", "storage_warning"]


def write_manifests(settings: Settings, out: Path) -> list[Path]:
    """Synthesize into a temporary directory beside `out`, then swap it in for `out`; return the files, in apply order.

    Nothing is written to `out` unless synthesis succeeds (a ManifestError or SettingsError leaves it as it was), and
    `out` never holds files of an older run. Files are named NNNN-<chart>.yaml in dependency (= apply) order, and the
    same settings and code give the same bytes.
    """
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        app = cdk8s.App(outdir=str(staging), output_file_extension=".yaml",
                        yaml_output_type=cdk8s.YamlOutputType.FILE_PER_CHART)
        build_manifests(app, settings)
        app.synth()
        previous = None
        if out.exists():
            previous = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=out.parent))
            out.rename(previous / out.name)
        try:
            staging.rename(out)
        except OSError:
            if previous is not None:  # put the old output back rather than leave nothing
                (previous / out.name).rename(out)
            raise
        finally:
            if previous is not None:
                shutil.rmtree(previous)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return sorted(out.glob("*.yaml"))


def storage_warning(settings: Settings) -> str | None:
    """Why the RayJobs of these settings would refuse to train, if they would: a multi-node run without storagePath."""
    if settings.workload.storage_path is None and settings.nodes.gpu_node_count > 1:
        return (
            f"storagePath is unset, so the RayJobs will refuse to train on {settings.nodes.gpu_node_count} nodes (their "
            "checkpoints need storage every node shares). The cluster stack creates a bucket: pass its output, "
            f"-c storagePath=$(aws cloudformation describe-stacks --stack-name {settings.cluster_stack_name} "
            "--query \"Stacks[0].Outputs[?OutputKey=='CheckpointStoragePath'].OutputValue\" --output text)"
        )
    return None
