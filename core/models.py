"""Model architecture presets, as data.

The training job turns a preset into a transformers Qwen2Config; the settings check sequence lengths against it and
the memory planner counts its parameters, all without importing torch. Qwen2.5-1.5B values are those of the
model's config.json (hidden 1536, 28 layers, 12 heads, 2 KV heads, MLP 8960, vocab 151,936, tied embeddings).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ModelPreset", "MODEL_PRESETS", "model_preset", "preset_from_config", "parameters_label", "QWEN2_MODEL_TYPE"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelPreset:
    """A decoder-only transformer in the Qwen2 architecture."""

    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = True
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def num_parameters(self) -> int:
        """Exact parameter count of transformers' Qwen2ForCausalLM with this config (q/k/v carry biases)."""
        d, layers, inter, vocab = self.hidden_size, self.num_hidden_layers, self.intermediate_size, self.vocab_size
        kv = self.num_key_value_heads * self.head_dim
        attention = d * d + d + 2 * (d * kv + kv) + d * d  # q (+bias), k and v (+bias), o (no bias)
        mlp = 3 * d * inter
        norms = 2 * d
        embeddings = vocab * d * (1 if self.tie_word_embeddings else 2)
        return embeddings + layers * (attention + mlp + norms) + d  # + final norm

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6N for the matmuls plus 12 * layers * hidden * seq for attention (PaLM, App. B)."""
        return 6 * self.num_parameters + 12 * self.num_hidden_layers * self.hidden_size * seq_len

    def config_dict(self) -> dict[str, Any]:
        """Keyword arguments for transformers.Qwen2Config."""
        values = asdict(self)
        values.pop("name")
        return values


MODEL_PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in (
        ModelPreset(
            name="qwen2.5-1.5b", hidden_size=1536, num_hidden_layers=28, num_attention_heads=12,
            num_key_value_heads=2, intermediate_size=8960, vocab_size=151_936, max_position_embeddings=32_768,
        ),
        ModelPreset(
            name="qwen2.5-0.5b", hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
            num_key_value_heads=2, intermediate_size=4864, vocab_size=151_936, max_position_embeddings=32_768,
        ),
        # The same architecture at a size a 2-core laptop trains in seconds: the embedded local default.
        ModelPreset(
            name="tiny", hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=256, vocab_size=1024, max_position_embeddings=32_768,
        ),
    )
}


def model_preset(name: str) -> ModelPreset:
    try:
        return MODEL_PRESETS[name]
    except KeyError:
        raise ValueError(f"model must be one of {', '.join(MODEL_PRESETS)}, got {name!r}") from None


QWEN2_MODEL_TYPE = "qwen2"
"""The one `model_type` of config.json that training/model.py (Qwen2ForCausalLM) and the planner's formulas know."""


def parameters_label(count: int) -> str:
    """A parameter count as the plan writes it: "1.54 B parameters", "3.18 M parameters", "980 parameters"."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            return f"{count / scale:.2f} {unit} parameters"
    return f"{count} parameters"


def preset_from_config(name: str, config: dict[str, Any]) -> ModelPreset:
    """The architecture a Hugging Face config.json describes, as a preset named `name`; ValueError if it is not Qwen2
    or lacks a field the plan needs."""
    model_type = config.get("model_type")
    if model_type != QWEN2_MODEL_TYPE:
        raise ValueError(f"has model_type {model_type!r}; only {QWEN2_MODEL_TYPE!r} is supported (training/model.py "
                         "builds Qwen2ForCausalLM and the planner counts its parameters)")
    required = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    missing = [key for key in required if not isinstance(config.get(key), int)]
    if missing:
        raise ValueError(f"lacks integer {', '.join(missing)}")
    heads = config["num_attention_heads"]
    return ModelPreset(
        name=name, hidden_size=config["hidden_size"], num_hidden_layers=config["num_hidden_layers"],
        num_attention_heads=heads, num_key_value_heads=int(config.get("num_key_value_heads") or heads),
        intermediate_size=config["intermediate_size"], vocab_size=config["vocab_size"],
        max_position_embeddings=int(config.get("max_position_embeddings", 32_768)),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),  # transformers' Qwen2Config default
        rope_theta=float(config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta", 10_000.0)),
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
    )
