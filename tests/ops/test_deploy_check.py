"""`ray-efa deploy-check`'s decisions: the real CDK CLI's diffs (recorded) against the states a cluster can be in.

The diffs in fixtures/deploy_check/ are what `cdk diff --app <after> --template <before>` printed for day-2 changes of
tests/infra/test_day2.py (that test also reads every live diff with the same parser, so a CLI whose output drifts from
these recordings fails there). What runs is a ClusterState here (the decision is a pure function of it); reading it
from the Kubernetes API, and the command, run against the real control plane in tests/cluster/test_deploy_check.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ray_efa.core.settings import Settings
from ray_efa.ops.deploy_check import ClusterState, check_deploy, read_diff
from tests.fresh_import import loaded_by
from tests.ops.cli_helpers import run_cli

DIFFS = Path(__file__).parent / "fixtures" / "deploy_check"
SETTINGS = ("-c", "gpuInstanceType=g6.12xlarge", "-c", "gpuNodeCount=2", "-c", "namespace=ray", "-c", "network=efa")


def diff_text(name: str) -> str:
    return (DIFFS / f"{name}.txt").read_text()


def cluster(job_status: str | None = "Running", gpu_nodes: bool = True) -> ClusterState:
    """Two GPU nodes and the training RayJob in `job_status` (None: deleted)."""
    return ClusterState(
        ray_jobs={} if job_status is None else {"ray/train-efa": job_status},
        gpu_nodes=("ip-10-0-1-17.us-east-2.compute.internal", "ip-10-0-2-41.us-east-2.compute.internal")
        if gpu_nodes
        else (),
    )


def findings(diff: str | None, state: ClusterState) -> dict[str, bool]:
    return {f.id: f.overridable for f in check_deploy(read_diff(diff_text(diff)) if diff else None, state, Settings())}


def test_the_recorded_diffs_read_as_the_changes_they_are():
    instance = read_diff(diff_text("instance_type"))
    assert instance.gpu_roll and "ray-train-gpu: GpuNodes/LaunchTemplate" in instance.rolled_node_groups
    assert instance.reapplied_jobs == ("train-efa",) and not instance.device_stack_switch
    steps = read_diff(diff_text("steps"))
    assert not steps.gpu_roll and not steps.rolled_node_groups and not steps.reapplied_jobs
    (guard,) = instance.guards
    assert (guard.stack, guard.path, guard.op) == ("ray-train-gpu", "JobGuard", "~")
    assert guard.old["RollKey"].startswith("gpuInstanceType=g6.12xlarge ") and "NodeCount" not in guard.old
    assert guard.new["RollKey"].startswith("gpuInstanceType=g6e.24xlarge ") and guard.new["RollDigest"]
    system = read_diff(diff_text("system_type"))
    assert not system.gpu_roll and system.rolled_node_groups == ("ray-train-cluster: Eks/Cluster/NodegroupSystemNodes",)
    system_guard = next(g for g in system.guards if g.stack == "ray-train-cluster")
    assert (system_guard.path, system_guard.op) == ("SystemJobGuard", "~")
    assert system_guard.old["RollKey"] == "systemInstanceType=m7i.xlarge kubernetesVersion=1.36"
    assert system_guard.new["RollKey"] == "systemInstanceType=m7i.2xlarge kubernetesVersion=1.36"
    allowed = read_diff(diff_text("allow_disruption"))
    # (the override forces both node groups' updates: a property of each, no roll)
    assert allowed.rolled_node_groups == (
        "ray-train-cluster: Eks/Cluster/NodegroupSystemNodes",
        "ray-train-gpu: GpuNodes/Nodegroup",
    )
    assert [(g.old, g.new) for g in allowed.guards] == [
        ({"AllowJobDisruption": "false"}, {"AllowJobDisruption": "true"})
    ] * 2
    dra = read_diff(diff_text("dra_nodes_up"))
    assert len(dra.device_stack_switch) == 4 and dra.reapplied_jobs == ("train-efa",)
    zero = read_diff(diff_text("scale_to_zero"))
    assert zero.gpu_roll and not zero.reapplied_jobs
    assert any(i.startswith("TrainingJobRayJobtrainefa") for i in zero.removed_manifests)


@pytest.mark.parametrize(
    "diff, job, nodes, expected",
    [
        # a roll with the job running: refused; with it finished: go (re-applying a finished job does not rerun it)
        ("instance_type", "Running", True, {"nodes-roll": True}),
        ("instance_type", "Initializing", True, {"nodes-roll": True}),
        ("instance_type", "Complete", True, {}),
        # a deleted job that the deploy re-applies comes back
        ("instance_type", None, True, {"job-recreated": True}),
        # a training setting leaves the nodes and the RayJob alone: go, job running or deleted
        ("steps", "Running", True, {}),
        ("steps", None, True, {}),
        # the system nodes hold the head: their roll kills the job too
        ("system_type", "Running", True, {"nodes-roll": True}),
        # a node group update that rolls no node (ForceUpdateEnabled): the guard is asked nothing of the nodes, nor is this
        ("allow_disruption", "Running", True, {}),
        # nodes back from zero for a job that waits for them, or a roll of a group at zero nodes: no pod is touched
        ("come_back", "Initializing", False, {}),
        ("roll_at_zero", "Running", False, {}),
        # scaling to zero under a running job: the nodes go and the RayJob is deleted
        ("scale_to_zero", "Running", True, {"nodes-roll": True, "job-deleted": True}),
        # DRA next to the device plugins on GPU nodes: never; at zero nodes the same swap is fine
        ("dra_nodes_up", "Complete", True, {"device-allocation-switch": False}),
        ("dra_nodes_up", "Complete", False, {}),
        # no diff: an active job refuses any deploy, a finished one none
        (None, "Running", True, {"active-jobs": True}),
        (None, "Failed", True, {}),
    ],
)
def test_a_deploy_is_refused_for_what_it_would_do_to_what_runs(diff, job, nodes, expected):
    assert findings(diff, cluster(job, nodes)) == expected


def test_a_roll_is_said_in_the_job_guards_words():
    (finding,) = check_deploy(read_diff(diff_text("instance_type")), cluster("Running"), Settings())
    assert finding.id == "nodes-roll"
    assert finding.message.startswith(
        "the deploy rolls the GPU nodes (gpuInstanceType g6.12xlarge -> g6e.24xlarge), "
        "and RayJob ray/train-efa (Running) runs on them"
    )
    (finding,) = check_deploy(read_diff(diff_text("scale_to_zero")), cluster("Complete"), Settings()) or [
        None
    ]  # nothing runs: no finding
    assert finding is None


def test_a_roll_of_the_system_nodes_is_said_in_their_guards_words():
    findings = check_deploy(read_diff(diff_text("system_type")), cluster("Running"), Settings())
    assert [f.id for f in findings] == ["nodes-roll"]
    assert findings[0].message.startswith(
        "the deploy rolls the system nodes (systemInstanceType m7i.xlarge -> m7i.2xlarge), "
        "and RayJob ray/train-efa (Running) runs on them"
    )


SYSTEM_NODEGROUP = "[~] AWS::EKS::Nodegroup Eks/Cluster/NodegroupSystemNodes EksClusterNodegroupSystemNodes7D54C381\n"


def test_a_system_node_group_change_its_guard_does_not_see_rolls_nothing():
    # GIVEN a deploy that changes the system nodes' labels or size alone: EKS changes them in place, and the guard's
    # properties (what rolls the nodes) are the same, so CloudFormation does not ask it
    text = f"Stack ray-train-cluster\nResources\n{SYSTEM_NODEGROUP} └─ [~] Labels\n"
    # THEN deploy-check lets it through, a job running
    assert check_deploy(read_diff(text), cluster("Running"), Settings()) == []
    # ... but not where the deploy creates the guard (a stack deployed before it had one: a Create judges nothing)
    created = (
        "Stack ray-train-cluster\nResources\n"
        "[+] Custom::RayEfa-JobDisruptionGuard SystemJobGuard/Resource SystemJobGuard2F050C31\n" + SYSTEM_NODEGROUP
    )
    (finding,) = check_deploy(read_diff(created), cluster("Running"), Settings())
    assert "drains the nodes of ray-train-cluster: Eks/Cluster/NodegroupSystemNodes" in finding.message


def test_a_guard_the_deploy_creates_guards_nothing_yet():
    # GIVEN a stack deployed before it had a guard: CloudFormation creates the guard (a Create judges nothing) and
    # updates the launch template in the same deploy
    text = (
        "Stack ray-train-gpu\n[+] Custom::RayEfa-JobDisruptionGuard JobGuard/Resource JobGuardFE2367F1\n"
        "[~] AWS::EC2::LaunchTemplate GpuNodes/LaunchTemplate GpuNodesLaunchTemplate8E6E2A4C\n"
    )
    # THEN the touched launch template drains the nodes
    findings = check_deploy(read_diff(text), cluster("Running"), Settings())
    assert [f.id for f in findings] == ["nodes-roll"]
    assert "drains the nodes of ray-train-gpu: GpuNodes/LaunchTemplate" in findings[0].message


def test_a_file_that_is_not_a_cdk_diff_is_exit_2(tmp_path, capsys):
    not_a_diff = tmp_path / "plan.txt"
    not_a_diff.write_text("Resources\n[~] nothing\n")
    assert run_cli("deploy_check", "--diff", str(not_a_diff), *SETTINGS) == 2
    assert "is not the output of `cdk diff`" in capsys.readouterr().err
    assert run_cli("deploy_check", "--diff", str(tmp_path / "missing.txt"), *SETTINGS) == 2


# -- what the CLI prints for a deployed stack (construct paths on): recorded by tests/infra/test_deploy_check_cli.py
RUNNING = ClusterState(ray_jobs={"ray/train-efa": "Running"}, gpu_nodes=("gpu-a", "gpu-b"))


@pytest.mark.parametrize(
    "diff, job, expected",
    [
        # -c trainingJob=false deletes the RayJob: refused while it runs, fine once it is complete
        ("training_job_off_cli", "Running", {"job-deleted": True}),
        ("training_job_off_cli", "Initializing", {"job-deleted": True}),
        ("training_job_off_cli", "Complete", {}),
        # a jobName rename deletes the old RayJob, and applies the new one (a new run on every GPU node)
        ("job_rename_cli", "Running", {"job-deleted": True, "job-recreated": True}),
        ("job_rename_cli", "Failed", {"job-recreated": True}),
    ],
)
def test_a_deployed_stacks_diff_is_read_by_construct_path(diff, job, expected):
    # GIVEN the diff the CLI prints against a deployed template: `[-] TYPE PATH LOGICAL_ID destroy`
    state = ClusterState(ray_jobs={"ray/train-efa": job}, gpu_nodes=RUNNING.gpu_nodes)
    # THEN the RayJob's removal is read from its construct path, whatever the API server is
    assert {f.id: f.overridable for f in check_deploy(read_diff(diff_text(diff)), state, Settings())} == expected


def test_a_removed_resource_is_read_in_both_forms_the_cli_prints():
    by_path = read_diff(
        "Stack s\n[-] Custom::AWSCDK-EKS-KubernetesResource TrainingJob/RayJob-a-b/Resource "
        "TrainingJobRayJobabFE58B741 destroy\n"
    )
    by_id = read_diff("Stack s\n[-] Custom::AWSCDK-EKS-KubernetesResource TrainingJobRayJobabFE58B741 destroy\n")
    assert by_path.removed_jobs == ("a-b",) and by_path.removed_manifests == ("TrainingJobRayJobabFE58B741",)
    assert by_id.removed_jobs == () and by_id.removed_manifests == ("TrainingJobRayJobabFE58B741",)
    settings = Settings.from_context({"jobName": "a-b"})
    for diff in (by_path, by_id):
        state = ClusterState(ray_jobs={"ray/a-b": "Running"})
        assert [f.id for f in check_deploy(diff, state, settings)] == ["job-deleted"]


def test_a_cluster_deployed_before_cluster_creator_admin_is_refused_its_replacement():
    # GIVEN a cluster deployed before clusterCreatorAdmin existed (recorded: its template as -c
    # clusterCreatorAdmin=true leaves it, diffed against the default settings): the diff adds
    # BootstrapClusterCreatorAdminPermissions, which EKS sets at creation only
    diff = read_diff(diff_text("creator_admin_cli"))
    assert diff.creator_admin_changes == ("ray-train-cluster: Eks/Cluster",)
    # THEN the deploy is refused whatever runs (CloudFormation cannot replace a named cluster), --yes or not ...
    for state in (cluster("Running"), cluster(None, gpu_nodes=False)):
        (finding,) = [f for f in check_deploy(diff, state, Settings()) if f.id == "cluster-creator-admin"]
        assert not finding.overridable
    # ... naming the setting and the remedy: keep the creator's admin, remove its access entry by hand
    assert "BootstrapClusterCreatorAdminPermissions" in finding.message
    assert "-c clusterCreatorAdmin=true" in finding.message and "delete-access-entry" in finding.message
    # ... and the same deploy with -c clusterCreatorAdmin=true changes nothing of the cluster: no such diff
    assert read_diff("Stack ray-train-cluster\nThere were no differences\n").creator_admin_changes == ()


@pytest.mark.spawn
def test_the_command_imports_no_cdk():
    # GIVEN a fresh interpreter WHEN `ray-efa deploy-check`'s module is imported, with the job guard's rules it judges
    # by (infra.job_guard_handler) THEN no CDK loads: importing aws_cdk starts jsii's node process, for nothing here
    assert loaded_by("import ray_efa.ops.deploy_check", ("aws_cdk", "constructs", "jsii", "cdk8s")) == []
