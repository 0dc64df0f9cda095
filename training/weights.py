"""modelPath's files on this node: a local folder as it is, s3:// downloaded once per node, hf:// through the Hub cache.

Once per node: the first process of the node (a rank, or the driver fetching config and tokenizer) takes an exclusive
lock file beside the copy (fcntl.flock) and downloads; the node's other ranks block on that lock, then find every file
present at its size and download nothing. No process-group barrier is involved, so a download may take longer than
the collectives' timeout. The copy lives on node-local disk (core.model_source.model_cache_root; the pods point it at
their model-cache volume), so a restarted worker group on the same node reuses it.

s3:// uses boto3's default credential chain, which in the pods is EKS Pod Identity (botocore's container provider);
hf:// uses huggingface_hub.snapshot_download (its own cache, HF_HUB_CACHE), offline with HF_HUB_OFFLINE=1.
"""

from __future__ import annotations

import fcntl
import fnmatch
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray_efa.core.model_source import CONFIG_FILE, ModelSource, hub_cache_root, parse_model_path, s3_cache_dir

if TYPE_CHECKING:
    import torch

__all__ = ["fetch_model", "describe_loaded", "SMALL_FILES", "WEIGHT_PATTERNS", "ModelFetchError"]

SMALL_FILES = (
    CONFIG_FILE,
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
)
"""Config and tokenizer: what the driver needs to plan and to tokenize, without the weights."""
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json")
"""The weights training loads (save_pretrained's default format); other formats under the prefix are not fetched."""
_PROGRESS_EVERY_S = 10.0


class ModelFetchError(RuntimeError):
    """modelPath cannot be fetched: the message names it and why (`reason`: why alone)."""

    def __init__(self, model_path: str, reason: str) -> None:
        self.model_path: str
        self.reason: str
        self.model_path, self.reason = model_path, reason
        super().__init__(f"modelPath {model_path}: {reason}")


def _wanted(name: str, small_only: bool) -> bool:
    base = name.rsplit("/", 1)[-1]
    if base in SMALL_FILES:
        return True
    return not small_only and any(fnmatch.fnmatch(base, pattern) for pattern in WEIGHT_PATTERNS)


class _NodeLock:
    """One holder per node at a time: the processes of one node share its disk, hence a lock file beside `folder`."""

    def __init__(self, folder: Path) -> None:
        folder.parent.mkdir(parents=True, exist_ok=True)
        self.path = folder.parent / f".{folder.name}.lock"

    def __enter__(self) -> _NodeLock:
        self.handle = open(self.path, "w")
        fcntl.flock(self.handle, fcntl.LOCK_EX)  # blocks while another process of the node downloads
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class _Progress:
    """Bytes done of a download, said every _PROGRESS_EVERY_S seconds (boto3 calls back from its threads)."""

    def __init__(self, what: str, total: int, say: Callable[[str], None], clock: Callable[[], float] = time.monotonic):
        self.what, self.total, self.say, self.clock = what, total, say, clock
        self.done = 0
        self.started = self.last = clock()
        self._lock = threading.Lock()

    def __call__(self, chunk: int) -> None:
        with self._lock:
            self.done += chunk
            now = self.clock()
            if now - self.last >= _PROGRESS_EVERY_S:
                self.last = now
                self.say(self.line(now))

    def line(self, now: float) -> str:
        rate = self.done / max(now - self.started, 1e-9)
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return (
            f"model: {self.what}: {pct:.0f}% ({self.done / 1e9:.2f}/{self.total / 1e9:.2f} GB, {rate / 1e6:.0f} MB/s)"
        )


