"""The marker of tests that run the pinned CDK CLI (node_modules/.bin/cdk through npx). `make test` installs it
first (npm ci), so in CI they always run; they skip only where someone runs pytest without `make install`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

needs_cdk_cli = pytest.mark.skipif(
    shutil.which("npx") is None or not (ROOT / "node_modules" / ".bin" / "cdk").exists(),
    reason="needs the pinned CDK CLI: `make install` (npm ci) provides it")
