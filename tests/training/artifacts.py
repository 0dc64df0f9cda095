"""Real training artifacts, made in the test: a BPE tokenizer trained with `tokenizers` on real English (the license
texts installed with the venv's packages), a tiny Qwen2 saved with save_pretrained, and parquet / JSON-lines files of
those texts written with pyarrow. The builders are the package's own (training.tiny_model, what `ray-efa tiny-model`
and the local run use); JSON lines are a test's only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray_efa.training.tiny_model import (
    EOS,
    TINY_VOCAB,
    VOCAB,
    license_texts,
    save_model_folder,
    save_tiny_qwen2,
    save_tokenizer,
    write_parquet,
)

if TYPE_CHECKING:  # Ray is imported by the tests that train, not by every user of the builders
    from ray.train import Result

__all__ = [
    "EOS",
    "VOCAB",
    "TINY_VOCAB",
    "license_texts",
    "save_tokenizer",
    "save_tiny_qwen2",
    "save_model_folder",
    "write_parquet",
    "write_jsonl",
    "returned",
]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def returned(result: Result) -> dict[str, Any]:
    """What the train function returned on rank 0, from `driver.fit`'s Result (Ray's type allows None)."""
    assert isinstance(result.return_value, dict), result.return_value
    return result.return_value
