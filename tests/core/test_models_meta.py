"""The planner's counts held to transformers' own models: each family's real configs (and variants of its options)
built on the meta device (no weights, no memory), AutoConfig.for_model(model_type, **config_dict()) as the job builds
them; the parameters summed, and each decoder layer's linears read for the fp8 filter's shapes."""

from __future__ import annotations

import json

import pytest

from ray_efa.core import fp8
from ray_efa.core.models import MODEL_PRESETS, ModelPreset, preset_from_config
from tests.core.test_models import CONFIGS, HELD_OUT, PUBLISHED_PARAMETERS, config

torch = pytest.importorskip("torch")  # the [train] extra; `make test` installs it
transformers = pytest.importorskip("transformers")

VARIANTS: dict[str, tuple[str, dict]] = {
    # each family's options that change what it builds, at a small size (checks what the held-out configs leave off)
    "llama-biases": ("tiny-llama", {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": False}),
    "llama-no-head-dim": ("tiny-llama", {"head_dim": None, "num_attention_heads": 8}),
    "qwen2-sliding": (
        "tiny-llama",
        {
            "model_type": "qwen2",
            "use_sliding_window": True,
            "sliding_window": 64,
            "max_window_layers": 1,
            "head_dim": None,
        },
    ),
    "qwen3-bias-tied": ("tiny-llama", {"model_type": "qwen3", "attention_bias": True}),
    "qwen3-window-default": (
        "tiny-llama",
        {"model_type": "qwen3", "use_sliding_window": True, "num_hidden_layers": 30},
    ),
    "mistral-head-dim": ("tiny-llama", {"model_type": "mistral", "head_dim": 48, "sliding_window": 256}),
    "gemma2-untied": ("tiny-llama", {"model_type": "gemma2", "tie_word_embeddings": False, "attention_bias": True}),
    "gemma3-text": ("tiny-llama", {"model_type": "gemma3_text", "head_dim": 64, "sliding_window": 32}),
    "phi3-gqa": (
        "tiny-llama",
        {
            "model_type": "phi3",
            "head_dim": None,
            "num_key_value_heads": 1,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
    ),  # Phi3Config's default pad id is 32000
    "olmo2-gqa": ("tiny-llama", {"model_type": "olmo2", "head_dim": None, "num_key_value_heads": 1}),
}


def built(p: ModelPreset):
    """transformers' causal LM of the architecture, on the meta device, as the train function builds it."""
    cfg = transformers.AutoConfig.for_model(p.model_type, **p.config_dict())
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg)


def variant(name: str) -> ModelPreset:
    base, change = VARIANTS[name]
    values = {k: v for k, v in {**config(base), **change}.items() if v is not None}
    return preset_from_config(name, values)


def assert_counts_match(p: ModelPreset) -> None:
    model = built(p)
    assert p.num_parameters == sum(t.numel() for t in model.parameters())
    # AND one decoder layer's linears are the planner's, by name and (in, out) shape: the fp8 filter's input
    layer = model.model.layers[0]
    real = {
        name.rsplit(".", 1)[-1]: (m.in_features, m.out_features, m.bias is not None)
        for name, m in layer.named_modules()
        if isinstance(m, torch.nn.Linear)
    }
    assert real == {name: (k, n, bias) for name, k, n, bias in p.linears()}
    assert p.layer_parameters == sum(t.numel() for t in layer.parameters())


@pytest.mark.parametrize("name", HELD_OUT)
def test_each_held_out_config_counts_what_transformers_builds(name):
    p = preset_from_config(name, config(name))
    assert_counts_match(p)
    assert p.num_parameters == PUBLISHED_PARAMETERS[name]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_family_option_counts_what_transformers_builds(name):
    assert_counts_match(variant(name))


@pytest.mark.parametrize("name", sorted(MODEL_PRESETS))
def test_the_presets_count_what_transformers_builds(name):
    assert_counts_match(MODEL_PRESETS[name])


def test_sliding_layers_are_the_ones_transformers_slides():
    for p in (
        *(preset_from_config(name, config(name)) for name in HELD_OUT),
        variant("gemma3-text"),
        variant("qwen2-sliding"),
        variant("mistral-head-dim"),
        variant("qwen3-window-default"),
    ):
        cfg = transformers.AutoConfig.for_model(p.model_type, **p.config_dict())
        # Mistral's and Phi-3's configs list no layer_types: every layer slides where sliding_window is set
        window = getattr(cfg, "sliding_window", None)  # Llama's and OLMo 2's configs have none
        every = ("sliding_attention" if window else "full_attention",) * cfg.num_hidden_layers
        kinds = tuple(getattr(cfg, "layer_types", None) or every)
        assert (p.layer_types or ("full_attention",) * p.num_hidden_layers) == kinds, p.name
        assert p.sliding_window == (window if "sliding_attention" in kinds else None), p.name


def test_fp8_filter_reads_the_real_shapes():
    # Gemma 2 2B's k and v (2304 x 1024) stay bf16; Phi-3's fused qkv (3072 x 9216) converts
    gemma = preset_from_config("gemma-2-2b", config("gemma-2-2b"))
    phi3 = preset_from_config("phi-3-mini-4k", config("phi-3-mini-4k"))
    assert {name for name, _, _ in fp8.fp8_linears(gemma)} == {"q_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert {name for name, _, _ in fp8.fp8_linears(phi3)} == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}


def test_config_dict_builds_the_files_model():
    # GIVEN a config.json read by the planner THEN AutoConfig.for_model of its config_dict is the file's config
    path = CONFIGS / "llama-3.2-1b" / "config.json"
    raw = json.loads(path.read_text())
    p = preset_from_config("llama-3.2-1b", raw)
    cfg = transformers.AutoConfig.for_model(p.model_type, **p.config_dict())
    for key in ("hidden_size", "num_hidden_layers", "num_key_value_heads", "head_dim", "tie_word_embeddings"):
        assert getattr(cfg, key) == raw[key]
