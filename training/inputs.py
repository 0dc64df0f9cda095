"""What the loop trains and evaluates on: random tokens (training.data) or the `dataset` shards (training.dataset),
and the held-out evaluation (training.evaluate) when there is one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ray_efa.core.settings import Problem, Settings, SettingsError, TrainingSettings
from ray_efa.training.data import TokenBatches
from ray_efa.training.dataset import EVAL, TRAIN, ShardBatches, quiet_ray_data
from ray_efa.training.evaluate import evaluate

if TYPE_CHECKING:
    from ray.data import DataIterator, Dataset

__all__ = ["Inputs", "check_inputs", "driver_datasets"]


def _model_folder(settings: Settings) -> str | None:
    """modelPath's config and tokenizer on this machine (s3:// and hf:// fetch them, not the weights)."""
    from ray_efa.training.weights import fetch_model

    t = settings.training
    return str(fetch_model(t.model_path, small_only=True)) if t.model_path else None


def check_inputs(settings: Settings) -> None:
    """Before Ray starts: fetch modelPath's config and tokenizer, then raise SettingsError with every problem of the
    model (no config.json, another architecture, a tokenizer past the embeddings) and of the data sets (missing,
    no text or input_ids column, text without a tokenizer)."""
    from ray_efa.core.model_source import model_problems
    from ray_efa.training.dataset import dataset_problems
    from ray_efa.training.weights import ModelFetchError

    t = settings.training
    problems: list[Problem] = []
    folder = None
    try:
        folder = _model_folder(settings)
    except ModelFetchError as error:
        problems.append(Problem("modelPath", t.model_path, error.reason))
    if not problems:
        problems += model_problems(t)
    problems += dataset_problems(settings, model_folder=folder)
    if problems:
        raise SettingsError(problems)


def driver_datasets(settings: Settings) -> dict[str, Dataset]:
    """TorchTrainer's datasets for `dataset` (training.dataset.build_datasets), tokenized with modelPath's tokenizer."""
    from ray_efa.training.dataset import build_datasets

    return build_datasets(
        settings, model_folder=_model_folder(settings), vocab_size=settings.training.preset.vocab_size
    )


def _shard(name: str) -> DataIterator:
    import ray.train

    shard = ray.train.get_dataset_shard(name)
    if shard is None:  # the driver hands the trainer every split the settings ask for (training.driver.fit)
        raise RuntimeError(f"Ray Train has no {name!r} dataset: TorchTrainer was built without datasets=")
    return shard


class Inputs:
    """The micro-batches of one rank, their position for a checkpoint, and the evaluations due."""

    def __init__(
        self, settings: Settings, *, rank: int, world_size: int, vocab_size: int, data_state: dict[str, Any]
    ) -> None:

        t = settings.training
        self.t: TrainingSettings
        self.world_size: int
        self.vocab_size: int
        self.t, self.world_size, self.vocab_size = t, world_size, vocab_size
        self.rank: int = rank
        self.random: TokenBatches = TokenBatches(
            vocab_size=vocab_size,
            seq_len=t.seq_len,
            micro_batch=t.micro_batch_size,
            seed=t.seed,
            rank=rank,
            pool_size=t.data_pool_size,
        )
        self.shard: ShardBatches | None = None
        if t.dataset is not None:
            quiet_ray_data()
            self.shard = ShardBatches(
                _shard(TRAIN),
                micro_batch=t.micro_batch_size,
                row_tokens=t.seq_len + 1,
                seed=t.seed,
                world_size=world_size,
                what=f"dataset {t.dataset}",
                **data_state,
            )
        held_out = t.dataset is not None and (t.eval_fraction > 0 or t.eval_dataset is not None)
        self.eval_split: DataIterator | None = _shard(EVAL) if held_out else None

    def batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Micro-batch `index` (1-based) of this rank: random tokens are a function of it, shards come in order."""
        return self.shard.next() if self.shard is not None else self.random.batch(index)

    def state(self) -> dict[str, Any]:
        """For train_state.json: the data position (a shard run only)."""
        return {"data": self.shard.state()} if self.shard is not None else {}

    def eval_due(self, step: int) -> bool:
        """Evaluate after `step`: every evalEvery steps and after the last one (the same on every rank)."""
        every = self.t.eval_every
        return self.eval_split is not None and (step == self.t.steps or (every > 0 and step % every == 0))

    def evaluate(self, model: torch.nn.Module, device: torch.device) -> dict[str, float]:
        assert self.eval_split is not None
        return evaluate(
            model,
            self.eval_split,
            micro_batch=self.t.micro_batch_size,
            max_batches=self.t.eval_batches,
            device=device,
            rank=self.rank,
            world_size=self.world_size,
            row_tokens=self.t.seq_len + 1,
            vocab_size=self.vocab_size,
        )
