"""Output projection + cross-entropy, optionally chunked over tokens.

With a 151,936-token vocabulary the logits dominate memory: at 4 x 4096 tokens the unchunked path holds about
12 bytes per logit (bf16 logits, their fp32 copy, the saved log-softmax and its gradient), 28 GiB per GPU. The
chunked path never builds more than one chunk of logits: it runs forward and backward of the projection chunk by
chunk inside the forward pass and keeps only the two gradients it will return (grad of the hidden states, the size
of the activations, and an fp32 accumulator of the weight's gradient). It costs no recomputation, only the
accumulator (vocab x hidden x 4 bytes).

Both paths average over every token (no ignore index: the batches have no padding) and compute the softmax in
fp32. `weight` is the output projection, which for tied embeddings is the embedding matrix itself, so the
gradient flows into the one shared parameter from both uses.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

__all__ = ["causal_lm_loss"]


def causal_lm_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, *, chunk_size: int = 0) -> torch.Tensor:
    """Mean cross-entropy of `hidden @ weight.T` against `labels`.

    hidden: (..., hidden_size) final hidden states; weight: (vocab, hidden_size); labels: (...) token ids, the same
    leading shape as hidden. chunk_size: tokens per chunk; 0 builds all logits at once.
    """
    hidden = hidden.reshape(-1, hidden.shape[-1])
    labels = labels.reshape(-1)
    if chunk_size <= 0:
        return F.cross_entropy(F.linear(hidden, weight).float(), labels)
    if not torch.is_grad_enabled() or not (hidden.requires_grad or weight.requires_grad):
        return _chunked_loss_no_grad(hidden, weight, labels, chunk_size)
    return _ChunkedLinearCrossEntropy.apply(hidden, weight, labels, chunk_size)


def _chunked_loss_no_grad(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_size: int) -> torch.Tensor:
    total = torch.zeros((), dtype=torch.float32, device=hidden.device)
    for start in range(0, labels.numel(), chunk_size):
        logits = F.linear(hidden[start : start + chunk_size], weight).float()
        total += F.cross_entropy(logits, labels[start : start + chunk_size], reduction="sum")
    return total / labels.numel()


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Loss and both gradients, one chunk of logits at a time; backward only scales the stored gradients."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_size: int) -> torch.Tensor:
        n = labels.numel()
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden)
        # fp32 accumulator: summing many bf16 chunk products in bf16 would lose the small ones.
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for start in range(0, n, chunk_size):
            h, y = hidden[start : start + chunk_size], labels[start : start + chunk_size]
            logits = F.linear(h, weight).float()
            lse = torch.logsumexp(logits, dim=-1)
            total += (lse - logits.gather(1, y[:, None]).squeeze(1)).sum()
            # d(sum of losses)/d(logits) = softmax - one_hot, built in place in the logits buffer; /n for the mean.
            probs = logits.sub_(lse[:, None]).exp_()
            probs[torch.arange(len(y), device=y.device), y] -= 1.0
            grad_logits = probs.div_(n).to(hidden.dtype)
            del logits, probs
            grad_hidden[start : start + chunk_size] = grad_logits @ weight
            grad_weight.add_(grad_logits.T @ h)  # in place: the bf16 product is widened element by element
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        ctx.mark_non_differentiable(labels)
        return total / n

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output: torch.Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        # grad_output is 1.0 for loss.backward(); anything else (a loss scale, a sum of losses) scales both. In place:
        # the stored gradients are used once, and a copy of the fp32 accumulator would cost vocab x hidden x 4 bytes.
        return (
            grad_hidden.mul_(grad_output.to(grad_hidden.dtype)),
            grad_weight.mul_(grad_output).to(ctx.weight_dtype),
            None,
            None,
        )
