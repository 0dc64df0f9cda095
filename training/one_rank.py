"""FSDP2's gradients where a shard group is one rank, without its reduce path's copies.

On one GPU (one rank, no replicas) FSDP2 still runs its reduce-scatter path at each step's last backward
(`foreach_reduce`): it copies every unit's unsharded gradients into one flat buffer (`chunk_cat`), copies that into a
second (its one-rank branch, `reduce_output.copy_`, a device-to-device memcpy) and hands views of the second to the
sharded parameters. Between micro-batches it casts each bf16 gradient to an fp32 accumulator, then adds the next one
into it: two passes over the fp32 gradients where one does. On the Llama 3.2 1B step of issue 57 (one H100, fp8
16 x 2048 x 2) this post-backward takes 21 ms of copies and passes out of the step and adds the one-pass sum (4.9 ms):
-1.4%, and 8.3 GiB less reserved (docs/BENCHMARKS.md, "One GPU without FSDP2's one-rank reduce").

On one rank the sharded parameter's local tensor has the unsharded shape, so the unsharded gradient can be the
sharded one as it is. `OneRankPostBackward` is that post-backward: the last micro-batch's gradient (or the fp32 sum
of the step's micro-batches) becomes the sharded parameter's gradient with no copy, and the first micro-batch's bf16
gradient is kept until the second arrives, the two summed into fp32 in one pass (`sum_in_fp32`: bf16 to fp32 is
exact, so the sums are FSDP2's). Everything runs on the compute stream, in order with the backward: no
reduce-scatter stream, nothing to record.

It reads FSDP2's private state (FSDPParamGroup, FSDPParam), so `use_one_rank_gradients`
installs it only on groups it knows to be plain (`applies`) and only on the torch releases in PROVEN, and leaves every
other group to FSDP2: the gradients are FSDP2's bit for bit (tests/training/test_one_rank.py on CPU; on CUDA with NCCL,
bench/one_rank_check.py).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.distributed.fsdp._fully_shard._fsdp_common import FSDPMeshInfo, HSDPMeshInfo, TrainingState
from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

__all__ = ["OneRankPostBackward", "applies", "sum_in_fp32", "use_one_rank_gradients", "PROVEN"]

PROVEN: dict[str, str] = {
    "2.11": "the GPU machine's torch: bit for bit FSDP2's on CUDA with NCCL (bench/one_rank_check.py on one H100, "
    "2026-12-08; the Llama side-by-side's runs trained on it)",
    "2.13": "the container's torch: bit for bit FSDP2's on gloo (tests/training/test_one_rank.py); its "
    "FSDPParamGroup.post_backward and FSDPParam's accumulation read in its source (2026-12-08)",
}
"""The torch releases (major.minor) whose FSDP2 internals OneRankPostBackward is checked against, with the evidence."""


def applies(group: FSDPParamGroup) -> bool:
    """Whether the group's parameters are sharded over one rank and reduced nowhere else (no HSDP replicas, no
    all-reduce hook, no divide factor, no CPU offload, one module): what OneRankPostBackward replaces exactly."""
    mesh = group.mesh_info
    return (
        isinstance(mesh, FSDPMeshInfo)
        and mesh.shard_mesh_size == 1
        and not isinstance(mesh, HSDPMeshInfo)
        and group._all_reduce_hook is None
        and getattr(group, "gradient_divide_factor", None) is None
        and not getattr(group, "reduce_scatter_unused_params", False)  # getattr: a newer FSDP2 option
        and len(group.modules) == 1
        and not any(p.offload_to_cpu for p in group.fsdp_params)
    )


@functools.cache
def _compiled_sum() -> Any:
    return torch.compile(lambda a, b: a.float() + b.float(), dynamic=True)


def sum_in_fp32(a: torch.Tensor, b: torch.Tensor, fused: bool) -> torch.Tensor:
    """fp32(a) + fp32(b) as a new fp32 tensor; `fused`: in one compiled kernel (reads 2 + 2 bytes, writes 4 a value)
    instead of a cast and an add (the same numbers: each bf16 value is exact in fp32)."""
    if fused:
        return _compiled_sum()(a.view(-1), b.view(-1)).view(a.shape)
    return a.float().add_(b)


class OneRankPostBackward:
    """FSDPParamGroup.post_backward for a group where `applies`: set on the group instance, called as FSDP2 calls its
    own (after each micro-batch's backward of the group, and by the root's final callback)."""

    def __init__(self, group: FSDPParamGroup, fused: bool) -> None:
        self.group = group
        self.fused = fused
        self.pending: dict[int, torch.Tensor] = {}  # index in fsdp_params -> the first micro-batch's bf16 gradient

    def _accumulate(self, index: int, fsdp_param: Any) -> None:
        """Fold the gradient autograd just wrote into the step's sum (FSDP2's accumulate and to-accumulated-grad)."""
        param = fsdp_param._unsharded_param  # the gathered data may be resharded already; its .grad is its own
        grad = param.grad
        reduce_dtype = fsdp_param.reduce_dtype
        if grad is None or reduce_dtype is None or grad.dtype == reduce_dtype:
            return  # autograd adds into .grad itself, in the reduce dtype (FSDP2 does the same)
        param.grad = None
        if fsdp_param.unsharded_accumulated_grad is not None:
            fsdp_param.unsharded_accumulated_grad += grad
        elif index in self.pending:
            fsdp_param.unsharded_accumulated_grad = sum_in_fp32(self.pending.pop(index), grad, self.fused)
        else:
            self.pending[index] = grad

    @torch._dynamo.disable
    def __call__(self, *unused: Any) -> None:
        group = self.group
        group._training_state = TrainingState.POST_BACKWARD
        for index, fsdp_param in enumerate(group.fsdp_params):
            if hasattr(fsdp_param, "_unsharded_param"):
                self._accumulate(index, fsdp_param)
        if not group.reduce_grads:  # a micro-batch before the step's last (set_gradient_sync False)
            if group.reshard_after_backward:
                group.reshard()
            return
        grads = []
        for index, fsdp_param in enumerate(group.fsdp_params):
            if not hasattr(fsdp_param, "_unsharded_param"):
                continue
            param = fsdp_param._unsharded_param
            if fsdp_param.unsharded_accumulated_grad is not None:
                grad, fsdp_param.unsharded_accumulated_grad = fsdp_param.unsharded_accumulated_grad, None
            elif index in self.pending:  # the step's only gradient came from an earlier micro-batch
                grad = self.pending.pop(index).to(fsdp_param.reduce_dtype)
            elif param.grad is not None:
                grad, param.grad = param.grad, None
            else:
                continue
            grads.append((fsdp_param, grad))
        if group.reshard_after_backward:
            group.reshard()
        for fsdp_param, grad in grads:
            sharded = fsdp_param.sharded_param
            # one rank: the sharded size is the unsharded one; FSDP2 hands the reduced gradient over in the sharded
            # parameter's dtype, accumulating into a gradient already there
            local = grad.to(sharded.dtype).view(fsdp_param.sharded_size)
            if sharded.grad is not None:
                sharded.grad._local_tensor += local
            else:
                sharded.grad = fsdp_param.to_sharded_dtensor(local)


def use_one_rank_gradients(module: torch.nn.Module, fused: bool) -> int:
    """Set OneRankPostBackward on every FSDP unit under `module` (fully_shard'ed) where it `applies`, on the torch
    releases in PROVEN; the number of units it was set on (0 elsewhere: FSDP2's own post-backward everywhere)."""
    if ".".join(torch.__version__.split(".")[:2]) not in PROVEN:
        return 0
    count = 0
    for group in _param_groups(module):
        if applies(group):
            group.post_backward = OneRankPostBackward(group, fused)  # type: ignore[method-assign]
            count += 1
    return count


def _param_groups(module: torch.nn.Module) -> list[FSDPParamGroup]:
    """The FSDP parameter groups of every unit under `module`: torch 2.13 keeps a list a unit, 2.11 one."""
    groups: list[FSDPParamGroup] = []
    for unit in module.modules():
        get_state = getattr(unit, "_get_fsdp_state", None)
        if get_state is None:
            continue
        state = get_state()
        found = getattr(state, "_fsdp_param_groups", None)
        groups += found if found is not None else [g for g in (state._fsdp_param_group,) if g is not None]
    return groups
