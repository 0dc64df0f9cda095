"""`ray-efa tiny-model DIR`: a model folder (tokenizer + tiny Qwen2) and an English data set, made offline; a folder
it did not write is refused. And the local run's layer that fine-tunes such a folder from the model cache."""

from __future__ import annotations

import json
import os

import pytest

from ray_efa.cli import main
from ray_efa.core.output_dir import RECORD_NAME
from ray_efa.training.local import LOCAL_PRESET, TINY_MODEL_LAYER, local_settings, tiny_model_layer, wants_tiny_model
from ray_efa.training.tiny_model import MODEL_FOLDER, TINY_VOCAB, VOCAB, TinyModelError, license_texts


def run_cli(*argv: str) -> int:
    try:
        return main(list(argv))
    except SystemExit as exit_:
        return int(exit_.code or 0)


def test_it_writes_a_model_folder_and_a_data_set_that_load(tmp_path, capsys):
    from transformers import AutoConfig, AutoTokenizer

    from ray_efa.training.dataset import inspect

    # WHEN it writes a new folder
    out = tmp_path / "tiny"
    assert run_cli("tiny-model", str(out)) == 0
    printed = capsys.readouterr().out
    # THEN it says where, and how to fine-tune it
    assert f"wrote {out}" in printed
    assert f"-c modelPath={out / MODEL_FOLDER} -c dataset={out / 'data'} -c evalFraction=0.1" in printed
    # the model folder is what modelPath takes: a Qwen2 config with room for the tokenizer, and a fast tokenizer
    config = AutoConfig.from_pretrained(out / MODEL_FOLDER, local_files_only=True)
    assert (config.model_type, config.vocab_size) == ("qwen2", TINY_VOCAB)
    assert (out / MODEL_FOLDER / "model.safetensors").is_file()
    tokenizer = AutoTokenizer.from_pretrained(out / MODEL_FOLDER, local_files_only=True)
    assert len(tokenizer) == VOCAB and tokenizer.eos_token == "<|endoftext|>"
    assert tokenizer.decode(tokenizer("Permission is hereby granted")["input_ids"]) == "Permission is hereby granted"
    # the data set is what dataset takes: parquet files with a text column of this machine's license paragraphs
    files = inspect("dataset", str(out / "data"))
    assert (files.format, files.column, len(files.files)) == ("parquet", "text", 2)
    import pyarrow.parquet as pq

    rows = [t for f in files.files for t in pq.read_table(f)["text"].to_pylist()]
    assert sorted(rows) == sorted(license_texts(len(rows)))
    # where the text came from is written down, and the folder is recorded as ray-efa's
    assert "license files" in (out / "SOURCES.txt").read_text()
    assert set(json.loads((out / RECORD_NAME).read_text())["entries"]) == {MODEL_FOLDER, "data", "SOURCES.txt"}


def test_it_replaces_its_own_folder_and_refuses_any_other(tmp_path, capsys):
    # GIVEN a folder it wrote, and one holding a user's file
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    assert run_cli("tiny-model", str(ours)) == 0
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    capsys.readouterr()
    # WHEN it writes both again THEN its own is replaced whole (exit 0)
    assert run_cli("tiny-model", str(ours)) == 0
    assert sorted(p.name for p in ours.iterdir()) == sorted([RECORD_NAME, "SOURCES.txt", "data", MODEL_FOLDER])
    # and the other is refused with exit 2, one line naming the file, nothing written
    assert run_cli("tiny-model", str(theirs)) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(
            f"ray-efa tiny-model: refusing to write into {theirs}: it holds files ray-efa did not write (notes.txt)"
        )
        and "Traceback" not in err
    )
    assert sorted(p.name for p in theirs.iterdir()) == ["notes.txt"]


