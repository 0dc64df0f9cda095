"""Every supported decoder family trains through the built-in train function's model code: a tiny config.json of each
(tests/training/fixtures/families: 2 layers, hidden 64, vocabulary 256, each family's own features on: llama's
llama3 RoPE and tied embeddings, qwen3's head_dim 32 and q/k norms, gemma2's soft-capping and sliding window,
gemma3's sliding and full layers, phi3's fused projections, olmo2's post-norms) is built by transformers' Auto
classes, its decoderBlock lean model computes transformers' own logits, loss and gradients (the lean layer where it
is exact for the family, transformers' layer elsewhere), and two gloo ranks train it under FSDP2 with selective
activation checkpointing, the loss going down, and resume from a checkpoint bit-identically. A checkpoint of each
that transformers' save_pretrained wrote loads through modelPath with its weights and logits exact, and evaluate
gives each one's token-weighted held-out loss.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from ray_efa.core.fp8 import decoder_linears
from ray_efa.core.models import ModelPreset, preset_from_config
from ray_efa.core.settings import TrainingSettings
from ray_efa.training.checkpoint import load_shards, save_shards
from ray_efa.training.data import TokenBatches
from ray_efa.training.dataset import ROW_COLUMN
from ray_efa.training.evaluate import evaluate
from ray_efa.training.lean_block import LeanDecoderLayer
from ray_efa.training.model import CausalLM, attention_implementation, build_model
from ray_efa.training.parallelize import ParallelPlan, parallelize
from ray_efa.training.train import build_optimizer, train_step
from tests.training.gloo_ranks import run_cases

FIXTURES = Path(__file__).parent / "fixtures" / "families"
FAMILIES = sorted(path.stem for path in FIXTURES.glob("*.json"))
LEAN = ("llama", "mistral", "qwen2", "qwen3")
"""The families the lean layer is exact for (training.lean_block); the others keep transformers' layer."""
CPU = torch.device("cpu")


def family_config(family: str) -> dict:
    return json.loads((FIXTURES / f"{family}.json").read_text())


def family_preset(family: str, **changes) -> ModelPreset:
    """The fixture's architecture as the plan reads a modelConfig (core.models.preset_from_config)."""
    return preset_from_config(f"tiny-{family}", {**family_config(family), **changes})


def test_every_supported_family_has_a_fixture():
    from ray_efa.core.models import SUPPORTED_MODEL_TYPES

    assert sorted(SUPPORTED_MODEL_TYPES) == FAMILIES


