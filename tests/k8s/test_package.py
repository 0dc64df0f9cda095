"""The k8s package's import surface: the chart builders on demand, the names without starting jsii."""

from __future__ import annotations

import subprocess
import sys

import ray_efa.k8s as k8s
from ray_efa.core.context import PROJECT_ROOT
from ray_efa.k8s import workload


def test_builders_are_exported_from_the_package():
    assert k8s.build_workload is workload.build_workload
    assert k8s.build_manifests is workload.build_manifests


def test_names_import_without_cdk8s():
    # GIVEN a fresh interpreter WHEN ops/ or cli/ import the object names THEN neither cdk8s nor the k8s client loads
    probe = "import sys, ray_efa.k8s.names; print(sorted(m for m in ('cdk8s', 'jsii', 'kubernetes') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
