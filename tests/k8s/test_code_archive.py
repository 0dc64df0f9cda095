"""codeDir as a zip under storagePath (k8s.code_archive): the files that ship, deterministic bytes, a URI named by the
content, unpacked by the pods' init container into the same tree; refused with codeDir named when it is empty or holds
data rather than code."""

from __future__ import annotations

import io
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from ray_efa.core.user_code import code_files
from ray_efa.k8s import code_archive
from ray_efa.k8s.code_archive import build_code_archive
from ray_efa.k8s.code_bundle import ManifestError
from tests.k8s.conftest import fetch_like_the_pods

STORAGE = "s3://research-ckpt/ray-efa"


def _code(root: Path) -> Path:
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("def fit(config): ...\n")
    (root / "pkg" / "weights.bin").write_bytes(bytes(range(256)) * 64)
    (root / "pkg" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "README.md").write_text("# my training\n")
    return root


def test_the_zip_holds_what_ships_and_the_pods_unpack_the_same_tree(tmp_path):
    # GIVEN a codeDir with a binary file (no ConfigMap can hold it), a cache and a hidden folder
    code = _code(tmp_path / "code")
    archive = build_code_archive(code, storage_path=STORAGE)
    # THEN the zip holds exactly the files that ship, and the init container unpacks them byte for byte
    shipped = [name for name, _ in code_files(code)]
    assert shipped == ["README.md", "pkg/__init__.py", "pkg/weights.bin"]
    assert zipfile.ZipFile(io.BytesIO(archive.data)).namelist() == shipped
    dest = fetch_like_the_pods(archive.data, tmp_path, name=archive.file_name)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == shipped
    for name in shipped:
        assert (dest / name).read_bytes() == (code / name).read_bytes(), name
    assert archive.files == 3


def test_the_init_container_refuses_an_archive_that_is_not_what_its_name_says(tmp_path):
    # GIVEN the zip of one codeDir stored under the name of another's (what a writer of the bucket could do)
    code = _code(tmp_path / "code")
    archive = build_code_archive(code, storage_path=STORAGE)
    (code / "pkg" / "__init__.py").write_text("import os; os.system('curl evil')\n")
    tampered = build_code_archive(code, storage_path=STORAGE)
    # WHEN the pods' init container fetches it THEN it fails naming the hash, and unpacks nothing
    with pytest.raises(subprocess.CalledProcessError) as failed:
        fetch_like_the_pods(tampered.data, tmp_path, name=archive.file_name)
    assert f"is not the archive its name says (sha256 {tampered.sha256})" in failed.value.stderr
    assert not (tmp_path / "user").exists() or not any((tmp_path / "user").iterdir())


def test_the_same_code_gives_the_same_bytes_and_uri_and_other_code_another(tmp_path):
    code = _code(tmp_path / "code")
    first = build_code_archive(code, storage_path=STORAGE)
    # WHEN the files are touched (a checkout, a copy) THEN nothing changes: no time is in the bytes
    os.utime(code / "pkg" / "__init__.py", (1_900_000_000, 1_900_000_000))
    again = build_code_archive(code, storage_path=STORAGE)
    assert again.data == first.data and again.sha256 == first.sha256
    assert first.uri == f"s3://research-ckpt/ray-efa/ray-efa-code/code-{first.sha256}.zip"
    assert build_code_archive(code, storage_path=STORAGE + "/").uri == first.uri
    # WHEN one byte of code changes THEN the URI does: a running job's code is never replaced under it
    (code / "pkg" / "__init__.py").write_text("def fit(config): return 1\n")
    assert build_code_archive(code, storage_path=STORAGE).uri != first.uri


def test_a_uri_needs_an_s3_storage_path(tmp_path):
    with pytest.raises(ValueError, match="s3:// storagePath, got '/mnt/fsx/runs'"):
        build_code_archive(_code(tmp_path / "code"), storage_path="/mnt/fsx/runs")


def test_an_empty_code_dir_or_one_holding_data_is_refused_naming_it(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    (empty / ".venv").mkdir(parents=True)
    (empty / ".venv" / "pyvenv.cfg").write_text("home = /usr\n")
    with pytest.raises(ManifestError, match=f"codeDir {empty} holds no file that ships"):
        build_code_archive(empty, storage_path=STORAGE)
    # a limit of 10 KiB stands in for 1 GiB: the same check
    monkeypatch.setattr(code_archive, "CODE_ARCHIVE_MAX_BYTES", 10 * 1024)
    code = _code(tmp_path / "code")
    with pytest.raises(ManifestError) as raised:
        build_code_archive(code, storage_path=STORAGE)
    assert f"codeDir {code} holds" in str(raised.value) and "largest: pkg/weights.bin" in str(raised.value)
    assert "dataset, evalDataset and modelPath" in str(raised.value)


def test_a_file_that_cannot_be_read_is_refused_naming_it(tmp_path):
    # GIVEN a link to a file that is gone (as a moved data folder leaves it); os.walk lists it among the files
    code = _code(tmp_path / "code")
    (code / "pkg" / "data.parquet").symlink_to(tmp_path / "moved" / "data.parquet")
    with pytest.raises(ManifestError, match=r"codeDir .* cannot be read: .*data.parquet: No such file or directory"):
        build_code_archive(code, storage_path=STORAGE)
