"""Which linears fp8 training converts, and what the conversion costs besides the matrix products (pure Python).

The planner (core.perf) and the training job (training.parallelize, torchao's module_filter_fn) both ask
`converts_to_fp8`, so the plan predicts exactly the linears the job converts.

torchao's float8 README measures tensorwise-scaled fp8 against bf16 per GEMM shape M x K x N (M tokens, K = in_features,
N = out_features) on an H100: small GEMMs lose (0.80x at 1024 x 2048 x 1024), because the casts and amax reductions
cost memory traffic that the fp8 matrix product does not win back; its own auto filter for tensorwise scaling
(torchao/float8/float8_linear_utils.py, _auto_filter_for_tensorwise) leaves a linear in bf16 when K <= 4096 and
N <= 1024, and any linear whose dimensions are not multiples of 16 (fp8 tensor cores need them). Here that rule, in
the README's K / N sense (the filter itself unpacks weight.shape, which is (out, in), into its K, N): the k and v
projections of a grouped-query model (N = kv heads x head dim, 256 for Qwen2.5-1.5B) stay bf16.
"""

from __future__ import annotations

from ray_efa.core.models import ModelPreset

__all__ = [
    "SMALL_K",
    "SMALL_N",
    "CAST_BYTES_PER_ELEMENT",
    "converts_to_fp8",
    "decoder_linears",
    "fp8_linears",
    "fp8_parameters",
    "cast_bytes_per_token",
]

SMALL_K = 4096
SMALL_N = 1024
"""A linear with in_features <= SMALL_K and out_features <= SMALL_N stays bf16 (torchao's tensorwise auto filter)."""

CAST_BYTES_PER_ELEMENT = 6.0
"""Device-memory bytes moved per element of a converted linear's input (forward) and output gradient (backward)
for torchao's dynamic tensorwise scaling under torch.compile: the amax reduction reads the bf16 tensor (2), the cast
reads it again and writes fp8 (2 + 1), and the weight gradient needs the fp8 copy transposed (1). Derived from the
recipe, not fitted: core.perf times it at the GPU's memory bandwidth, which is why the same fp8 gain on an H200
(4.8 TB/s) is a loss on an L4 (300 GB/s, 16x less bandwidth for 8x less compute)."""


def converts_to_fp8(in_features: int, out_features: int) -> bool:
    """Whether fp8 training converts an nn.Linear of this shape (see the module docstring)."""
    if in_features % 16 or out_features % 16:
        return False
    return not (in_features <= SMALL_K and out_features <= SMALL_N)


def decoder_linears(p: ModelPreset) -> tuple[tuple[str, int, int], ...]:
    """(name, in_features, out_features) of each linear in one decoder layer, as the family builds it (ModelPreset.linears:
    q, k, v, o, gate, up, down; phi3's fused qkv_proj and gate_up_proj; q's width heads x head_dim)."""
    return tuple((name, k, n) for name, k, n, _ in p.linears())


def fp8_linears(p: ModelPreset) -> tuple[tuple[str, int, int], ...]:
    """The decoder-layer linears fp8 training converts."""
    return tuple(row for row in decoder_linears(p) if converts_to_fp8(row[1], row[2]))


def fp8_parameters(p: ModelPreset) -> int:
    """Weights of the converted linears over all layers: their FLOPs run in fp8 and they are all-gathered as 1 byte."""
    return p.num_hidden_layers * sum(k * n for _, k, n in fp8_linears(p))


def cast_bytes_per_token(p: ModelPreset) -> float:
    """Device-memory bytes the casts and amax reductions of the converted linears move per token (fwd + bwd)."""
    return CAST_BYTES_PER_ELEMENT * p.num_hidden_layers * sum(k + n for _, k, n in fp8_linears(p))
