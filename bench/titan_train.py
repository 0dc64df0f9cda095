"""torchtitan's own trainer on the project's default model shape or on Llama 3, for bench/titan_side_by_side.sh and
bench/titan_rounds.sh.

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

A second spec, `llama3_shape` (flavor "1B"), is torchtitan's own Llama 3 model (torchtitan.models.llama3, its home
ground) in the Llama 3.2 1B dimensions with untied embeddings (torchtitan's Llama 3 has a separate output projection;
the project side trains bench/configs/llama-3.2-1b-untied/config.json, the same network). With TITAN_INIT_SEED its
initial weights are the project's for that config (TITAN_PROJECT_CONFIG, the config.json's path): the q/k projections
are permuted from transformers' rotate-half RoPE layout to torchtitan's interleaved one (the inverse of the
permutation of transformers' own Llama conversion script, as torchtitan's Llama3StateDictAdapter.from_hf applies it).
`python3 titan_train.py check-llama` compares the two models' logits on CPU with tiny dimensions.
"""

# pyright: reportMissingImports=false
# (torchtitan and datasets exist only on the GPU machine, from .whl/: bench/titan_carry.sh; not project dependencies)
from __future__ import annotations

import contextlib
import functools
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
        print(
            f"titan_train: `datasets` does not import ({error!r}); its text loader is unused here, a placeholder "
            "stands in",
            file=sys.stderr,
        )
        placeholder = types.ModuleType("torchtitan.hf_datasets.text_datasets")

        def unused(*args, **kwargs):
            raise RuntimeError("the Hugging Face text loader is not available in this benchmark")

        placeholder.build_text_dataloader = unused  # type: ignore[attr-defined]
        placeholder.build_text_validator = unused  # type: ignore[attr-defined]
        placeholder.build_text_validation_dataloader = unused  # type: ignore[attr-defined]  # llama3's validator
        sys.modules[placeholder.__name__] = placeholder


_datasets_or_placeholder()

from torchtitan.components.dataloader import ParallelAwareDataloader  # noqa: E402
from torchtitan.models.llama3 import get_train_spec as llama3_train_spec  # noqa: E402
from torchtitan.models.llama3.infra.parallelize import parallelize_llama  # noqa: E402
from torchtitan.models.llama3.model.args import RoPEScalingArgs, TransformerModelArgs  # noqa: E402
from torchtitan.models.qwen3 import get_train_spec as qwen3_train_spec  # noqa: E402
from torchtitan.models.qwen3.infra.parallelize import parallelize_qwen3  # noqa: E402
from torchtitan.models.qwen3.model.args import Qwen3ModelArgs  # noqa: E402
from torchtitan.protocols.train_spec import register_train_spec  # noqa: E402

SPEC = "qwen2_5_shape"
LLAMA_SPEC = "llama3_shape"

# Qwen2.5 (core.models): RoPE theta 1e6, RMSNorm eps 1e-6, tied embeddings, no q/k norm (as in Qwen2.5); each flavor
# gives its size.
_qwen2_5_shape = functools.partial(
    Qwen3ModelArgs,
    norm_eps=1e-6,
    rope_theta=1_000_000,
    qk_norm=False,
    max_seq_len=32_768,
    enable_weight_tying=True,
)
MODEL_ARGS = {
    # Qwen2.5-1.5B: hidden 1536, 28 layers, 12 heads of 128, 2 KV heads, MLP 8960, vocabulary 151,936
    "1.5B": _qwen2_5_shape(
        dim=1536, n_layers=28, n_heads=12, n_kv_heads=2, head_dim=128, hidden_dim=8960, vocab_size=151_936
    ),
    # A few-MB model of the same code, for a CPU check of this file.
    "tiny": _qwen2_5_shape(dim=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, hidden_dim=256, vocab_size=1024),
}


# Llama 3.2 1B (its config.json: hidden 2048, 16 layers, 32 heads of 64, 8 KV heads, MLP 8192, vocabulary 128,256, RoPE
# theta 5e5 with llama3 scaling factor 32 / low 1 / high 4 / original 8192, RMSNorm eps 1e-5), untied output. torchtitan
# sizes the MLP from dim: 4 x 2048 -> int(2/3 x 8192) = 5461 -> x 1.5 = 8191 -> rounded up to a multiple of 256 = 8192.
LLAMA_ROPE = RoPEScalingArgs(
    scaling_factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192
)
_llama3_2_shape = functools.partial(
    TransformerModelArgs,
    ffn_dim_multiplier=1.5,
    multiple_of=256,
    norm_eps=1e-5,
    rope_theta=500_000,
    rope_scaling_args=LLAMA_ROPE,
    max_seq_len=131_072,
)
LLAMA_MODEL_ARGS = {
    "1B": _llama3_2_shape(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, vocab_size=128_256),
    # dim 128 -> MLP int(2/3 x 512) = 341 -> x 1.5 = 511 -> 512; for the CPU check (check_llama)
    "tiny": _llama3_2_shape(dim=128, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=1024),
}
ALL_MODEL_ARGS = {SPEC: MODEL_ARGS, LLAMA_SPEC: LLAMA_MODEL_ARGS}


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
    vocab = ALL_MODEL_ARGS[job_config.model.name][job_config.model.flavor].vocab_size
    dataset = RandomTokens(vocab, job_config.training.seq_len, seed=1234 + dp_rank)
    return ParallelAwareDataloader(
        dataset, dp_rank=dp_rank, dp_world_size=dp_world_size, batch_size=job_config.training.local_batch_size
    )


