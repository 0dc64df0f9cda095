"""Apply the parallelism to a CausalLM, in torchtitan's order: activation checkpointing, compile, then FSDP2.

Each decoder layer is its own FSDP unit (`fully_shard` per layer, then the root for the embeddings, final norm and
tied output projection), so only one or two layers are ever all-gathered at a time. On GPU the parameters are
gathered in bf16 and gradients reduce-scattered in fp32 (MixedPrecisionPolicy); the sharded master weights and
AdamW's state stay fp32.

On CPU (the local gloo run) everything stays fp32, for three reasons: most CPUs have no bf16 matrix units (here a
bf16 step of the tiny model is ~30% slower than fp32), gloo's collectives are tuned for fp32, and exact fp32
arithmetic lets the tests compare resumed, chunked, checkpointed and compiled runs to tight tolerances.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from ray_efa.training.model import CausalLM

__all__ = ["ParallelPlan", "parallelize", "mixed_precision_policy"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelPlan:
    """How to wrap the decoder layers."""

    activation_checkpointing: bool = False
    """Recompute each decoder layer in backward: keep only its input (2 bytes x hidden per token)."""
    compile: bool = False
    """torch.compile each decoder layer (one graph per layer type, reused across layers)."""
    mixed_precision: MixedPrecisionPolicy | None = None
    """FSDP2 parameter/reduction dtypes; None keeps the parameters' own dtype (fp32) for both."""


def mixed_precision_policy(device: torch.device) -> MixedPrecisionPolicy | None:
    """bf16 parameters with fp32 gradient reduction on GPU; None (all fp32) on CPU, see the module docstring."""
    if device.type == "cuda":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return None


def parallelize(model: CausalLM, plan: ParallelPlan) -> CausalLM:
    """Wrap the layers as `plan` says and shard the model over the default process group, in place."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    layers = model.layers
    for index, layer in enumerate(layers):
        if plan.activation_checkpointing:
            # Non-reentrant checkpointing composes with FSDP2 and compile; the wrapper strips its prefix from
            # state-dict keys, so checkpoints move freely between runs with and without it.
            layer = checkpoint_wrapper(layer, preserve_rng_state=False)
        if plan.compile:
            layer.compile()  # in place: no "_orig_mod." in state-dict keys
        layers[index] = layer

    model.compile_loss = plan.compile  # the chunked loss's softmax is compiled with the layers
    mp = {"mp_policy": plan.mixed_precision} if plan.mixed_precision is not None else {}
    for index, layer in enumerate(layers):
        # The last layer is needed again at once by backward: resharding it after forward only costs an all-gather.
        fully_shard(layer, reshard_after_forward=index < len(layers) - 1, **mp)
    fully_shard(model, **mp)
    return model
