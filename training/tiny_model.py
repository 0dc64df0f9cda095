"""A tiny model folder to fine-tune offline: a byte-level BPE tokenizer and a tiny Qwen2, trained on real English.

`ray-efa tiny-model DIR` writes one, and `ray-efa train --local` fine-tunes one it keeps in its cache
(tiny_model_cache), so that modelPath, dataset and evalFraction can be tried on a laptop before a cluster:

    DIR/tiny-qwen2/  config.json + model.safetensors (random weights, the `tiny` preset's shape) and the tokenizer
                 (tokenizer.json, tokenizer_config.json: what save_pretrained writes, what modelPath takes); the
                 folder's name is what run names and captions call the model (local-tiny-qwen2-<time>)
    DIR/data/    two parquet files with a `text` column, one English paragraph per row (what dataset takes)
    DIR/SOURCES.txt  the files the paragraphs came from

The text is the license files that the installed Python packages ship in their *.dist-info folders (torch's, ray's,
transformers', numpy's ...): real English prose, on every machine that has the training dependencies, the container
included, with nothing to download and nothing copied into this package. It differs a little between installs
(other packages, other versions); SOURCES.txt says which files a folder was made from, and the cache is keyed by
the text, so a changed install gets a folder of its own.

Needs the train extra (tokenizers, transformers, torch, pyarrow); imports only the standard library and core here.
"""

from __future__ import annotations

import hashlib
import site
import sys
from dataclasses import dataclass
from pathlib import Path

from ray_efa.core.model_source import model_cache_root
from ray_efa.core.output_dir import RECORD_NAME, publish

__all__ = [
    "MODEL_FOLDER",
    "EOS",
    "VOCAB",
    "TINY_VOCAB",
    "TinyModel",
    "TinyModelError",
    "license_texts",
    "save_tokenizer",
    "save_tiny_qwen2",
    "save_model_folder",
    "write_parquet",
    "write_tiny_model",
    "make_tiny_model",
    "tiny_model_cache",
]

MODEL_FOLDER = "tiny-qwen2"
"""The model's folder in a tiny model folder (modelPath): its name names the runs that fine-tune it."""
EOS = "<|endoftext|>"
"""The tokenizer's one special token: the packer puts it between documents."""
VOCAB = 512
"""The tokenizer's vocabulary; the saved model's embeddings are TINY_VOCAB (more: Qwen pads its embeddings too)."""
TINY_VOCAB = 640
MIN_PARAGRAPHS = 100
"""Fewer license paragraphs than this make a held-out split too small to say anything: refused."""
MAX_CHARS = 400_000
"""At most this much text (about 150k tokens): enough for the local run's 60 steps, quick to tokenize on 2 cores."""
EVAL_FRACTION = 0.1
"""The share of the paragraphs the local run holds out (evalFraction)."""
_FORMAT = "2"
"""Part of the cache key: bump it when what write_tiny_model makes changes."""


class TinyModelError(ValueError):
    """No folder can be made (too little license text on this machine); the message says what was found."""


@dataclass(frozen=True)
class TinyModel:
    """Where a tiny model folder's parts are: modelPath and dataset."""

    root: Path
    model: Path
    data: Path
    paragraphs: int
    """Rows of the data set (license paragraphs)."""

    def context(self) -> dict[str, object]:
        """The settings that fine-tune it with a held-out split (as `-c` takes them)."""
        return {"modelPath": str(self.model), "dataset": str(self.data), "evalFraction": EVAL_FRACTION}


def _license_files() -> list[Path]:
    roots = [Path(p) for p in site.getsitepackages()]
    if site.ENABLE_USER_SITE:  # `pip install --user`; off in a venv, so a venv's texts are its own
        roots.append(Path(site.getusersitepackages()))
    return sorted({f for root in roots for f in root.glob("*.dist-info/**/LICENSE*") if f.is_file()})


def _paragraphs(limit: int | None = None, max_chars: int | None = None) -> tuple[list[str], list[Path]]:
    paragraphs: list[str] = []
    sources: list[Path] = []
    seen: set[str] = set()
    size = 0
    for path in _license_files():
        used = False
        for block in path.read_text(encoding="utf-8", errors="ignore").split("\n\n"):
            text = " ".join(block.split())
            if len(text) < 200 or text in seen:  # headings, copyright lines and the many copies of MIT's text
                continue
            if (limit is not None and len(paragraphs) >= limit) or (
                max_chars is not None and size + len(text) > max_chars
            ):
                return paragraphs, sources
            seen.add(text)
            paragraphs.append(text)
            size += len(text)
            used = True
        if used:
            sources.append(path)
    return paragraphs, sources


def license_texts(limit: int | None = None, *, max_chars: int | None = None) -> list[str]:
    """Paragraphs (200 characters or more, each once) of the installed packages' license files, in a stable order:
    the first `limit` of them, or as many as fit `max_chars`. TinyModelError when there are fewer than `limit` (or
    than MIN_PARAGRAPHS without a limit)."""
    paragraphs, _ = _paragraphs(limit, max_chars)
    _check_enough(paragraphs, limit if limit is not None else MIN_PARAGRAPHS)
    return paragraphs


