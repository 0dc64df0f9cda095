"""Model architecture presets, as data.

The training job turns a preset into a transformers Qwen2Config; the settings check sequence lengths against it and
the memory planner counts its parameters, all without importing torch. Qwen2.5-1.5B values are those of the
model's config.json (hidden 1536, 28 layers, 12 heads, 2 KV heads, MLP 8960, vocab 151,936, tied embeddings).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["ModelPreset", "MODEL_PRESETS", "model_preset"]


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

    def config_dict(self) -> dict:
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
