"""The marker of tests that run the pinned CDK CLI (node_modules/.bin/cdk through npx).

`make test` installs the CLI first (npm ci). Where it is missing (pytest run without `make install`) these tests fail
with that instruction instead of skipping: a skip would let a run without the CLI pass without ever synthesizing
through it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cdk_cli() -> Path:
    """The pinned CDK CLI, or a failure that says how to install it."""
    cli = ROOT / "node_modules" / ".bin" / "cdk"
    if shutil.which("npx") is None or not cli.exists():
        pytest.fail(f"needs the pinned CDK CLI at {cli.relative_to(ROOT)} and npx: `make install` (npm ci) provides "
                    "them", pytrace=False)
    return cli


needs_cdk_cli = pytest.mark.usefixtures("cdk_cli")
