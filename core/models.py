"""Model architectures, as data: the presets and any supported decoder family's config.json, without torch.

The training job turns an architecture into a transformers config (`transformers.AutoConfig.for_model(model_type,
**config_dict())`); the settings check sequence lengths against it and the planner counts its parameters, FLOPs,
activations and fp8 linears from the shapes here. Qwen2.5-1.5B's values are those of the model's config.json (hidden
1536, 28 layers, 12 heads, 2 KV heads, MLP 8960, vocab 151,936, tied embeddings).

Each supported family's layer, as transformers builds it (transformers/models/<family>/modeling_<family>.py):

    family       attention linears (bias)                 q/k norms          norms a layer   MLP             tied default
    llama        q, k, v, o (attention_bias)              -                  2               gate/up/down    no
                                                                                             (mlp_bias)
    mistral      q, k, v, o (none)                        -                  2               gate/up/down    no
    qwen2        q, k, v (bias), o                        -                  2               gate/up/down    no
    qwen3        q, k, v, o (attention_bias)              head_dim each      2               gate/up/down    no
    gemma2       q, k, v, o (attention_bias)              -                  4               gate/up/down    yes
    gemma3_text  q, k, v, o (attention_bias)              head_dim each      4               gate/up/down    yes
    phi3         fused qkv, o (none)                      -                  2               gate_up/down    no
    olmo2        q, k, v, o (attention_bias)              over q's and k's   2               gate/up/down    no
                                                          whole width

q's width is heads x head_dim, k's and v's key/value heads x head_dim; head_dim is config.json's when it gives one
(Gemma 2 2B: 256 with hidden 2304 and 8 heads), else hidden / heads. A norm is one weight of its width; the final norm
one of hidden; the embeddings vocab x hidden, and the output projection another unless tied.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = [
    "ModelPreset",
    "ModelArchitecture",
    "MODEL_PRESETS",
    "model_preset",
    "preset_from_config",
    "parameters_label",
    "QWEN2_MODEL_TYPE",
    "SUPPORTED_MODEL_TYPES",
    "unsupported_model_type",
    "FULL_ATTENTION",
    "SLIDING_ATTENTION",
]

QWEN2_MODEL_TYPE = "qwen2"
"""The model_type of the presets (Qwen2ForCausalLM)."""

SUPPORTED_MODEL_TYPES: tuple[str, ...] = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma2",
    "gemma3_text",
    "phi3",
    "olmo2",
)
"""config.json model_types the built-in train function builds and the planner counts; "gemma3" (the multimodal
config) is read through its text_config, as gemma3_text."""

FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
"""transformers' names of a layer's attention kind (config.layer_types)."""

_QK_NORM = {"qwen3": "head", "gemma3_text": "head", "olmo2": "width"}
_FOUR_NORMS = frozenset({"gemma2", "gemma3_text"})
_POST_NORMS = frozenset({"gemma2", "gemma3_text", "olmo2"})
"""Families whose attention and MLP outputs pass a norm before the residual add (its backward reads them)."""
_RESIDUAL_LINEARS = frozenset({"down_proj"})
"""The linear whose output goes straight into the residual add, read by no backward op, in a pre-norm layer."""
_TIED_BY_DEFAULT = frozenset({"gemma2", "gemma3_text"})
_NOT_ARCHITECTURE = frozenset(
    {
        "model_type",
        "architectures",
        "transformers_version",
        "torch_dtype",
        "dtype",
        "_name_or_path",
        "auto_map",
        "use_cache",
        "attn_implementation",
    }
)
"""config.json keys config_dict leaves out: what the file says about where it came from or how to run it (the job
decides dtype, cache and attention kernel), not the architecture."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelPreset:
    """A decoder-only transformer of one supported family (model_type): its shapes, and the config it came from."""

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
    model_type: str = QWEN2_MODEL_TYPE
    explicit_head_dim: int | None = None
    """config.json's head_dim, where it gives one; head_dim is hidden / heads otherwise."""
    attention_bias: bool = False
    """Biases on q, k, v and o (llama, qwen3, gemma, olmo2's attention_bias); qwen2's q, k, v always have one."""
    mlp_bias: bool = False
    """Biases on the MLP's linears (llama's mlp_bias)."""
    sliding_window: int | None = None
    """Tokens a sliding-window layer attends to (itself included), or None."""
    layer_types: tuple[str, ...] = ()
    """Each layer's attention kind (FULL_ATTENTION or SLIDING_ATTENTION); empty: every layer full."""
    source_config: str = field(default="", compare=False, repr=False)
    """The config.json values this came from (JSON, _NOT_ARCHITECTURE left out); empty for a preset."""

    @property
    def head_dim(self) -> int:
        return self.explicit_head_dim or self.hidden_size // self.num_attention_heads

    @property
    def q_width(self) -> int:
        """Width of the queries (and of the attention output o_proj reads): heads x head_dim."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of the keys and of the values: key/value heads x head_dim."""
        return self.num_key_value_heads * self.head_dim

    @property
    def norms_per_layer(self) -> int:
        """RMSNorms of hidden width in one decoder layer."""
        return 4 if self.model_type in _FOUR_NORMS else 2

    def linears(self) -> tuple[tuple[str, int, int, bool], ...]:
        """(name, in_features, out_features, bias) of each linear of one decoder layer, in the order the layer runs
        them (phi3 fuses q, k, v into qkv_proj and gate, up into gate_up_proj)."""
        d, q, kv, inter = self.hidden_size, self.q_width, self.kv_width, self.intermediate_size
        if self.model_type == "phi3":
            return (
                ("qkv_proj", d, q + 2 * kv, False),
                ("o_proj", q, d, False),
                ("gate_up_proj", d, 2 * inter, False),
                ("down_proj", inter, d, False),
            )
        qkv_bias = self.attention_bias or self.model_type == QWEN2_MODEL_TYPE
        o_bias = self.attention_bias and self.model_type != QWEN2_MODEL_TYPE
        return (
            ("q_proj", d, q, qkv_bias),
            ("k_proj", d, kv, qkv_bias),
            ("v_proj", d, kv, qkv_bias),
            ("o_proj", q, d, o_bias),
            ("gate_proj", d, inter, self.mlp_bias),
            ("up_proj", d, inter, self.mlp_bias),
            ("down_proj", inter, d, self.mlp_bias),
        )

    @property
    def qk_norm_parameters(self) -> int:
        """Weights of the q and k norms of one layer: per head (qwen3, gemma3) or over the whole width (olmo2)."""
        kind = _QK_NORM.get(self.model_type)
        if kind == "head":
            return 2 * self.head_dim
        return self.q_width + self.kv_width if kind == "width" else 0

    @property
    def layer_parameters(self) -> int:
        """Parameters of one decoder layer: its linears (weights and biases), its norms, its q/k norms."""
        linears = sum(k * n + (n if bias else 0) for _, k, n, bias in self.linears())
        return linears + self.norms_per_layer * self.hidden_size + self.qk_norm_parameters

    def selective_linears(
        self,
    ) -> tuple[tuple[tuple[str, int, int, bool], ...], tuple[tuple[str, int, int, bool], ...]]:
        """(saved, recomputed) linears of one layer under selective (per-op) activation checkpointing: torchtitan's
        policy (torchtitan/distributed/activation_checkpoint.py, _apply_op_sac: "Saves output of all compute ops,
        except every second mm"; training.parallelize.selective_policy), which keeps the 1st, 3rd, 5th ... matrix
        product's output in the order the layer runs them, recomputes the others, and keeps the attention kernel's
        output. A linear with a bias runs as addmm, a compute-intensive op the policy saves without counting it
        among the matrix products (Qwen2's q, k and v)."""
        rows = self.linears()
        plain = [row for row in rows if not row[3]]
        recomputed = tuple(plain[1::2])
        return tuple(row for row in rows if row not in recomputed), recomputed

    def activation_bytes_per_token_layer(self) -> int:
        """Bytes one decoder layer keeps for backward per token, nothing recomputed (bf16 activations): each RMSNorm its
        fp32 input and bf16 normalized and scaled output (8 a channel; the q/k norms of qwen3, gemma3 and olmo2 over
        q's and k's widths), attention with SDPA (q, output and o_proj's input: 6 a query channel; k and v: 4 a
        key/value channel; no seq x seq scores), the gated MLP (gate, activation, up, product: 8 an MLP channel).
        Qwen2: 22d + 4kv + 8I."""
        qk_norms = 8 * (self.q_width + self.kv_width) if self.model_type in _QK_NORM else 0
        return (
            8 * self.norms_per_layer * self.hidden_size
            + 6 * self.q_width
            + 4 * self.kv_width
            + 8 * self.intermediate_size
            + qk_norms
        )

    def selective_bytes_per_token_layer(self, *, compiled: bool = False) -> int:
        """Bytes one layer keeps per token under selective checkpointing: its bf16 input, the saved linears' bf16
        outputs (selective_linears) and the attention output (q's width).

        compiled: the partitioner of a compiled layer keeps a saved output only where its backward reads it, and no
        backward op reads the output of the layer's last linear (down_proj's) where it only enters the residual add:
        every family but gemma2/gemma3 and olmo2, whose post-norms read it. (o_proj's output, where saved, rebuilds
        the residual stream the MLP's norm recomputes from, so it stays.) Measured on one H100 (2026-12-07, Llama 3.2
        1B dims bf16 16 x 2048 x 2, bench/results/2026-12-07-h100x1-llama3-side-by-side.jsonl, run b16): the eager
        count with a whole recomputed layer on top planned 5.5 GiB over the allocated peak, this one (with
        core.memory's recomputed layer that never meets the loss's logits) 1.2, about 1 of it the other parts' usual
        excess there."""
        saved, _ = self.selective_linears()
        if compiled and self.model_type not in _POST_NORMS:
            saved = tuple(row for row in saved if row[0] not in _RESIDUAL_LINEARS)
        return 2 * self.hidden_size + 2 * sum(n for _, _, n, _ in saved) + 2 * self.q_width

    def selective_recompute_bytes_per_token(self) -> int:
        """Device-memory bytes per token selective checkpointing's recompute moves besides its matrix products: each
        activation a layer does not save (activation_bytes_per_token_layer less the saved outputs) written again and
        its input read again, over the layers."""
        saved = self.selective_bytes_per_token_layer() - 2 * self.hidden_size  # the input is kept, not recomputed
        return 2 * self.num_hidden_layers * max(0, self.activation_bytes_per_token_layer() - saved)

    def recompute_flops_per_token(self, mode: str, seq_len: int) -> float:
        """Training FLOPs per token that activation checkpointing `mode` adds (none, selective or full): full runs
        each layer's forward again, counted as a third of flops_per_token (forward 1, backward 2); selective only the
        recomputed linears' forward, 2 k n a token each (norms, activations and RoPE are memory-bound, not FLOPs)."""
        if mode == "full":
            return self.flops_per_token(seq_len) / 3
        if mode == "selective":
            _, recomputed = self.selective_linears()
            return 2.0 * self.num_hidden_layers * sum(k * n for _, k, n, _ in recomputed)
        return 0.0

    @property
    def embedding_parameters(self) -> int:
        """The input embeddings; tied, they are the output projection too."""
        return self.vocab_size * self.hidden_size

    @property
    def num_parameters(self) -> int:
        """Exact parameter count of transformers' <family>ForCausalLM with this config."""
        output = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return self.embedding_parameters + output + self.num_hidden_layers * self.layer_parameters + self.hidden_size

    def attended_keys(self, seq_len: int) -> float:
        """Keys a query attends to, summed over the layers and averaged over a causal sequence of seq_len: seq_len / 2
        a full layer; w - w^2 / (2 seq_len) a sliding layer of window w < seq_len (the first w queries see their
        prefix, the rest w keys each)."""
        kinds = self.layer_types or (FULL_ATTENTION,) * self.num_hidden_layers
        window = self.sliding_window
        total = 0.0
        for kind in kinds:
            if kind == SLIDING_ATTENTION and window is not None and window < seq_len:
                total += window - window * window / (2 * seq_len)
            else:
                total += seq_len / 2
        return total

    @property
    def matmul_parameters(self) -> int:
        """Parameters whose matrix products every token pays: all but the untied input embeddings (a lookup)."""
        return self.num_parameters - (0 if self.tie_word_embeddings else self.embedding_parameters)

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token, the project's convention (MFU, docs/BENCHMARKS.md "12LdS"), attention counted
        over the full square (PaLM, App. B): 6N + 12 (heads x head_dim) x (keys a query attends to, causal, doubled)
        over the layers, which is 6N + 12 L d S for a model without sliding windows whose heads x head_dim is its
        hidden size (GQA changes k and v, not the attention's FLOPs; a sliding layer counts 2 w - w^2 / S keys, so
        S where w >= S). N leaves out untied input embeddings (a lookup, no matmul); tied, they are the output
        projection's. flops_per_token_causal counts the causal attention as run (MFU causal, "6LdS")."""
        return 6 * self.matmul_parameters + 12 * self.q_width * 2 * self.attended_keys(seq_len)

    def flops_per_token_causal(self, seq_len: int) -> float:
        """Training FLOPs per token with causal attention counted as run: 6N + 12 (heads x head_dim) x keys attended
        (6 L d S without sliding windows)."""
        return 6 * self.matmul_parameters + 12 * self.q_width * self.attended_keys(seq_len)

    def config_dict(self) -> dict[str, Any]:
        """Keyword arguments of transformers' config class of model_type (AutoConfig.for_model(model_type, **them)):
        a config.json's own values (less _NOT_ARCHITECTURE), else the preset's fields."""
        if self.source_config:
            return json.loads(self.source_config)
        values: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name in _PRESET_KEYS}
        if self.explicit_head_dim is not None:
            values["head_dim"] = self.explicit_head_dim
        if self.attention_bias:
            values["attention_bias"] = True
        if self.mlp_bias:
            values["mlp_bias"] = True
        if self.sliding_window is not None:
            values["sliding_window"] = self.sliding_window
        if self.layer_types:
            values["layer_types"] = list(self.layer_types)
        return values


