"""Every supported decoder family planned from its config.json, without torch: parameters, FLOPs, activations, the
fp8 filter, selective checkpointing, and the refusal of a family the job cannot build (at settings time)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_efa.core import fp8, memory, perf
from ray_efa.core.models import (
    MODEL_PRESETS,
    SLIDING_ATTENTION,
    SUPPORTED_MODEL_TYPES,
    ModelPreset,
    model_preset,
    preset_from_config,
)
from ray_efa.core.settings import Settings, SettingsError
from tests.core.shapes import fixed_training

CONFIGS = Path(__file__).parent / "fixtures" / "model_configs"
HELD_OUT = ("llama-3.1-8b", "llama-3.2-1b", "mistral-7b-v0.3", "qwen3-8b", "gemma-2-2b", "phi-3-mini-4k", "olmo-2-7b")

PUBLISHED_PARAMETERS = {
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.2-1b": 1_235_814_400,
    "mistral-7b-v0.3": 7_248_023_552,
    "qwen3-8b": 8_190_735_360,
    "gemma-2-2b": 2_614_341_888,
    "phi-3-mini-4k": 3_821_079_552,
    "olmo-2-7b": 7_298_617_344,
}
"""Each model's parameter count as its model card or safetensors index states it (fixtures/model_configs/README.md);
tests/core/test_models_meta.py holds the same counts to transformers' own models built on the meta device."""


def config(name: str) -> dict:
    return json.loads((CONFIGS / name / "config.json").read_text())


def architecture(name: str) -> ModelPreset:
    return preset_from_config(name, config(name))


@pytest.mark.parametrize("name", HELD_OUT)
def test_each_held_out_config_counts_its_published_parameters(name):
    assert architecture(name).num_parameters == PUBLISHED_PARAMETERS[name]


def test_the_default_preset_plans_as_it_always_did():
    # GIVEN the default job's Qwen2.5-1.5B: q/k/v biases, tied embeddings, head_dim 128 = 1536 / 12
    p = model_preset("qwen2.5-1.5b")
    d, layers, kv, inter, vocab = 1536, 28, 256, 8960, 151_936
    layer = (d * d + d) + 2 * (d * kv + kv) + d * d + 3 * d * inter + 2 * d
    assert p.num_parameters == vocab * d + layers * layer + d == 1_543_714_304
    # THEN its FLOPs are 6N + 12 L d S (and the causal 6N + 6 L d S), its layer activations 22d + 4kv + 8I bytes
    assert p.flops_per_token(2048) == 6 * p.num_parameters + 12 * layers * d * 2048
    assert (
        p.flops_per_token_causal(2048)
        == perf.flops_per_token_causal(p, 2048)
        == (6 * p.num_parameters + 6 * layers * d * 2048)
    )
    assert p.activation_bytes_per_token_layer() == 22 * d + 4 * kv + 8 * inter
    # AND config_dict gives transformers' Qwen2Config the same keyword arguments as before
    assert p.config_dict() == {
        "hidden_size": d,
        "num_hidden_layers": layers,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "intermediate_size": inter,
        "vocab_size": vocab,
        "max_position_embeddings": 32_768,
        "tie_word_embeddings": True,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
    }


def test_untied_embeddings_are_a_lookup_not_a_matmul():
    # GIVEN Llama 3.1 8B (untied) and Llama 3.2 1B (tied)
    untied, tied = architecture("llama-3.1-8b"), architecture("llama-3.2-1b")
    # THEN the FLOPs' N leaves out the untied input embeddings and keeps the output projection
    assert untied.matmul_parameters == untied.num_parameters - 128_256 * 4096
    assert tied.matmul_parameters == tied.num_parameters
    assert untied.flops_per_token(8192) == 6 * untied.matmul_parameters + 12 * 32 * 4096 * 8192


