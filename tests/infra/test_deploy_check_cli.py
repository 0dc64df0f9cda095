"""`ray-efa deploy-check` on what the real CDK CLI prints for a deployed stack: `npx cdk synth` before and after,
then `npx cdk diff --app <after> --template <before> STACK`, the before template carrying its construct paths as
`cdk deploy` leaves them in CloudFormation. One test per refusal; the running job is given as the cluster state, so
these tests do not depend on how an API server answers.

tests/ops/fixtures/deploy_check/*_cli.txt are recordings of the same diffs (`record()` below writes them again).
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from ray_efa.core.settings import Settings
from ray_efa.ops.deploy_check import ClusterState, check_deploy, read_diff
from tests.cdk_cli import ROOT, cli_diff, cli_synth, needs_cdk_cli

pytestmark = needs_cdk_cli

GPU_STACK = "ray-train-gpu"
CLUSTER_STACK = "ray-train-cluster"
CHANGES: dict[str, dict[str, object]] = {
    "training_job_off": {"trainingJob": "false"},
    "job_rename": {"jobName": "train-efa-2"},
    "creator_admin_kept": {"clusterCreatorAdmin": "true"},
}
"""The recorded changes: fixture name -> the `-c` context of the deploy after (before: cdk.json as it is)."""

RUNNING = ClusterState(ray_jobs={"ray/train-efa": "Running"}, gpu_nodes=("gpu-a", "gpu-b"))


@functools.cache
def _assembly(name: str) -> Path:
    return cli_synth(Path(tempfile.mkdtemp(prefix=f"ray-efa-cli-{name}-")), **CHANGES.get(name, {}))


@functools.cache
def live_diff(change: str) -> str:
    return cli_diff(_assembly(change), _assembly("before") / f"{GPU_STACK}.template.json", GPU_STACK)


@functools.cache
def creator_admin_diff() -> str:
    """The upgrade of a cluster deployed before clusterCreatorAdmin existed: its template is what -c
    clusterCreatorAdmin=true synthesizes (the property left out), the deploy after has the default settings."""
    return cli_diff(
        _assembly("before"), _assembly("creator_admin_kept") / f"{CLUSTER_STACK}.template.json", CLUSTER_STACK
    )


def record() -> None:
    """Write the fixtures of tests/ops/test_deploy_check.py from the live CLI (a few minutes)."""
    fixtures = ROOT / "tests" / "ops" / "fixtures" / "deploy_check"
    for change in ("training_job_off", "job_rename"):
        (fixtures / f"{change}_cli.txt").write_text(live_diff(change))
    (fixtures / "creator_admin_cli.txt").write_text(creator_admin_diff())


def test_an_upgrade_that_adds_bootstrap_cluster_creator_admin_permissions_is_refused():
    # THEN the CLI prints the replacement EKS would need as an in-place update of AccessConfig ...
    text = creator_admin_diff()
    assert "[~] AWS::EKS::Cluster Eks/Cluster EksClusterB2BDED5B" in text
    assert "[+] Added: .BootstrapClusterCreatorAdminPermissions" in text
    # ... which deploy-check reads and refuses, --yes or not, with the remedy
    (finding,) = check_deploy(read_diff(text), RUNNING, Settings())
    assert (finding.id, finding.overridable) == ("cluster-creator-admin", False)
    assert "-c clusterCreatorAdmin=true" in finding.message


def test_the_deployed_template_names_a_removed_resource_by_its_construct_path():
    # THEN the CLI prints `[-] TYPE PATH LOGICAL_ID destroy` for the RayJob, the form deploy-check must read
    assert (
        "[-] Custom::AWSCDK-EKS-KubernetesResource TrainingJob/RayJob-train-efa/Resource "
        "TrainingJobRayJobtrainefaFE58B741 destroy"
    ) in live_diff("training_job_off")


def test_training_job_false_keeps_the_settings_that_submit_reads():
    # THEN the deployed settings ConfigMap is updated in place (the same resource: never deleted, never created twice)
    lines = live_diff("training_job_off").splitlines()
    assert (
        "[~] Custom::AWSCDK-EKS-KubernetesResource TrainingJob/ConfigMap-train-efa-settings/Resource "
        "TrainingJobConfigMaptrainefasettingsCFE365B5"
    ) in lines
    assert not [line for line in lines if line.startswith("[-]") and "ConfigMap-train-efa-settings" in line]


def test_training_job_false_is_refused_while_the_job_runs():
    diff = read_diff(live_diff("training_job_off"))
    assert diff.removed_jobs == ("train-efa",)
    # THEN deploying -c trainingJob=false under the Running job is refused, naming it ...
    (finding,) = check_deploy(diff, RUNNING, Settings())
    assert finding.id == "job-deleted" and "ray/train-efa" in finding.message
    # ... and goes ahead once it is complete
    assert check_deploy(diff, ClusterState(ray_jobs={"ray/train-efa": "Complete"}), Settings()) == []


def test_a_job_rename_is_refused_while_the_old_job_runs():
    diff = read_diff(live_diff("job_rename"))
    assert diff.removed_jobs == ("train-efa",) and diff.reapplied_jobs == ("train-efa-2",)
    # THEN the rename deletes the Running train-efa: refused (and the new job's run is said too)
    assert [f.id for f in check_deploy(diff, RUNNING, Settings())] == ["job-deleted", "job-recreated"]
    assert [f.id for f in check_deploy(diff, ClusterState(ray_jobs={"ray/train-efa": "Failed"}), Settings())] == [
        "job-recreated"
    ]


def test_the_job_guards_hash_of_the_rayjob_is_the_same_from_synth_to_synth():
    import json
    from collections.abc import Mapping
    from typing import Any

    from tests.infra.conftest import synthesize

    def job_hash(template: Mapping[str, Any]) -> str:
        (guard,) = [r for r in template["Resources"].values() if r["Type"] == "Custom::RayEfa-JobDisruptionGuard"]
        return guard["Properties"]["JobHash"]

    cli = json.loads((_assembly("before") / f"{GPU_STACK}.template.json").read_text())
    # THEN the CLI's synth (another process, path metadata on) and an in-process one agree: an unchanged job never
    # updates the guard, so an unchanged deploy never asks whether a job runs
    assert job_hash(cli) == job_hash(synthesize().gpu.to_json()) != "none"
