"""What a fresh interpreter loads: for the tests that keep jsii's node process (aws_cdk, constructs, cdk8s) and other
heavy packages out of the light paths (ops/, cli/, k8s.objects)."""

from __future__ import annotations

import ast
import subprocess
import sys

from ray_efa.core.context import PROJECT_ROOT

__all__ = ["loaded_by"]


def loaded_by(statements: str, watched: tuple[str, ...]) -> list[str]:
    """Those of the `watched` modules in sys.modules after a fresh interpreter, in the project root, runs
    `statements` (Python source); sorted, [] when none loaded."""
    probe = f"import sys\n{statements}\nprint(sorted(m for m in {watched!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    return ast.literal_eval(out.stdout.strip().splitlines()[-1])
