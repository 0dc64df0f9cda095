"""torchtitan's own trainer on the project's default model shape, for bench/titan_side_by_side.sh.

torchtitan (0.2.2, the `torchtitan` wheel) has no Qwen2.5 model; its Qwen3 model with qk_norm off, tied embeddings
and the Qwen2.5-1.5B dimensions of core.models is the same network less the q/k/v biases (57,344 of 1.54 B
parameters). This file registers that shape as the train spec `qwen2_5_shape` (flavor "1.5B") and runs
torchtitan.train.main with the command-line arguments it is given, torchtitan's own:

    torchrun --standalone --nproc-per-node 1 bench/titan_train.py --model.name qwen2_5_shape --model.flavor 1.5B ...

Two things differ from torchtitan's Qwen3 spec, both because the GPU machine has no network and one GPU:
- data: random token ids (the project's benchmarks train on random tokens too), no tokenizer, no Hugging Face dataset;
- on one GPU torchtitan applies no FSDP (its data-parallel degree is 1) and trains fp32 weights under autocast.
  With TITAN_ONE_GPU_FSDP=1 (the default) the model is instead wrapped as the project's job wraps it on one GPU:
  FSDP2 over a 1-rank mesh, one unit per transformer block plus the root (embeddings, final norm and the tied output
  projection), bf16 parameters, fp32 reduction, and no autocast; torchtitan's --parallelism.fsdp_reshard_after_forward
  decides whether the blocks are resharded after forward (bench/titan_compare.py passes "never" on one GPU).
  TITAN_ONE_GPU_FSDP=0 runs torchtitan's own one-GPU path (autocast bf16 over fp32 weights).
Everything else (model code, per-block torch.compile, compiled loss, float8 converter, AdamW, step loop, metrics) is
torchtitan's own.
"""

# pyright: reportMissingImports=false
# (torchtitan and datasets exist only on the GPU machine, from .whl/: bench/titan_carry.sh; not project dependencies)
from __future__ import annotations

import contextlib
import os
import sys
import types

import torch
from torch.distributed.tensor import DTensor
from torch.utils.data import IterableDataset


def _datasets_or_placeholder() -> None:
    """torchtitan's Qwen3 package imports its Hugging Face text loader, which imports `datasets`. This benchmark never
    calls that loader; where `datasets` cannot be imported a placeholder module stands in, and says so."""
    try:
        import datasets  # noqa: F401
    except Exception as error:  # noqa: BLE001 - any import failure of an unused package
        print(f"titan_train: `datasets` does not import ({error!r}); its text loader is unused here, a placeholder "
              "stands in", file=sys.stderr)
        placeholder = types.ModuleType("torchtitan.hf_datasets.text_datasets")

        def unused(*args, **kwargs):
            raise RuntimeError("the Hugging Face text loader is not available in this benchmark")

        placeholder.build_text_dataloader = unused  # type: ignore[attr-defined]
        placeholder.build_text_validator = unused  # type: ignore[attr-defined]
        sys.modules[placeholder.__name__] = placeholder


_datasets_or_placeholder()

from torchtitan.components.dataloader import ParallelAwareDataloader  # noqa: E402
from torchtitan.models.qwen3 import get_train_spec as qwen3_train_spec  # noqa: E402
from torchtitan.models.qwen3.infra.parallelize import parallelize_qwen3  # noqa: E402
from torchtitan.models.qwen3.model.args import Qwen3ModelArgs  # noqa: E402
from torchtitan.protocols.train_spec import register_train_spec  # noqa: E402

SPEC = "qwen2_5_shape"

