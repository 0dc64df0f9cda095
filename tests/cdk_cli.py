"""The marker of tests that run the pinned CDK CLI (node_modules/.bin/cdk through npx).

`make test` installs the CLI first (npm ci). Where it is missing (pytest run without `make install`) these tests fail
with that instruction instead of skipping: a skip would let a run without the CLI pass without ever synthesizing
through it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cdk_cli() -> Path:
    """The pinned CDK CLI, or a failure that says how to install it."""
    cli = ROOT / "node_modules" / ".bin" / "cdk"
    if shutil.which("npx") is None or not cli.exists():
        pytest.fail(
            f"needs the pinned CDK CLI at {cli.relative_to(ROOT)} and npx: `make install` (npm ci) provides them",
            pytrace=False,
        )
    return cli


needs_cdk_cli = pytest.mark.usefixtures("cdk_cli")


def cli_env() -> dict[str, str]:
    """A fresh machine's environment: no AWS credentials or profile (synth and an offline diff need none)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    env.update(
        AWS_CONFIG_FILE="/nonexistent",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
        AWS_EC2_METADATA_DISABLED="true",
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
    )
    return env


def cli_synth(outdir: Path, **context: object) -> Path:
    """`npx cdk synth -o OUTDIR -c key=value...` of the project's app, as users run it: the CLI writes every
    resource's construct path (aws:cdk:path metadata), as `cdk deploy` does into the deployed template."""
    args = [f"{key}={value}" for key, value in context.items()]
    result = subprocess.run(
        [
            "npx",
            "cdk",
            "synth",
            "--quiet",
            "--no-notices",
            "--output",
            str(outdir),
            *(a for arg in args for a in ("-c", arg)),
        ],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return outdir


def cli_diff(assembly: Path, before_template: Path, stack: str) -> str:
    """What `npx cdk diff --app ASSEMBLY --template BEFORE STACK` prints (offline: the before template stands for the
    deployed stack), without colours."""
    result = subprocess.run(
        [
            "npx",
            "cdk",
            "diff",
            "--app",
            str(assembly),
            "--template",
            str(before_template),
            stack,
            "--exclusively",
            "--no-notices",
            "--no-color",
        ],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return result.stdout + result.stderr