ModelArchitecture = ModelPreset
"""The clearer name: any supported architecture, a preset's or a config.json's."""

_PRESET_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "tie_word_embeddings",
    "rope_theta",
    "rms_norm_eps",
)


MODEL_PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in (
        ModelPreset(
            name="qwen2.5-1.5b",
            hidden_size=1536,
            num_hidden_layers=28,
            num_attention_heads=12,
            num_key_value_heads=2,
            intermediate_size=8960,
            vocab_size=151_936,
            max_position_embeddings=32_768,
        ),
        ModelPreset(
            name="qwen2.5-0.5b",
            hidden_size=896,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            intermediate_size=4864,
            vocab_size=151_936,
            max_position_embeddings=32_768,
        ),
        # The same architecture at a size a 2-core laptop trains in seconds: the embedded local default.
        ModelPreset(
            name="tiny",
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=256,
            vocab_size=1024,
            max_position_embeddings=32_768,
        ),
    )
}


def model_preset(name: str) -> ModelPreset:
    try:
        return MODEL_PRESETS[name]
    except KeyError:
        raise ValueError(f"model must be one of {', '.join(MODEL_PRESETS)}, got {name!r}") from None


def parameters_label(count: int) -> str:
    """A parameter count as the plan writes it: "1.54 B parameters", "3.18 M parameters", "980 parameters"."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            return f"{count / scale:.2f} {unit} parameters"
    return f"{count} parameters"


def unsupported_model_type(model_type: object) -> str:
    """What a config.json of a family the job cannot build is told."""
    return (
        f"has model_type {model_type!r}, which the built-in train function and the planner do not support: "
        f"model_type must be one of {', '.join(SUPPORTED_MODEL_TYPES)} (or gemma3, read as its text_config)"
    )


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The decoder's own config: gemma3's multimodal config.json keeps it under text_config."""
    if config.get("model_type") == "gemma3" and isinstance(config.get("text_config"), dict):
        return {**config["text_config"], "model_type": "gemma3_text"}
    return config


