"""Apply the parallelism to a CausalLM, in torchtitan's order: activation checkpointing, compile, then FSDP2.

Activation checkpointing has three modes (ParallelPlan.activation_checkpointing; the plan decides which,
TrainingSettings.checkpointing_mode): none keeps every activation; full recomputes each decoder layer in backward from
its input; selective recomputes per op, as torchtitan's SelectiveAC does (torchtitan/distributed/
activation_checkpoint.py, commit b5bcd76): the outputs of the compute-intensive ops (the partitioner's list: matrix
products, attention) and of the fp8 scales' max are saved, the cheap elementwise ops between them (norms, RoPE,
SiLU, residual adds) recomputed, and of the matrix products every second one recomputed too (`selective_policy`).
Per op and not every k-th layer, for two reasons: it is torchtitan's own selective mode (its per-layer option is
gone from that file), and it is the same in every layer, so the plan charges each layer the same memory and
recompute instead of a layer count's remainder.

Two sharding strategies (the `sharding` setting; core.perf resolves auto): plain FSDP shards every parameter over
all ranks; HSDP (`replicas` > 1) builds a 2-D DeviceMesh (replicate across nodes x shard within a node), so the
all-gathers and reduce-scatters stay on the fast link inside a node and only an all-reduce of each gradient shard
crosses the network. With gradient accumulation, `set_gradient_sync(model, False)` holds back what crosses the
network until the last micro-batch: plain FSDP skips its reduce-scatter (and keeps unsharded gradients meanwhile);
HSDP keeps reducing inside the node and skips only the all-reduce across nodes.

gradReduceDtype bf16 keeps fp32 accumulation: FSDP2 adds held-back gradients in its reduction dtype, so with
accumulation the policy stays fp32 and Bf16WireReduceScatter casts only the wire copy. FSDP2's native HSDP would then
all-reduce the partial sums across nodes in fp32, and it takes no custom all-reduce; so HSDP with a bf16 wire shards
each node 1-D over its shard group and all-reduces across nodes itself, in bf16, from FSDP2's all-reduce hook
(Bf16WireReplicaAllReduce): the sums stay fp32, only the network copy is bf16.

precision fp8: torchao float8 (tensorwise) on the decoder-layer linears core.fp8 converts (the plan's rule: not the small
k/v projections), all-gathered in fp8 where a weight is sharded over more than one rank.

Each decoder layer is its own FSDP unit (`fully_shard` per layer, then the root for the embeddings, final norm and
tied output projection), so only one or two layers are ever all-gathered at a time; where the shard group has one
rank there is nothing to shard, and the gathered model is held for the whole step instead (ParallelPlan.hold_gathered:
one cast and copy a step, not two a micro-batch), and its gradients skip FSDP2's one-rank reduce
(ParallelPlan.one_rank_gradients, training.one_rank). On GPU the parameters are
gathered in bf16 and gradients reduce-scattered in fp32 (MixedPrecisionPolicy); the sharded master weights and
AdamW's state stay fp32.

On CPU (the local gloo run) everything stays fp32, for three reasons: most CPUs have no bf16 matrix units (here a
bf16 step of the tiny model is ~30% slower than fp32), gloo's collectives are tuned for fp32, and exact fp32
arithmetic lets the tests compare resumed, chunked, checkpointed and compiled runs to tight tolerances.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

# set_custom_reduce_scatter's interface (torch >= 2.9), exported from here only
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter

from ray_efa.core.fp8 import converts_to_fp8
from ray_efa.core.pod_env import TORCHAO_VERSION
from ray_efa.training.loss import inductor_options
from ray_efa.training.model import CausalLM
from ray_efa.training.one_rank import use_one_rank_gradients

if TYPE_CHECKING:
    import torch.distributed as dist

__all__ = [
    "ParallelPlan",
    "parallelize",
    "CHECKPOINTING_MODES",
    "checkpointing_mode",
    "selective_policy",
    "mixed_precision_policy",
    "gradient_precision",
    "set_gradient_sync",
    "set_hold_gathered",
    "Bf16WireReduceScatter",
    "Bf16WireReplicaAllReduce",
    "keep_for_current_stream",
    "after_optimizer_step",
    "BF16_ALL_REDUCE_HOOK_PROVEN",
    "all_reduce_hook_proven",
    "TORCHAO_VERSION",
]

BF16_ALL_REDUCE_HOOK_PROVEN: dict[str, str] = {
    "2.11": "CUDA + NCCL against a deliberately slow all-reduce, bitwise equal with the fix and 52.8% off without "
    "(bench/replica_all_reduce_race.py on one H200, docs/BENCHMARKS.md, 2026-12-03)",
    "2.13": "the container's torch (train-ml-cuda-v1.1): FSDP2's foreach_reduce calls the hook on the all-reduce stream "
    "and views the first shard as the .grads, as on 2.11 (read in its source); the storage contract is tested "
    "on 2.13 (tests/training/test_accumulation.py); the slow-link check itself ran on 2.11",
}
"""The torch releases (major.minor) that Bf16WireReplicaAllReduce leans on FSDP2's private behaviour of, with the
evidence. On any other release HSDP falls back to FSDP2's native all-reduce (fp32 across nodes) and says so."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelPlan:
    """How to wrap the decoder layers."""

    activation_checkpointing: bool | Literal["none", "selective", "full"] = False
    """full (or True): recompute each decoder layer in backward, keeping only its input (2 bytes x hidden per token);
    selective: recompute per op, keeping half the matrix products' outputs and the attention's (selective_policy);
    none (or False): keep every activation."""
    compile: bool = False
    """torch.compile each decoder layer (one graph per layer type, reused across layers)."""
    mixed_precision: MixedPrecisionPolicy | None = None
    """FSDP2 parameter/reduction dtypes; None keeps the parameters' own dtype (fp32) for both."""
    replicas: int = 1
    """HSDP: replicate over this many groups of ranks (the nodes) and shard within each; 1 is plain FSDP."""
    bf16_wire: bool = False
    """Bf16WireReduceScatter on every FSDP unit (bf16 reduction with accumulation); with replicas > 1, also the
    all-reduce across replicas in bf16 (Bf16WireReplicaAllReduce)."""
    fp8: bool = False
    """torchao float8 training of the decoder-layer linears (GPU only)."""
    fp8_all_gather: bool | None = None
    """fp8: all-gather the weights in fp8 (half the bytes, cast once for every forward and backward that uses the
    gathered copy); None: where the shard group has more than one rank, or where the gathered model is held for the
    step (one cast a step instead of one a micro-batch: 0.5% faster on one H100, docs/BENCHMARKS.md). On one rank that
    gathers for every use it cost 0.9-1.3% (measured on one H200), so None leaves it off there."""
    tune_kernels: bool = True
    """compile: inductor's coordinate-descent tuning of each compiled kernel's launch configuration (block sizes,
    warps; the compileTuning setting). The default job's step was 1.0% faster with it on one H100
    (docs/BENCHMARKS.md); the first compile takes about a minute longer (it times each kernel's candidates), once per
    layer shape, then comes from inductor's cache."""
    hold_gathered: bool | None = None
    """Keep the gathered bf16 parameters from a step's first forward to its last backward: one all-gather a step
    instead of two a micro-batch (train_step, set_hold_gathered). None: where the shard group has one rank, where
    every all-gather is only a cast and a copy of the whole model and holding its result costs 2 bytes a parameter."""
    one_rank_gradients: bool = True
    """Where a unit's shard group is one rank (one GPU, no replicas), its gradients skip FSDP2's one-rank reduce
    copies and the first micro-batch's fp32 cast (training.one_rank; the same gradients, bit for bit). False: FSDP2's
    own post-backward everywhere."""


