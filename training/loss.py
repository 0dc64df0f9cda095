"""Output projection + cross-entropy, optionally chunked over tokens.

With a 151,936-token vocabulary the logits dominate memory: at 4 x 4096 tokens the unchunked path holds about
12 bytes per logit (bf16 logits, their fp32 copy, the saved log-softmax and its gradient), 28 GiB per GPU. The
chunked path never builds more than one chunk of logits: it runs forward and backward of the projection chunk by
chunk inside the forward pass and keeps only the two gradients it will return (grad of the hidden states, the size
of the activations, and an fp32 accumulator of the weight's gradient). It costs no recomputation, only the
accumulator (vocab x hidden x 4 bytes).

Both paths average over every token (no ignore index: the batches have no padding) and compute the softmax in
fp32. With `compiled`, each chunk's softmax and gradient is one torch.compile'd function: the eager code makes six
passes over the chunk's fp32 logits (widen, log-sum-exp, subtract, exp, scale, narrow), which on an H200 cost more
than the chunk's two matrix products; compiled, it reads the bf16 logits twice and writes the bf16 gradient once. `weight` is the output projection, which for tied embeddings is the embedding matrix itself, so the
gradient flows into the one shared parameter from both uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

__all__ = ["causal_lm_loss", "inductor_options", "scale_gradients"]


def causal_lm_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    chunk_size: int = 0,
    compiled: bool = False,
    tuned: bool = False,
    softcap: float | None = None,
) -> torch.Tensor:
    """Mean cross-entropy of `hidden @ weight.T` against `labels`.

    hidden: (..., hidden_size) final hidden states; weight: (vocab, hidden_size); labels: (...) token ids, the same
    leading shape as hidden. chunk_size: tokens per chunk; 0 builds all logits at once. compiled: fuse each chunk's
    softmax and gradient with torch.compile (chunked path only); tuned: with inductor's coordinate-descent tuning of
    its kernels (inductor_options). softcap: the family's final-logit soft-cap (Gemma 2: tanh(logits / cap) x cap, as
    its ForCausalLM applies it); the logits are then built all at once (the chunked path has no soft-cap).
    """
    hidden = hidden.reshape(-1, hidden.shape[-1])
    labels = labels.reshape(-1)
    if softcap:
        logits = F.linear(hidden, weight).float()
        return F.cross_entropy(torch.tanh(logits / softcap) * softcap, labels)
    if chunk_size <= 0:
        return F.cross_entropy(F.linear(hidden, weight).float(), labels)
    if not torch.is_grad_enabled() or not (hidden.requires_grad or weight.requires_grad):
        return _chunked_loss_no_grad(hidden, weight, labels, chunk_size)
    return _ChunkedLinearCrossEntropy.apply(hidden, weight, labels, chunk_size, compiled, tuned)


def _chunked_loss_no_grad(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_size: int
) -> torch.Tensor:
    total = torch.zeros((), dtype=torch.float32, device=hidden.device)
    for start in range(0, labels.numel(), chunk_size):
        logits = F.linear(hidden[start : start + chunk_size], weight).float()
        total += F.cross_entropy(logits, labels[start : start + chunk_size], reduction="sum")
    return total / labels.numel()


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Loss and both gradients, one chunk of logits at a time; backward only scales the stored gradients."""

    @staticmethod
    def forward(
        ctx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        labels: torch.Tensor,
        chunk_size: int,
        compiled: bool,
        tuned: bool,
    ) -> torch.Tensor:
        n = labels.numel()
        softmax_grad = _compiled_softmax_grad(tuned) if compiled else _softmax_grad
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden)
        # fp32 accumulator: summing many bf16 chunk products in bf16 would lose the small ones.
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for start in range(0, n, chunk_size):
            h, y = hidden[start : start + chunk_size], labels[start : start + chunk_size]
            loss_sum, grad_logits = softmax_grad(F.linear(h, weight), y, 1.0 / n)
            total += loss_sum
            grad_hidden[start : start + chunk_size] = grad_logits @ weight
            _accumulate_product(grad_weight, grad_logits, h)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        ctx.mark_non_differentiable(labels)
        return total / n

    @staticmethod
    @once_differentiable
    # torch's documented form takes one gradient per forward output; the base class declares *grad_outputs.
    def backward(ctx, grad_output: torch.Tensor):  # pyright: ignore[reportIncompatibleMethodOverride]
        grad_hidden, grad_weight = ctx.saved_tensors
        return (*scale_gradients(grad_hidden, grad_weight, grad_output, ctx.weight_dtype), None, None, None, None)


