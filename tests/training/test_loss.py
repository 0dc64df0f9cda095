"""The chunked output projection + cross-entropy gives the unchunked loss and gradients, in fp32 and bf16."""

from typing import TypedDict

import pytest
import torch
import torch.nn.functional as F

from ray_efa.core.models import model_preset
from ray_efa.training.loss import causal_lm_loss, scale_gradients
from ray_efa.training.model import build_model


class Tolerance(TypedDict):
    rtol: float
    atol: float


# bf16 rounds to 8 bits of mantissa; the two paths round at different places (per chunk vs once).
TOLERANCE: dict[torch.dtype, Tolerance] = {
    torch.float32: {"rtol": 1e-5, "atol": 1e-6},
    torch.bfloat16: {"rtol": 2e-2, "atol": 2e-3},
}


def _inputs(dtype, tokens=(3, 37), hidden=16, vocab=97, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(*tokens, hidden, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(vocab, hidden, generator=g) * 0.5).to(dtype).requires_grad_()
    y = torch.randint(0, vocab, tokens, generator=g)
    return h, w, y


def _loss_and_grads(h, w, y, chunk, compiled=False):
    loss = causal_lm_loss(h, w, y, chunk_size=chunk, compiled=compiled)
    return (loss, *torch.autograd.grad(loss, (h, w)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [1, 7, 37, 111, 4096])
def test_chunked_loss_and_gradients_equal_unchunked(dtype, chunk):
    # GIVEN hidden states, a projection and labels (111 tokens: chunks that do and do not divide it, and one chunk)
    h, w, y = _inputs(dtype)
    # WHEN the loss is computed whole and in chunks
    whole = _loss_and_grads(h, w, y, 0)
    chunked = _loss_and_grads(h, w, y, chunk)
    # THEN loss, grad of the hidden states and grad of the weight agree, each in the input's dtype
    for a, b in zip(whole, chunked):
        torch.testing.assert_close(b.float(), a.float(), **TOLERANCE[dtype])
    assert chunked[1].dtype == chunked[2].dtype == dtype


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_chunk_softmax_equals_the_eager_one(dtype):
    # GIVEN the chunked loss with each chunk's softmax and gradient compiled (the GPU path with compile on)
    h, w, y = _inputs(dtype)
    eager = _loss_and_grads(h, w, y, 37)
    compiled = _loss_and_grads(h, w, y, 37, compiled=True)
    # THEN loss and both gradients are those of the eager chunked path (and so of the unchunked one)
    for a, b in zip(eager, compiled):
        torch.testing.assert_close(b.float(), a.float(), **TOLERANCE[dtype])


def test_unchunked_loss_is_the_mean_cross_entropy_of_the_fp32_logits():
    h, w, y = _inputs(torch.bfloat16)
    expected = F.cross_entropy((h @ w.T).float().flatten(0, 1), y.flatten())
    torch.testing.assert_close(causal_lm_loss(h, w, y), expected)


def test_chunked_loss_without_grad_matches_and_keeps_no_graph():
    # GIVEN inputs under no_grad (evaluation)
    h, w, y = _inputs(torch.float32)
    with torch.no_grad():
        loss = causal_lm_loss(h, w, y, chunk_size=8)
    # THEN the value is the same and nothing was built for backward
    torch.testing.assert_close(loss, causal_lm_loss(h, w, y).detach())
    assert loss.grad_fn is None


def test_a_scaled_loss_scales_both_gradients():
    # GIVEN the chunked loss, multiplied by 3 before backward (as a sum of losses or a loss scale would)
    h, w, y = _inputs(torch.float32)
    grads_1 = torch.autograd.grad(causal_lm_loss(h, w, y, chunk_size=8), (h, w))
    grads_3 = torch.autograd.grad(3 * causal_lm_loss(h, w, y, chunk_size=8), (h, w))
    # THEN both gradients are three times larger
    for one, three in zip(grads_1, grads_3):
        torch.testing.assert_close(three, 3 * one)


def test_tied_embedding_gets_both_gradients_with_the_chunked_loss():
    # GIVEN the tiny model (tied embeddings: the projection IS the embedding matrix) with the chunked loss
    model = build_model(model_preset("tiny"), seed=0, device=torch.device("cpu"), loss_chunk_size=5)
    weight = model.hf.model.embed_tokens.weight
    assert model.hf.lm_head.weight is weight
    tokens = torch.randint(0, 1024, (2, 17), generator=torch.Generator().manual_seed(1))
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    # WHEN the loss is back-propagated through the whole model, and separately through the projection alone
    model(inputs, labels).backward()
    hidden = model.hidden_states(inputs).detach()
    (projection_only,) = torch.autograd.grad(causal_lm_loss(hidden, weight, labels, chunk_size=5), weight)
    # THEN the shared weight holds the projection's gradient plus the lookup's, which touches the input tokens' rows only
    assert weight.grad is not None
    lookup = weight.grad - projection_only
    used = torch.zeros(weight.shape[0], dtype=torch.bool)
    used[inputs.flatten()] = True
    assert lookup[used].abs().amax(dim=1).min() > 0
    torch.testing.assert_close(lookup[~used], torch.zeros_like(lookup[~used]), rtol=0, atol=1e-7)


@pytest.mark.parametrize("hidden_dtype", [torch.float32, torch.bfloat16])
def test_the_backward_scale_is_mul_by_the_same_scalar_value_for_value(hidden_dtype):
    # GIVEN the stored gradients (hidden in the model's dtype, the weight's fp32 accumulator) and a scale that no
    # binary fraction holds exactly (1/3: a mean over 3 micro-batches)
    g = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(5, 8, generator=g).to(hidden_dtype), torch.randn(11, 8, generator=g)
    scale = torch.tensor(1 / 3)
    expected = (hidden * scale.to(hidden_dtype), (weight * scale).to(torch.bfloat16))
    # WHEN the backward scales them
    got = scale_gradients(hidden.clone(), weight.clone(), scale, torch.bfloat16)
    # THEN they are mul_'s products exactly, the weight's cast to its dtype after the fp32 product
    assert torch.equal(got[0], expected[0]) and got[0].dtype == hidden_dtype
    assert torch.equal(got[1], expected[1]) and got[1].dtype == torch.bfloat16