def test_head_dim_from_the_config_sets_the_attention_widths():
    # GIVEN Gemma 2 2B: hidden 2304 but 8 heads of 256 (q 2048 wide), 4 key/value heads
    p = architecture("gemma-2-2b")
    assert (p.head_dim, p.q_width, p.kv_width) == (256, 2048, 1024)
    assert {name: (k, n) for name, k, n in fp8.decoder_linears(p)}["o_proj"] == (2048, 2304)
    # THEN fp8 converts q (2304 x 2048: N > 1024) and leaves k and v (N = 1024) in bf16
    assert [name for name, _, _ in fp8.fp8_linears(p)] == ["q_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def test_phi3_fused_linears_are_filtered_by_their_real_shapes():
    p = architecture("phi-3-mini-4k")
    assert fp8.decoder_linears(p) == (
        ("qkv_proj", 3072, 9216),
        ("o_proj", 3072, 3072),
        ("gate_up_proj", 3072, 16_384),
        ("down_proj", 8192, 3072),
    )
    assert fp8.fp8_parameters(p) == 32 * (3072 * 9216 + 3072 * 3072 + 3072 * 16_384 + 8192 * 3072)


def test_sliding_window_layers_attend_to_their_window():
    # GIVEN Gemma 2 2B: every other layer slides over 4096 tokens
    p = architecture("gemma-2-2b")
    assert p.layer_types.count(SLIDING_ATTENTION) == 13 and p.sliding_window == 4096
    # THEN at 4096 tokens or fewer a window changes nothing: S / 2 keys a query, causal
    assert p.attended_keys(4096) == 26 * 4096 / 2
    # AND at 8192 a sliding layer attends w - w^2 / 2S = 3072 keys on average, a full one 4096
    assert p.attended_keys(8192) == 13 * 4096 + 13 * 3072
    assert p.flops_per_token(8192) == 6 * p.num_parameters + 12 * 2048 * 2 * (13 * 4096 + 13 * 3072)
    # AND Mistral v0.3 (sliding_window null) and Qwen3 (use_sliding_window false) attend to everything
    assert architecture("mistral-7b-v0.3").layer_types == () == architecture("qwen3-8b").layer_types


def test_family_norms_show_in_the_activations():
    # Gemma's four norms a layer, and Qwen3's q/k norms, each keep 8 bytes a channel
    gemma, qwen3 = architecture("gemma-2-2b"), architecture("qwen3-8b")
    assert gemma.activation_bytes_per_token_layer() == 8 * 4 * 2304 + 6 * 2048 + 4 * 1024 + 8 * 9216
    assert qwen3.activation_bytes_per_token_layer() == 8 * 2 * 4096 + 6 * 4096 + 4 * 1024 + 8 * 12_288 + 8 * (
        4096 + 1024
    )


def test_selective_checkpointing_keeps_every_other_product_and_costs_what_it_recomputes():
    # GIVEN Llama 3 70B's shapes (hidden 8192, 8 KV heads of 128, MLP 28672)
    p = preset_from_config(
        "llama-3-70b",
        {
            **config("llama-3.1-8b"),
            "hidden_size": 8192,
            "num_hidden_layers": 80,
            "num_attention_heads": 64,
            "intermediate_size": 28_672,
        },
    )
    saved, recomputed = p.selective_linears()
    assert [row[0] for row in saved] == ["q_proj", "v_proj", "gate_proj", "down_proj"]
    assert [row[0] for row in recomputed] == ["k_proj", "o_proj", "up_proj"]
    # THEN selective charges about 12% more compute where full charges a third more: 15-18% faster than full, as
    # torchtitan's selective runs of 70B models are
    selective = perf.recompute_factor(p, "selective", 8192)
    assert 1.10 < selective < 1.14 and perf.recompute_factor(p, "full", 8192) == pytest.approx(4 / 3)
    # AND it keeps more than full's input per layer, far less than nothing recomputed
    assert 2 * 8192 < p.selective_bytes_per_token_layer() < p.activation_bytes_per_token_layer() / 2


@pytest.mark.parametrize(
    ("name", "unread"),
    [
        ("llama-3.1-8b", 2 * 4096),  # down_proj's output is saved and only enters the residual add
        ("mistral-7b-v0.3", 2 * 4096),
        ("qwen3-8b", 2 * 4096),
        ("gemma-2-2b", 0),  # the post-feedforward norm's backward reads down_proj's output
        ("olmo-2-7b", 0),  # so does OLMo 2's post-norm's
        ("phi-3-mini-4k", 0),  # qkv, o, gate_up, down: down is recomputed, not saved
    ],
)
def test_compiled_selective_drops_the_output_no_backward_reads(name, unread):
    # GIVEN a family's layer under selective checkpointing
    p = architecture(name)
    # WHEN it is compiled, THEN it keeps the saved outputs less down_proj's where no backward reads it
    assert p.selective_bytes_per_token_layer() - p.selective_bytes_per_token_layer(compiled=True) == unread


def test_selective_sits_between_none_and_full_in_memory_and_speed():
    t = {
        mode: fixed_training(model="qwen2.5-1.5b", micro_batch=4, seq_len=4096, activation_checkpointing=mode)
        for mode in ("none", "selective", "full")
    }
    gib = {mode: memory.estimate_for(s, world_size=8, gpu=_gpu("H100")).activations_gib for mode, s in t.items()}
    assert gib["full"] < gib["selective"] < gib["none"]
    assert t["selective"].checkpointing_mode == "selective" and t["selective"].checkpointing
    assert fixed_training(activation_checkpointing=True).checkpointing_mode == "full"
    assert fixed_training(activation_checkpointing=False).checkpointing_mode == "none"
    with pytest.raises(ValueError, match="activationCheckpointing is auto"):
        _ = fixed_training(activation_checkpointing="auto").checkpointing_mode


def _gpu(name: str):
    from ray_efa.core import catalog

    return catalog.GPUS[name]


def test_fp8_all_gather_holds_the_small_linears_in_bf16():
    # GIVEN the default job at fp8: its k and v projections (N = 256) stay bf16, and are gathered in 2 bytes
    bf16, fp8_ = (fixed_training(model="qwen2.5-1.5b", precision=precision) for precision in ("bf16", "fp8"))
    saved = (
        memory.estimate_for(bf16, world_size=8, gpu=_gpu("H100")).gathered_gib
        - memory.estimate_for(fp8_, world_size=8, gpu=_gpu("H100")).gathered_gib
    )
    p = model_preset("qwen2.5-1.5b")
    assert saved * 2**30 == pytest.approx(2 * fp8.fp8_parameters(p) / p.num_hidden_layers)


@pytest.mark.parametrize("key", ["modelConfig", "modelPath"])
def test_an_unsupported_family_is_refused_at_settings_time_by_name(tmp_path, key):
    folder = tmp_path / "mixtral"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**config("mistral-7b-v0.3"), "model_type": "mixtral"}))
    context = {"modelConfig": str(folder / "config.json")} if key == "modelConfig" else {"modelPath": str(folder)}
    with pytest.raises(SettingsError) as caught:
        _ = Settings.from_context(context).training.preset
    (problem,) = caught.value.problems
    assert problem.key == key
    assert "model_type 'mixtral'" in problem.message
    assert ", ".join(SUPPORTED_MODEL_TYPES) in problem.message


