"""Real training artifacts, made in the test: a BPE tokenizer trained with `tokenizers` on real English (the license
texts installed with the venv's packages), a tiny Qwen2 saved with save_pretrained, and parquet / JSON-lines files of
those texts written with pyarrow."""

from __future__ import annotations

import json
import site
from pathlib import Path

EOS = "<|endoftext|>"
VOCAB = 512
"""The tokenizer's vocabulary; the saved model's embeddings are TINY_VOCAB (more: Qwen pads its embeddings too)."""
TINY_VOCAB = 640


def license_texts(limit: int = 120) -> list[str]:
    """Paragraphs of the license files of the installed packages (real prose, sorted for a stable order)."""
    roots = [Path(p) for p in site.getsitepackages()]
    files = sorted({f for root in roots for f in root.glob("*.dist-info/**/LICENSE*") if f.is_file()})
    seen: set[str] = set()
    paragraphs: list[str] = []
    for path in files:
        for block in path.read_text(encoding="utf-8", errors="ignore").split("\n\n"):
            text = " ".join(block.split())
            if len(text) >= 200 and text not in seen:
                seen.add(text)
                paragraphs.append(text)
    assert len(paragraphs) >= limit, f"only {len(paragraphs)} license paragraphs found"
    return paragraphs[:limit]


def save_tokenizer(folder: Path, texts: list[str], vocab_size: int = VOCAB) -> None:
    """A byte-level BPE trained on `texts`, saved as transformers saves a fast tokenizer (tokenizer.json + config)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS).save_pretrained(folder)


def save_tiny_qwen2(folder: Path, *, vocab_size: int = TINY_VOCAB, seed: int = 0) -> None:
    """The tiny preset's shape with `vocab_size` embeddings, random weights, save_pretrained (safetensors)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ray_efa.core.models import model_preset

    values = model_preset("tiny").config_dict()
    values["vocab_size"] = vocab_size
    torch.manual_seed(seed)
    Qwen2ForCausalLM(Qwen2Config(**values)).save_pretrained(folder)


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


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path
