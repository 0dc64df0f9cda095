"""The model: seeded random initialization of a preset, or weights from a local directory (never the hub)."""

import pytest
import torch

from ray_efa.core.models import model_preset
from ray_efa.training.model import ModelPathError, build_model, qwen2_config

CPU = torch.device("cpu")
TINY = model_preset("tiny")


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_the_preset_architecture_with_its_exact_parameter_count():
    model = build_model(TINY, seed=0, device=CPU)
    assert sum(p.numel() for p in model.parameters()) == TINY.num_parameters
    assert len(model.layers) == TINY.num_hidden_layers
    assert model.hf.config._attn_implementation == "sdpa"


def test_the_same_seed_builds_the_same_weights_on_every_rank():
    # GIVEN two builds with seed 0 (two ranks) and one with seed 1
    a, b, c = (_state(build_model(TINY, seed=s, device=CPU)) for s in (0, 0, 1))
    # THEN the two ranks agree on every tensor, and another seed differs
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["hf.model.embed_tokens.weight"], c["hf.model.embed_tokens.weight"])


def test_model_path_loads_saved_weights(tmp_path):
    # GIVEN a model of the preset's architecture saved to a local directory
    saved = build_model(TINY, seed=7, device=CPU)
    saved.hf.save_pretrained(tmp_path)
    # WHEN it is built from that path (with another seed, which must not matter)
    loaded = build_model(TINY, seed=0, device=CPU, model_path=str(tmp_path))
    # THEN it holds the saved weights, the embeddings still tied to the output projection
    expected, actual = _state(saved), _state(loaded)
    assert expected.keys() == actual.keys() and all(torch.equal(expected[k], actual[k]) for k in expected)
    assert loaded.hf.lm_head.weight is loaded.hf.model.embed_tokens.weight


def test_model_path_of_another_architecture_is_refused(tmp_path):
    from transformers import Qwen2ForCausalLM

    config = qwen2_config(TINY)
    config.hidden_size, config.intermediate_size = 64, 128
    Qwen2ForCausalLM(config).save_pretrained(tmp_path)
    with pytest.raises(ModelPathError, match=r"hidden_size 64 \(preset: 128\), intermediate_size 128 \(preset: 256\)"):
        build_model(TINY, seed=0, device=CPU, model_path=str(tmp_path))


def test_model_path_that_is_not_a_directory_is_refused(tmp_path):
    with pytest.raises(ModelPathError, match="modelPath must be a local directory"):
        build_model(TINY, seed=0, device=CPU, model_path=str(tmp_path / "missing"))
