"""The `dataset` setting: parquet or JSON-lines files read with Ray Data, packed into seqLen + 1 token rows, one shard
per rank through Ray Train (`datasets=` on the trainer, `ray.train.get_dataset_shard` in the loop).

Driver side (before Ray Train starts): `inspect` lists the files (local or s3://, through pyarrow's filesystems) and
finds the column, so that a missing path or a file without `text` / `input_ids` is exit 2 naming the setting;
`build_datasets` builds the pipeline:

    read_parquet / read_json (one read task per file, files in a seeded order)
      -> map_batches(_pack): keep this split's documents (evalFraction: a crc32 hash of each document picks the
         held-out ones, the same on every run), tokenize `text` with the model's tokenizer and append EOS to every
         document (an `input_ids` column is taken as it is), concatenate, cut into rows of seqLen + 1 tokens (inputs
         and their shifted labels); each block's tail shorter than a row is dropped.

Deterministic per seed: the file order comes from the seed, each epoch's shuffle of a rank's rows (windows of
SHUFFLE_WINDOW rows, whatever the micro batch) from seed and epoch, and
the shards are cut with `preserve_order` on. Ray Data documents that a seed alone does not fix the row order (tasks
finish in any order) unless `DataContext.execution_options.preserve_order` is set (ray.data.FileShuffleConfig,
ray.data.RandomSeedConfig); with it, Ray's OutputSplitter ignores locality hints "to ensure determinism" and hands
each block to the shard with the fewest rows so far, so every rank gets the same rows on every run of the same files
and world size.

Resume: open-source Ray Data keeps no iterator state in a checkpoint; a restarted run iterates each epoch from its
start (mid-epoch resumption is an Anyscale RayTurbo feature: https://docs.anyscale.com/rayturbo/mid-epoch-resumption).
So the checkpoint records (epoch, micro-batches consumed in it), and a resumed rank re-reads its shard from the
epoch's start and skips that many micro-batches: no batch repeated or skipped, at the cost of re-reading them. The
rank's row order does not depend on microBatch, so a resume at another one (training.checkpoint.remap_train_state:
the same samples counted in its micro-batches) trains each sample of the epoch exactly once.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch
    from ray.data import Dataset
    from ray.train import DataConfig

    from ray_efa.core.settings import Problem, Settings

__all__ = [
    "DataFiles",
    "inspect",
    "dataset_problems",
    "Tokenizer",
    "load_tokenizer",
    "build_datasets",
    "data_config",
    "ShardBatches",
    "SHUFFLE_WINDOW",
    "DataTooSmall",
    "too_small",
    "TRAIN",
    "EVAL",
    "ROW_COLUMN",
]

TRAIN, EVAL = "train", "eval"
ROW_COLUMN = "tokens"
"""The packed dataset's one column: rows of seqLen + 1 token ids (int32)."""
_FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}
_COLUMNS = ("input_ids", "text")  # an input_ids column wins: already tokenized


class DataTooSmall(ValueError):
    """A data set holds fewer rows than the run needs; the message says how many it has."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DataFiles:
    """The files of a dataset setting, and what they hold."""

    key: str
    """The setting (dataset or evalDataset)."""
    path: str
    files: tuple[str, ...]
    """Sorted paths as pyarrow's filesystem names them (no s3:// scheme)."""
    format: Literal["parquet", "json"]
    column: Literal["text", "input_ids"]
    filesystem: Any
    """pyarrow.fs.FileSystem of `files`."""


def _list(path: str):
    import pyarrow.fs as pafs

    filesystem, root = pafs.FileSystem.from_uri(path)
    info = filesystem.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        return filesystem, None
    if info.type == pafs.FileType.File:
        return filesystem, [root]
    found = filesystem.get_file_info(pafs.FileSelector(root, recursive=True))
    return filesystem, sorted(f.path for f in found if f.type == pafs.FileType.File)