def _randomized(model: CausalLM, seed: int) -> dict[str, torch.Tensor]:
    """Every tensor random, the biases and norm weights too (transformers initialises them to 0 and 1 or 0, which
    would hide a bias or a norm a layer drops): the state dict to load into both models."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for name, tensor in model.state_dict().items():
        noise = torch.randn(tensor.shape, generator=g)
        state[name] = noise * 0.2 + 1.0 if "norm" in name else noise * 0.3
    return state


def _case_changes(case: str) -> tuple[str, dict]:
    # mistral with a sliding window shorter than the sequence: transformers' layer slides, the lean one cannot
    return ("mistral", {"sliding_window": 8}) if case == "mistral-sliding" else (case, {})


@pytest.mark.parametrize("case", [*FAMILIES, "mistral-sliding"])
def test_decoder_lean_computes_transformers_logits_loss_and_gradients(case):
    # GIVEN the family's tiny architecture with every weight random, built as decoderBlock lean and as transformers
    family, changes = _case_changes(case)
    preset = family_preset(family, **changes)
    lean = build_model(preset, seed=0, device=CPU, loss_chunk_size=16)
    reference = build_model(preset, seed=0, device=CPU, decoder="transformers")
    state = _randomized(reference, seed=3)
    reference.load_state_dict(state)
    lean.load_state_dict(state)  # the lean layer keeps transformers' state-dict keys
    # THEN the lean layer runs exactly where it is exact for the family, and says why not elsewhere
    uses_lean = family in LEAN and not changes
    assert lean.decoder == ("lean" if uses_lean else "transformers"), lean.decoder_fallback
    assert all(isinstance(layer, LeanDecoderLayer) for layer in lean.layers) == uses_lean
    assert bool(lean.decoder_fallback) != uses_lean
    assert lean.model_type == family_config(family)["model_type"]
    # AND its logits are transformers' ForCausalLM's own (soft-capped for gemma2), far from uniform
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, preset.vocab_size, (2, 25), generator=g)
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    expected = reference.hf(input_ids=inputs, use_cache=False).logits
    with torch.no_grad():
        logits = lean.hf.lm_head(lean.hidden_states(inputs))
        if lean.logit_softcap:
            logits = torch.tanh(logits / lean.logit_softcap) * lean.logit_softcap
    torch.testing.assert_close(logits, expected.detach(), rtol=1e-5, atol=1e-5)
    assert expected.std() > 0.5
    # AND so are the loss (transformers' logits' cross-entropy) and every parameter's gradient
    loss = lean(inputs, labels)
    reference_loss = F.cross_entropy(expected.reshape(-1, preset.vocab_size).float(), labels.reshape(-1))
    torch.testing.assert_close(loss, reference_loss, rtol=1e-5, atol=1e-6)
    loss.backward()
    reference_loss.backward()
    grads = dict(reference.named_parameters())
    for name, param in lean.named_parameters():
        assert param.grad is not None, name
        torch.testing.assert_close(
            param.grad, grads[name].grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}"
        )


@pytest.mark.parametrize("family", FAMILIES)
def test_the_plans_decoder_linears_are_the_models(family):
    # the fp8 filter and the plan's FLOPs read these shapes: they must be the layer transformers builds
    preset = family_preset(family)
    model = build_model(preset, seed=0, device=CPU, decoder="transformers")
    built = sorted(
        (name.rsplit(".", 1)[-1], m.in_features, m.out_features)
        for name, m in model.layers[0].named_modules()
        if isinstance(m, torch.nn.Linear)
    )
    assert built == sorted(decoder_linears(preset))
    assert sum(p.numel() for p in model.parameters()) == preset.num_parameters


def _saved_checkpoint(family: str, folder: Path):
    """A checkpoint of the family as a user's would be: transformers' own model of the fixture's config.json, every
    weight random (biases and norms too), written by save_pretrained (config.json + safetensors)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**family_config(family))
    saved = AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, attn_implementation=attention_implementation(config)
    )
    g = torch.Generator().manual_seed(5)
    saved.load_state_dict(
        {
            name: torch.randn(t.shape, generator=g) * (0.2 if "norm" in name else 0.3) + ("norm" in name)
            for name, t in saved.state_dict().items()
        }
    )
    saved.save_pretrained(folder)
    return saved.eval()


