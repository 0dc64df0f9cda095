"""modelPath, dataset and their checks, without Ray: on a tiny Qwen2 saved with save_pretrained, a BPE tokenizer trained
with `tokenizers` on the venv's license texts, and parquet / JSON-lines files written with pyarrow (tests/training/
artifacts.py). The Hub path runs offline against a Hub cache filled here in huggingface_hub's documented layout; the
S3 path runs against moto's in-process S3 (the only stand-in: no AWS account here)."""

from __future__ import annotations

import functools
import hashlib
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from ray_efa.core.model_source import architecture, model_problems, pod_path_problems
from ray_efa.core.settings import Settings, SettingsError
from ray_efa.training import weights
from ray_efa.training.dataset import ROW_COLUMN, _pack, dataset_problems, inspect, load_tokenizer
from tests.training import artifacts


@pytest.fixture(scope="module")
def texts():
    return artifacts.license_texts(120)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, texts):
    return artifacts.save_model_folder(tmp_path_factory.mktemp("model"), texts)


def _keys(error: SettingsError) -> list[str]:
    return [p.key for p in error.problems]


# -- the architecture comes from config.json ---------------------------------------------------------------------


def test_the_plan_counts_the_saved_models_own_parameters(model_folder):
    # GIVEN a saved model whose embeddings (640) differ from every preset's
    import torch
    from transformers import Qwen2ForCausalLM

    saved = Qwen2ForCausalLM.from_pretrained(model_folder, dtype=torch.float32)
    # WHEN the settings name it
    arch = Settings.from_context({"modelPath": str(model_folder)}).training.preset
    # THEN the architecture the plan uses is the saved one, down to the exact parameter count
    assert arch.vocab_size == 640
    assert arch.num_parameters == sum(p.numel() for p in saved.parameters())


def test_a_folder_without_config_json_is_refused_naming_modelpath(tmp_path):
    settings = Settings.from_context({"modelPath": str(tmp_path)})
    assert _keys(SettingsError(model_problems(settings.training))) == ["modelPath"]
    assert "has no config.json" in model_problems(settings.training)[0].message


def test_a_tokenizer_past_the_embeddings_is_refused(tmp_path, texts):
    # GIVEN a 512-token tokenizer beside a model with 300 embeddings
    artifacts.save_tiny_qwen2(tmp_path, vocab_size=300)
    artifacts.save_tokenizer(tmp_path, texts)
    # THEN the plan refuses, saying both sizes
    (problem,) = model_problems(Settings.from_context({"modelPath": str(tmp_path)}).training)
    assert problem.key == "modelPath" and "512 token ids, more than the model's 300 embeddings" in problem.message


@pytest.mark.parametrize(
    "value", ["hf://just-a-name", "hf://org/na--me", "hf://org/name@", "s3://", "models/qwen", "gs://bucket/model"]
)
def test_malformed_model_paths_are_settings_errors(value):
    with pytest.raises(SettingsError) as error:
        Settings.from_context({"modelPath": value})
    assert _keys(error.value) == ["modelPath"]


def test_s3_model_plans_from_model_config_or_says_how(tmp_path, model_folder, monkeypatch):
    monkeypatch.setenv("RAY_EFA_MODEL_CACHE", str(tmp_path / "cache"))
    s3 = {"modelPath": "s3://models-bucket/tiny"}
    # WHEN nothing on this machine describes it THEN the plan names modelPath and both ways out
    with pytest.raises(SettingsError, match=r"modelPath: has no config.json on this machine.*modelConfig"):
        architecture(Settings.from_context(s3).training)
    # WHEN modelConfig is a local copy of its config.json, or a preset name THEN that is the architecture
    copy = Settings.from_context({**s3, "modelConfig": str(model_folder / "config.json")}).training.preset
    assert copy.vocab_size == 640
    assert Settings.from_context({**s3, "modelConfig": "qwen2.5-0.5b"}).training.preset.hidden_size == 896


# -- hf:// through the Hub cache, offline --------------------------------------------------------------------------