def test_model_config_alone_is_a_random_initialization_of_it():
    path = CONFIGS / "tiny-llama" / "config.json"
    arch = Settings.from_context({"modelConfig": str(path)}).training.preset
    assert (arch.name, arch.model_type, arch.head_dim, arch.tie_word_embeddings) == ("tiny-llama", "llama", 32, True)
    # AND its config_dict is the file's architecture, without model_type or provenance
    values = arch.config_dict()
    assert "model_type" not in values and values["num_key_value_heads"] == 2 and "architectures" not in values
    # AND a preset name works too
    assert Settings.from_context({"modelConfig": "qwen2.5-0.5b"}).training.preset == MODEL_PRESETS["qwen2.5-0.5b"]


def test_a_long_sequence_is_judged_against_the_config_not_the_unused_preset():
    # GIVEN Llama 3.2 1B's 131,072 positions, where the unused `model` preset has 32,768
    path = str(CONFIGS / "llama-3.2-1b" / "config.json")
    s = Settings.from_context({"modelConfig": path, "seqLen": 65_536})
    assert s.training.preset.max_position_embeddings == 131_072


def test_gemma3_multimodal_config_plans_its_text_decoder():
    text = {
        "model_type": "gemma3_text",
        "hidden_size": 1152,
        "num_hidden_layers": 26,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "intermediate_size": 6912,
        "vocab_size": 262_144,
        "sliding_window": 512,
    }
    p = preset_from_config("gemma3", {"model_type": "gemma3", "text_config": text})
    assert p.model_type == "gemma3_text" and p.tie_word_embeddings
    assert p.layer_types.count(SLIDING_ATTENTION) == 22  # 5 of every 6 layers
    assert p.qk_norm_parameters == 2 * 256 and p.norms_per_layer == 4