CHECKPOINTING_MODES = ("none", "selective", "full")


def checkpointing_mode(plan: ParallelPlan) -> str:
    """The plan's activation checkpointing as one of CHECKPOINTING_MODES (a bool is full or none)."""
    mode = plan.activation_checkpointing
    if isinstance(mode, bool):
        return "full" if mode else "none"
    if mode not in CHECKPOINTING_MODES:
        raise ValueError(f"activation checkpointing must be one of {', '.join(CHECKPOINTING_MODES)}, got {mode!r}")
    return mode


def _saved_ops() -> set[Any]:
    """The ops whose outputs selective checkpointing keeps: torchtitan's `_get_default_save_ops` (the AOT
    partitioner's compute-intensive ops, the SDPA variants, the fp8 scales' max, FSDP's reduce-scatter), and the
    CPU's flash attention, which the partitioner's list names only as the GPU's."""
    from torch._functorch.partitioners import get_default_op_list

    aten = torch.ops.aten
    # OpOverloadPackets (typed as functions): each one's .default overload, as torchtitan takes them
    ops: set[Any] = {cast(Any, op).default for op in get_default_op_list().compute_intensive_ops}
    ops |= {
        aten._scaled_dot_product_cudnn_attention.default,
        aten._scaled_dot_product_attention_math.default,
        aten._scaled_dot_product_flash_attention.default,
        aten._scaled_dot_product_efficient_attention.default,
        aten._scaled_dot_product_flash_attention_for_cpu.default,
        aten.max.default,
        aten.linear.default,
        aten._scaled_mm.default,
        torch.ops._c10d_functional.reduce_scatter_tensor.default,
    }
    return ops


