"""The k8s package's import surface: the chart builders on demand, the names without starting jsii."""

from __future__ import annotations

from pathlib import Path

import pytest

import ray_efa.k8s as k8s
from ray_efa.k8s import workload
from tests.fresh_import import loaded_by


def test_builders_are_exported_from_the_package():
    assert k8s.build_workload is workload.build_workload
    assert k8s.build_manifests is workload.build_manifests


def test_names_import_without_cdk8s():
    # GIVEN a fresh interpreter WHEN ops/ or cli/ import the object names THEN neither cdk8s nor the k8s client loads
    assert loaded_by("import ray_efa.k8s.names", ("cdk8s", "jsii", "kubernetes")) == []


def test_the_object_builders_import_without_cdk8s():
    # GIVEN a fresh interpreter WHEN the builders of every chart's objects are imported and used THEN cdk8s (jsii's
    # node process) never loads: only k8s.workload's charts wrap the objects in cdk8s
    statements = (
        "from ray_efa.core.settings import Settings\n"
        "from ray_efa.k8s.objects import manifest_objects\n"
        "manifest_objects(Settings())"
    )
    assert loaded_by(statements, ("cdk8s", "constructs", "jsii")) == []


@pytest.mark.spawn
def test_the_researcher_rbac_imports_without_the_cdk():
    # GIVEN a fresh interpreter WHEN the researchers' RBAC objects and admission policy are built (what the cluster
    # tests apply: tests/cluster/test_jobs.py) THEN no CDK loads: ResearcherAccess alone (infra/) needs it
    statements = (
        "from ray_efa.k8s.researcher_rbac import RESEARCHER_GROUP, researcher_rbac\n"
        "from ray_efa.k8s.admission_policy import researcher_admission\n"
        "researcher_rbac('ns')\n"
        "researcher_admission('ns', group=RESEARCHER_GROUP)"
    )
    assert loaded_by(statements, ("aws_cdk", "cdk8s", "constructs", "jsii")) == []


def test_the_readme_names_every_module_of_the_package():
    # k8s/README.md's table is the package's map: a module added without its line fails here
    root = Path(__file__).resolve().parents[2] / "k8s"
    readme = (root / "README.md").read_text()
    missing = [
        module.name
        for module in sorted(root.glob("*.py"))
        if module.name != "__init__.py" and f"`{module.name}`" not in readme
    ]
    assert not missing, f"k8s/README.md does not name {missing}"
