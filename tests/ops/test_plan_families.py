"""`ray-efa plan --json` plans each held-out real config.json of the supported decoder families, as a user names it:
modelPath=hf://example/NAME (not in the Hub cache here) with modelConfig=<its config.json>, counting exactly the
parameters transformers builds for it (tests/core/test_models_meta.py holds the planner to transformers' meta-device
models)."""

from __future__ import annotations

import json

import pytest

from tests.core.test_models import CONFIGS, HELD_OUT, PUBLISHED_PARAMETERS, config
from tests.ops.cli_helpers import run_cli

ONE_P5 = ("-c", "gpuInstanceType=p5.48xlarge", "-c", "gpuNodeCount=1")


@pytest.mark.parametrize("name", HELD_OUT)
def test_plan_json_plans_each_held_out_family(capsys, tmp_path, monkeypatch, name):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    # WHEN the plan is asked for the Hub model, its config.json given as modelConfig
    code = run_cli(
        "plan",
        "--json",
        *ONE_P5,
        "-c",
        f"modelPath=hf://example/{name}",
        "-c",
        f"modelConfig={CONFIGS / name / 'config.json'}",
    )
    out = json.loads(capsys.readouterr().out)
    # THEN it plans it (exit 0: it fits 8 H100s) with that architecture's exact parameter count
    assert code == 0, out.get("memory_per_gpu")
    deployment = out["deployment"]
    assert (deployment["model_architecture"], deployment["model_parameters"]) == (
        f"example/{name}",
        PUBLISHED_PARAMETERS[name],
    )
    assert deployment["model_type"] == config(name)["model_type"]
    assert out["memory_per_gpu"]["fits"] and out["performance"]["efa"]["tokens_per_s_per_gpu"] > 0


def test_plan_refuses_an_unsupported_family_by_name(capsys, tmp_path):
    config = json.loads((CONFIGS / "mistral-7b-v0.3" / "config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "model_type": "mixtral"}))
    code = run_cli("plan", "--json", *ONE_P5, "-c", "modelPath=hf://example/mixtral", "-c", f"modelConfig={path}")
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and out["error"] == "invalid settings"
    (problem,) = out["problems"]
    assert problem["key"] == "modelConfig" and "model_type 'mixtral'" in problem["message"]
    assert "llama, mistral, qwen2, qwen3, gemma2, gemma3_text, phi3, olmo2" in problem["message"]