def _fetch_s3(source: ModelSource, *, small_only: bool, say: Callable[[str], None], client=None) -> Path:
    import boto3

    s3 = client or boto3.client("s3")
    folder = s3_cache_dir(source.bucket, source.prefix)
    base = f"{source.prefix}/" if source.prefix else ""
    with _NodeLock(folder):
        objects = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=source.bucket, Prefix=base):
            objects += [o for o in page.get("Contents", ()) if not o["Key"].endswith("/")]
        wanted = [o for o in objects if _wanted(o["Key"][len(base) :], small_only)]
        if not any(o["Key"][len(base) :] == CONFIG_FILE for o in wanted):
            raise ModelFetchError(source.text, f"no {CONFIG_FILE} under it ({len(objects)} objects)")
        missing = [o for o in wanted if not _present(folder / o["Key"][len(base) :], o["Size"])]
        if not missing:
            return folder
        total = sum(o["Size"] for o in missing)
        what = f"{source.text} -> {folder}"
        say(f"model: downloading {len(missing)} files ({total / 1e9:.2f} GB) of {what}")
        progress = _Progress(what, total, say)
        for obj in missing:
            target = folder / obj["Key"][len(base) :]
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
            s3.download_file(source.bucket, obj["Key"], str(partial), Callback=progress)
            os.replace(partial, target)  # a file at its final name is whole
        say(progress.line(time.monotonic()).replace(": 100%", ": done, 100%"))
    return folder


def _present(path: Path, size: int) -> bool:
    return path.is_file() and path.stat().st_size == size


def _fetch_hub(source: ModelSource, *, small_only: bool, say: Callable[[str], None]) -> Path:
    from huggingface_hub import snapshot_download

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    patterns: list[str] = [*SMALL_FILES, *([] if small_only else WEIGHT_PATTERNS)]
    say(
        f"model: {source.text}: {'looking up the Hub cache' if offline else 'snapshot_download from the Hub'} "
        f"({'config and tokenizer' if small_only else 'weights, config and tokenizer'})"
    )
    cache = hub_cache_root()
    try:
        # One snapshot_download per node at a time (the others then find the files cached); cache_dir explicitly:
        # huggingface_hub reads HF_HUB_CACHE once, at import, and the plan reads it at each call.
        with _NodeLock(cache / ("ray-efa--" + source.repo_id.replace("/", "--"))):
            folder = Path(
                snapshot_download(
                    source.repo_id,
                    revision=source.revision,
                    allow_patterns=patterns,
                    local_files_only=offline,
                    cache_dir=cache,
                )
            )
    except Exception as error:  # noqa: BLE001 - huggingface_hub raises many kinds; the message says which
        raise ModelFetchError(source.text, f"{type(error).__name__}: {error}") from None
    if not (folder / CONFIG_FILE).is_file():
        raise ModelFetchError(source.text, f"the repository has no {CONFIG_FILE}")
    return folder


def fetch_model(
    model_path: str, *, small_only: bool = False, say: Callable[[str], None] = _say, s3_client: Any = None
) -> Path:  # a boto3 S3 client: boto3 ships no types
    """The local folder of modelPath's files, fetching what this node lacks: config and tokenizer only with
    `small_only`, else the safetensors weights too. Raises ModelFetchError."""
    source = parse_model_path(model_path)
    if source.kind == "local":
        folder = Path(source.path)
        if not (folder / CONFIG_FILE).is_file():
            raise ModelFetchError(model_path, f"has no {CONFIG_FILE} (it must be a save_pretrained folder)")
        return folder
    if source.kind == "hf":
        return _fetch_hub(source, small_only=small_only, say=say)
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return _fetch_s3(source, small_only=small_only, say=say, client=s3_client)
    except (BotoCoreError, ClientError) as error:  # no credentials, access denied, no such bucket
        raise ModelFetchError(model_path, f"cannot be read from S3: {error}") from None


def describe_loaded(model_path: str, folder: Path, model: torch.nn.Module) -> str:
    """Rank 0's line on what was loaded: where from, parameters, the stored dtype and the one training uses."""
    import json

    config = json.loads((folder / CONFIG_FILE).read_text())
    stored = config.get("dtype") or config.get("torch_dtype") or "unknown"
    parameters = sum(p.numel() for p in model.parameters())
    dtype = next(model.parameters()).dtype
    where = "" if str(folder) == model_path else f" (from {folder})"
    return (
        f"model: loaded {model_path}{where}: {parameters:,} parameters, stored {stored}, "
        f"trained in {str(dtype).removeprefix('torch.')} master weights"
    )