@pytest.mark.parametrize("family", FAMILIES)
def test_model_path_loads_each_familys_saved_checkpoint(family, tmp_path):
    # GIVEN a checkpoint of the family saved to a local folder
    saved = _saved_checkpoint(family, tmp_path)
    ids = torch.randint(0, saved.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = saved.lm_head(saved.model(input_ids=ids, use_cache=False).last_hidden_state)
    # WHEN the built-in train function builds it from modelPath (another seed, which must not matter), with
    # transformers' layer and with the default decoder (the lean layer where it is exact for the family)
    preset = family_preset(family)
    loaded = build_model(preset, seed=1, device=CPU, model_path=str(tmp_path), decoder="transformers")
    default = build_model(preset, seed=1, device=CPU, model_path=str(tmp_path))
    # THEN it holds the saved weights exactly, and computes the saved model's logits exactly
    state = loaded.hf.state_dict()
    assert state.keys() == saved.state_dict().keys()
    assert all(torch.equal(state[name], tensor) for name, tensor in saved.state_dict().items())
    assert default.decoder == ("lean" if family in LEAN else "transformers")
    with torch.no_grad():
        assert torch.equal(loaded.hf.lm_head(loaded.hidden_states(ids)), expected)
        torch.testing.assert_close(default.hf.lm_head(default.hidden_states(ids)), expected, rtol=1e-5, atol=1e-5)


class _HeldOutRows:
    """The eval split evaluate reads (Ray Data's DataIterator, its one contract here): blocks of batch_size packed
    rows, the last one shorter."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows

    def iter_batches(self, *, batch_size: int, batch_format: str):
        assert batch_format == "numpy"
        for start in range(0, len(self.rows), batch_size):
            yield {ROW_COLUMN: self.rows[start : start + batch_size]}


@pytest.mark.parametrize("family", FAMILIES)
def test_evaluate_gives_each_familys_token_weighted_held_out_loss(family):
    # GIVEN the family's model as the built-in train function builds it (the lean layer where exact), and 5 held-out
    # rows of 13 tokens in blocks of 2, 2 and 1 (one rank)
    preset = family_preset(family)
    reference = build_model(preset, seed=0, device=CPU, decoder="transformers")
    reference.load_state_dict(_randomized(reference, seed=4))
    model = build_model(preset, seed=0, device=CPU)
    model.load_state_dict(reference.state_dict())
    rows = torch.randint(0, preset.vocab_size, (5, 13), generator=torch.Generator().manual_seed(2)).numpy()
    # WHEN evaluate runs the split through it
    result = evaluate(
        model,
        _HeldOutRows(rows),  # pyright: ignore[reportArgumentType]
        micro_batch=2,
        max_batches=0,
        device=CPU,
        rank=0,
        world_size=1,
        row_tokens=13,
        vocab_size=preset.vocab_size,
    )
    # THEN eval_loss is the mean over every held-out token of the next-token loss, from transformers' own logits
    # (Gemma 2's final soft-capping included)
    tokens = torch.from_numpy(rows)
    with torch.no_grad():
        logits = reference.hf(input_ids=tokens[:, :-1], use_cache=False).logits
    per_token = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1), reduction="none")
    assert result["eval_tokens"] == per_token.numel() == 5 * 12
    assert result["eval_loss"] == pytest.approx(per_token.double().mean().item(), rel=1e-5)
    assert result["eval_perplexity"] == pytest.approx(math.exp(result["eval_loss"]))
    # and not the mean of the three blocks' means, which weighs the short last block as much as a full one
    blocks = per_token.double().reshape(5, 12)
    block_means = [blocks[0:2].mean(), blocks[2:4].mean(), blocks[4:5].mean()]
    assert result["eval_loss"] != pytest.approx(torch.stack(block_means).mean().item(), rel=1e-5)
    assert model.training  # back in training mode


# -- two gloo ranks: FSDP2 with selective checkpointing trains each family and resumes bit-identically ---------------

WORLD, STEPS, SAVE_AT = 2, 4, 2


def _train_case(rank: int, family: str, folder: str) -> dict:
    preset = family_preset(family)
    t = TrainingSettings(model="tiny", learning_rate=1e-2)
    data = TokenBatches(vocab_size=preset.vocab_size, seq_len=16, micro_batch=2, seed=0, rank=rank, pool_size=2)

    def fresh():
        model = parallelize(build_model(preset, seed=0, device=CPU), ParallelPlan(activation_checkpointing="selective"))
        return model, build_optimizer(model, t, CPU)

    def steps(model, optimizer, first: int, last: int) -> list[float]:
        losses = []
        for step in range(first, last + 1):
            loss, _ = train_step(model, optimizer, data.batch(step), lr=1e-2, grad_clip=1.0, device=CPU)
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append(mean.item() / WORLD)
            if step == SAVE_AT and first == 1:
                save_shards(model, optimizer, Path(folder))
        return losses

    model, optimizer = fresh()
    uninterrupted = steps(model, optimizer, 1, STEPS)
    dist.barrier()
    model, optimizer = fresh()  # a restarted worker: new model and optimizer, the checkpoint loaded into them
    load_shards(model, optimizer, Path(folder))
    resumed = steps(model, optimizer, SAVE_AT + 1, STEPS)
    return {
        "uninterrupted": uninterrupted,
        "resumed": resumed,
        "decoder": model.decoder,
        "model_type": model.model_type,
    }


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One spawn of two gloo ranks for every family (a rank's start costs more than a family's steps)."""
    folder = tmp_path_factory.mktemp("families")
    cases = [(family, tempfile.mkdtemp(dir=folder)) for family in FAMILIES]
    return dict(zip(FAMILIES, run_cases(_train_case, cases, world=WORLD, tmp_path=folder)))


@pytest.mark.xdist_group("gloo-spawn")
@pytest.mark.parametrize("family", FAMILIES)
def test_two_gloo_ranks_train_each_family_and_resume_bit_identically(trained, family):
    run = trained[family]
    assert run["model_type"] == family_config(family)["model_type"]
    assert run["decoder"] == ("lean" if family in LEAN else "transformers")
    losses = run["uninterrupted"]
    assert losses[-1] < losses[0] - 0.2, losses  # a pool of two sequences a rank: the model learns them
    assert run["resumed"] == losses[SAVE_AT:]  # exactly: the same fp32 arithmetic from the same state