def _fill_hub_cache(cache: Path, repo_id: str, folder: Path, revision: str = "main") -> Path:
    """huggingface_hub's cache layout: blobs by hash, snapshots/<commit>/ of links to them, refs/<revision>."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for file in folder.iterdir():
        blob = repo / "blobs" / hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.copyfile(file, blob)
        (snapshot / file.name).symlink_to(Path("../..") / "blobs" / blob.name)
    (repo / "refs").mkdir()
    (repo / "refs" / revision).write_text(commit)
    return snapshot


def test_hf_model_from_a_prefilled_hub_cache_offline(tmp_path, model_folder, monkeypatch):
    # GIVEN the model in a Hub cache and the Hub unreachable (HF_HUB_OFFLINE: local_files_only)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = _fill_hub_cache(tmp_path / "hub", "ray-efa/tiny-qwen2", model_folder)
    settings = Settings.from_context({"modelPath": "hf://ray-efa/tiny-qwen2"})
    # THEN the plan reads its config.json from the cache, and huggingface_hub's snapshot_download resolves it there
    assert settings.training.preset.vocab_size == 640 and model_problems(settings.training) == []
    assert weights.fetch_model("hf://ray-efa/tiny-qwen2", say=lambda _: None) == snapshot
    # and the weights load from it
    import torch

    from ray_efa.training.model import build_model

    model = build_model(settings.training.preset, seed=0, device=torch.device("cpu"), model_path=str(snapshot))
    assert sum(p.numel() for p in model.parameters()) == settings.training.preset.num_parameters


def test_hf_revision_not_in_the_cache_says_what_to_download(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    (problem,) = model_problems(Settings.from_context({"modelPath": "hf://Qwen/Qwen2.5-1.5B@v1"}).training)
    assert "hf download Qwen/Qwen2.5-1.5B config.json tokenizer.json --revision v1" in problem.message


# -- s3:// against moto, once per node ----------------------------------------------------------------------------


@pytest.fixture
def s3_model(model_folder, tmp_path, monkeypatch):
    """The model folder uploaded to a moto bucket (moto: AWS's API cannot be reached from a test)."""
    from moto import mock_aws

    monkeypatch.setenv("RAY_EFA_MODEL_CACHE", str(tmp_path / "node-cache"))
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-2")
    with mock_aws():
        import boto3

        s3 = boto3.client("s3", region_name="us-east-2")
        s3.create_bucket(Bucket="models-bucket", CreateBucketConfiguration={"LocationConstraint": "us-east-2"})
        for file in model_folder.iterdir():
            s3.upload_file(str(file), "models-bucket", f"models/tiny/{file.name}")
        s3.put_object(Bucket="models-bucket", Key="models/tiny/pytorch_model.bin", Body=b"not fetched")
        yield "s3://models-bucket/models/tiny"


class _CountingClient:
    """A real boto3 client (on moto) that counts the downloads it makes."""

    def __init__(self):
        import boto3

        self.client = boto3.client("s3", region_name="us-east-2")
        self.downloads: list[str] = []
        self._lock = threading.Lock()

    def get_paginator(self, name):
        return self.client.get_paginator(name)

    def download_file(self, bucket, key, filename, Callback=None):
        with self._lock:
            self.downloads.append(key)
        return self.client.download_file(bucket, key, filename, Callback=Callback)


def test_s3_model_downloads_once_per_node(s3_model, model_folder):
    # GIVEN four ranks of one node fetching the model at the same time
    clients = [_CountingClient() for _ in range(4)]
    folders: list[Path] = []
    said: list[str] = []
    threads = [
        threading.Thread(target=lambda c=c: folders.append(weights.fetch_model(s3_model, s3_client=c, say=said.append)))
        for c in clients
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    # THEN one of them downloaded each file once, the others waited on the node's lock and downloaded nothing
    downloads = sorted(key for c in clients for key in c.downloads)
    expected = sorted(f"models/tiny/{f.name}" for f in model_folder.iterdir())
    assert downloads == expected  # pytorch_model.bin stays in S3: only safetensors, config and tokenizer
    assert len(set(folders)) == 1 and len(folders) == 4
    (folder,) = set(folders)
    for file in model_folder.iterdir():
        assert (folder / file.name).read_bytes() == file.read_bytes()
    assert [line for line in said if "downloading" in line] == [
        f"model: downloading {len(expected)} files ({sum(f.stat().st_size for f in model_folder.iterdir()) / 1e9:.2f} GB)"
        f" of {s3_model} -> {folder}"
    ]
    # and the plan now reads the node's copy: no modelConfig needed
    assert Settings.from_context({"modelPath": s3_model}).training.preset.vocab_size == 640


def test_s3_small_files_only_and_a_missing_config(s3_model):
    folder = weights.fetch_model(s3_model, small_only=True, say=lambda _: None)
    assert (folder / "tokenizer.json").is_file() and not (folder / "model.safetensors").exists()
    with pytest.raises(weights.ModelFetchError, match="no config.json under it"):
        weights.fetch_model("s3://models-bucket/nothing-here", say=lambda _: None)


# -- dataset: files, columns, packing -------------------------------------------------------------------------------


def test_missing_and_columnless_datasets_name_the_setting(tmp_path, model_folder):
    artifacts.write_parquet(tmp_path / "wrong", ["a", "b"], files=1, column="body")
    cases = {
        str(tmp_path / "missing"): "does not exist",
        str(tmp_path / "wrong"): "has neither a text nor an input_ids column",
        str(tmp_path): "mixes parquet and JSON-lines files",
    }
    artifacts.write_jsonl(tmp_path / "x.jsonl", [{"text": "a"}])
    for path, message in cases.items():
        problems = dataset_problems(Settings.from_context({"dataset": path}), model_folder=str(model_folder))
        assert [(p.key, message in p.message) for p in problems] == [("dataset", True)], path


def test_text_needs_a_tokenizer(tmp_path, texts):
    artifacts.write_parquet(tmp_path / "data", texts[:4])
    (problem,) = dataset_problems(Settings.from_context({"dataset": str(tmp_path / "data")}), model_folder=None)
    assert problem.key == "dataset" and "needs a tokenizer" in problem.message


def test_jsonl_input_ids_are_found(tmp_path):
    path = artifacts.write_jsonl(tmp_path / "ids" / "a.jsonl", [{"input_ids": [1, 2, 3]}])
    files = inspect("dataset", str(path.parent))
    assert (files.format, files.column, len(files.files)) == ("json", "input_ids", 1)


def test_packing_puts_eos_between_documents_in_rows_of_seq_len_plus_one(model_folder, texts):
    tokenizer = load_tokenizer(str(model_folder))
    from tokenizers import Tokenizer

    docs = texts[:6]
    out = _pack(
        {"text": np.array(docs, dtype=object)},
        column="text",
        row=33,
        split="train",
        fraction=0.0,
        tokenizer=tokenizer.json,
        eos_id=tokenizer.eos_id,
        vocab_size=640,
        source="test",
    )[ROW_COLUMN]
    ids = [e.ids for e in Tokenizer.from_str(tokenizer.json).encode_batch(docs, add_special_tokens=False)]
    stream = [token for doc in ids for token in [*doc, tokenizer.eos_id]]
    assert out.shape == (len(stream) // 33, 33)
    assert out.reshape(-1).tolist() == stream[: out.size]  # in order, the tail shorter than a row dropped


def test_eval_fraction_splits_documents_the_same_way_every_time(model_folder, texts):
    tokenizer = load_tokenizer(str(model_folder))
    pack = functools.partial(
        _pack,
        column="text",
        row=17,
        fraction=0.25,
        tokenizer=tokenizer.json,
        eos_id=tokenizer.eos_id,
        vocab_size=640,
        source="test",
    )
    batch = {"text": np.array(texts, dtype=object)}
    train, held = (pack(batch, split=s)[ROW_COLUMN] for s in ("train", "eval"))
    again = pack({"text": np.array(texts[::-1], dtype=object)}, split="eval")[ROW_COLUMN]
    assert 0 < len(held) < len(train) / 2
    # the documents in reverse order: the same ones held out (their tokens, packed in another order, count the same)
    assert len(again) == len(held) and np.bincount(again.ravel(), minlength=640)[:8].sum() > 0


def test_token_ids_past_the_embeddings_are_refused():
    with pytest.raises(ValueError, match="token id 900 is outside the model's 640 embeddings"):
        _pack(
            {"input_ids": np.array([[1, 900]], dtype=object)},
            column="input_ids",
            row=2,
            split="train",
            fraction=0.0,
            tokenizer=None,
            eos_id=0,
            vocab_size=640,
            source="dataset /x",
        )


# -- volumes: no path that no pod can read --------------------------------------------------------------------------


def test_local_paths_of_a_cluster_run_need_the_shared_volume():
    paths = {"modelPath": "/mnt/fsx/models/qwen", "dataset": "/mnt/fsx/data", "storagePath": "/mnt/fsx/runs"}
    problems = pod_path_problems(Settings.from_context(paths))
    assert [p.key for p in problems] == ["modelPath", "dataset", "storagePath"]
    assert all("sharedVolumeClaim" in p.message for p in problems)
    mounted = Settings.from_context({**paths, "sharedVolumeClaim": "fsx-claim", "sharedVolumeMountPath": "/mnt/fsx"})
    assert pod_path_problems(mounted) == []
    elsewhere = pod_path_problems(mounted.replace(dataset="/home/me/data"))
    assert [(p.key, "not under sharedVolumeMountPath /mnt/fsx" in p.message) for p in elsewhere] == [("dataset", True)]
    assert (
        pod_path_problems(
            Settings.from_context({"modelPath": "hf://Qwen/Qwen2.5-1.5B", "dataset": "s3://data-bucket/text"})
        )
        == []
    )


# -- the CLI: exit 2 before Ray starts ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("context", "key", "message"),
    [
        (["dataset=/nonexistent/text"], "dataset", "dataset: does not exist, got '/nonexistent/text'"),
        (["modelPath=hf://not-an-id"], "modelPath", "modelPath: must be hf://org/name"),
        (["dataset=/tmp", "evalFraction=0.2", "evalDataset=/tmp"], "evalFraction", "must be 0 when evalDataset is set"),
    ],
    ids=["missing-dataset", "malformed-hf", "two-held-out-sets"],
)
def test_bad_inputs_exit_2_naming_the_setting_before_ray_starts(capsys, context, key, message):
    import ray

    from tests.training.test_train_cli import run_cli

    argv = [arg for pair in context for arg in ("-c", pair)]
    assert run_cli("--local", *argv) == 2
    err = capsys.readouterr().err
    assert message in err and f"- {key}:" in err
    assert not ray.is_initialized()


def test_a_model_folder_without_config_is_exit_2_before_ray_starts(capsys, tmp_path):
    import ray

    from tests.training.test_train_cli import run_cli

    assert run_cli("--local", "-c", f"modelPath={tmp_path}") == 2
    assert (
        f"modelPath: has no config.json (it must be a save_pretrained folder), got '{tmp_path}'"
        in capsys.readouterr().err
    )
    assert not ray.is_initialized()


def test_a_dangling_symlink_is_named_as_such(tmp_path, texts):
    # GIVEN a data folder of links to parquet files, one of whose targets was moved away, and a dataset path that is
    # itself a link to a folder that is gone
    first, second = sorted(artifacts.write_parquet(tmp_path / "real", texts[:4], files=2))
    links = tmp_path / "links"
    links.mkdir()
    (links / "a.parquet").symlink_to(first)
    (links / "b.parquet").symlink_to(tmp_path / "moved" / second.name)
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    # THEN each is refused naming the setting, the link and its missing target: not "holds no .parquet files" or
    # "does not exist", and not read as a data set without the missing file
    for path, link, target in (
        (links, links / "b.parquet", tmp_path / "moved" / second.name),
        (tmp_path / "gone", tmp_path / "gone", tmp_path / "nowhere"),
    ):
        (problem,) = dataset_problems(Settings.from_context({"dataset": str(path)}), model_folder=None)
        assert problem.key == "dataset"
        assert f"holds symbolic links whose targets do not exist: {link} -> {target}" in problem.message