def selective_policy() -> Callable[..., Any]:
    """A fresh per-op policy for torch.utils.checkpoint's create_selective_checkpoint_contexts, as torchtitan's
    SelectiveAC writes it: save what _saved_ops lists, except every second matrix product (counted apart in the
    forward and in its recompute, so both make the same choices); recompute everything else."""
    from torch.utils.checkpoint import CheckpointPolicy

    saved = _saved_ops()
    matmuls = (torch.ops.aten.mm.default, torch.ops.aten.linear.default)
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if func in matmuls:
            counts["recompute" if ctx.is_recompute else "forward"] += 1
            if counts["recompute" if ctx.is_recompute else "forward"] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if func in saved else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _checkpointed(layer: torch.nn.Module, mode: str) -> torch.nn.Module:
    """`layer` wrapped for activation checkpointing in `mode` (not none). Non-reentrant checkpointing composes with
    FSDP2 and compile; the wrapper strips its prefix from state-dict keys, so checkpoints move freely between runs
    with and without it."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    if mode == "full":
        return checkpoint_wrapper(layer, preserve_rng_state=False)
    return checkpoint_wrapper(
        layer, preserve_rng_state=False, context_fn=lambda: create_selective_checkpoint_contexts(selective_policy())
    )


def mixed_precision_policy(device: torch.device, reduce_dtype: str = "fp32") -> MixedPrecisionPolicy | None:
    """bf16 parameters with fp32 (or, gradReduceDtype bf16, bf16) gradient reduction on GPU; None (all fp32) on CPU."""
    if device.type == "cuda":
        reduce = torch.bfloat16 if reduce_dtype == "bf16" else torch.float32
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce)
    return None


def gradient_precision(
    device: torch.device, reduce_dtype: str, grad_accumulation: int
) -> tuple[MixedPrecisionPolicy | None, bool]:
    """(policy, bf16_wire) for a resolved gradReduceDtype: with accumulation, fp32 policy and a bf16 wire."""
    if reduce_dtype == "bf16" and grad_accumulation > 1:
        return mixed_precision_policy(device, "fp32"), device.type == "cuda"
    return mixed_precision_policy(device, reduce_dtype), False


class Bf16WireReduceScatter(ReduceScatter):
    """FSDP2's reduce-scatter with a bf16 wire: fp32 in, fp32 out."""

    def allocate(self, size: Sequence[int | torch.SymInt], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        op: dist.ReduceOp | dist.ReduceOp.RedOpType,
        async_op: bool = False,
    ) -> None:
        import torch.distributed as dist

        wire_out = torch.empty(output_tensor.shape, dtype=torch.bfloat16, device=output_tensor.device)
        reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor  # 2.13 / 2.11
        reduce_scatter(wire_out, input_tensor.to(torch.bfloat16), op=op, group=group)  # pyright: ignore[reportArgumentType]
        output_tensor.copy_(wire_out)
        return None


