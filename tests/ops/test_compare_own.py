"""`ray-efa compare` of two runs of a train function of your own: what each was given (trainConfig) is what differs,
not the built-in function's levers (which it never ran)."""

from __future__ import annotations

import json

from ray_efa.core.settings import Settings
from ray_efa.training.run_summary import summary_record, training_levers
from tests.ops.cli_helpers import run_cli

OWN = {"trainFunction": "own_training.train:train_func", "codeDir": "examples/own-training/src"}


def _run_folder(tmp_path, name: str, train_config: dict, tokens: float):
    settings = Settings.from_context({**OWN, "trainConfig": json.dumps(train_config)})
    folder = tmp_path / name
    folder.mkdir()
    record = summary_record(
        name=f"run-{name}",
        network="efa",
        instance_type="p5.48xlarge",
        nodes=2,
        summary={"throughput/tokens_per_s": tokens, "training": training_levers(settings)},
    )
    (folder / "summary.json").write_text(json.dumps(record))
    return folder


def test_the_run_summary_of_an_own_function_records_its_function_and_train_config():
    levers = training_levers(Settings.from_context({**OWN, "trainConfig": '{"epochs": 3, "lr": 0.01}'}))
    assert levers["train_function"] == OWN["trainFunction"] and levers["train_config"] == {"epochs": 3, "lr": 0.01}
    assert "train_function" not in training_levers(Settings())  # the built-in function: its levers alone


def test_compare_says_which_train_config_keys_differ(tmp_path, capsys):
    a = _run_folder(tmp_path, "a", {"epochs": 3, "lr": 0.01}, 1000.0)
    b = _run_folder(tmp_path, "b", {"epochs": 5, "lr": 0.01, "width": 256}, 1200.0)
    assert run_cli("compare", "--json", str(a), str(b)) == 0
    differences = json.loads(capsys.readouterr().out)["differences"]
    assert differences == {"trainConfig.epochs": [3, 5], "trainConfig.width": ["(unset)", 256]}
    assert run_cli("compare", str(a), str(b)) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "trainConfig.epochs (3 vs 5)" in text and "nothing recorded" not in text
    assert "trainConfig.lr" in text and "micro batch" not in text  # its config, not the built-in's levers
