"""codeDir as one zip under storagePath: the kubectl path's route for code that a ConfigMap cannot hold.

    archive = build_code_archive(code_dir, storage_path=settings.workload.storage_path)
    archive.data, archive.uri      # the files that ship (core.user_code.code_files), zipped; where the pods fetch them:
                                   # s3://bucket/prefix/ray-efa-code/code-<sha256>.zip

`ray-efa submit` uploads the zip to that URI before it creates the job, and `ray-efa manifests` writes it beside the
YAML with the `aws s3 cp` line that puts it there; the pods' init container (k8s.user_code.FETCH_SCRIPT) fetches it
with their own role, which reads storagePath anyway (Ray Train restores checkpoints from it). The key is the
content's whole sha256, so the same code is one object whatever the job, and the init container refuses an object
whose bytes are not what its name says (the Ray pods may not write under ray-efa-code/ either: infra.checkpoints).
The zip is deterministic (sorted entries, fixed timestamps and modes): the same files give the same bytes and the same URI.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ray_efa.core.user_code import code_files
from ray_efa.k8s.code_bundle import ManifestError

__all__ = ["CodeArchive", "build_code_archive", "CODE_ARCHIVE_FOLDER", "CODE_ARCHIVE_MAX_BYTES"]

CODE_ARCHIVE_FOLDER = "ray-efa-code"
"""The folder under storagePath that holds the zips (not a plausible Ray Train run name)."""
CODE_ARCHIVE_MAX_BYTES = 1 << 30
"""Above 1 GiB of files, codeDir holds data or weights, which have their own settings (dataset, modelPath): refused,
rather than read into memory and uploaded for every job."""

_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can hold: no build time in the bytes
_FILE_MODE = 0o644 << 16


@dataclass(frozen=True, kw_only=True, slots=True)
class CodeArchive:
    """The zipped codeDir and what names it."""

    data: bytes
    files: int
    """How many files it holds."""
    sha256: str
    """Hex digest of `data`."""
    uri: str
    """Where the pods fetch it: <storagePath>/ray-efa-code/code-<sha256>.zip."""

    @property
    def file_name(self) -> str:
        """code-<sha256>.zip: its name in S3 and in the manifests' output folder."""
        return self.uri.rpartition("/")[2]

    def describe(self) -> str:
        return f"{self.files} files, {len(self.data) / 2**20:.1f} MiB zipped"


def build_code_archive(code_dir: Path, *, storage_path: str) -> CodeArchive:
    """Zip the files of `code_dir` that ship (core.user_code.code_files), paths relative to it, deterministically,
    for `storage_path` (an s3:// URL: ValueError otherwise).

    Raises ManifestError naming codeDir when it holds no file or more than CODE_ARCHIVE_MAX_BYTES of them."""
    if not storage_path.startswith("s3://"):
        raise ValueError(f"the code archive lives under an s3:// storagePath, got {storage_path!r}")
    try:
        return _build(code_dir, storage_path.rstrip("/"))
    except OSError as error:
        raise ManifestError(f"codeDir {code_dir} cannot be read: {error.filename}: {error.strerror or error}") from None


def _build(code_dir: Path, storage_path: str) -> CodeArchive:
    files = code_files(code_dir)
    if not files:
        raise ManifestError(f"codeDir {code_dir} holds no file that ships (hidden files and caches are left out)")
    total = sum(path.stat().st_size for _, path in files)
    if total > CODE_ARCHIVE_MAX_BYTES:
        largest = sorted(files, key=lambda f: f[1].stat().st_size, reverse=True)[:3]
        raise ManifestError(
            f"codeDir {code_dir} holds {total / 2**30:.1f} GiB, more than the {CODE_ARCHIVE_MAX_BYTES >> 30} GiB a "
            f"code archive may (largest: {', '.join(name for name, _ in largest)}); keep data and weights out of it: "
            "dataset, evalDataset and modelPath read them from S3 or the shared volume"
        )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, path in files:
            entry = zipfile.ZipInfo(name, date_time=_EPOCH)
            entry.external_attr = _FILE_MODE
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, path.read_bytes())
    data = buffer.getvalue()
    sha256 = hashlib.sha256(data).hexdigest()
    return CodeArchive(
        data=data, files=len(files), sha256=sha256, uri=f"{storage_path}/{CODE_ARCHIVE_FOLDER}/code-{sha256}.zip"
    )
