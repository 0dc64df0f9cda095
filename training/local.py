"""The `--local` preset: what `ray-efa train --local` changes so that a 2-core laptop trains in well under a minute.

It is a settings layer (context keys, as `-c` takes them), applied above the project's context and below `-c`, so
any value here can still be overridden on the command line.

By default the local run is a real fine-tune: a second layer (tiny_model_layer) points modelPath and dataset at the
tiny model folder kept in the model cache (training.tiny_model: a byte-level BPE and a tiny Qwen2 made from the
English license texts of the installed packages), holds out evalFraction 0.1 of its paragraphs and evaluates them
at steps 30 and 60. The held-out loss falls below the unigram baseline (the held-out tokens' entropy) in 60 steps.
A run that brings its own inputs (modelPath, dataset, or modelConfig: a random initialization of that config.json's
architecture, on random tokens), asks for random tokens (dataPoolSize, e.g.
`-c dataPoolSize=8`: a pool the model memorizes, so the loss falls from ln(1024) to about 1) or runs a
trainFunction of its own gets no such layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray_efa.core.settings import Settings, SettingsError

__all__ = [
    "LOCAL_PRESET",
    "LOCAL_WORKERS",
    "TINY_MODEL_LAYER",
    "wants_tiny_model",
    "tiny_model_layer",
    "local_settings",
]

LOCAL_WORKERS = 2
"""CPU workers of the local run (gloo), one per core of the smallest machine we support."""

LOCAL_PRESET: dict[str, object] = {
    "model": "tiny",
    "compile": False,  # inductor's C++ build on a 2-core CPU would take longer than the whole run
    "steps": 60,
    "seqLen": 128,
    "microBatch": 4,
    "gradAccumulation": 1,  # the local run's global batch is what it is: 2 CPU ranks, not globalBatchTokens
    "learningRate": 5e-3,  # high for a 0.4M-parameter model that must learn in 60 steps
    "warmupSteps": 5,
    "reportEvery": 10,
    "checkpointEvery": 30,
}

TINY_MODEL_LAYER = "tiny model"
"""The name of the tiny model folder's layer in the settings' sources (`plan` shows where a value came from)."""


_INPUT_KEYS = ("modelPath", "modelConfig", "dataset", "dataPoolSize", "trainFunction")
"""The settings that say whether a local run brings its own inputs."""


def wants_tiny_model(context: Mapping[str, Any]) -> bool:
    """Whether a local run of the merged context values `context` (every layer but the tiny model's) fine-tunes the
    tiny model folder: the built-in train function with no inputs of its own (no modelPath, modelConfig or dataset; evalDataset
    needs dataset) and no random-token pool (dataPoolSize 0). Read from the context, not resolved settings: `-c
    evalFraction=0.2` alone is valid only once the tiny model's dataset is there."""
    try:
        t = Settings.from_context({key: context[key] for key in _INPUT_KEYS if key in context}).training
    except SettingsError:  # a bad value: the whole resolution names it, with no tiny model to hide it
        return False
    return (
        t.builtin
        and t.model_path is None
        and t.model_configuration is None
        and t.dataset is None
        and t.data_pool_size == 0
    )


def tiny_model_layer(context: Mapping[str, Any]) -> tuple[str, dict[str, object]] | None:
    """The layer above LOCAL_PRESET that fine-tunes the cached tiny model folder (made on first use, see
    training.tiny_model.tiny_model_cache), or None when `context` (see wants_tiny_model) brings its own inputs.
    Raises training.tiny_model.TinyModelError when this machine has too little license text to make one."""
    if not wants_tiny_model(context):
        return None
    from ray_efa.training.tiny_model import tiny_model_cache

    tiny = tiny_model_cache()
    return TINY_MODEL_LAYER, {**tiny.context(), "evalEvery": 30}


def local_settings() -> Settings:
    """The local run's settings with nothing else given (`python -m ray_efa.training.driver --local`)."""
    layer = tiny_model_layer(LOCAL_PRESET)
    return Settings.from_context({**LOCAL_PRESET, **(layer[1] if layer else {})})