@pytest.mark.parametrize(("micro_batch", "mode"), [(8, False), (16, "selective"), (32, True)])
def test_auto_checkpointing_takes_the_least_recompute_that_fits(micro_batch, mode):
    # GIVEN the default job on one H100 at a micro-batch the user set: 8 fits without recompute; at 16 the activations
    # do not fit, selective's do; at 32 only full checkpointing's
    from ray_efa.core import strategy

    s = Settings.from_context({"gpuInstanceType": "p5.4xlarge", "gpuNodeCount": 1, "microBatch": micro_batch})
    resolved = strategy.resolve(s)
    assert resolved.training.activation_checkpointing == mode
    assert memory.estimate(resolved, "fsdp").fits


def test_selective_saves_biased_linears_as_the_policy_does():
    # Qwen2's q, k and v carry biases: addmm, saved without counting among the matrix products the policy alternates
    saved, recomputed = model_preset("qwen2.5-1.5b").selective_linears()
    assert [row[0] for row in saved] == ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj"]
    assert [row[0] for row in recomputed] == ["gate_proj", "down_proj"]


@pytest.mark.parametrize(
    ("checkpointing", "seq_len", "micro_batch", "precision", "compile_", "published_gib"),
    [
        ("selective", 8192, 2, "bf16", False, 82.4),  # Table 1, FSDP (eager)
        ("full", 32_768, 1, "fp8", True, 83.9),  # Table 2, FSDP 8, CP 1
    ],
)
def test_llama3_8b_memory_matches_torchtitans_published_runs(
    checkpointing, seq_len, micro_batch, precision, compile_, published_gib
):
    # GIVEN torchtitan's Llama 3.1 8B on 8 H100s (benchmarks/llama3_h100_202412_torchtitan.md: memory as its logs
    # report it, the max reserved), unchunked loss as torchtitan computes it
    s = Settings.from_context(
        {
            "modelConfig": str(CONFIGS / "llama-3.1-8b" / "config.json"),
            "gpuInstanceType": "p5.48xlarge",
            "gpuNodeCount": 1,
            "microBatch": micro_batch,
            "seqLen": seq_len,
            "gradAccumulation": 1,
            "precision": precision,
            "activationCheckpointing": checkpointing,
            "compile": compile_,
            "lossChunkSize": 0,
        }
    )
    # THEN the plan is within 5% of it (its compiled selective rows, 77.0 and 76.8 GiB, plan 7% over: torchtitan's
    # compiled loss holds less than this project's unchunked one)
    assert memory.estimate(s, "fsdp").total_gib == pytest.approx(published_gib, rel=0.05)


def test_tinyllamas_published_shape_fits_an_a100_40gb():
    # GIVEN TinyLlama 1.1B as it was pretrained: 8 x 2048 tokens a GPU, no activation checkpointing, FSDP over 16
    # A100-40GB (fixtures/model_configs/README.md), with this project's chunked loss (the default)
    s = Settings.from_context(
        {
            "modelConfig": str(CONFIGS / "tinyllama-1.1b" / "config.json"),
            "gpuInstanceType": "p4d.24xlarge",
            "gpuNodeCount": 2,
            "microBatch": 8,
            "seqLen": 2048,
            "gradAccumulation": 1,
            "precision": "bf16",
            "activationCheckpointing": False,
            "compile": False,
        }
    )
    assert s.training.preset.num_parameters == 1_100_048_384
    # THEN the plan says it fits, as it ran
    assert memory.estimate(s, "fsdp").fits


@pytest.mark.parametrize(("sharding", "nodes"), [("hsdp", 2), ("fsdp", 1)])
def test_olmo2_13bs_published_shape_fits_an_h100(sharding: str, nodes: int):
    # GIVEN OLMo 2 13B as OLMo-core's OLMo2-13B.py trains it on H100s: 1 x 4096 tokens a GPU, no activation
    # checkpointing, bf16, compiled, HSDP (fixtures/model_configs/README.md), at one micro-batch a step
    s = Settings.from_context(
        {
            "modelConfig": str(CONFIGS / "olmo-2-13b" / "config.json"),
            "gpuInstanceType": "p5.48xlarge",
            "gpuNodeCount": nodes,
            "sharding": sharding,
            "microBatch": 1,
            "seqLen": 4096,
            "gradAccumulation": 1,
            "precision": "bf16",
            "activationCheckpointing": False,
            "compile": True,
        }
    )
    assert s.training.preset.num_parameters == 13_716_198_400
    # THEN the plan says it fits, as it ran
    assert memory.estimate(s, sharding).fits
