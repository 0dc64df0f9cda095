"""training.lean_block: the lean decoder layer computes what transformers' Qwen2 layer computes, on its weights."""

import pytest
import torch

from ray_efa.core.models import model_preset
from ray_efa.training.lean_block import LeanDecoderLayer, lean_unsupported, rope_cos_sin, to_lean
from ray_efa.training.loss import causal_lm_loss
from ray_efa.training.model import build_model, qwen2_config

CPU = torch.device("cpu")
TINY = model_preset("tiny")  # 2 layers, 4 query heads over 2 key/value heads (GQA), tied embeddings


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A transformers checkpoint of the tiny preset whose every tensor is random: the q/k/v biases and the norm
    weights too (transformers initialises them to 0 and 1, which would hide a bias or norm the lean layer drops)."""
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(3)
    model = Qwen2ForCausalLM(qwen2_config(TINY))
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(
                torch.randn_like(param) * (0.3 if "norm" not in name else 0.2) + (1.0 if "norm" in name else 0.0)
            )
    folder = tmp_path_factory.mktemp("tiny-qwen2")
    model.save_pretrained(folder)
    return str(folder)


def _batch(seed=0, batch=2, seq=24):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, TINY.vocab_size, (batch, seq + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def _logits(model, inputs):
    return model.hf.lm_head(model.hidden_states(inputs))


def test_a_transformers_checkpoint_loads_into_the_lean_layer_with_the_same_state_dict(checkpoint):
    lean = build_model(TINY, seed=0, device=CPU, model_path=checkpoint)
    reference = build_model(TINY, seed=0, device=CPU, model_path=checkpoint, decoder="transformers")
    assert lean.decoder == "lean" and reference.decoder == "transformers"
    assert all(isinstance(layer, LeanDecoderLayer) for layer in lean.layers)
    a, b = lean.state_dict(), reference.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert lean.hf.lm_head.weight is lean.hf.model.embed_tokens.weight  # still tied


def test_logits_loss_and_every_gradient_match_transformers(checkpoint):
    lean = build_model(TINY, seed=0, device=CPU, model_path=checkpoint, loss_chunk_size=16)
    reference = build_model(TINY, seed=0, device=CPU, model_path=checkpoint, loss_chunk_size=16, decoder="transformers")
    inputs, labels = _batch()
    with torch.no_grad():
        expected = _logits(reference, inputs)
        torch.testing.assert_close(_logits(lean, inputs), expected, rtol=1e-5, atol=1e-5)
    assert expected.std() > 1.0  # the random checkpoint gives logits far from uniform: a dropped term would show
    losses = []
    for model in (lean, reference):
        loss = model(inputs, labels)
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-6, atol=1e-6)
    grads = {n: p.grad for n, p in reference.named_parameters()}
    for name, param in lean.named_parameters():
        assert param.grad is not None, name
        torch.testing.assert_close(param.grad, grads[name], rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def test_rope_matches_transformers_rotary_embedding():
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

    rotary = Qwen2RotaryEmbedding(qwen2_config(TINY))
    x = torch.zeros(1, 40, 8)
    cos_ref, sin_ref = rotary(x, torch.arange(40)[None])
    cos, sin = rope_cos_sin(rotary.inv_freq, 40, rotary.attention_scaling)
    torch.testing.assert_close(cos, cos_ref[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(sin, sin_ref[0], rtol=0, atol=1e-6)


def test_the_same_loss_as_full_logits_cross_entropy(checkpoint):
    # the lean model's chunked loss against plain cross-entropy of its own full logits
    lean = build_model(TINY, seed=0, device=CPU, model_path=checkpoint, loss_chunk_size=7)
    inputs, labels = _batch(seed=1)
    with torch.no_grad():
        full = torch.nn.functional.cross_entropy(_logits(lean, inputs).reshape(-1, TINY.vocab_size), labels.reshape(-1))
        hidden = lean.hidden_states(inputs)
        torch.testing.assert_close(causal_lm_loss(hidden, lean.hf.lm_head.weight, labels, chunk_size=7), full)


def test_an_architecture_the_lean_layer_does_not_cover_falls_back_to_transformers():
    from transformers import Qwen2ForCausalLM

    config = qwen2_config(TINY)
    config.hidden_act = "gelu"
    hf = Qwen2ForCausalLM(config)
    assert lean_unsupported(hf) == "hidden_act 'gelu' (covered: silu)"
    with pytest.raises(ValueError, match="does not cover this model: hidden_act 'gelu'"):
        to_lean(hf)


def test_build_model_falls_back_and_says_why(monkeypatch):
    import ray_efa.training.model as model_module

    monkeypatch.setattr(model_module, "lean_unsupported", lambda hf: "sliding-window attention layers")
    model = build_model(TINY, seed=0, device=CPU)
    assert model.decoder == "transformers" and model.decoder_fallback == "sliding-window attention layers"
    assert not any(isinstance(layer, LeanDecoderLayer) for layer in model.layers)


def test_an_unknown_decoder_is_refused():
    with pytest.raises(ValueError, match="decoder must be one of lean, transformers, got 'fast'"):
        build_model(TINY, seed=0, device=CPU, decoder="fast")


def test_the_lean_layer_compiles_as_one_graph(checkpoint):
    # compiled per block as parallelize() does (layer.compile()): the same loss as eager, no graph break
    import torch._dynamo

    torch._dynamo.reset()
    eager = build_model(TINY, seed=0, device=CPU, model_path=checkpoint)
    compiled = build_model(TINY, seed=0, device=CPU, model_path=checkpoint)
    for layer in compiled.layers:
        layer.compile(backend="eager", fullgraph=True)  # fullgraph: a graph break raises
    inputs, labels = _batch(seed=2)
    torch.testing.assert_close(compiled(inputs, labels), eager(inputs, labels), rtol=1e-6, atol=1e-6)