def one_gpu_fsdp() -> bool:
    return os.environ.get("TITAN_ONE_GPU_FSDP", "1") == "1"


def parallelize(model, parallel_dims, job_config):
    """torchtitan's Qwen3 or Llama 3 parallelize (activation checkpointing, per-block compile, FSDP when sharded); on
    one GPU with TITAN_ONE_GPU_FSDP=1, then FSDP2 over a 1-rank mesh as the project's job does."""
    own = parallelize_llama if job_config.model.name == LLAMA_SPEC else parallelize_qwen3
    model = own(model, parallel_dims, job_config)
    if parallel_dims.fsdp_enabled or parallel_dims.world_size != 1 or not one_gpu_fsdp():
        return model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torchtitan.config import TORCH_DTYPE_MAP
    from torchtitan.tools.utils import device_type

    mesh = init_device_mesh(device_type, (1,), mesh_dim_names=("fsdp",))
    training = job_config.training
    policy = MixedPrecisionPolicy(
        param_dtype=TORCH_DTYPE_MAP[training.mixed_precision_param],
        reduce_dtype=TORCH_DTYPE_MAP[training.mixed_precision_reduce],
    )
    # torchtitan's own policy (--parallelism.fsdp_reshard_after_forward), as its parallelize applies it without PP
    reshard = job_config.parallelism.fsdp_reshard_after_forward != "never"
    for block in model.layers.values():
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    # The root unit holds the embedding, the final norm and the output projection (Qwen: tied to the embedding, so one
    # unit owns the shared weight; Llama 3: its own weight, as the project's root unit holds lm_head).
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard)
    print(
        f"titan_train: FSDP2 over a 1-rank mesh, {len(model.layers)} blocks + root, params "
        f"{training.mixed_precision_param}, reduce {training.mixed_precision_reduce}, no autocast, "
        f"reshard after forward {reshard}",
        file=sys.stderr,
    )
    return model


def project_init_seed() -> int | None:
    """TITAN_INIT_SEED=<seed>: start from the project's initial weights for that seed (the same loss curve)."""
    seed = os.environ.get("TITAN_INIT_SEED", "")
    return int(seed) if seed else None


