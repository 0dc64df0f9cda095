"""Where the job's files are: modelPath's weights, config and tokenizer, the data sets, and which of them a pod can read.

modelPath takes three forms:

    /abs/folder               save_pretrained output (config.json, *.safetensors, tokenizer files): on this machine for
                              `--local`, on the shared volume (sharedVolumeClaim) for a cluster run
    s3://bucket/prefix        the same files under an S3 prefix: each node downloads them once into node-local disk
                              (training.weights), with the pods' Pod Identity role
    hf://org/name[@revision]  a Hugging Face Hub repository (revision: branch, tag or commit; default main), downloaded
                              on the cluster with huggingface_hub.snapshot_download (the nodes reach the Hub through NAT)

The architecture (and with it the plan: memory, FLOPs, MFU) comes from the model's own config.json; the `model` preset
is only the architecture of a random initialization. `ray-efa plan` and `cdk synth` reach neither AWS nor the Hub, so
they read config.json from this machine, in this order:

1. modelPath's own folder: the local folder; for hf:// the Hub cache's snapshot of that revision (`hf download org/name
   config.json tokenizer.json` puts both there); for s3:// the node-local copy (model_cache_root()), which the driver
   fills on the cluster before it plans;
2. else `modelConfig`: a local copy of the config.json, or the name of a preset of the same architecture;
3. else the plan refuses (exit 2), saying which to provide.

The driver plans again on the cluster after fetching config.json and the tokenizer (before Ray Train starts), so a
modelConfig that differs from the weights fails there with exit 2, before any GPU work.

Pure Python (the training job ships this module); the Hub cache layout is huggingface_hub's documented one
(https://huggingface.co/docs/huggingface_hub/guides/manage-cache: models--org--name/refs/<revision> holds the commit,
snapshots/<commit>/ the files).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal, Protocol

from ray_efa.core.models import MODEL_PRESETS, ModelPreset, model_preset, preset_from_config
from ray_efa.core.problems import Problem, SettingsError

# What this module reads of the settings, as protocols that core.settings.Settings and its sections meet: core.settings
# imports this module (through core.settings.checks), so this one never imports it back, not even for the type checker.


class ModelFields(Protocol):
    """What this module reads of TrainingSettings: the model and where its weights are."""

    @property
    def model(self) -> str: ...
    @property
    def model_path(self) -> str | None: ...
    @property
    def model_configuration(self) -> str | None: ...
    @property
    def seq_len(self) -> int: ...


class DataFields(Protocol):
    """What pod_path_problems and s3_read_locations read of TrainingSettings: the paths the job reads."""

    @property
    def model_path(self) -> str | None: ...
    @property
    def dataset(self) -> str | None: ...
    @property
    def eval_dataset(self) -> str | None: ...


class SharedVolumeFields(Protocol):
    """What pod_path_problems reads of WorkloadSettings: where the job writes and the volume the pods share."""

    @property
    def storage_path(self) -> str | None: ...
    @property
    def shared_volume_claim(self) -> str | None: ...
    @property
    def shared_volume_mount_path(self) -> str: ...


class JobPathFields(Protocol):
    """What pod_path_problems and s3_read_locations read of Settings: its training and workload sections."""

    @property
    def training(self) -> DataFields: ...
    @property
    def workload(self) -> SharedVolumeFields: ...


__all__ = [
    "ModelSource",
    "parse_model_path",
    "model_path_problem",
    "data_path_problem",
    "parse_s3_url",
    "model_cache_root",
    "s3_cache_dir",
    "hub_cache_root",
    "hub_snapshot_dir",
    "local_model_dir",
    "architecture",
    "model_label",
    "tokenizer_size",
    "model_problems",
    "pod_path_problems",
    "s3_read_locations",
    "CONFIG_FILE",
    "MODEL_CACHE_ENV",
]

CONFIG_FILE = "config.json"
MODEL_CACHE_ENV = "RAY_EFA_MODEL_CACHE"
"""Node-local folder of the s3:// model copies (the pods set it to their model-cache volume)."""

