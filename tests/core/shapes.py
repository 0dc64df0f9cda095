"""Fixed batch shapes for the tests of the step-time and memory formulas: the values the pre-auto defaults had
(2 x seqLen, no accumulation, bf16, no checkpointing), given explicitly, so a formula is checked at the shape it was
calibrated on while the defaults are auto (core.strategy.resolve decides them; tests/core/test_auto.py tests that)."""

from __future__ import annotations

from typing import Any

from ray_efa.core.settings import Settings, TrainingSettings

FIXED = {
    "microBatch": 2,
    "gradAccumulation": 1,
    "precision": "bf16",
    "activationCheckpointing": False,
    "lossChunkSize": 1024,
}
_FIELDS = {
    "microBatch": "micro_batch",
    "gradAccumulation": "grad_accumulation",
    "precision": "precision",
    "activationCheckpointing": "activation_checkpointing",
    "lossChunkSize": "loss_chunk_size",
}


def fixed_training(**fields: Any) -> TrainingSettings:
    """TrainingSettings by field name, with the fixed shape where `fields` leaves it."""
    return TrainingSettings(**{**{_FIELDS[k]: v for k, v in FIXED.items()}, **fields})


def fixed_settings(context: dict[str, Any] | None = None) -> Settings:
    """Settings from context keys, with the fixed shape where `context` leaves it."""
    return Settings.from_context({**FIXED, **(context or {})})