def _layer_types(model_type: str, config: dict[str, Any], layers: int) -> tuple[int | None, tuple[str, ...]]:
    """(sliding window, each layer's attention kind) as transformers' config class derives them (its defaults where
    config.json is silent: sliding_window 4096 (Mistral, Gemma, Qwen with use_sliding_window), Gemma2's every other
    layer, Gemma3's 5 of 6, Qwen's layers from max_window_layers (28) on; Mistral and Phi-3 slide every layer)."""
    defaults = {"mistral": 4096, "gemma2": 4096, "gemma3_text": 4096, "qwen2": 4096, "qwen3": 4096}
    window = config.get("sliding_window", defaults.get(model_type))
    if model_type in ("qwen2", "qwen3") and not config.get("use_sliding_window", False):
        window = None
    if window is None:
        return None, ()
    given = config.get("layer_types")
    if isinstance(given, list) and len(given) == layers:
        return int(window), tuple(str(kind) for kind in given)
    if model_type == "gemma2":
        kinds = [SLIDING_ATTENTION if (i + 1) % 2 else FULL_ATTENTION for i in range(layers)]
    elif model_type == "gemma3_text":
        pattern = int(config.get("sliding_window_pattern") or 6)
        kinds = [SLIDING_ATTENTION if (i + 1) % pattern else FULL_ATTENTION for i in range(layers)]
    elif model_type in ("qwen2", "qwen3"):
        first = int(config.get("max_window_layers", 28))  # Qwen2Config's and Qwen3Config's default
        kinds = [SLIDING_ATTENTION if i >= first else FULL_ATTENTION for i in range(layers)]
    else:  # mistral, phi3: every layer
        kinds = [SLIDING_ATTENTION] * layers
    return int(window), tuple(kinds)