_HF_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_HF_ID = re.compile(rf"^({_HF_PART})/({_HF_PART})(?:@([A-Za-z0-9][A-Za-z0-9._/-]{{0,254}}))?$")
_MODEL_PATH_FORMS = "an absolute folder, s3://bucket/prefix or hf://org/name[@revision]"
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSource:
    """modelPath, parsed."""

    kind: Literal["local", "s3", "hf"]
    text: str
    """modelPath as given."""
    path: str = ""
    """kind local: the folder."""
    bucket: str = ""
    prefix: str = ""
    """kind s3: the key prefix, without a trailing '/' ("" for the whole bucket)."""
    repo_id: str = ""
    """kind hf: org/name."""
    revision: str = "main"


def parse_s3_url(url: str) -> tuple[str, str]:
    """(bucket, prefix without a trailing '/') of s3://bucket/prefix; ValueError if it names no valid bucket."""
    bucket, _, prefix = url[len("s3://") :].partition("/")
    if not _S3_BUCKET.match(bucket) or ".." in bucket:
        raise ValueError("must name a bucket: s3://bucket/prefix (bucket: 3-63 lowercase letters, digits, '.', '-')")
    return bucket, prefix.strip("/")


def parse_model_path(text: str) -> ModelSource:
    """modelPath as a ModelSource; ValueError saying what is allowed."""
    if text.startswith("s3://"):
        bucket, prefix = parse_s3_url(text)
        return ModelSource(kind="s3", text=text, bucket=bucket, prefix=prefix)
    if text.startswith("hf://"):
        match = _HF_ID.match(text[len("hf://") :])
        if not match or "--" in match[1] + match[2] or ".." in match[1] + match[2]:
            raise ValueError(
                "must be hf://org/name or hf://org/name@revision (a Hub repository id: letters, digits, "
                "'.', '-', '_', no '--' or '..'; revision: a branch, tag or commit)"
            )
        return ModelSource(kind="hf", text=text, repo_id=f"{match[1]}/{match[2]}", revision=match[3] or "main")
    if "://" in text:
        raise ValueError(f"must be {_MODEL_PATH_FORMS}")
    if not text.startswith("/"):
        raise ValueError(f"must be {_MODEL_PATH_FORMS} (a relative folder means another one on every node)")
    return ModelSource(kind="local", text=text, path=text)


def model_path_problem(text: str) -> str | None:
    try:
        parse_model_path(text)
    except ValueError as error:
        return str(error)
    return None


def data_path_problem(text: str) -> str | None:
    """What is wrong with a dataset / evalDataset value: an absolute path or s3://bucket/prefix."""
    if text.startswith("s3://"):
        try:
            parse_s3_url(text)
        except ValueError as error:
            return str(error)
        return None
    if text.startswith("/"):
        return None
    return (
        "must be an absolute path or s3://bucket/prefix of parquet or JSON-lines files (with a text or an "
        "input_ids column)"
    )


def model_cache_root() -> Path:
    """Node-local folder of the s3:// model copies: $RAY_EFA_MODEL_CACHE, else ~/.cache/ray-efa/models."""
    return Path(os.environ.get(MODEL_CACHE_ENV) or Path.home() / ".cache" / "ray-efa" / "models")


def s3_cache_dir(bucket: str, prefix: str) -> Path:
    """Where the node-local copy of s3://bucket/prefix lives."""
    return model_cache_root() / "s3" / bucket / (prefix or "_bucket")


def hub_cache_root() -> Path:
    """huggingface_hub's cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
    return Path(home) / "hub"


def hub_snapshot_dir(repo_id: str, revision: str = "main") -> Path | None:
    """The cached snapshot folder of repo_id at revision (a branch or tag the cache recorded, or a commit), or None."""
    repo = hub_cache_root() / ("models--" + repo_id.replace("/", "--"))
    ref = repo / "refs" / PurePosixPath(revision)
    commit = ref.read_text().strip() if ref.is_file() else revision
    snapshot = repo / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None


def local_model_dir(source: ModelSource) -> Path | None:
    """The folder on this machine that holds modelPath's files (its config.json at least), or None."""
    if source.kind == "local":
        folder: Path | None = Path(source.path)
    elif source.kind == "hf":
        folder = hub_snapshot_dir(source.repo_id, source.revision)
    else:
        folder = s3_cache_dir(source.bucket, source.prefix)
    return folder if folder is not None and (folder / CONFIG_FILE).is_file() else None