class Bf16WireReplicaAllReduce:
    """HSDP's all-reduce across the replicas (the nodes) with a bf16 wire, as FSDP2's all-reduce hook of one FSDP unit
    sharded 1-D over its node's shard group (`set_all_reduce_hook`, torch >= 2.7).

    FSDP2 calls it after each micro-batch's reduce-scatter inside the node, on its all-reduce stream, with the fp32
    shard of this unit's gradients; what it leaves there FSDP2 adds into the sharded `.grad`s. Before the last
    micro-batch (`last` False, set by set_gradient_sync) it sends nothing: the first call's shard becomes the `.grad`s'
    storage (FSDP2 views it, in the reduction dtype = the fp32 parameters' dtype), and FSDP2 adds the later
    micro-batches' into it, in fp32, as native HSDP adds its partial sums. At the last micro-batch the held sum and
    this shard are added, cast to bf16 for one all-reduce across the replicas, and put back in fp32, divided by the
    replicas (the reduce-scatter already averaged over the shard group): the mean over every rank.
    """

    def __init__(self, group: dist.ProcessGroup, replicas: int, owner: torch.nn.Parameter) -> None:
        self.group: dist.ProcessGroup = group
        """The replicate group: the same shard rank on every node."""
        self.replicas: int = replicas
        self.owner: torch.nn.Parameter = owner
        """A parameter of this unit, whose .grad must view the held sum (checked at the send)."""
        self.last: bool = True
        """Whether this micro-batch is the step's last: send (set_gradient_sync)."""
        self._held: torch.Tensor | None = None

    def __call__(self, reduce_output: torch.Tensor) -> None:
        import torch.distributed as dist

        keep_for_current_stream(reduce_output)
        if not self.last:
            if self._held is None:
                self._held = reduce_output  # FSDP2 makes it the .grads' storage right after this call
            return
        if self._held is not None:
            held, self._held = self._held, None
            grad = self.owner.grad
            local = getattr(grad, "_local_tensor", grad)
            if local is None or local.untyped_storage().data_ptr() != held.untyped_storage().data_ptr():
                # FSDP2 copied the first shard instead of viewing it: the held sum is not the .grads' (a torch change)
                raise RuntimeError(
                    "Bf16WireReplicaAllReduce: FSDP2 no longer keeps the sharded gradients in the "
                    "reduce-scatter's output; use gradReduceDtype fp32 or sharding fsdp"
                )
            reduce_output += held
            held.zero_()  # the .grads: FSDP2 adds the all-reduced sum into them next
        wire = reduce_output.to(torch.bfloat16)
        dist.all_reduce(wire, group=self.group)
        reduce_output.copy_(wire).div_(self.replicas)


def all_reduce_hook_proven(torch_version: str | None = None) -> bool:
    """Whether the bf16 all-reduce hook is proven on this torch (BF16_ALL_REDUCE_HOOK_PROVEN)."""
    release = ".".join((torch_version or torch.__version__).split("+")[0].split(".")[:2])
    return release in BF16_ALL_REDUCE_HOOK_PROVEN