# Qwen2.5-1.5B (core.models: hidden 1536, 28 layers, 12 heads of 128, 2 KV heads, MLP 8960, vocabulary 151,936,
# tied embeddings, RoPE theta 1e6, RMSNorm eps 1e-6); no q/k norm, as in Qwen2.5.
MODEL_ARGS = {
    "1.5B": Qwen3ModelArgs(
        dim=1536, n_layers=28, n_heads=12, n_kv_heads=2, head_dim=128, hidden_dim=8960, vocab_size=151_936,
        norm_eps=1e-6, rope_theta=1_000_000, qk_norm=False, max_seq_len=32_768, enable_weight_tying=True,
    ),
    # A few-MB model of the same code, for a CPU check of this file.
    "tiny": Qwen3ModelArgs(
        dim=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, hidden_dim=256, vocab_size=1024,
        norm_eps=1e-6, rope_theta=1_000_000, qk_norm=False, max_seq_len=32_768, enable_weight_tying=True,
    ),
}


class RandomTokens(IterableDataset):
    """Endless samples of seq_len + 1 uniformly random token ids: ({"input": first seq_len}, last seq_len)."""

    def __init__(self, vocab_size: int, seq_len: int, seed: int) -> None:
        self.vocab_size, self.seq_len = vocab_size, seq_len
        self.generator = torch.Generator().manual_seed(seed)

    def __iter__(self):
        while True:
            tokens = torch.randint(0, self.vocab_size, (self.seq_len + 1,), generator=self.generator)
            yield {"input": tokens[:-1]}, tokens[1:]

    # The trainer's checkpoint manager asks every component for its state; random data has none worth keeping.
    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        pass


def build_random_dataloader(dp_world_size: int, dp_rank: int, tokenizer, job_config, **kwargs):
    del tokenizer, kwargs
    vocab = MODEL_ARGS[job_config.model.flavor].vocab_size
    dataset = RandomTokens(vocab, job_config.training.seq_len, seed=1234 + dp_rank)
    return ParallelAwareDataloader(dataset, dp_rank=dp_rank, dp_world_size=dp_world_size,
                                   batch_size=job_config.training.local_batch_size)


def one_gpu_fsdp() -> bool:
    return os.environ.get("TITAN_ONE_GPU_FSDP", "1") == "1"


def parallelize(model, parallel_dims, job_config):
    """torchtitan's Qwen3 parallelize (activation checkpointing, per-block compile, FSDP when sharded); on one GPU with
    TITAN_ONE_GPU_FSDP=1, then FSDP2 over a 1-rank mesh as the project's job does."""
    model = parallelize_qwen3(model, parallel_dims, job_config)
    if parallel_dims.fsdp_enabled or parallel_dims.world_size != 1 or not one_gpu_fsdp():
        return model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torchtitan.config import TORCH_DTYPE_MAP
    from torchtitan.tools.utils import device_type

    mesh = init_device_mesh(device_type, (1,), mesh_dim_names=("fsdp",))
    training = job_config.training
    policy = MixedPrecisionPolicy(param_dtype=TORCH_DTYPE_MAP[training.mixed_precision_param],
                                  reduce_dtype=TORCH_DTYPE_MAP[training.mixed_precision_reduce])
    # torchtitan's own policy (--parallelism.fsdp_reshard_after_forward), as its parallelize applies it without PP
    reshard = job_config.parallelism.fsdp_reshard_after_forward != "never"
    for block in model.layers.values():
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    # The root unit holds the embedding, which the output projection shares (tied): one unit owns the tied weight.
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    print(f"titan_train: FSDP2 over a 1-rank mesh, {len(model.layers)} blocks + root, params "
          f"{training.mixed_precision_param}, reduce {training.mixed_precision_reduce}, no autocast, "
          f"reshard after forward {reshard}", file=sys.stderr)
    return model


def project_init_seed() -> int | None:
    """TITAN_INIT_SEED=<seed>: start from the project's initial weights for that seed (the same loss curve)."""
    seed = os.environ.get("TITAN_INIT_SEED", "")
    return int(seed) if seed else None


# The project's (transformers Qwen2) parameter names -> torchtitan Qwen3's, per layer and at the root.
_LAYER_NAMES = {
    "self_attn.q_proj.weight": "attention.wq.weight", "self_attn.k_proj.weight": "attention.wk.weight",
    "self_attn.v_proj.weight": "attention.wv.weight", "self_attn.o_proj.weight": "attention.wo.weight",
    "mlp.gate_proj.weight": "feed_forward.w1.weight", "mlp.down_proj.weight": "feed_forward.w2.weight",
    "mlp.up_proj.weight": "feed_forward.w3.weight",
    "input_layernorm.weight": "attention_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
}


