"""core/ in the training container: importable with the standard library and pydantic alone (no CDK, no torch).

The container gets core/ and training/ through a ConfigMap and has Ray's dependencies, pydantic among them, but not
the CDK. A fresh venv that sees only pydantic's closure (tests/venvs.py) imports a copy of ray_efa/core from a
folder on its path, as the pods do from their mount, and reads and writes settings there.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.venvs import fresh_venv, run

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from ray_efa.core.settings import Settings, SettingsError, context_json_schema
settings = Settings.from_context({"gpuNodeCount": "4", "storagePath": "s3://bucket/runs", "pipPackages": "a==1,b==2"})
assert Settings.from_json(settings.to_json()) == settings
try:
    Settings.from_context({"learningRate": "inf", "gpuNodeCont": "2"})
except SettingsError as error:
    problems = [str(p) for p in error.problems]
context_json_schema()
roots = sorted({name.split(".")[0] for name in sys.modules})
print(json.dumps({"nodes": settings.nodes.gpu_node_count, "problems": problems, "modules": roots}))
"""


def test_core_settings_imports_with_pydantic_alone(tmp_path):
    # GIVEN a venv with pydantic and nothing else, and core/ copied as the ConfigMap mounts it
    python, _ = fresh_venv(tmp_path / "venv", ["pydantic"], pip=False)
    code = tmp_path / "code"
    shutil.copytree(ROOT / "core", code / "ray_efa" / "core", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "ray_efa" / "__init__.py", code / "ray_efa" / "__init__.py")
    # WHEN settings are parsed, round-tripped and rejected there
    result = run([str(python), "-c", _PROBE, str(code)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout)
    # THEN it works, with the same messages, and nothing of the CDK or of training was imported
    assert out["nodes"] == 4
    assert out["problems"] == [
        "learningRate: must be a finite number, got 'inf'",
        "gpuNodeCont: unknown setting (did you mean gpuNodeCount?), got '2'",
    ]
    assert not {"aws_cdk", "constructs", "jsii", "cdk8s", "kubernetes", "yaml", "boto3", "rich", "torch", "ray"} & set(
        out["modules"]
    )
    assert run([str(python), "-c", "import aws_cdk"]).returncode != 0  # the venv really lacks the CDK
