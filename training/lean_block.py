"""A lean decoder layer for the Llama family (llama, mistral, qwen2, qwen3): the same weights as transformers' layer,
fewer kernels.

transformers' Qwen2DecoderLayer reaches SDPA through its attention-interface registry, builds RoPE's cos/sin in
the hidden states' dtype and applies it in (B, H, S, D) layout, and its model builds a causal mask and position
ids each call. This layer is the plain form, as torchtitan and nanoGPT write it: RMSNorm, q/k/v projections,
RoPE in fp32 (compiled, it fuses into the projections' epilogue), `F.scaled_dot_product_attention` with
`is_causal=True` and `enable_gqa=True` (flash attention on GPU, no repeated k/v, no mask tensor), o_proj, SwiGLU MLP.
Qwen3 adds an RMSNorm over each head's queries and keys before RoPE (q_norm, k_norm), which the layer applies as
Qwen3Attention does. Every family it covers is proved against transformers' logits and gradients
(tests/training/test_families.py); the others keep transformers' layer: Gemma 2/3 (scaled embeddings, soft-capping,
sandwich norms, (1 + w) norms), Phi-3 (fused qkv and gate/up projections), OLMo 2 (norms after attention and MLP,
q/k norms over the whole projection).

The layer *takes over* the transformers modules (the same nn.Linear and RMSNorm parameters under the same names:
`self_attn.q_proj`, `mlp.gate_proj`, `input_layernorm`, ...), so a state dict, a checkpoint or a modelPath load is
the same with either layer. transformers stays the loader, and the fallback (`lean_unsupported` says why) for a
config this layer does not cover: another family, sliding-window layers, attention dropout, an activation other than
SiLU.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["LeanAttention", "LeanDecoderLayer", "lean_unsupported", "to_lean", "rope_cos_sin"]

_COVERED_MODELS = ("qwen2", "llama", "mistral", "qwen3")
_HEAD_NORM_MODELS = ("qwen3",)  # RMSNorm over each head's q and k (q_norm, k_norm) before RoPE
_STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # inv_freq and scaling fixed at construction


def lean_unsupported(hf_model: nn.Module) -> str | None:
    """Why the lean layer cannot stand in for `hf_model`'s decoder layers, or None where it can."""
    config = getattr(hf_model, "config", None)
    if config is None:
        return "the model has no transformers config"
    if config.model_type not in _COVERED_MODELS:
        return f"model_type {config.model_type!r} (covered: {', '.join(_COVERED_MODELS)})"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"hidden_act {config.hidden_act!r} (covered: silu)"
    if getattr(config, "attention_dropout", 0.0):
        return f"attention_dropout {config.attention_dropout}"
    if _sliding_window(config):
        return "sliding-window attention layers"
    rope_type = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope_type not in _STATIC_ROPE_TYPES:
        return f"rope_type {rope_type!r} (covered: {', '.join(_STATIC_ROPE_TYPES)}; others change with the length)"
    layers = getattr(getattr(hf_model, "model", None), "layers", None)
    if not layers:
        return "no decoder layers at model.layers"
    attention = layers[0].self_attn
    if config.model_type not in _HEAD_NORM_MODELS and any(hasattr(attention, norm) for norm in ("q_norm", "k_norm")):
        return "q/k norms"
    return None


def _sliding_window(config: Any) -> bool:
    """Whether any layer attends over a sliding window: layer_types says so per layer (qwen2, qwen3); a family
    without it (mistral) slides wherever sliding_window is set, unless use_sliding_window turns it off."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        return any(kind != "full_attention" for kind in layer_types)
    return bool(getattr(config, "sliding_window", None)) and getattr(config, "use_sliding_window", True)


def rope_cos_sin(inv_freq: torch.Tensor, seq_len: int, scaling: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE's cos and sin for positions 0..seq_len-1, (seq_len, head_dim), fp32, as transformers' rotary embedding
    computes them (the frequencies concatenated twice, times the rope type's attention scaling)."""
    positions = torch.arange(seq_len, device=inv_freq.device, dtype=torch.float32)
    freqs = torch.outer(positions, inv_freq.float())
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos() * scaling, angles.sin() * scaling


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, S, H, D) rotated in fp32; cos/sin (S, D). Compiled, this is one elementwise epilogue."""
    x32 = x.float()
    cos, sin = cos[:, None, :], sin[:, None, :]
    return (x32 * cos + _rotate_half(x32) * sin).to(x.dtype)


class LeanAttention(nn.Module):
    """Causal grouped-query attention on transformers' own q/k/v/o projections."""

    def __init__(self, hf_attention: nn.Module, *, num_heads: int, num_kv_heads: int, head_dim: int) -> None:
        super().__init__()
        self.q_proj: nn.Linear = hf_attention.q_proj  # pyright: ignore[reportAttributeAccessIssue]
        self.k_proj: nn.Linear = hf_attention.k_proj  # pyright: ignore[reportAttributeAccessIssue]
        self.v_proj: nn.Linear = hf_attention.v_proj  # pyright: ignore[reportAttributeAccessIssue]
        self.o_proj: nn.Linear = hf_attention.o_proj  # pyright: ignore[reportAttributeAccessIssue]
        # Qwen3: RMSNorm over head_dim of each head's q and k, before RoPE; None where the family has none
        self.q_norm: nn.Module | None = getattr(hf_attention, "q_norm", None)
        self.k_norm: nn.Module | None = getattr(hf_attention, "k_norm", None)
        self.num_heads: int = num_heads
        self.num_kv_heads: int = num_kv_heads
        self.head_dim: int = head_dim
        self.scaling: float = float(getattr(hf_attention, "scaling", head_dim**-0.5))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.q_proj(x).view(batch, seq, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = _apply_rope(q, cos, sin), _apply_rope(k, cos, sin)
        v = self.v_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            is_causal=True,
            scale=self.scaling,
            enable_gqa=self.num_kv_heads != self.num_heads,
        )
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, self.num_heads * self.head_dim))


class LeanDecoderLayer(nn.Module):
    """Pre-norm decoder layer: x + attn(norm(x)), then + mlp(norm(x)), on transformers' modules (same state dict)."""

    def __init__(self, hf_layer: nn.Module, config: Any) -> None:
        super().__init__()
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.self_attn: LeanAttention = LeanAttention(
            hf_layer.self_attn,  # pyright: ignore[reportArgumentType]
            num_heads=config.num_attention_heads,
            num_kv_heads=config.num_key_value_heads,
            head_dim=head_dim,
        )
        # Qwen2MLP / LlamaMLP / MistralMLP / Qwen3MLP: down(silu(gate(x)) * up(x)), plain already
        self.mlp: nn.Module = cast(nn.Module, hf_layer.mlp)
        # RMSNorm in fp32, weight times the input-dtype result
        self.input_layernorm: nn.Module = cast(nn.Module, hf_layer.input_layernorm)
        self.post_attention_layernorm: nn.Module = cast(nn.Module, hf_layer.post_attention_layernorm)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


def to_lean(hf_model: nn.Module) -> None:
    """Replace `hf_model.model.layers` by lean layers over the same modules, in place (check lean_unsupported first)."""
    reason = lean_unsupported(hf_model)
    if reason is not None:
        raise ValueError(f"the lean decoder layer does not cover this model: {reason}")
    inner = cast(nn.Module, hf_model.model)
    layers = cast(nn.ModuleList, inner.layers)
    inner.layers = nn.ModuleList(LeanDecoderLayer(layer, hf_model.config) for layer in layers)
