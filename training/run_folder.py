"""A run's folder, `<storagePath>/<run name>`, on the filesystem Ray Train writes it with (local, shared or s3://).

Besides Ray Train's checkpoints it holds what `ray-efa report` reads: metrics.jsonl and tensorboard/ (training.history,
written during the run), settings.json (before training), summary.json and verdict.json (the driver, at the end),
and gate-logs.tar.gz next to the verdict: the NCCL logs and EFA counter snapshots it was judged on.
Paths are pyarrow.fs paths, as Ray Train resolves them (pyarrow.fs.FileSystem.from_uri; ray/train/v2/_internal/
execution/storage.py, get_fs_and_path).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "RunFolder",
    "RUN_NAME",
    "run_name_problem",
    "METRICS_FILE",
    "TENSORBOARD_DIR",
    "SETTINGS_FILE",
    "SUMMARY_FILE",
    "VERDICT_FILE",
    "GATE_LOGS_FILE",
]

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
SETTINGS_FILE = "settings.json"
SUMMARY_FILE = "summary.json"
VERDICT_FILE = "verdict.json"
GATE_LOGS_FILE = "gate-logs.tar.gz"
"""The evidence of verdict.json: every file the transport gate read (each node's NCCL lines, the EFA counter
snapshots), which otherwise lives in the head pod's /tmp and goes with its RayCluster."""


RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
"""A run name: one path segment of letters, digits, '.', '_' and '-', starting with a letter or digit (no "..", no
"/", no hidden folder), at most 200 characters: the folder it names is `<storagePath>/<name>` and nothing else."""


def run_name_problem(name: str) -> str | None:
    """Why `name` cannot name a run folder (the message of a Problem naming --name), or None when it can."""
    if RUN_NAME.fullmatch(name):
        return None
    if "/" in name or "\\" in name or name in (".", ".."):
        why = "must be one folder name under storagePath, not a path"
    elif len(name) > 200:
        why = f"is {len(name)} characters long: at most 200"
    else:
        why = "may hold only letters, digits, '.', '_' and '-', starting with a letter or digit"
    return f"{why} (the run folder is <storagePath>/<name>)"


@dataclass(frozen=True, slots=True)
class RunFolder:
    fs: Any
    """A pyarrow.fs.FileSystem."""
    path: str

    @classmethod
    def of(cls, storage_path: str | None, name: str) -> RunFolder:
        """The folder Ray Train uses for run `name` under `storage_path` (None: Ray's default, ~/ray_results)."""
        import pyarrow.fs
        from ray.train.constants import DEFAULT_STORAGE_PATH

        fs, root = pyarrow.fs.FileSystem.from_uri(storage_path or DEFAULT_STORAGE_PATH)
        return cls(fs, f"{root.rstrip('/')}/{name}")

    @property
    def uri(self) -> str:
        """How a person names it: s3://bucket/prefix/name, or the local path."""
        kind = self.fs.type_name
        return self.path if kind == "local" else f"{'s3' if kind == 's3' else kind}://{self.path}"

    def local_path(self) -> Path | None:
        """The folder as a local path when the filesystem is the local one (appends work there; not on S3)."""
        return Path(self.path) if self.fs.type_name == "local" else None

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write (replace) the file `name` of the folder, creating the folders on the way."""
        target = f"{self.path}/{name}"
        self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        with self.fs.open_output_stream(target) as stream:
            stream.write(data)

    def write_json(self, name: str, data: Any) -> None:
        self.write_bytes(name, (json.dumps(data, indent=2, sort_keys=True, default=str) + "\n").encode())

    def read_bytes(self, name: str) -> bytes | None:
        """The file's bytes; None when it does not exist."""
        import pyarrow.fs

        target = f"{self.path}/{name}"
        if self.fs.get_file_info(target).type != pyarrow.fs.FileType.File:
            return None
        with self.fs.open_input_stream(target) as stream:
            return stream.read()

    def exists(self) -> bool:
        """The folder is there: an earlier run of this name under this storage path."""
        import pyarrow.fs

        return self.fs.get_file_info(self.path).type != pyarrow.fs.FileType.NotFound

    def latest_checkpoint(self) -> str | None:
        """The name of the run's latest Ray Train checkpoint folder (checkpoint_NNNNNN), None when it has none."""
        import pyarrow.fs

        entries = self.fs.get_file_info(pyarrow.fs.FileSelector(self.path, allow_not_found=True))
        names = sorted(
            e.base_name
            for e in entries
            if e.type == pyarrow.fs.FileType.Directory and e.base_name.startswith("checkpoint_")
        )
        return names[-1] if names else None