def _rope_theta(config: dict[str, Any]) -> float:
    return float(config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta", 10_000.0))


def preset_from_config(name: str, config: dict[str, Any]) -> ModelPreset:
    """The architecture a Hugging Face config.json describes, as a preset named `name`; ValueError if its model_type
    is not one of SUPPORTED_MODEL_TYPES or it lacks a field the plan needs."""
    config = _text_config(config)
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(unsupported_model_type(model_type))
    required = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    missing = [key for key in required if not isinstance(config.get(key), int)]
    if missing:
        raise ValueError(f"lacks integer {', '.join(missing)}")
    heads, layers = config["num_attention_heads"], config["num_hidden_layers"]
    window, kinds = _layer_types(model_type, config, layers)
    head_dim = config.get("head_dim")
    return ModelPreset(
        name=name,
        model_type=model_type,
        hidden_size=config["hidden_size"],
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=int(config.get("num_key_value_heads") or heads),
        intermediate_size=config["intermediate_size"],
        vocab_size=config["vocab_size"],
        max_position_embeddings=int(config.get("max_position_embeddings") or 32_768),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", model_type in _TIED_BY_DEFAULT)),
        rope_theta=_rope_theta(config),
        rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        explicit_head_dim=int(head_dim) if isinstance(head_dim, int) else None,
        attention_bias=bool(config.get("attention_bias", False)) and model_type not in ("mistral", "phi3"),
        mlp_bias=bool(config.get("mlp_bias", False)) and model_type == "llama",
        sliding_window=window,
        layer_types=kinds,
        source_config=json.dumps({k: v for k, v in config.items() if k not in _NOT_ARCHITECTURE}, sort_keys=True),
    )
