"""A candidate lever for one GPU, not adopted: FSDP2's gradients without its one-rank "reduce-scatter".

Where a parameter's shard group is one rank, FSDP2's post-backward still runs its reduce path for every unit
(`foreach_reduce`): the unsharded gradients are copied into a flat reduce-scatter input (`chunk_cat`), that input is
copied into a second flat buffer (the one-rank branch's `reduce_output.copy_`), and the sharded gradients are views of
the second. On the Llama 3.2 1B untied step of issue 57 (one H100, fp8 16 x 2048 x 2) those two copies are about 10.5
ms of a 0.81 s step (docs/BENCHMARKS.md, "The Qwen default beside torchtitan, 4 runs a side").

On one rank the sharded parameter's local tensor has the unsharded shape, so the unsharded gradient itself (the fp32
accumulator FSDP2 keeps between micro-batches, or the last backward's gradient cast to the sharded dtype) can be the
sharded gradient, with no copy. `installed()` swaps FSDPParamGroup.post_backward for that, for groups of one rank
without a replicate dimension, and leaves every other group to FSDP2. It runs on the compute stream, in order with
the backward (no reduce-scatter stream, nothing to record).

It reaches into FSDP2's private state (FSDPParamGroup, FSDPParam; torch 2.11 and 2.13 alike), so it lives here, not in
training/: the gradients are checked equal to FSDP2's on CPU (tests/training/test_one_rank_grads.py), and its speed is
for a GPU to show (`bench/step_profile.py variants hold+fp8ag+cdt+r1g`) before training/ takes anything like it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch.distributed.fsdp._fully_shard._fsdp_common import FSDPMeshInfo, HSDPMeshInfo, TrainingState
from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

__all__ = ["installed", "install", "uninstall", "one_rank"]

_FSDP_POST_BACKWARD = FSDPParamGroup.post_backward


def one_rank(group: FSDPParamGroup) -> bool:
    """Whether the group's parameters are sharded over one rank and reduced nowhere else: no HSDP all-reduce, no
    all-reduce hook (training.parallelize's bf16-wire replicas)."""
    mesh = group.mesh_info
    return (
        isinstance(mesh, FSDPMeshInfo)
        and mesh.shard_mesh_size == 1
        and not isinstance(mesh, HSDPMeshInfo)
        and group._all_reduce_hook is None
    )


def _post_backward(self: FSDPParamGroup, *unused: Any) -> None:
    if not one_rank(self) or len(self.modules) > 1:
        return _FSDP_POST_BACKWARD(self, *unused)
    self._training_state = TrainingState.POST_BACKWARD
    for fsdp_param in self.fsdp_params:
        fsdp_param.accumulate_unsharded_grad_if_needed()
    if not self.reduce_grads:  # a micro-batch before the step's last: as FSDP2 does
        if self.reshard_after_backward:
            self.reshard()
        for fsdp_param in self.fsdp_params:
            fsdp_param.to_accumulated_grad_if_needed()
        return
    grads = []
    for fsdp_param in self.fsdp_params:
        if not hasattr(fsdp_param, "_unsharded_param"):
            continue
        if fsdp_param.unsharded_accumulated_grad is not None:
            grad = fsdp_param.unsharded_accumulated_grad_data
            fsdp_param.unsharded_accumulated_grad = None
        elif fsdp_param.unsharded_param.grad is not None:
            grad = fsdp_param.unsharded_grad_data
            fsdp_param.unsharded_param.grad = None
        else:
            continue
        grads.append((fsdp_param, grad))
    if self.reshard_after_backward:
        self.reshard()
    for fsdp_param, grad in grads:
        sharded = fsdp_param.sharded_param
        # one rank: the sharded size is the unsharded one; FSDP2 hands over the reduce dtype cast to the parameter's
        local = grad.to(sharded.dtype).view(fsdp_param.sharded_size)
        if sharded.grad is not None:
            sharded.grad += fsdp_param.to_sharded_dtensor(local)
        else:
            sharded.grad = fsdp_param.to_sharded_dtensor(local)


def install() -> None:
    """FSDP2's post-backward without the one-rank copies, for every group of one rank, for the rest of the process
    (bench/step_profile.py's `r1g` variant)."""
    FSDPParamGroup.post_backward = _post_backward  # type: ignore[method-assign]


def uninstall() -> None:
    """FSDP2's own post-backward again."""
    FSDPParamGroup.post_backward = _FSDP_POST_BACKWARD  # type: ignore[method-assign]


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """install() while the context lasts."""
    install()
    try:
        yield
    finally:
        uninstall()