def test_a_file_is_refused_and_json_says_where_it_wrote(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert run_cli("tiny-model", str(tmp_path / "file"), "--json") == 2
    assert json.loads(capsys.readouterr().out)["exit_code"] == 2
    assert run_cli("tiny-model", str(tmp_path / "new"), "--json") == 0
    record = json.loads(capsys.readouterr().out)
    assert record["model_path"] == str(tmp_path / "new" / MODEL_FOLDER) and record["paragraphs"] >= 100
    assert record["context"] == {"modelPath": record["model_path"], "dataset": record["dataset"], "evalFraction": 0.1}


def test_too_little_text_is_an_error_that_says_how_much_there_is():
    with pytest.raises(TinyModelError, match=r"only \d+ license paragraphs .* 1000000 are needed"):
        license_texts(1_000_000)


@pytest.mark.parametrize(
    ("context", "wanted"),
    [
        ({}, True),
        ({"dataPoolSize": 8}, False),  # random tokens, as the local run trained before
        ({"dataPoolSize": "8"}, False),  # as -c gives it
        ({"evalFraction": "0.2"}, True),  # valid once the tiny model's dataset is there
        ({"modelPath": "/models/mine"}, False),
        ({"dataset": "/data/mine"}, False),
        (
            {"trainFunction": "my_pkg.train:train_func"},
            False,
        ),  # a function of yours gets no data set it did not ask for
    ],
    ids=["default", "random-pool", "random-pool-string", "eval-fraction", "model-path", "dataset", "own-function"],
)
def test_the_local_run_fine_tunes_the_tiny_model_only_without_inputs_of_its_own(context, wanted):
    assert wants_tiny_model({**LOCAL_PRESET, **context}) is wanted


def test_the_local_layer_makes_the_cache_folder_once_and_holds_out_a_split(tmp_path, monkeypatch):
    # GIVEN an empty model cache
    monkeypatch.setenv("RAY_EFA_MODEL_CACHE", str(tmp_path))
    # WHEN the local settings are made twice
    settings = local_settings()
    (root,) = (tmp_path / "tiny-model").iterdir()
    made = os.stat(root / MODEL_FOLDER / "model.safetensors").st_mtime_ns
    name, again = tiny_model_layer(LOCAL_PRESET) or ("", {})
    # THEN they fine-tune the cache's folder with a held-out split evaluated twice, and the second use made nothing
    t = settings.training
    assert (t.model_path, t.dataset) == (str(root / MODEL_FOLDER), str(root / "data"))
    assert (t.eval_fraction, t.eval_every, t.data_pool_size) == (0.1, 30, 0)
    assert (name, again["modelPath"]) == (TINY_MODEL_LAYER, t.model_path)
    assert os.stat(root / MODEL_FOLDER / "model.safetensors").st_mtime_ns == made
    assert t.preset.vocab_size == TINY_VOCAB  # the architecture is the folder's config.json


def test_dash_c_still_wins_over_the_tiny_model_layer(tmp_path, monkeypatch, capsys):
    import argparse

    from ray_efa.cli._common import resolve_local_or_exit

    monkeypatch.setenv("RAY_EFA_MODEL_CACHE", str(tmp_path))
    args = argparse.Namespace(context=["evalFraction=0.2", "steps=7"])
    resolved = resolve_local_or_exit(args, "train")
    assert (resolved.settings.training.eval_fraction, resolved.settings.training.steps) == (0.2, 7)
    assert resolved.sources["modelPath"] == TINY_MODEL_LAYER and resolved.sources["evalFraction"] == "-c"
    assert "tiny model: fine-tuning modelPath" in capsys.readouterr().out
    # and asking for random tokens leaves the inputs unset
    random = resolve_local_or_exit(argparse.Namespace(context=["dataPoolSize=8"]), "train").settings.training
    assert (random.model_path, random.dataset, random.data_pool_size) == (None, None, 8)


@pytest.mark.spawn
@pytest.mark.parametrize("what", ["a-file", "a-folder-of-yours", "under-a-file"])
def test_a_refusal_is_its_one_line_with_nothing_imported_before_it(tmp_path, what):
    import subprocess
    import sys
    from pathlib import Path

    # GIVEN a DIR that cannot be written: a file, a folder holding files ray-efa did not write, a path under a file
    target = {
        "a-file": tmp_path / "model",
        "a-folder-of-yours": tmp_path / "mine",
        "under-a-file": tmp_path / "model" / "sub",
    }[what]
    (tmp_path / "model").write_text("mine")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    # WHEN `ray-efa tiny-model DIR` runs in a fresh process (which says whether torch was imported)
    probe = (
        "import sys; from ray_efa.cli import main; code = main(['tiny-model', sys.argv[1]]); "
        "print('torch' in sys.modules, 'transformers' in sys.modules); sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    # THEN exit 2 and one line naming DIR, before torch or transformers is imported (whose warnings would come first)
    assert done.returncode == 2, done.stderr
    assert (
        done.stderr.count("\n") == 1 and done.stderr.startswith("ray-efa tiny-model: ") and str(target) in done.stderr
    )
    assert done.stdout.split() == ["False", "False"]
