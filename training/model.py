"""The model: a transformers causal LM of any decoder family built from a core.models preset, with the loss attached.

`build_model` seeds torch and builds the architecture with random weights, identical on every rank (FSDP then
keeps each rank's shard), or loads weights from a local directory (`modelPath`): never a hub download. The family is
the preset's `model_type` (llama, mistral, qwen2, qwen3, gemma2, gemma3_text, phi3, olmo2, ...): transformers' Auto
classes build it (`AutoConfig.for_model`, `AutoModelForCausalLM`), and the decoder layers are found where every such
family keeps them (`model.model.layers`: `decoder_layers`), the unit of sharding, compilation and checkpointing.
`CausalLM` wraps the Hugging Face model so that one forward call runs decoder *and* loss: FSDP2 unshards the root's
parameters (embeddings, final norm and, tied to the embeddings, the output projection) around that call, which is
what lets the loss read the projection weight directly instead of asking the model for full logits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ray_efa.core.models import ModelPreset
from ray_efa.training.lean_block import lean_unsupported, rope_cos_sin, to_lean
from ray_efa.training.loss import causal_lm_loss

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel, Qwen2Config  # imported where used: it loads slowly

__all__ = ["CausalLM", "build_model", "hf_config", "qwen2_config", "decoder_layers", "ModelPathError", "DECODER_BLOCKS"]

DECODER_BLOCKS = ("lean", "transformers")
"""The decoderBlock setting's values: training.lean_block's layer over transformers' weights, or transformers' own."""


class ModelPathError(ValueError):
    """modelPath is missing, not a directory, or holds an architecture other than the preset's."""


def attention_implementation(config: Any) -> str:
    """SDPA, which dispatches to flash / memory-efficient kernels on GPU (no seq x seq attention matrix is kept),
    except where the family soft-caps its attention logits (Gemma 2: attn_logit_softcapping): SDPA has no soft-cap,
    and transformers' SDPA path drops it silently, so such a model trains with transformers' eager attention, which
    applies it (tanh(scores / cap) x cap before the softmax) at the cost of the seq x seq scores."""
    return "eager" if getattr(config, "attn_logit_softcapping", None) else "sdpa"


def hf_config(preset: ModelPreset) -> PretrainedConfig:
    """The transformers config of a preset's family, for training: SDPA attention (attention_implementation), no KV
    cache."""
    from transformers import AutoConfig

    config = AutoConfig.for_model(preset.model_type, **preset.config_dict(), use_cache=False)
    config._attn_implementation = attention_implementation(config)  # transformers' own setter of the choice
    return config


def qwen2_config(preset: ModelPreset) -> Qwen2Config:
    """hf_config of a Qwen2 preset (the name the Qwen2-only tests and benchmarks import); ValueError for another
    family."""
    from transformers import Qwen2Config

    config = hf_config(preset)
    if not isinstance(config, Qwen2Config):
        raise ValueError(f"{preset.name} is a {preset.model_type} architecture, not qwen2")
    return config