def _check_enough(paragraphs: list[str], needed: int) -> None:
    if len(paragraphs) < needed:
        raise TinyModelError(
            f"only {len(paragraphs)} license paragraphs of 200 characters or more in the "
            f"*.dist-info folders of {', '.join(site.getsitepackages())}; {needed} are needed "
            "(is the train extra installed: pip install 'ray-efa-stack[train]'?)"
        )


def save_tokenizer(folder: Path, texts: list[str], vocab_size: int = VOCAB) -> None:
    """A byte-level BPE trained on `texts`, saved as transformers saves a fast tokenizer (tokenizer.json + config)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS).save_pretrained(folder)


def save_tiny_qwen2(folder: Path, *, vocab_size: int = TINY_VOCAB, seed: int = 0) -> None:
    """The tiny preset's shape with `vocab_size` embeddings, random weights, save_pretrained (safetensors)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.utils import logging

    from ray_efa.core.models import model_preset

    values = model_preset("tiny").config_dict()
    values["vocab_size"] = vocab_size
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(Qwen2Config(**values))
    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # "Writing model shards: 1/1" for one 1.5 MB file says nothing
    try:
        model.save_pretrained(folder)
    finally:
        if shown:
            logging.enable_progress_bar()


def save_model_folder(folder: Path, texts: list[str], *, vocab_size: int = TINY_VOCAB) -> Path:
    """Weights + tokenizer in one folder: what a fine-tune's modelPath holds."""
    save_tiny_qwen2(folder, vocab_size=vocab_size)
    save_tokenizer(folder, texts)
    return folder


def write_parquet(folder: Path, texts: list[str], files: int = 2, column: str = "text") -> list[Path]:
    """`texts` split over `files` parquet files with one `column` (plus an id column Ray Data must ignore)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(files):
        part = texts[index::files]
        path = folder / f"part-{index:05d}.parquet"
        pq.write_table(pa.table({"id": list(range(len(part))), column: part}), path)
        paths.append(path)
    return paths


def _selection() -> tuple[list[str], list[Path]]:
    paragraphs, sources = _paragraphs(max_chars=MAX_CHARS)
    _check_enough(paragraphs, MIN_PARAGRAPHS)
    return paragraphs, sources


def write_tiny_model(root: Path, texts: list[str] | None = None, sources: list[Path] | None = None) -> TinyModel:
    """Write root/tiny-qwen2, root/data and root/SOURCES.txt (root may exist; use make_tiny_model for a user's folder).
    `texts`: default the license paragraphs of this machine (license_texts), at most MAX_CHARS of them."""
    if texts is None:
        texts, sources = _selection()
    save_model_folder(root / MODEL_FOLDER, texts)
    write_parquet(root / "data", texts, files=2)
    listed = "".join(f"{p}\n" for p in sources or [])
    (root / "SOURCES.txt").write_text(
        f"{len(texts)} paragraphs ({sum(map(len, texts)):,} characters) of English text, one per row of data/, "
        f"from these license files of the Python packages installed on the machine that made this folder "
        f"(Python {sys.version.split()[0]}):\n{listed}",
        encoding="utf-8",
    )
    return TinyModel(root, root / MODEL_FOLDER, root / "data", len(texts))


def make_tiny_model(out: Path | str, *, command: str = "ray-efa tiny-model") -> TinyModel:
    """write_tiny_model into `out` through core.output_dir.publish: a new or empty folder, or one ray-efa wrote
    before (replaced whole); OutputDirError, writing nothing, for any other folder."""
    texts, sources = _selection()  # before the folder is touched: too little text writes nothing
    publish(out, lambda staging: write_tiny_model(staging, texts, sources), command=command)
    root = Path(out).expanduser().resolve()
    return TinyModel(root, root / MODEL_FOLDER, root / "data", len(texts))


def tiny_model_cache() -> TinyModel:
    """The tiny model folder of this machine's license texts, made once: <model cache>/tiny-model/<key>, where the
    model cache is $RAY_EFA_MODEL_CACHE or ~/.cache/ray-efa/models and the key is a hash of the text (another
    install's text gets another folder). A folder is reused only once it is complete (publish's record written)."""
    texts, sources = _selection()
    key = hashlib.sha256("\n\n".join([_FORMAT, *texts]).encode("utf-8")).hexdigest()[:16]
    root = model_cache_root() / "tiny-model" / key
    if (root / RECORD_NAME).is_file() and (root / MODEL_FOLDER / "config.json").is_file() and (root / "data").is_dir():
        return TinyModel(root, root / MODEL_FOLDER, root / "data", len(texts))
    publish(root, lambda staging: write_tiny_model(staging, texts, sources), command="ray-efa train --local")
    return TinyModel(root, root / MODEL_FOLDER, root / "data", len(texts))
