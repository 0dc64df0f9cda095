"""Plain YAML for kubectl users: every chart of `build_manifests`, one file per chart, written all or nothing."""

from __future__ import annotations

from pathlib import Path

import cdk8s

from ray_efa.core.output_dir import check_output_dir, publish
from ray_efa.core.settings import Settings, shared_storage_problem
from ray_efa.k8s.code_archive import CodeArchive
from ray_efa.k8s.workload import build_manifests

__all__ = ["write_manifests", "storage_warning"]


def write_manifests(settings: Settings, out: Path, *, code_archive: CodeArchive | None = None) -> list[Path]:
    """Synthesize the charts, then publish them into `out` (core.output_dir); return the YAML files, in apply order.

    `out` must be a folder of its own: new, empty, or one an earlier run wrote (OutputDirError otherwise, before
    anything is synthesized or written). Nothing changes in `out` unless synthesis succeeds (a ManifestError or
    SettingsError leaves it as it was); afterwards it holds exactly this run's files. Files are named
    NNNN-<chart>.yaml in dependency (= apply) order, and the same settings and code give the same bytes.

    `code_archive` (codeDir zipped, k8s.code_archive): the pods fetch it from `code_archive.uri` instead of a
    ConfigMap, and it is written beside the YAML as `code_archive.file_name`, to be uploaded there first.
    """

    def synth(staging: Path) -> None:
        app = cdk8s.App(
            outdir=str(staging), output_file_extension=".yaml", yaml_output_type=cdk8s.YamlOutputType.FILE_PER_CHART
        )
        build_manifests(app, settings, code_archive_uri=code_archive.uri if code_archive is not None else None)
        app.synth()
        if code_archive is not None:
            (staging / code_archive.file_name).write_bytes(code_archive.data)

    check_output_dir(out)  # refuse before the slow synthesis
    return [p for p in publish(out, synth, command="ray-efa manifests") if p.suffix == ".yaml"]


def storage_warning(settings: Settings) -> str | None:
    """Why the RayJobs of these settings would refuse to train, if they would: a multi-node run without storagePath
    (core.settings.shared_storage_problem, the driver's own check)."""
    problem = shared_storage_problem(
        settings.nodes.gpu_node_count, settings.workload.storage_path, settings.cluster_stack_name
    )
    if problem is None:
        return None
    return (
        f"storagePath is unset, so the RayJobs will refuse to train on {settings.nodes.gpu_node_count} nodes: "
        f"storagePath {problem.message}"
    )