# The project's (transformers Qwen2) parameter names -> torchtitan Qwen3's, per layer and at the root.
_LAYER_NAMES = {
    "self_attn.q_proj.weight": "attention.wq.weight",
    "self_attn.k_proj.weight": "attention.wk.weight",
    "self_attn.v_proj.weight": "attention.wv.weight",
    "self_attn.o_proj.weight": "attention.wo.weight",
    "mlp.gate_proj.weight": "feed_forward.w1.weight",
    "mlp.down_proj.weight": "feed_forward.w2.weight",
    "mlp.up_proj.weight": "feed_forward.w3.weight",
    "input_layernorm.weight": "attention_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}


def interleave_rope_rows(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """A q or k projection from transformers' Llama layout (each head's rows: the first halves of the rotated pairs,
    then the second halves; rotate_half RoPE) to torchtitan's (the pairs adjacent; complex RoPE): the inverse of the
    permutation in transformers' convert_llama_weights_to_hf.py, as torchtitan's Llama3StateDictAdapter.from_hf."""
    rows, cols = weight.shape
    return weight.view(heads, 2, rows // heads // 2, cols).transpose(1, 2).reshape(rows, cols)


def project_model(seed: int, device: torch.device, llama_args: TransformerModelArgs | None = None):
    """The project's model as its job builds it for seed (ray_efa.training.model.build_model): Qwen2.5-1.5B, or the
    config.json at TITAN_PROJECT_CONFIG (the project side's modelConfig) for torchtitan's Llama 3."""
    from ray_efa.core.models import model_preset, preset_from_config
    from ray_efa.training.model import build_model

    if llama_args is None:
        preset = model_preset("qwen2.5-1.5b")
    else:
        import json

        path = os.environ["TITAN_PROJECT_CONFIG"]
        with open(path) as f:
            preset = preset_from_config("modelConfig", json.load(f))
    return build_model(preset, seed=seed, device=device, decoder="transformers")


def project_weights(project, llama_args: TransformerModelArgs | None) -> dict[str, torch.Tensor]:
    """The project's parameters under torchtitan's names (Llama 3: q/k permuted for its interleaved RoPE)."""
    source = {}
    for name, tensor in project.hf.model.named_parameters():
        if name.startswith("layers."):
            _, index, rest = name.split(".", 2)
            if rest.endswith(".bias"):
                assert not tensor.any(), f"{name}: the project's initial bias is not zero"
                continue
            if llama_args is not None and rest == "self_attn.q_proj.weight":
                tensor = interleave_rope_rows(tensor, llama_args.n_heads)
            elif llama_args is not None and rest == "self_attn.k_proj.weight":
                tensor = interleave_rope_rows(tensor, llama_args.n_kv_heads or llama_args.n_heads)
            source[f"layers.{index}.{_LAYER_NAMES[rest]}"] = tensor
        elif name == "embed_tokens.weight":
            source["tok_embeddings.weight"] = tensor
        elif name == "norm.weight":
            source["norm.weight"] = tensor
    if llama_args is not None:
        assert project.hf.lm_head.weight is not project.hf.model.embed_tokens.weight, "the project's model is tied"
        source["output.weight"] = project.hf.lm_head.weight
    return source


def copy_project_init(model: torch.nn.Module, seed: int) -> None:
    """Overwrite torchtitan's initial weights with the project's: ray_efa.training.model.build_model(seed) on this
    GPU, as every project rank builds it (transformers' init: normal(0, 0.02) matrices and embeddings, unit norms;
    Qwen2's zero q/k/v biases, which torchtitan's Qwen3 lacks: with zero biases the two networks compute the same
    function). One rank, so each torchtitan parameter (a 1-rank DTensor under FSDP2) holds the whole tensor."""
    llama_args = getattr(model, "model_args", None)
    llama_args = llama_args if isinstance(llama_args, TransformerModelArgs) else None
    device = next(model.parameters()).device
    project = project_model(seed, device, llama_args)
    source = project_weights(project, llama_args)
    copied = 0
    with torch.no_grad():
        for name, param in model.named_parameters():
            key = name.replace("._orig_mod", "").replace("._checkpoint_wrapped_module", "")
            if key == "output.weight" and llama_args is None:
                continue  # tied to tok_embeddings
            local = param.to_local() if isinstance(param, DTensor) else param  # a DTensor shard
            local.copy_(source.pop(key).to(local.dtype))
            copied += 1
    assert not source, f"project weights with no torchtitan parameter: {sorted(source)[:5]}"
    del project
    if torch.cuda.is_available():
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
    for name, own_spec, model_args in (
        (SPEC, qwen3_train_spec, MODEL_ARGS),
        (LLAMA_SPEC, llama3_train_spec, LLAMA_MODEL_ARGS),
    ):
        spec = own_spec()
        spec.model_args = model_args
        spec.model_cls = model_class(spec.model_cls)
        spec.parallelize_fn = parallelize
        spec.build_dataloader_fn = build_random_dataloader
        spec.build_tokenizer_fn = None
        spec.build_validator_fn = None
        spec.state_dict_adapter = None  # converts to Hugging Face checkpoints; no checkpoint is written here
        register_train_spec(name, spec)
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


def check_llama(config_path: str) -> None:
    """On CPU, in fp32: torchtitan's Llama 3 model in the tiny flavor with the project's initial weights for the tiny
    config.json at config_path (the same dimensions) gives the project's logits, through the project's transformers
    layer and its lean layer. Prints the largest differences; exits 1 if one exceeds 1e-4."""
    import dataclasses
    import json

    from torchtitan.models.llama3.model.model import Transformer

    from ray_efa.core.models import preset_from_config
    from ray_efa.training.model import build_model

    args = dataclasses.replace(LLAMA_MODEL_ARGS["tiny"], max_seq_len=64)
    with open(config_path) as f:
        preset = preset_from_config("tiny", json.load(f))
    titan = model_class(Transformer)(args)
    os.environ["TITAN_PROJECT_CONFIG"] = config_path
    cpu = torch.device("cpu")
    with torch.no_grad():
        titan.init_weights(buffer_device=cpu)
        copy_project_init(titan, seed=7)
    tokens = torch.randint(0, args.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    worst = 0.0
    for decoder in ("transformers", "lean"):
        project = build_model(preset, seed=7, device=cpu, decoder=decoder)
        with torch.no_grad():
            hidden = project.hidden_states(tokens)
            theirs = hidden @ project.hf.lm_head.weight.T
            ours = titan(tokens)
        diff = (ours - theirs).abs().max().item()
        worst = max(worst, diff)
        print(
            f"check-llama: project {decoder} layer vs torchtitan llama3: logits max |diff| {diff:.3e} "
            f"(logits max |value| {theirs.abs().max().item():.3f})"
        )
    raise SystemExit(0 if worst < 1e-4 else 1)


def main() -> None:
    if sys.argv[1:2] == ["check-llama"]:
        os.environ.pop("TITAN_INIT_SEED", None)
        check_llama(sys.argv[2])
    register()
    from torchtitan.train import Trainer
    from torchtitan.train import main as titan_main

    titan_main(Trainer)


if __name__ == "__main__":
    main()