def scale_gradients(
    grad_hidden: torch.Tensor, grad_weight: torch.Tensor, grad_output: torch.Tensor, weight_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The stored gradients times grad_output (1.0 for loss.backward(); 1/k for train_step's k micro-batches, a loss
    scale or a sum of losses otherwise), the weight's in its own dtype.

    In place: the stored gradients are used once, and a copy of the fp32 accumulator would cost vocab x hidden x 4
    bytes. `_foreach_mul_` by the 0-dim tensor, not `mul_`: on CUDA a `mul_` by a 0-dim CUDA tensor broadcasts it and
    takes torch's strided elementwise kernel (`elementwise_kernel<128, 2, gpu_kernel_impl_nocast>`, 6.3 ms a step
    over the Llama 3.2 1B job's 1 GiB accumulator in the 2026-12-08 profile, bench/results/
    2026-12-08-h100x1-one-rank-variants.jsonl), where the foreach op reads the scalar on the device and stays
    vectorized; the same products (tests/training/test_loss.py)."""
    # the op clip_grad_norm_ scales gradients by its 0-dim clip coefficient with (torch.nn.utils.clip_grad)
    torch._foreach_mul_([grad_hidden], grad_output.to(grad_hidden.dtype))  # pyright: ignore[reportPrivateImportUsage]
    torch._foreach_mul_([grad_weight], grad_output)  # pyright: ignore[reportPrivateImportUsage]
    return grad_hidden, grad_weight.to(weight_dtype)


def _accumulate_product(acc: torch.Tensor, grad_logits: torch.Tensor, h: torch.Tensor) -> None:
    """acc += grad_logits.T @ h, acc fp32 and the factors bf16.

    On CUDA the sum is the matrix product's own epilogue (cuBLAS with beta = 1 and an fp32 output; an fp32 `self` with
    bf16 factors since pytorch/pytorch#167931, measured on the GPU image's torch 2.11, and the project requires 2.13):
    the accumulator is read and written once and the chunk's vocab x hidden product is never stored. On CPU, where torch has no
    mixed-dtype addmm, the bf16 product is built and widened into acc element by element.
    """
    if acc.is_cuda:
        torch.addmm(acc, grad_logits.T, h, out_dtype=torch.float32, out=acc)
    else:
        acc.add_(grad_logits.T @ h)


def _softmax_grad(logits: torch.Tensor, labels: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk: the sum of its token losses, and `scale` x d(sum)/d(logits) in the logits' dtype (eager, in place).

    d(sum of losses)/d(logits) = softmax - one_hot, built in place in the fp32 copy of the logits.
    """
    x = logits.float()
    lse = torch.logsumexp(x, dim=-1)
    loss_sum = (lse - x.gather(1, labels[:, None]).squeeze(1)).sum()
    probs = x.sub_(lse[:, None]).exp_()
    probs[torch.arange(len(labels), device=labels.device), labels] -= 1.0
    return loss_sum, probs.mul_(scale).to(logits.dtype)


def _softmax_grad_functional(
    logits: torch.Tensor, labels: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same as _softmax_grad without in-place ops, which is the form torch.compile fuses into two kernels."""
    x = logits.float()
    lse = torch.logsumexp(x, dim=-1)
    loss_sum = (lse - x.gather(1, labels[:, None]).squeeze(1)).sum()
    one_hot = torch.arange(x.shape[-1], device=x.device)[None, :] == labels[:, None]
    grad = (torch.exp(x - lse[:, None]) - one_hot.to(x.dtype)) * scale
    return loss_sum, grad.to(logits.dtype)


def inductor_options(tuned: bool) -> dict[str, Any]:
    """torch.compile's inductor options for the job's compiled code (the decoder layers, this loss's softmax):
    coordinate-descent tuning of the generated kernels' launch configurations, or inductor's defaults."""
    return {"coordinate_descent_tuning": True} if tuned else {}


_COMPILED: dict[bool, Callable] = {}


def _compiled_softmax_grad(tuned: bool = False) -> Callable:
    """torch.compile of _softmax_grad_functional, made on first use (compiling costs seconds, once per chunk shape);
    `tuned`: with inductor's coordinate-descent tuning."""
    if tuned not in _COMPILED:
        _COMPILED[tuned] = torch.compile(_softmax_grad_functional, dynamic=False, options=inductor_options(tuned))
    return _COMPILED[tuned]
