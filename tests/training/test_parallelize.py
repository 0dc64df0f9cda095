"""FSDP2 wrapping and the throughput levers: activation checkpointing, per-layer torch.compile and the chunked loss
train to the same losses as the plain step (CPU, tiny model, a one-process gloo group)."""

from typing import Literal

import pytest
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from ray_efa.core.models import model_preset
from ray_efa.core.settings import TrainingSettings
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model
from ray_efa.training.parallelize import ParallelPlan, mixed_precision_policy, parallelize
from ray_efa.training.train import build_optimizer

CPU = torch.device("cpu")
STEPS = 3


@pytest.fixture(scope="module", autouse=True)
def process_group(tmp_path_factory):
    # fully_shard needs a process group; one rank over a file store needs no port.
    store = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _train(plan: ParallelPlan, loss_chunk_size: int = 0):
    """Losses of STEPS optimizer steps of the tiny model, and the model."""
    model = parallelize(build_model(model_preset("tiny"), seed=0, device=CPU, loss_chunk_size=loss_chunk_size), plan)
    optimizer = build_optimizer(model, TrainingSettings(model="tiny", learning_rate=1e-3), CPU)
    data = TokenBatches(vocab_size=1024, seq_len=32, micro_batch=2, seed=0, rank=0)
    losses = []
    for step in range(1, STEPS + 1):
        loss = model(*data.batch(step))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, model


@pytest.fixture(scope="module")
def plain():
    return _train(ParallelPlan())


@pytest.mark.parametrize(
    ("plan", "chunk"),
    [
        (ParallelPlan(activation_checkpointing=True), 0),
        (ParallelPlan(activation_checkpointing="selective"), 0),
        (ParallelPlan(), 16),
        # torch.compile (inductor, C++ on CPU): the slowest test of the area, ~25 s on 2 cores
        (ParallelPlan(compile=True, activation_checkpointing=True), 16),
    ],
    ids=["activation-checkpointing", "selective-checkpointing", "chunked-loss", "compile+checkpointing+chunked"],
)
def test_levers_train_to_the_plain_losses_and_keep_checkpoint_keys(plain, plan, chunk):
    # GIVEN the plain run's losses and model
    plain_losses, plain_model = plain
    # WHEN the same steps run with the lever(s) on
    losses, model = _train(plan, chunk)
    # THEN every step's loss is the same (fp32 on CPU: only summation order differs)
    assert losses == pytest.approx(plain_losses, rel=1e-5)
    assert losses[-1] != losses[0]  # the steps did train
    if plan.compile:  # and compiled: nn.Module.compile() installed a compiled call on every layer
        assert all(layer._compiled_call_impl is not None for layer in model.layers)
    # and the checkpoint keys are the plain model's: checkpoints move between runs with and without the levers
    assert set(get_state_dict(model, [])[0]) == set(get_state_dict(plain_model, [])[0])


def test_every_decoder_layer_and_the_root_are_fsdp_units_with_sharded_parameters(plain):
    _, model = plain
    assert all(isinstance(layer, FSDPModule) for layer in model.layers)
    assert all(isinstance(p, DTensor) for p in model.parameters())
    assert isinstance(model, FSDPModule)


def test_gpu_gathers_bf16_and_reduces_fp32_while_cpu_keeps_fp32():
    gpu = mixed_precision_policy(torch.device("cuda", 0))
    assert gpu is not None
    assert (gpu.param_dtype, gpu.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert mixed_precision_policy(CPU) is None


def test_the_run_summary_names_the_precision_the_run_trained_in():
    # a CPU run (local, a local fine-tune) has no mixed-precision policy: it trained in fp32, whatever precision says
    from ray_efa.training.train import trained_precision

    assert trained_precision(mixed_precision_policy(torch.device("cpu")), fp8=False) == "fp32"
    assert trained_precision(mixed_precision_policy(torch.device("cuda")), fp8=False) == "bf16"
    assert trained_precision(mixed_precision_policy(torch.device("cuda")), fp8=True) == "fp8"


def test_the_gpu_mixed_precision_policy_trains_within_bf16_tolerance_of_fp32(plain):
    # GIVEN the GPU's policy (bf16 parameters, fp32 reduction), run on CPU
    losses, _ = _train(ParallelPlan(mixed_precision=mixed_precision_policy(torch.device("cuda", 0))))
    # THEN the losses stay within bf16 rounding of the fp32 run
    assert losses == pytest.approx(plain[0], rel=2e-2)


def _backward_matmuls(mode: Literal["none", "selective", "full"]) -> int:
    """Matrix products one backward runs (its own and those it recomputes) with activation checkpointing `mode`."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.matmuls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default):
                self.matmuls += 1
            return func(*args, **(kwargs or {}))

    model = parallelize(
        build_model(model_preset("tiny"), seed=0, device=CPU), ParallelPlan(activation_checkpointing=mode)
    )
    data = TokenBatches(vocab_size=1024, seq_len=32, micro_batch=2, seed=0, rank=0)
    loss = model(*data.batch(1))
    with Count() as count:
        loss.backward()
    return count.matmuls


def test_selective_checkpointing_recomputes_some_matrix_products_and_full_all_of_them():
    # GIVEN the backward's matrix products without checkpointing (the gradients' own)
    none, selective, full = _backward_matmuls("none"), _backward_matmuls("selective"), _backward_matmuls("full")
    # THEN full recomputes every layer's forward products, selective (torchtitan's per-op policy) only every second
    # plain matrix product (q/k/v carry biases: addmm, saved like the other compute-intensive ops)
    assert none < selective < full, (none, selective, full)


def test_an_unknown_checkpointing_mode_is_refused():
    from ray_efa.training.parallelize import checkpointing_mode

    assert [checkpointing_mode(ParallelPlan(activation_checkpointing=m)) for m in (False, True, "selective")] == [
        "none",
        "full",
        "selective",
    ]
    with pytest.raises(ValueError, match="activation checkpointing must be one of none, selective, full, got 'some'"):
        checkpointing_mode(ParallelPlan(activation_checkpointing="some"))  # pyright: ignore[reportArgumentType]