def decoder_layers(hf_model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a transformers causal LM: its base model's `layers` (every decoder-only family
    transformers builds keeps them there: LlamaModel.layers, Gemma2Model.layers, Phi3Model.layers, ...)."""
    layers = getattr(getattr(hf_model, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        raise ValueError(
            f"{type(hf_model).__name__} has no list of decoder layers at model.layers: not a "
            "decoder-only causal LM the built-in train function can shard layer by layer"
        )
    return layers


class CausalLM(nn.Module):
    """A transformers causal LM whose forward(input_ids, labels) returns the mean next-token loss."""

    def __init__(self, hf_model: PreTrainedModel, *, loss_chunk_size: int = 0, decoder: str = "transformers") -> None:
        super().__init__()
        self.hf = hf_model
        # "lean": hf.model.layers are training.lean_block layers (build_model swapped them in), and forward runs the
        # embeddings, RoPE, layers and final norm itself; "transformers": hf.model's own forward.
        self.decoder = decoder
        self.decoder_fallback = ""  # why the lean layer was asked for and not used (an uncovered architecture)
        self.loss_chunk_size = loss_chunk_size
        # Fuse the chunked loss's softmax with torch.compile; parallelize() turns it on with the compile lever.
        self.compile_loss = False
        self.tune_kernels = False  # set by parallelize(): inductor's coordinate-descent tuning of the compiled kernels
        self.hsdp = False  # set by parallelize(): whether the model is sharded over a 2-D (replicate, shard) mesh
        # set by parallelize(): HSDP's own bf16-wire all-reduce hooks, one per FSDP unit, if any
        self.replica_all_reduce: list[Callable[[torch.Tensor], None]] = []
        self.fp8 = False  # set by parallelize(): whether the decoder layers' linears train in float8 (torchao)
        self.fp8_all_gather = False  # set by parallelize(): whether FSDP2 all-gathers those weights in fp8
        self.hold_gathered = False  # set by parallelize(): whether the gathered parameters are held for the whole step
        self.one_rank_units = 0  # set by parallelize(): FSDP units on training.one_rank's post-backward
        # Gemma 2's final_logit_softcapping: the logits are tanh(logits / cap) x cap (the loss applies it)
        self.logit_softcap: float | None = getattr(hf_model.config, "final_logit_softcapping", None) or None

    @property
    def model_type(self) -> str:
        """The architecture's family, as config.json names it (the run summary's model_type)."""
        return str(self.hf.config.model_type)

    @property
    def layers(self) -> nn.ModuleList:
        """The decoder layers, the unit of sharding, compilation and activation checkpointing."""
        return decoder_layers(self.hf)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        hidden = self.hidden_states(input_ids)
        return causal_lm_loss(
            hidden,
            self.hf.lm_head.weight,
            labels,
            chunk_size=self.loss_chunk_size,
            compiled=self.compile_loss,
            tuned=self.tune_kernels,
            softcap=self.logit_softcap,
        )

    def hidden_states(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The final (normed) hidden states the loss projects, through whichever decoder layers the model runs."""
        if self.decoder == "lean":
            return self._lean_hidden(input_ids)
        return self.hf.model(input_ids=input_ids, use_cache=False).last_hidden_state

    def _lean_hidden(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Final hidden states through the lean layers: no mask tensor (causal SDPA), positions 0..S-1 as
        transformers uses without padding, cos/sin once per call for every layer."""
        inner = self.hf.model
        rotary = inner.rotary_emb
        cos, sin = rope_cos_sin(rotary.inv_freq, input_ids.shape[1], float(rotary.attention_scaling))
        hidden = inner.embed_tokens(input_ids)
        for layer in inner.layers:
            hidden = layer(hidden, cos, sin)
        return inner.norm(hidden)


def build_model(
    preset: ModelPreset,
    *,
    seed: int,
    device: torch.device,
    model_path: str | None = None,
    loss_chunk_size: int = 0,
    decoder: str = "lean",
) -> CausalLM:
    """The preset's architecture (its model_type's transformers causal LM) in fp32 on `device`: random weights from
    `seed`, or those stored at `model_path`.

    decoder "lean" (the decoderBlock setting's default) runs training.lean_block's layer over the same weights where
    it covers the architecture, else transformers' own (CausalLM.decoder_fallback says why); "transformers" always
    transformers' own."""
    if decoder not in DECODER_BLOCKS:
        raise ValueError(f"decoder must be one of {', '.join(DECODER_BLOCKS)}, got {decoder!r}")
    if not torch.cuda.is_available():
        _quiet_torchao_import()
    from transformers import AutoModelForCausalLM

    config = hf_config(preset)
    if model_path is None:
        torch.manual_seed(seed)  # the same weights on every rank: each keeps its FSDP shard of one model
        with torch.device(device):
            hf_model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    else:
        # transformers decorates PreTrainedModel.to with functools.wraps(nn.Module.to), which pyright does not bind
        # as a method (typeshed's _Wrapped is no descriptor), so it reads `device` as `self`.
        hf_model = _load_local(Path(model_path), config).to(device)  # pyright: ignore[reportArgumentType]
    decoder_layers(hf_model)  # a model without a layer list is refused here, before any sharding
    fallback = lean_unsupported(hf_model) if decoder == "lean" else None
    if decoder == "lean" and fallback is None:
        to_lean(hf_model)
    model = CausalLM(
        hf_model,
        loss_chunk_size=loss_chunk_size,
        decoder="lean" if decoder == "lean" and not fallback else "transformers",
    )
    model.decoder_fallback = fallback or ""
    return model


def _quiet_torchao_import() -> None:
    """transformers imports torchao where it is installed (the dev extra, for precision fp8). On a CPU-only torch,
    torchao then warns about each CUDA kernel library it cannot load, and torch about torchao's enum registrations
    (deprecated in 2.13): expected there, and noise in every local run. Only those records are dropped."""
    logging.getLogger("torchao").setLevel(logging.ERROR)
    pytree = logging.getLogger("torch.utils._pytree")
    if not any(isinstance(f, _TorchaoEnumRegistration) for f in pytree.filters):
        pytree.addFilter(_TorchaoEnumRegistration())


class _TorchaoEnumRegistration(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Calling register_constant() on Enum subclasses is deprecated" not in record.getMessage()


# The fields that must agree between a stored model and the preset for the plan (memory, FLOPs, MFU) to be true.
_ARCHITECTURE_FIELDS = (
    "model_type",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
)


def _load_local(path: Path, config: PretrainedConfig) -> PreTrainedModel:
    from transformers import AutoModelForCausalLM

    if not path.is_dir():
        raise ModelPathError(
            f"modelPath must be a local directory of saved weights (config.json + safetensors), got {str(path)!r}"
        )
    model = AutoModelForCausalLM.from_pretrained(
        path,
        local_files_only=True,
        dtype=torch.float32,
        attn_implementation=attention_implementation(config),
        use_cache=False,
    )
    wrong = [
        f"{name} {getattr(model.config, name)} (preset: {getattr(config, name)})"
        for name in _ARCHITECTURE_FIELDS
        if getattr(model.config, name) != getattr(config, name)
    ]
    if wrong:
        raise ModelPathError(
            f"modelPath {str(path)!r} holds another architecture than the model preset: {', '.join(wrong)}"
        )
    return model