def copy_project_init(model: torch.nn.Module, seed: int) -> None:
    """Overwrite torchtitan's initial weights with the project's: ray_efa.training.model.build_model(seed) on this
    GPU, as every project rank builds it (transformers' Qwen2 init: normal(0, 0.02) matrices and embeddings, unit
    norms, zero q/k/v biases, which torchtitan's Qwen3 lacks: with zero biases the two networks compute the same
    function). One rank, so each torchtitan parameter (a 1-rank DTensor under FSDP2) holds the whole tensor."""
    from ray_efa.core.models import model_preset
    from ray_efa.training.model import build_model

    device = next(model.parameters()).device
    project = build_model(model_preset("qwen2.5-1.5b"), seed=seed, device=device, decoder="transformers")
    source = {}
    for name, tensor in project.hf.model.named_parameters():
        if name.startswith("layers."):
            _, index, rest = name.split(".", 2)
            if rest.endswith(".bias"):
                assert not tensor.any(), f"{name}: the project's initial bias is not zero"
                continue
            source[f"layers.{index}.{_LAYER_NAMES[rest]}"] = tensor
        elif name == "embed_tokens.weight":
            source["tok_embeddings.weight"] = tensor
        elif name == "norm.weight":
            source["norm.weight"] = tensor
    copied = 0
    with torch.no_grad():
        for name, param in model.named_parameters():
            key = name.replace("._orig_mod", "").replace("._checkpoint_wrapped_module", "")
            if key == "output.weight":
                continue  # tied to tok_embeddings
            local = param.to_local() if isinstance(param, DTensor) else param  # a DTensor shard
            local.copy_(source.pop(key).to(local.dtype))
            copied += 1
    assert not source, f"project weights with no torchtitan parameter: {sorted(source)[:5]}"
    del project
    torch.cuda.empty_cache()
    print(f"titan_train: {copied} parameters set to the project's initial weights (seed {seed})", file=sys.stderr)


def model_class(base: type) -> type:
    """torchtitan's model class, whose init_weights ends with the project's weights where TITAN_INIT_SEED says."""

    class ProjectInit(base):
        def init_weights(self, *args, **kwargs):
            super().init_weights(*args, **kwargs)
            seed = project_init_seed()
            if seed is not None and next(self.parameters()).device.type != "meta":
                copy_project_init(self, seed)

    return ProjectInit


def register() -> None:
    spec = qwen3_train_spec()
    spec.model_args = MODEL_ARGS
    spec.model_cls = model_class(spec.model_cls)
    spec.parallelize_fn = parallelize
    spec.build_dataloader_fn = build_random_dataloader
    spec.build_tokenizer_fn = None
    spec.build_validator_fn = None
    spec.state_dict_adapter = None  # converts to Hugging Face checkpoints; no checkpoint is written here
    register_train_spec(SPEC, spec)
    if one_gpu_fsdp():
        # FSDP2 casts parameters to bf16 itself; the trainer would add autocast only because its data-parallel
        # degree is 1 (torchtitan.distributed.utils.maybe_enable_amp).
        import torchtitan.distributed.utils as dist_utils

        original = dist_utils.maybe_enable_amp

        def no_autocast_under_fsdp(parallel_dims, mixed_precision_param, device_type):
            if parallel_dims.world_size == 1 and not parallel_dims.fsdp_enabled:
                return contextlib.nullcontext()
            return original(parallel_dims, mixed_precision_param, device_type)

        dist_utils.maybe_enable_amp = no_autocast_under_fsdp


def main() -> None:
    register()
    from torchtitan.train import Trainer
    from torchtitan.train import main as titan_main

    titan_main(Trainer)


if __name__ == "__main__":
    main()