def keep_for_current_stream(tensor: torch.Tensor) -> None:
    """Keep `tensor`'s memory from reuse until the work queued so far on the current stream has finished.

    FSDP2 allocates a unit's `reduce_output` on its reduce-scatter stream, then runs the all-reduce hook and the add
    into the `.grad`s on its all-reduce stream, and drops the tensor when `foreach_reduce` returns. The caching
    allocator only orders a freed block after the stream it was allocated on, so without this the next unit's
    reduce-scatter (same size: every decoder layer) can be handed the block while a slow cross-node all-reduce still
    reads or writes it: the next layer's gradients overwrite this one's, silently. Native HSDP is guarded against
    exactly this upstream (`_fsdp_param_group.py`, AllReduceState; pytorch PRs 140044 and 180900); the hook path is
    not, so the hook ties the buffer to its own stream. `record_stream` defers the block's reuse until the work the
    all-reduce stream has queued when the tensor is freed is done, whatever the link's speed. On CPU (gloo) there are
    no streams. Proven on CUDA with NCCL against a deliberately slow all-reduce: bench/replica_all_reduce_race.py.
    """
    if tensor.is_cuda:
        tensor.record_stream(torch.cuda.current_stream(tensor.device))


def _convert_to_fp8(model: CausalLM, all_gather: bool) -> None:
    """The decoder-layer nn.Linears worth converting (core.fp8.converts_to_fp8, the rule the plan predicts with:
    not the small k/v projections) to torchao's Float8Linear."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as error:
        raise RuntimeError(
            f"precision fp8 needs torchao=={TORCHAO_VERSION} in the job's environment "
            f"(the Ray pods' init container installs it: k8s.pip_packages): {error}"
        ) from None
    config = Float8LinearConfig(enable_fsdp_float8_all_gather=all_gather)
    convert_to_float8_training(
        model.layers,
        config=config,
        module_filter_fn=lambda module, fqn: (
            isinstance(module, torch.nn.Linear) and converts_to_fp8(module.in_features, module.out_features)
        ),
    )


def after_optimizer_step(model: torch.nn.Module) -> None:
    """fp8: the next all-gather's weight scales, in one all-reduce."""
    if getattr(model, "fp8_all_gather", False):
        from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

        precompute_float8_dynamic_scale_for_fsdp(model)