@functools.lru_cache(maxsize=64)
def _read_json(path: str, mtime_ns: int) -> dict[str, Any]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("is not a JSON object")
    return data


def _json(path: Path) -> dict[str, Any]:
    """A JSON file, read once per version of it (the plan asks for the architecture many times)."""
    return _read_json(str(path), path.stat().st_mtime_ns)


def _config_architecture(path: Path, name: str, key: str, value: str) -> ModelPreset:
    try:
        return preset_from_config(name, _json(path))
    except (OSError, ValueError) as error:  # JSONDecodeError is a ValueError
        raise SettingsError([Problem(key, value, f"{path} {error}")]) from None


def model_label(model_path: str) -> str:
    """The model's name, from modelPath alone (no I/O): the folder's name, the Hub's org/name[@revision], or the
    S3 prefix's last part; what captions and run names call a fine-tuned model."""
    text = model_path.rstrip("/")
    if text.startswith("hf://"):
        return text.removeprefix("hf://")
    return text.rsplit("/", 1)[-1] or text


def architecture(t: ModelFields) -> ModelPreset:
    """The architecture to train and plan: modelPath's config.json, else modelConfig (a config.json or a preset name;
    without modelPath, the architecture of a random initialization), else the `model` preset.

    Raises SettingsError (naming modelPath or modelConfig) when neither can be read here, or the config.json's
    model_type is not one of core.models.SUPPORTED_MODEL_TYPES.
    """
    if t.model_path is None:
        if t.model_configuration is None:
            return model_preset(t.model)
        return _model_config_architecture(t.model_configuration, _config_label(t.model_configuration))
    source = parse_model_path(t.model_path)
    folder = local_model_dir(source)
    if folder is not None:
        return _config_architecture(folder / CONFIG_FILE, model_label(t.model_path), "modelPath", t.model_path)
    if t.model_configuration is not None:
        return _model_config_architecture(t.model_configuration, model_label(t.model_path))
    raise SettingsError([Problem("modelPath", t.model_path, _not_here(source))])


def _config_label(model_config: str) -> str:
    """A random initialization's name, from modelConfig: the preset's, or the folder holding the config.json (the
    file's own name when it is not config.json)."""
    if model_config in MODEL_PRESETS:
        return model_config
    path = PurePosixPath(model_config)
    return (path.parent.name if path.name == CONFIG_FILE else path.stem) or path.name


def _model_config_architecture(model_config: str, name: str) -> ModelPreset:
    """modelConfig's architecture under `name`: a preset, or a config.json read here."""
    if model_config in MODEL_PRESETS:
        return dataclasses.replace(model_preset(model_config), name=name)
    path = Path(model_config)
    if not path.is_file():
        raise SettingsError(
            [
                Problem(
                    "modelConfig",
                    model_config,
                    f"must be a readable config.json file or one of the presets {', '.join(MODEL_PRESETS)}",
                )
            ]
        )
    return _config_architecture(path, name, "modelConfig", model_config)


def _not_here(source: ModelSource) -> str:
    if source.kind == "local":
        return (
            f"has no {CONFIG_FILE} on this machine (the architecture and the plan come from it): point it at a "
            "save_pretrained folder, or, for a folder only the pods see, set modelConfig to a local copy of its "
            "config.json or to a preset name"
        )
    if source.kind == "hf":
        return (
            f"has no {CONFIG_FILE} in the Hub cache ({hub_cache_root()}), and plan reaches no network: run "
            f"`hf download {source.repo_id} config.json tokenizer.json"
            + (f" --revision {source.revision}" if source.revision != "main" else "")
            + "`, or set modelConfig to a local copy of its config.json or to a preset name"
        )
    return (
        f"has no {CONFIG_FILE} on this machine, and plan reaches no AWS: set modelConfig to a local copy "
        f"(aws s3 cp {source.text.rstrip('/')}/{CONFIG_FILE} .) or to a preset name"
    )


