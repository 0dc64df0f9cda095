"""core.context resolves context exactly as the real CDK CLI hands it to the app (node_modules/.bin/cdk, offline).

The app of a temporary app directory is a tiny script that dumps the context the CLI passes it (CDK_CONTEXT_JSON,
plus the overflow file the CLI uses when the context is large) and writes a cloud assembly of one empty stack.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ray_efa.core.context import PROJECT_ROOT, merge_context, parse_overrides, read_context, resolve_settings
from ray_efa.core.settings import Settings

CDK = PROJECT_ROOT / "node_modules" / ".bin" / "cdk"

DUMP_APP = """
import json, os
context = json.loads(os.environ.get("CDK_CONTEXT_JSON", "{}"))
overflow = os.environ.get("CDK_CONTEXT_OVERFLOW_LOCATION")
if overflow:
    with open(overflow) as stream:
        context.update(json.load(stream))
with open(os.environ["RAY_EFA_TEST_DUMP"], "w") as stream:
    json.dump(context, stream)
out = os.environ["CDK_OUTDIR"]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "Dump.template.json"), "w") as stream:
    json.dump({"Resources": {}}, stream)
stack = {"type": "aws:cloudformation:stack", "environment": "aws://unknown-account/us-east-2",
         "properties": {"templateFile": "Dump.template.json"}}
with open(os.path.join(out, "manifest.json"), "w") as stream:
    json.dump({"version": "36.0.0", "artifacts": {"Dump": stack}}, stream)
"""


def cdk_context(app_dir, home, overrides: list[str]) -> dict:
    """The context the real CDK CLI hands the app of `app_dir`, with `~` at `home` and `-c` overrides."""
    dump = app_dir / "dumped-context.json"
    env = {
        **os.environ,
        "HOME": str(home),
        "RAY_EFA_TEST_DUMP": str(dump),
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    flags = [arg for pair in overrides for arg in ("-c", pair)]
    result = subprocess.run(
        [str(CDK), "ls", "--no-notices", *flags], cwd=app_dir, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and result.stdout.split() == ["Dump"], result.stderr
    return json.loads(dump.read_text())


@pytest.fixture
def conflicting_app(tmp_path):
    """An app directory and a home whose three context files, and -c, disagree on the same keys."""
    app_dir, home = tmp_path / "app", tmp_path / "home"
    app_dir.mkdir()
    home.mkdir()
    (app_dir / "dump.py").write_text(DUMP_APP)
    (app_dir / "cdk.json").write_text(
        json.dumps(
            {
                "app": f"{sys.executable} dump.py",
                "context": {
                    "gpuNodeCount": 2,
                    "steps": 30,
                    "gpuAvailabilityZone": "us-east-2b",
                    "pipPackages": ["einops==0.8.1"],
                    "team": {"owner": "ml", "budget": 1},
                },
            }
        )
    )
    (app_dir / "cdk.context.json").write_text(
        json.dumps(
            {
                "gpuNodeCount": 3,
                "seqLen": 1024,
                "gpuAvailabilityZone": "us-east-2c",
                "pipPackages": ["a==1", "b==2"],
                "team": {"budget": 2, "cost-center": "x"},
            }
        )
    )
    (home / ".cdk.json").write_text(
        json.dumps({"context": {"seqLen": 512, "model": "tiny", "steps": 1, "microBatch": 1}})
    )
    return app_dir, home


OVERRIDES = ["steps=9", "microBatch=4"]


@pytest.mark.xdist_group("cdk-cli")
def test_context_resolution_matches_the_real_cdk_cli(conflicting_app):
    app_dir, home = conflicting_app
    # GIVEN the context the real CDK CLI hands the app
    handed = cdk_context(app_dir, home, OVERRIDES)
    handed = {k: v for k, v in handed.items() if not k.startswith(("aws:", "@aws-cdk/"))}  # the CLI's own switches
    # WHEN core.context merges the same files and overrides
    layers = [values for _, values in read_context(app_dir, home=home)] + [parse_overrides(OVERRIDES)]
    # THEN it is the same context, key by key
    assert merge_context(layers) == handed
    # ...which pins the CDK's precedence: -c > cdk.json > cdk.context.json > ~/.cdk.json, objects merged deeply
    assert handed["steps"] == "9" and handed["microBatch"] == "4"
    assert handed["gpuNodeCount"] == 2 and handed["gpuAvailabilityZone"] == "us-east-2b"
    assert handed["seqLen"] == 1024 and handed["model"] == "tiny"
    assert handed["pipPackages"] == ["einops==0.8.1"] and handed["team"] == {
        "owner": "ml",
        "budget": 1,
        "cost-center": "x",
    }


@pytest.mark.xdist_group("cdk-cli")
def test_resolved_settings_and_sources_are_what_cdk_deploy_gets(conflicting_app, monkeypatch):
    app_dir, home = conflicting_app
    for f in ("cdk.json", "cdk.context.json"):  # settings only: `team` is not a setting key
        path = app_dir / f
        data = json.loads(path.read_text())
        (data.get("context", data)).pop("team")
        path.write_text(json.dumps(data))
    handed = cdk_context(app_dir, home, OVERRIDES)
    # WHEN ray-efa resolves settings from a subdirectory of the app (it finds the app directory upwards)
    (app_dir / "notebooks").mkdir()
    monkeypatch.chdir(app_dir / "notebooks")
    resolved = resolve_settings(parse_overrides(OVERRIDES), home=home)
    # THEN the settings are those the CDK app builds from what the CLI handed it, and each source is the winning file
    assert resolved.app_dir == app_dir
    assert resolved.settings == Settings.from_context(handed)
    assert (resolved.settings.nodes.gpu_node_count, resolved.sources["gpuNodeCount"]) == (2, "cdk.json")
    assert (resolved.settings.training.seq_len, resolved.sources["seqLen"]) == (1024, "cdk.context.json")
    assert (resolved.settings.training.model, resolved.sources["model"]) == ("tiny", "~/.cdk.json")
    assert (resolved.settings.training.steps, resolved.sources["steps"]) == (9, "-c")
    assert resolved.sources["region"] == "default"