def _mesh(model: CausalLM, replicas: int):
    """The 2-D (replicate, shard) DeviceMesh of HSDP over the default process group, or None for plain FSDP."""
    if replicas <= 1:
        return None
    import torch.distributed as dist

    world = dist.get_world_size()
    if world % replicas:
        raise ValueError(f"HSDP needs the world size ({world}) to be a multiple of the replica count ({replicas})")
    device_type = next(model.parameters()).device.type
    return init_device_mesh(device_type, (replicas, world // replicas), mesh_dim_names=("replicate", "shard"))


def set_gradient_sync(model: torch.nn.Module, sync: bool) -> None:
    """Whether this micro-batch's backward sends gradients across the network (False until the last micro-batch)."""
    sharded = cast(FSDPModule, model)  # parallelize()'s fully_shard made the model's class an FSDPModule
    hooks: list[Bf16WireReplicaAllReduce] = getattr(model, "replica_all_reduce", [])
    if hooks:  # HSDP with a bf16 wire: FSDP2 reduces inside the node at every micro-batch, the hooks hold back
        for hook in hooks:
            hook.last = sync
    elif getattr(model, "hsdp", False):
        sharded.set_requires_all_reduce(sync, recurse=True)
    else:
        sharded.set_requires_gradient_sync(sync, recurse=True)


def set_hold_gathered(model: torch.nn.Module, hold: bool) -> None:
    """Whether this micro-batch's backward keeps the gathered parameters for the next micro-batch (True until the
    step's last micro-batch); nothing where parallelize() did not hold them (ParallelPlan.hold_gathered)."""
    if getattr(model, "hold_gathered", False):
        cast(FSDPModule, model).set_reshard_after_backward(not hold, recurse=True)


def parallelize(model: CausalLM, plan: ParallelPlan) -> CausalLM:
    """Wrap the layers as `plan` says and shard the model over the default process group, in place."""
    mode = checkpointing_mode(plan)
    hold = plan.hold_gathered if plan.hold_gathered is not None else _shard_ranks(plan) == 1
    fp8_all_gather = plan.fp8 and (
        plan.fp8_all_gather if plan.fp8_all_gather is not None else hold or _shard_ranks(plan) > 1
    )
    if plan.fp8:
        _convert_to_fp8(model, fp8_all_gather)  # before sharding
    layers = model.layers
    for index, layer in enumerate(layers):
        if mode != "none":
            layer = _checkpointed(layer, mode)
        if plan.compile:
            layer.compile(options=inductor_options(plan.tune_kernels))  # in place: no "_orig_mod." in state-dict keys
        layers[index] = layer

    model.compile_loss = plan.compile  # the chunked loss's softmax is compiled with the layers
    model.tune_kernels = plan.compile and plan.tune_kernels
    mp: dict[str, Any] = {"mp_policy": plan.mixed_precision} if plan.mixed_precision is not None else {}
    mesh = _mesh(model, plan.replicas)
    # HSDP with a bf16 wire: 1-D FSDP over the node's shard group, the all-reduce across nodes ours (see above),
    # on the torch releases it is proven on
    own_all_reduce = mesh is not None and plan.bf16_wire and all_reduce_hook_proven()
    if mesh is not None and plan.bf16_wire and not own_all_reduce:
        _say_once(
            f"hsdp: the bf16 all-reduce across nodes is proven on torch {', '.join(BF16_ALL_REDUCE_HOOK_PROVEN)} "
            f"only, this is {torch.__version__}: FSDP2's native HSDP all-reduces in fp32 instead (slower across "
            "nodes, same gradients)"
        )
    if mesh is not None:
        mp["mesh"] = mesh["shard"] if own_all_reduce else mesh
    for index, layer in enumerate(layers):
        # The last layer is needed again at once by backward: resharding it after forward only costs an all-gather.
        fully_shard(layer, reshard_after_forward=not hold and index < len(layers) - 1, **mp)
    fully_shard(model, reshard_after_forward=not hold, **mp)
    if plan.bf16_wire:
        comm = Bf16WireReduceScatter()
        for module in (*layers, model):
            cast(FSDPModule, module).set_custom_reduce_scatter(comm)
    model.replica_all_reduce = []
    if own_all_reduce:
        assert mesh is not None
        in_layers = {id(p) for layer in layers for p in layer.parameters()}
        root_param = next(p for p in model.parameters() if id(p) not in in_layers)  # the root unit's own
        for module, owner in (*zip(layers, (next(layer.parameters()) for layer in layers)), (model, root_param)):
            hook = Bf16WireReplicaAllReduce(mesh.get_group("replicate"), plan.replicas, owner)
            cast(FSDPModule, module).set_all_reduce_hook(hook)
            model.replica_all_reduce.append(hook)
    # after every hook is set: a unit with an all-reduce hook keeps FSDP2's post-backward
    fused = plan.compile and next(model.parameters()).device.type == "cuda"
    model.one_rank_units = use_one_rank_gradients(model, fused) if plan.one_rank_gradients else 0
    model.hsdp = mesh is not None
    model.hold_gathered = hold
    model.fp8 = plan.fp8
    model.fp8_all_gather = fp8_all_gather
    return model


def _say_once(text: str) -> None:
    """A line on rank 0's stdout (every rank decides the same)."""
    import sys

    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_rank() == 0:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def _shard_ranks(plan: ParallelPlan) -> int:
    """How many ranks each parameter is sharded over (1 without a process group: nothing to gather)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return 1
    return dist.get_world_size() // max(plan.replicas, 1)