def tokenizer_size(folder: Path) -> int | None:
    """Token ids the tokenizer in `folder` can emit (largest id + 1, added tokens included), from tokenizer.json; None
    when the folder has no tokenizer.json."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    data = _json(path)
    vocab = (data.get("model") or {}).get("vocab")
    size = 0
    if isinstance(vocab, dict) and vocab:
        size = max(int(i) for i in vocab.values()) + 1
    elif isinstance(vocab, list):
        size = len(vocab)  # Unigram: [token, score] pairs, ids by position
    added = [int(token["id"]) for token in data.get("added_tokens") or () if "id" in token]
    return max([size, *(i + 1 for i in added)])


def model_problems(t: ModelFields) -> list[Problem]:
    """What keeps the settings' model from being planned and trained, read from this machine: the architecture cannot
    be found, or the tokenizer emits ids past the model's embeddings."""
    try:
        arch = architecture(t)
    except SettingsError as error:
        return error.problems
    if t.seq_len > arch.max_position_embeddings:
        key, value = (
            ("modelPath", t.model_path)
            if t.model_path
            else ("modelConfig", t.model_configuration)
            if t.model_configuration
            else ("model", t.model)
        )
        return [
            Problem(
                "seqLen",
                t.seq_len,
                f"must be <= {arch.max_position_embeddings}, the max positions of {arch.name} ({key} {value})",
            )
        ]
    if t.model_path is None:
        return []
    folder = local_model_dir(parse_model_path(t.model_path))
    size = tokenizer_size(folder) if folder is not None else None
    if size is not None and size > arch.vocab_size:
        return [
            Problem(
                "modelPath",
                t.model_path,
                f"has a tokenizer of {size:,} token ids, more than the model's "
                f"{arch.vocab_size:,} embeddings (config.json vocab_size)",
            )
        ]
    return []


def _under(path: str, mount: str) -> bool:
    return PurePosixPath(path).is_relative_to(PurePosixPath(mount))


def pod_path_problems(settings: JobPathFields) -> list[Problem]:
    """Local paths of a cluster run (modelPath, dataset, evalDataset, storagePath) that no pod can read: each must be
    s3:// (or hf:// for the model), or lie under sharedVolumeMountPath with sharedVolumeClaim set."""
    t, w = settings.training, settings.workload
    paths = {
        "modelPath": t.model_path,
        "dataset": t.dataset,
        "evalDataset": t.eval_dataset,
        "storagePath": w.storage_path,
    }
    problems = []
    for key, value in paths.items():
        if value is None or not value.startswith("/"):
            continue
        if w.shared_volume_claim is None:
            problems.append(
                Problem(
                    key,
                    value,
                    "is a local path, which no pod can read: use s3://bucket/prefix, or "
                    "mount a shared filesystem (FSx for Lustre, EFS) into the pods with "
                    "sharedVolumeClaim=<PersistentVolumeClaim> and sharedVolumeMountPath "
                    "(the folder it is mounted at, holding this path)",
                )
            )
        elif not _under(value, w.shared_volume_mount_path):
            problems.append(
                Problem(
                    key,
                    value,
                    f"is not under sharedVolumeMountPath {w.shared_volume_mount_path}, "
                    f"where the pods mount PersistentVolumeClaim {w.shared_volume_claim}: "
                    "no pod can read it",
                )
            )
    return problems


def s3_read_locations(settings: JobPathFields) -> list[str]:
    """The s3:// URLs the job reads (modelPath, dataset, evalDataset), in that order, each once: what the pods' role
    is granted read on (infra.checkpoints.CheckpointStorage)."""
    t = settings.training
    urls = [url for url in (t.model_path, t.dataset, t.eval_dataset) if url is not None and url.startswith("s3://")]
    return list(dict.fromkeys(urls))