def _dangling_links(path: str) -> list[tuple[str, str]]:
    """(link, target) of each symbolic link at or under a local `path` whose target does not exist (a data file
    moved or deleted): pyarrow's listing leaves them out, so that "does not exist" or "holds no .parquet files"
    would hide the cause. Nothing for s3:// and other filesystems' paths."""
    if "://" in path:
        return []
    root = Path(path).expanduser()
    if root.is_symlink() and not root.exists():
        return [(str(root), os.readlink(root))]
    if not root.is_dir():
        return []
    found = []
    for folder, folders, files in os.walk(root):
        for name in sorted([*folders, *files]):
            entry = Path(folder) / name
            if entry.is_symlink() and not entry.exists():
                found.append((str(entry), os.readlink(entry)))
    return sorted(found)


def _columns(filesystem, first: str, fmt: str) -> list[str]:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(first, filesystem=filesystem).names)
    with filesystem.open_input_stream(first) as stream:
        line = stream.read(1 << 20).decode("utf-8", errors="replace").split("\n", 1)[0]
    record = json.loads(line) if line.strip() else {}
    return list(record) if isinstance(record, dict) else []


def inspect(key: str, path: str) -> DataFiles:
    """The files of `path` and their column; SettingsError naming `key` when there are none or they lack a column."""
    from ray_efa.core.settings import Problem, SettingsError

    def fail(message: str) -> SettingsError:
        return SettingsError([Problem(key, path, message)])

    try:
        filesystem, listed = _list(path)
    except OSError as error:  # an s3 error: access denied, no such bucket, no credentials
        raise fail(f"cannot be listed: {error}") from None
    if dangling := _dangling_links(path):  # pyarrow lists a link to nothing as nothing at all
        shown = ", ".join(f"{link} -> {target}" for link, target in dangling[:3])
        more = f" and {len(dangling) - 3} more" if len(dangling) > 3 else ""
        raise fail(f"holds symbolic links whose targets do not exist: {shown}{more}")
    if listed is None:
        raise fail("does not exist")
    # Files whose names start with '.' or '_' are not data (Spark's _SUCCESS, .crc files), as Ray Data skips them.
    data = [f for f in listed if not f.rsplit("/", 1)[-1].startswith((".", "_"))]
    kinds = {_FORMATS.get("." + f.rsplit(".", 1)[-1]) for f in data} - {None}
    files = [f for f in data if _FORMATS.get("." + f.rsplit(".", 1)[-1])]
    if not files:
        raise fail(f"holds no .parquet or .jsonl files ({len(listed)} other files)")
    if len(kinds) > 1:
        raise fail("mixes parquet and JSON-lines files: keep one format per data set")
    fmt = kinds.pop()
    try:
        columns = _columns(filesystem, files[0], str(fmt))
    except (OSError, ValueError) as error:
        raise fail(f"{files[0]} cannot be read as {fmt}: {error}") from None
    column = next((c for c in _COLUMNS if c in columns), None)
    if column is None:
        raise fail(f"has neither a text nor an input_ids column ({files[0]} has {', '.join(columns) or 'no columns'})")
    return DataFiles(
        key=key,
        path=path,
        files=tuple(files),
        format=fmt,  # pyright: ignore[reportArgumentType]
        column=column,  # type: ignore[arg-type]
        filesystem=filesystem,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Tokenizer:
    """What the read tasks need of the model's tokenizer: its serialized form (tokenizers' JSON) and EOS."""

    json: str
    eos_id: int
    size: int


def load_tokenizer(folder: str, *, key: str = "modelPath", value: str | None = None) -> Tokenizer:
    """The tokenizer saved in `folder` (save_pretrained output), through transformers' AutoTokenizer."""
    from transformers import AutoTokenizer

    from ray_efa.core.settings import Problem, SettingsError

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as error:
        raise SettingsError(
            [Problem(key, value or folder, f"has no tokenizer transformers can load: {error}")]
        ) from None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or tokenizer.eos_token_id is None:
        raise SettingsError(
            [
                Problem(
                    key,
                    value or folder,
                    "needs a fast tokenizer with an EOS token (tokenizer.json "
                    "and eos_token in tokenizer_config.json) to pack documents",
                )
            ]
        )
    return Tokenizer(json=backend.to_str(), eos_id=int(tokenizer.eos_token_id), size=len(tokenizer))


@lru_cache(maxsize=2)
def _tokenizer(text: str):
    from tokenizers import Tokenizer as FastTokenizer

    return FastTokenizer.from_str(text)


def _held_out(documents: list, fraction: float) -> np.ndarray:
    """Whether each document is held out: crc32 of its bytes below `fraction` of 2**32 (run-, seed- and
    layout-independent)."""
    limit = fraction * 2**32
    codes = [
        zlib.crc32(d.encode("utf-8") if isinstance(d, str) else np.asarray(d, dtype=np.int64).tobytes())
        for d in documents
    ]
    return np.asarray(codes, dtype=np.float64) < limit


def _pack(
    batch: dict[str, np.ndarray],
    *,
    column: str,
    row: int,
    split: str,
    fraction: float,
    tokenizer: str | None,
    eos_id: int,
    vocab_size: int,
    source: str,
) -> dict[str, np.ndarray]:
    """One block of documents -> rows of `row` tokens (map_batches with batch_size None: the whole block)."""
    documents = list(batch[column])
    if fraction > 0:
        keep = _held_out(documents, fraction)
        documents = [d for d, held in zip(documents, keep, strict=True) if held == (split == EVAL)]
    if column == "text":
        encoded = (
            _tokenizer(tokenizer).encode_batch([str(d) for d in documents], add_special_tokens=False)
            if documents
            else []
        )  # type: ignore[arg-type]
        pieces = [np.asarray(e.ids + [eos_id], dtype=np.int32) for e in encoded]
    else:
        pieces = [np.asarray(d, dtype=np.int64) for d in documents]
    stream = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    if stream.size and (stream.min() < 0 or stream.max() >= vocab_size):
        raise ValueError(f"{source}: token id {int(stream.max())} is outside the model's {vocab_size} embeddings")
    rows = stream.size // row
    return {ROW_COLUMN: stream[: rows * row].astype(np.int32).reshape(rows, row)}


def _read(files: DataFiles, order: list[str]) -> Dataset:
    import ray.data

    read = ray.data.read_parquet if files.format == "parquet" else ray.data.read_json
    kwargs: dict[str, Any] = {} if files.format == "parquet" else {"lines": True}
    # One read task per file: the blocks, and with them the packed rows, do not depend on the cluster's size. The
    # column selection is pushed down into the parquet read.
    dataset = read(order, filesystem=files.filesystem, override_num_blocks=len(order), **kwargs)
    return dataset.select_columns([files.column])


def build_datasets(settings: Settings, *, model_folder: str | None, vocab_size: int) -> dict[str, Dataset]:
    """{"train": ..., "eval": ...} (eval only with evalFraction or evalDataset) for TorchTrainer(datasets=...).

    model_folder: where modelPath's tokenizer is on this machine (a text column is tokenized with it). An eval split
    with no sequence is a SettingsError.
    The eval split is materialized here, once: every evaluation then streams the same rows from the object store
    instead of re-reading (and, with evalFraction, re-hashing) the whole data set.
    """
    from ray.data import DataContext

    context = DataContext.get_current()  # each Dataset keeps a copy of it: set before the reads
    # Our progress line says how training goes; Ray Data's progress bars and per-execution lines, once per epoch and
    # rank, would bury it.
    context.enable_progress_bars = context.enable_operator_progress_bars = False
    context.print_on_execution_start = False
    quiet_ray_data()
    t = settings.training
    assert t.dataset is not None
    train = inspect("dataset", t.dataset)
    held = inspect("evalDataset", t.eval_dataset) if t.eval_dataset is not None else None
    text = "text" in (train.column, held.column if held else None)
    tokenizer = load_tokenizer(model_folder, value=t.model_path) if text and model_folder is not None else None
    order = [train.files[i] for i in np.random.default_rng([t.seed, 1]).permutation(len(train.files))]

    def packed(files: DataFiles, paths: list[str], split: str, fraction: float) -> Dataset:
        if files.column == "text" and tokenizer is None:
            raise _no_tokenizer(files)
        udf: Any = _pack  # Ray's UDF type knows no keyword arguments; fn_kwargs supplies them
        return _read(files, paths).map_batches(
            udf,
            batch_size=None,
            batch_format="numpy",
            fn_kwargs={
                "column": files.column,
                "row": t.seq_len + 1,
                "split": split,
                "fraction": fraction,
                "tokenizer": tokenizer.json if tokenizer else None,
                "eos_id": tokenizer.eos_id if tokenizer else 0,
                "vocab_size": vocab_size,
                "source": f"{files.key} {files.path}",
            },
        )

    datasets = {TRAIN: packed(train, order, TRAIN, t.eval_fraction)}
    if t.eval_fraction > 0:
        datasets[EVAL] = packed(train, list(train.files), EVAL, t.eval_fraction).materialize()
    elif held is not None:
        datasets[EVAL] = packed(held, list(held.files), EVAL, 0.0).materialize()
    if EVAL in datasets:
        rows = datasets[EVAL].count()  # materialized: counted, not read again
        if rows == 0:
            from ray_efa.core.settings import Problem, SettingsError

            key, value = ("evalFraction", t.eval_fraction) if t.eval_fraction > 0 else ("evalDataset", t.eval_dataset)
            raise SettingsError(
                [
                    Problem(
                        key,
                        value,
                        (
                            f"holds no held-out sequence of seqLen + 1 = {t.seq_len + 1} tokens after packing (each document's "
                            "tokens are packed into rows, and a tail shorter than a row is dropped): hold out more documents, "
                            "or lower seqLen"
                        ),
                    )
                ]
            )
    return datasets


def _no_tokenizer(files: DataFiles):
    from ray_efa.core.settings import Problem, SettingsError

    return SettingsError(
        [
            Problem(
                files.key,
                files.path,
                "has a text column, which needs a tokenizer: set modelPath to "
                "a model with its tokenizer files, or pre-tokenize into an "
                "input_ids column",
            )
        ]
    )


def dataset_problems(settings: Settings, *, model_folder: str | None) -> list[Problem]:
    """The data settings' problems found before Ray starts: paths that do not exist or hold no usable files, a text
    column without a tokenizer to read it (model_folder: modelPath's files on this machine)."""
    from ray_efa.core.settings import SettingsError

    problems: list[Problem] = []
    t = settings.training
    needs_tokenizer = None
    for key, path in (("dataset", t.dataset), ("evalDataset", t.eval_dataset)):
        if path is None:
            continue
        try:
            files = inspect(key, path)
        except SettingsError as error:
            problems += error.problems
            continue
        if files.column == "text":
            needs_tokenizer = needs_tokenizer or files
    if needs_tokenizer is not None:
        try:
            if model_folder is None:
                raise _no_tokenizer(needs_tokenizer)
            load_tokenizer(model_folder, value=t.model_path)
        except SettingsError as error:
            problems += error.problems
    return problems


def quiet_ray_data() -> None:
    """Ray Data's INFO lines ("execution finished", once per epoch and rank) off; its warnings stay."""
    import logging

    logging.getLogger("ray.data").setLevel(logging.WARNING)


def data_config() -> DataConfig:
    """Ray Train's DataConfig: the train split cut into one shard per rank, in a deterministic order (see the
    docstring); the eval split goes whole to every rank, which evaluates its slice of it (training.evaluate)."""
    from ray.data import ExecutionOptions
    from ray.train import DataConfig

    return DataConfig(
        datasets_to_split=[TRAIN], execution_options=ExecutionOptions(preserve_order=True, verbose_progress=False)
    )


def too_small(what: str, *, rows: int, row_tokens: int, needed: int, world_size: int) -> DataTooSmall:
    """The error of a data set with fewer packed rows than `needed`, saying how many tokens it has."""
    return DataTooSmall(
        f"{what} is too small: it holds {rows:,} sequences of seqLen + 1 = {row_tokens} tokens after packing "
        f"({rows * row_tokens:,} tokens), and one step needs {needed:,} ({needed * row_tokens:,} tokens: microBatch "
        f"sequences on each of {world_size} ranks); add data or lower seqLen or microBatch"
    )


SHUFFLE_WINDOW = 256
"""Rows a rank's seeded shuffle permutes at a time (ShardBatches.rows): fixed, whatever microBatch is."""


class BatchSource(Protocol):
    """What ShardBatches reads of a rank's shard: ray.data.DataIterator's iter_batches (a test's double has it too)."""

    def iter_batches(self, *, batch_size: int, batch_format: str, drop_last: bool) -> Iterable[Any]: ...


class ShardBatches:
    """This rank's micro-batches of its `get_dataset_shard` iterator, epoch after epoch, from a saved position."""

    def __init__(
        self,
        shard: BatchSource,
        *,
        micro_batch: int,
        row_tokens: int,
        seed: int,
        epoch: int = 0,
        consumed: int = 0,
        world_size: int = 1,
        what: str = "dataset",
    ) -> None:
        self.shard: BatchSource
        self.micro_batch: int
        self.row_tokens: int
        self.seed: int
        self.epoch: int
        self.consumed: int
        self.world_size: int
        self.what: str
        self.shard, self.micro_batch, self.row_tokens, self.seed = shard, micro_batch, row_tokens, seed
        self.epoch, self.consumed = epoch, consumed
        self.world_size, self.what = world_size, what
        self._batches = self._open(skip=consumed)

    def rows(self) -> Iterator[np.ndarray]:
        """This rank's rows of the epoch in a seeded order that does not depend on microBatch: the shard's rows (in
        their deterministic order) in windows of SHUFFLE_WINDOW, each permuted by (seed, epoch, window). Ray Data's
        local shuffle buffer would not do: its order depends on the batch size it is asked for, so a resume at another
        microBatch trained some samples twice and skipped others."""
        batches = self.shard.iter_batches(batch_size=SHUFFLE_WINDOW, batch_format="numpy", drop_last=False)
        for window, batch in enumerate(batches):
            tokens = np.asarray(batch[ROW_COLUMN])
            yield from tokens[np.random.default_rng([self.seed, self.epoch, window]).permutation(len(tokens))]

    def _open(self, skip: int) -> Iterator[np.ndarray]:
        rows, index, pending = 0, 0, []
        for row in self.rows():
            rows += 1
            pending.append(row)
            if len(pending) < self.micro_batch:
                continue
            if index >= skip:
                yield np.stack(pending)
            index, pending = index + 1, []
        # the epoch's last, partial micro-batch (pending) is dropped, as every rank's is (equal shards)
        if rows < self.micro_batch:
            raise too_small(
                self.what,
                rows=rows * self.world_size,
                row_tokens=self.row_tokens,
                needed=self.micro_batch * self.world_size,
                world_size=self.world_size,
            )

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, labels), each (micro_batch, seqLen) int64; a new epoch starts where the last one ends."""
        import torch

        while True:
            try:
                tokens = next(self._batches)
                break
            except StopIteration:
                self.epoch, self.consumed = self.epoch + 1, 0
                self._batches = self._open(skip=0)
        self.consumed += 1
        tensor = torch.from_numpy(tokens.astype(np.int64))
        return tensor[:, :-1], tensor[:, 1:]

    def state(self) -> dict[str, int]:
        """The position to resume from: the epoch and the micro-batches consumed in it."""
        return {"epoch": self.epoch, "consumed": self.consumed}
