"""What each day-2 change does to a running deployment, by the real CDK CLI's `cdk diff`, offline.

For each change a user makes, both stacks are synthesized before and after (the session's cached synths), and
`cdk diff --app <after cloud assembly> --template <before template> STACK --exclusively` compares them with no AWS
account. Nothing long-lived may be replaced or removed: the VPC, its subnets, route tables and NAT, the EKS cluster,
the system node group, the KMS key and the checkpoint bucket. The table printed (pytest -s) is docs/changes.md's
"What a change does to a running deployment", and each of its rows must say what the diff shows: that the GPU nodes
roll, that a node group is replaced, that the RayJob is re-applied (a deleted one runs again).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
import pytest

from ray_efa.core.context import PROJECT_ROOT
from ray_efa.core.image import DLC_IMAGE
from tests.infra.conftest import Synthesized, synthesize

CDK = PROJECT_ROOT / "node_modules" / ".bin" / "cdk"
RESERVATION = "cr-0123456789abcdef0"
DAY2_DOC = PROJECT_ROOT / "docs" / "changes.md"
P5 = {"gpuInstanceType": "p5.48xlarge"}  # a type Capacity Blocks offer
ODCR_P5 = {**P5, "capacityReservationId": RESERVATION}
BLOCK_P5 = {**ODCR_P5, "capacityReservationType": "capacity-block"}

# (change, settings before, settings after): each a day-2 change of docs/changes.md's table.
CHANGES = [
    ("gpuInstanceType g6.12xlarge -> g6e.24xlarge", {}, {"gpuInstanceType": "g6e.24xlarge"}),
    ("gpuNodeCount 2 -> 4", {}, {"gpuNodeCount": 4}),
    ("gpuNodeCount 2 -> 0 (scale to zero)", {}, {"gpuNodeCount": 0}),
    ("gpuNodeCount 0 -> 2 (come back)", {"gpuNodeCount": 0}, {}),
    ("gpuAvailabilityZone us-east-2a -> us-east-2c", {}, {"gpuAvailabilityZone": "us-east-2c"}),
    ("capacityReservationId set", {}, {"capacityReservationId": RESERVATION}),
    ("capacityReservationId unset", {"capacityReservationId": RESERVATION}, {}),
    ("kuberayVersion 1.4.0 -> 1.7.0", {"kuberayVersion": "1.4.0"}, {}),
    (
        "chart versions (kuberay, NVIDIA and EFA plugins)",
        {},
        {"kuberayVersion": "1.4.0", "nvidiaDevicePluginVersion": "0.19.0", "efaDevicePluginVersion": "v0.5.29"},
    ),
    ("dlcImage", {}, {"dlcImage": "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0"}),
    ("a training setting (steps 20 -> 40)", {}, {"steps": 40}),
    ("systemInstanceType m7i.xlarge -> m7i.2xlarge", {}, {"systemInstanceType": "m7i.2xlarge"}),
    (
        "deviceAllocation device-plugin -> dra (GPU nodes at zero)",
        {"gpuNodeCount": 0},
        {"gpuNodeCount": 0, "deviceAllocation": "dra"},
    ),
    ("deviceAllocation device-plugin -> dra (GPU nodes up)", {}, {"deviceAllocation": "dra"}),
    ("capacityReservationType odcr -> capacity-block", ODCR_P5, BLOCK_P5),
    ("capacityReservationType capacity-block -> odcr", BLOCK_P5, ODCR_P5),
    ("on-demand -> Capacity Block", P5, BLOCK_P5),
    ("kubernetesVersion 1.35 -> 1.36", {"kubernetesVersion": "1.35"}, {}),
    ("gpuRootVolumeGib 500 -> 600", {}, {"gpuRootVolumeGib": 600}),
    ("allowJobDisruption false -> true", {}, {"allowJobDisruption": True}),
    ("trainingJob true -> false", {}, {"trainingJob": False}),
]

EXPECTED_REPLACEMENTS = {
    # EKS cannot change a node group's instance types: a new system type is a new system node group, under a new
    # name (it carries the type), created before the old one is deleted.
    "systemInstanceType m7i.xlarge -> m7i.2xlarge": {"Eks/Cluster/NodegroupSystemNodes"},
    # CapacityType requires replacement: a new GPU node group, under a new name (it carries the capacity type)
    "capacityReservationType odcr -> capacity-block": {"GpuNodes/Nodegroup"},
    "capacityReservationType capacity-block -> odcr": {"GpuNodes/Nodegroup"},
    "on-demand -> Capacity Block": {"GpuNodes/Nodegroup"},
}
"""Long-lived resources a change replaces on purpose, by construct path."""

LONG_LIVED_TYPES = {
    "AWS::EC2::VPC",
    "AWS::EC2::Subnet",
    "AWS::EC2::RouteTable",
    "AWS::EC2::SubnetRouteTableAssociation",
    "AWS::EC2::NatGateway",
    "AWS::EC2::EIP",
    "AWS::EC2::InternetGateway",
    "AWS::EKS::Cluster",
    "AWS::KMS::Key",
    "AWS::S3::Bucket",
}
"""What the cluster is built on: replacing any of these fails the update or loses state."""

# `[~] AWS::EKS::Nodegroup GpuNodes/Nodegroup GpuNodesNodegroup23F56272 replace` (the marker is optional)
_RESOURCE = re.compile(r"^\[(?P<op>[-+~])\] (?P<type>\S+) (?P<path>\S+) (?P<id>\S+)(?: (?P<marker>.+))?$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Change:
    op: str
    """"+" added, "-" removed, "~" modified."""
    type: str
    path: str
    logical_id: str
    replaced: bool
    """CloudFormation replaces it (or may): a new physical resource."""
    details: str

    @property
    def long_lived(self) -> bool:
        return self.type in LONG_LIVED_TYPES or (self.type == "AWS::EKS::Nodegroup" and "SystemNodes" in self.path)

    def describe(self) -> str:
        verb = {"+": "added", "-": "removed"}.get(self.op) or ("replaced" if self.replaced else "updated")
        return f"{self.path.rsplit('/Resource', 1)[0]} ({self.type.split('::')[-1]}) {verb}"


def summary(changes: list[Change]) -> str:
    """The changes in a line; a changed launch template rolls its node group's nodes (the node group's template
    reference is the launch template's LatestVersionNumber, so its own diff does not show it)."""
    rows = [c.describe() for c in changes]
    if any(c.type == "AWS::EC2::LaunchTemplate" and c.op == "~" for c in changes):
        rows.append("GPU nodes roll to the new launch template version")
    return "; ".join(rows) or "outputs only"


_NAME_PROPERTIES = {
    "AWS::EKS::Nodegroup": "NodegroupName",
    "AWS::EKS::Cluster": "Name",
    "AWS::S3::Bucket": "BucketName",
    "AWS::EC2::LaunchTemplate": "LaunchTemplateName",
    "AWS::IAM::Role": "RoleName",
}


def custom_name_kept(change: Change, before: dict, after: dict) -> bool:
    """CloudFormation cannot replace a resource whose custom name stays the same ("cannot update a stack when a
    custom-named resource requires replacing"): the update fails."""
    key = _NAME_PROPERTIES.get(change.type)
    old, new = before.get(change.logical_id, {}), after.get(change.logical_id, {})
    name = old.get("Properties", {}).get(key) if key else None
    return change.replaced and name is not None and name == new.get("Properties", {}).get(key)


def cdk_diff(before: Synthesized | str, after: Synthesized, stack: str) -> tuple[str, list[Change]]:
    """The real CDK CLI's diff of `stack` from `before`'s template (or a template file) to `after`'s assembly."""
    template = before if isinstance(before, str) else os.path.join(before.assembly.directory, f"{stack}.template.json")
    env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    result = subprocess.run(
        [
            str(CDK),
            "diff",
            "--app",
            after.assembly.directory,
            "--template",
            template,
            stack,
            "--exclusively",
            "--no-notices",
            "--no-color",
        ],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = _ANSI.sub("", result.stdout + result.stderr)
    assert result.returncode == 0, output[-2000:]
    changes: list[Change] = []
    block: list[str] = []
    header = None
    for line in [*output.splitlines(), "Outputs"]:
        match = _RESOURCE.match(line)
        if match and "::" not in match["type"]:
            match = None  # a template field or an output, not a resource
        if match or not line.startswith((" ", "\t")):
            if header:
                marker = header["marker"] or ""
                changes.append(
                    Change(
                        header["op"],
                        header["type"],
                        header["path"],
                        header["id"],
                        "replace" in marker or "replace" in "\n".join(block),
                        "\n".join(block),
                    )
                )
            header, block = match, []
        else:
            block.append(line)
    return output, changes


def _imports(node) -> set[str]:
    if isinstance(node, dict):
        if set(node) == {"Fn::ImportValue"} and isinstance(node["Fn::ImportValue"], str):
            return {node["Fn::ImportValue"]}
        return set().union(*(_imports(v) for v in node.values())) if node else set()
    if isinstance(node, list):
        return set().union(*(_imports(v) for v in node)) if node else set()
    return set()


def exports_in_use_removed(old: Synthesized, new: Synthesized) -> set[str]:
    """Exports of the cluster stack that the change removes while the deployed GPU stack still imports them:
    `cdk deploy` updates the cluster stack first, and CloudFormation refuses to delete an export in use."""

    def exports(template) -> set[str]:
        return {o["Export"]["Name"] for o in template.to_json().get("Outputs", {}).values() if "Export" in o}

    return (exports(old.cluster) - exports(new.cluster)) & _imports(old.gpu.to_json())


def synth_of(context: dict) -> Synthesized:
    return synthesize(**context)


@dataclass(frozen=True)
class StackDiff:
    stack: str
    output: str
    changes: list[Change]


@functools.cache
def _diff_of(change: str) -> tuple[StackDiff, ...]:
    """Both stacks' `cdk diff` for one change of CHANGES (one CLI run a stack a session; a stack whose template is
    unchanged has no diff)."""
    _, before, after = next(c for c in CHANGES if c[0] == change)
    old, new = synth_of(before), synth_of(after)
    diffs = []
    for stack, template_old, template_new in (
        (old.settings.cluster_stack_name, old.cluster, new.cluster),
        (old.settings.gpu_stack_name, old.gpu, new.gpu),
    ):
        if template_old.to_json() != template_new.to_json():
            output, changes = cdk_diff(old, new, stack)
            diffs.append(StackDiff(stack, output, changes))
    return tuple(diffs)


def rolls_gpu_nodes(diff: StackDiff) -> bool:
    """The GPU stack's roll key (gpu_stack.gpu_nodes_roll_key) changed: the GPU nodes roll or are resized."""
    return re.search(r"^\[~\] Output GpuNodesRollWhen ", diff.output, re.MULTILINE) is not None


def reapplies_ray_job(diff: StackDiff) -> bool:
    """The RayJob's manifest is created or updated: the kubectl handler runs `kubectl apply` (or create) of it, so a
    RayJob deleted since the last deploy is created again and runs."""
    return any(
        c.type == "Custom::AWSCDK-EKS-KubernetesResource" and "/RayJob-" in c.path and c.op in "+~"
        for c in diff.changes
    )


@pytest.mark.parametrize("change, before, after", CHANGES, ids=[c[0] for c in CHANGES])
def test_a_day2_change_never_replaces_what_the_cluster_is_built_on(change, before, after):
    old, new = synth_of(before), synth_of(after)
    rows = []
    replaced: set[str] = set()
    diffs = {d.stack: d for d in _diff_of(change)}
    for stack in (old.settings.cluster_stack_name, old.settings.gpu_stack_name):
        template_old = old.cluster if stack.endswith("-cluster") else old.gpu
        template_new = new.cluster if stack.endswith("-cluster") else new.gpu
        if stack not in diffs:
            rows.append(f"  {stack}: no change")
            continue
        output, changes = diffs[stack].output, diffs[stack].changes
        # THEN nothing long-lived is replaced or removed
        expected = EXPECTED_REPLACEMENTS.get(change, set())
        broken = [c for c in changes if c.long_lived and (c.replaced or c.op == "-") and c.path not in expected]
        replaced |= {c.path for c in changes if c.replaced}
        assert not broken, f"{change} would replace or remove {[c.describe() for c in broken]}:\n{output[-3000:]}"
        # ...and nothing is replaced under the same custom name, which CloudFormation refuses
        resources_old, resources_new = template_old.to_json()["Resources"], template_new.to_json()["Resources"]
        stuck = [c.describe() for c in changes if custom_name_kept(c, resources_old, resources_new)]
        assert not stuck, f"{change}: CloudFormation cannot replace custom-named {stuck}"
        rows.append(f"  {stack}: {summary(changes)}")
    assert replaced >= EXPECTED_REPLACEMENTS.get(change, set()), f"{change}: expected {EXPECTED_REPLACEMENTS[change]}"
    # ...and no export the running GPU stack imports disappears first
    assert not exports_in_use_removed(old, new), f"{change} removes exports in use: {exports_in_use_removed(old, new)}"
    print(f"\n{change}\n" + "\n".join(rows))


def _referenced(node) -> set[str]:
    """The logical ids an output's value refers to (Ref, Fn::GetAtt)."""
    if isinstance(node, dict):
        if set(node) == {"Ref"}:
            return {node["Ref"]}
        if set(node) == {"Fn::GetAtt"}:
            target = node["Fn::GetAtt"]
            return {target[0] if isinstance(target, list) else target.split(".", 1)[0]}
        return set().union(*(_referenced(v) for v in node.values())) if node else set()
    if isinstance(node, list):
        return set().union(*(_referenced(v) for v in node)) if node else set()
    return set()


def exports_in_use_changed(change: str, old: Synthesized, new: Synthesized) -> dict[str, str]:
    """Exports the deployed GPU stack imports whose value the change would change: CloudFormation refuses to update an
    export another stack imports ("Cannot update export ... as it is in use"), so the cluster stack's update fails.

    A value changes when its expression does, or when a resource it refers to is replaced (the real CLI's `cdk diff`
    says which), as a Lambda LayerVersion is on any change of its content: its Ref is a new ARN."""

    def exports(template) -> dict[str, dict]:
        return {
            o["Export"]["Name"]: o["Value"] for o in template.to_json().get("Outputs", {}).values() if "Export" in o
        }

    before, after = exports(old.cluster), exports(new.cluster)
    diffs = {d.stack: d for d in _diff_of(change)}
    cluster_diff = diffs.get(old.settings.cluster_stack_name)
    replaced = {c.logical_id for c in cluster_diff.changes if c.replaced} if cluster_diff else set()
    changed = {}
    for name in sorted(_imports(old.gpu.to_json()) & before.keys()):
        if after.get(name) != before[name]:
            changed[name] = f"{before[name]} -> {after.get(name)}"
        elif _referenced(before[name]) & replaced:
            changed[name] = f"{sorted(_referenced(before[name]) & replaced)} replaced"
    return changed


EXPORT_CHANGES = ["kubernetesVersion 1.35 -> 1.36", "systemInstanceType m7i.xlarge -> m7i.2xlarge"]


@pytest.mark.parametrize("change", EXPORT_CHANGES)
def test_no_export_the_gpu_stack_imports_changes_value_on_a_supported_change(change):
    _, before, after = next(c for c in CHANGES if c[0] == change)
    old, new = synth_of(before), synth_of(after)
    assert not exports_in_use_changed(change, old, new), f"{change} changes exports in use"


def test_the_gpu_stack_imports_nothing_built_from_a_package_s_content(default_synth):
    """A layer's content is a package of the lock (kubectl, awscli, helm): any bump of one replaces the LayerVersion
    (a new ARN), whichever setting is unchanged. The GPU stack imports no export of one."""
    resources = default_synth.cluster.to_json()["Resources"]
    outputs = default_synth.cluster.to_json().get("Outputs", {}).values()
    imported = _imports(default_synth.gpu.to_json())
    layers = {
        o["Export"]["Name"]
        for o in outputs
        if "Export" in o
        and o["Export"]["Name"] in imported
        and any(resources[i]["Type"] == "AWS::Lambda::LayerVersion" for i in _referenced(o["Value"]))
    }
    assert not layers


def placement_groups_in_use(synth: Synthesized, generation: dict[str, int]) -> dict[tuple[str, int], str]:
    """Placement group (logical id, physical generation) -> the AZ of the GPU node group launching into it."""
    resources = synth.gpu.to_json()["Resources"]
    groups = [i for i, r in resources.items() if r["Type"] == "AWS::EC2::PlacementGroup"]
    return {(group, generation.get(group, 0)): synth.settings.gpu_availability_zone for group in groups}


@pytest.mark.parametrize("change, before, after", CHANGES, ids=[c[0] for c in CHANGES])
def test_no_placement_group_is_shared_across_azs_while_cloudformation_updates(change, before, after):
    """CloudFormation creates a replacement before it deletes what it replaces, and deletes nothing before the update
    is done: while a change rolls out, the node groups (or nodes) of before and after run side by side. A cluster
    placement group belongs to the AZ of its first instance, so one group used by nodes of two AZs fails the launch
    (InvalidPlacementGroup.InUse)."""
    old, new = synth_of(before), synth_of(after)
    gpu_diff = [d for d in _diff_of(change) if d.stack == old.settings.gpu_stack_name]
    if not gpu_diff:
        return
    changes = gpu_diff[0].changes
    replaced = {c.logical_id: 1 for c in changes if c.replaced and c.type == "AWS::EC2::PlacementGroup"}
    in_use = placement_groups_in_use(old, {})
    for group, zone in placement_groups_in_use(new, replaced).items():
        # THEN a group kept (same logical id, not replaced) serves the same AZ before and after
        assert in_use.get(group, zone) == zone, (
            f"{change}: placement group {group[0]} kept across {in_use[group]} -> {zone}"
        )


def test_moving_the_gpu_az_changes_the_gpu_stack_alone():
    old, new = synth_of({}), synth_of({"gpuAvailabilityZone": "us-east-2c"})
    # THEN the cluster stack is the same template (no subnet, NAT or system node group moves) ...
    assert old.cluster.to_json() == new.cluster.to_json()
    # ... and in the GPU stack only the GPU node group and what is tied to its AZ change
    _, changes = cdk_diff(old, new, old.settings.gpu_stack_name)
    # (the settings ConfigMap holds every setting, the AZ too; the job guard's roll key names the GPU AZ, so it asks
    # the API server for running jobs before the roll)
    assert {c.path for c in changes} == {
        "GpuNodes/Nodegroup",
        "GpuNodes/PlacementGroup",
        "TrainingJob/ConfigMap-train-efa-settings/Resource",
        "JobGuard/Resource",
    }
    (nodegroup,) = [c for c in changes if c.type == "AWS::EKS::Nodegroup"]
    assert nodegroup.replaced  # new subnet: a new node group, under a new name (the AZ is in it)
    (placement_group,) = [c for c in changes if c.type == "AWS::EC2::PlacementGroup"]
    assert placement_group.replaced  # ... into a new placement group (its tags name the AZ), not the old AZ's


def test_a_kuberay_upgrade_updates_its_crds_in_place_before_the_chart():
    old, new = synth_of({"kuberayVersion": "1.4.0"}), synth_of({})
    _, changes = cdk_diff(old, new, old.settings.cluster_stack_name)
    by_path = {c.path.rsplit("/Resource", 1)[0]: c for c in changes}
    # THEN the CRDs resource is updated to the new version (not replaced: one physical id per cluster) ...
    crds = by_path["KubeRay/Crds"]
    assert crds.op == "~" and not crds.replaced and "[-] 1.4.0" in crds.details and "[+] 1.7.0" in crds.details
    # ... and the Helm release waits for it, so the operator of 1.7.0 starts on the 1.7.0 schema
    resources = new.cluster.to_json()["Resources"]
    (chart,) = [
        r
        for r in resources.values()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Chart"] == "kuberay-operator"
    ]
    assert crds.logical_id in chart["DependsOn"]
    assert by_path["KubeRay/Chart"].op == "~"


def test_a_training_setting_is_a_small_readable_diff():
    old, new = synth_of({}), synth_of({"steps": 40})
    output, changes = cdk_diff(old, new, old.settings.gpu_stack_name)
    # THEN one resource changes, the settings ConfigMap, and the whole diff is a few KB with no giant line
    # (it was 146 KB with one 73,000-character line when the code, settings and RayJob were one manifest)
    assert [c.path for c in changes] == ["TrainingJob/ConfigMap-train-efa-settings/Resource"]
    assert len(output) < 12_000, len(output)
    assert max(len(line) for line in output.splitlines()) < 4_000


def test_the_named_outputs_reach_a_deployed_cluster_stack_without_touching_a_resource(tmp_path):
    # GIVEN a cluster stack deployed before it had the VpcId, ClusterArn and ClusterSecurityGroupId outputs
    new = synth_of({})
    stack = new.settings.cluster_stack_name
    template = json.loads((Path(new.assembly.directory) / f"{stack}.template.json").read_text())
    for name in ("VpcId", "ClusterArn", "ClusterSecurityGroupId"):
        del template["Outputs"][name]
    before = tmp_path / "before.template.json"
    before.write_text(json.dumps(template))
    # WHEN it is updated to this version: THEN the diff adds the outputs and changes no resource
    output, changes = cdk_diff(str(before), new, stack)
    assert changes == [], output[-2000:]
    assert all(f"[+] Output {name}" in output for name in ("VpcId", "ClusterArn", "ClusterSecurityGroupId")), output


ROLLING_CHANGES = {
    "gpuInstanceType g6.12xlarge -> g6e.24xlarge",
    "gpuNodeCount 2 -> 4",
    "gpuNodeCount 2 -> 0 (scale to zero)",
    "gpuNodeCount 0 -> 2 (come back)",
    "gpuAvailabilityZone us-east-2a -> us-east-2c",
    "capacityReservationId set",
    "capacityReservationId unset",
    "capacityReservationType odcr -> capacity-block",
    "capacityReservationType capacity-block -> odcr",
    "on-demand -> Capacity Block",
    "kubernetesVersion 1.35 -> 1.36",
    "gpuRootVolumeGib 500 -> 600",
}
"""The changes that drain, replace or resize the GPU nodes: a running RayJob dies (or, scaled up, idles new nodes)."""


def _gpu_diff(change: str) -> StackDiff | None:
    return next((d for d in _diff_of(change) if d.stack.endswith("-gpu")), None)


@pytest.mark.parametrize("change, before, after", CHANGES, ids=[c[0] for c in CHANGES])
def test_cdk_diff_says_when_the_gpu_nodes_roll(change, before, after):
    diff = _gpu_diff(change)
    rolls = diff is not None and rolls_gpu_nodes(diff)
    # THEN the GpuNodesRollWhen output changes in the diff exactly for the changes that roll or resize the GPU nodes
    assert rolls == (change in ROLLING_CHANGES), (change, diff.output[-3000:] if diff else "no GPU stack change")
    if diff is not None:
        # ... and never misses one: a changed launch template, or a GPU node group replaced, always changes the key
        touched = [
            c
            for c in diff.changes
            if c.type in ("AWS::EC2::LaunchTemplate", "AWS::EKS::Nodegroup")
            and (c.op != "~" or c.type == "AWS::EC2::LaunchTemplate" or c.replaced)
        ]
        assert not touched or rolls, f"{change}: {[c.describe() for c in touched]} but the roll key is unchanged"


@pytest.mark.parametrize(
    "change",
    [
        "capacityReservationType odcr -> capacity-block",
        "capacityReservationType capacity-block -> odcr",
        "on-demand -> Capacity Block",
    ],
)
def test_the_capacity_switch_replaces_the_gpu_node_group_under_a_new_name(change):
    _, before, after = next(c for c in CHANGES if c[0] == change)
    names = []
    for synth in (synth_of(before), synth_of(after)):
        (nodegroup,) = synth.gpu.find_resources("AWS::EKS::Nodegroup").values()
        names.append((nodegroup["Properties"]["NodegroupName"], nodegroup["Properties"]["CapacityType"]))
    # THEN CapacityType changes (replacement), and with it the name: CloudFormation creates the new group first
    (old_name, old_type), (new_name, new_type) = names
    assert old_type != new_type and old_name != new_name, names
    for name, capacity_type in names:
        assert name.endswith("-cb") == (capacity_type == "CAPACITY_BLOCK"), name
    diff = _gpu_diff(change)
    assert diff is not None
    (replaced,) = [c for c in diff.changes if c.type == "AWS::EKS::Nodegroup"]
    assert replaced.replaced and replaced.op == "~"


def test_a_kubernetes_version_bump_upgrades_both_node_groups():
    diffs = {d.stack: d for d in _diff_of("kubernetesVersion 1.35 -> 1.36")}
    old, new = synth_of({"kubernetesVersion": "1.35"}), synth_of({})
    for synth, version in ((old, "1.35"), (new, "1.36")):
        for template in (synth.cluster, synth.gpu):
            (nodegroup,) = template.find_resources("AWS::EKS::Nodegroup").values()
            # THEN both node groups carry the cluster's version ...
            assert nodegroup["Properties"]["Version"] == version
    # ... and the bump updates both in place (EKS rolls them onto the new version's AMI), not replaces them
    for stack, path in (
        (old.settings.cluster_stack_name, "Eks/Cluster/NodegroupSystemNodes"),
        (old.settings.gpu_stack_name, "GpuNodes/Nodegroup"),
    ):
        (nodegroup,) = [c for c in diffs[stack].changes if c.path == path]
        assert nodegroup.op == "~" and not nodegroup.replaced and "Version" in nodegroup.details, nodegroup
    (cluster,) = [c for c in diffs[old.settings.cluster_stack_name].changes if c.type == "AWS::EKS::Cluster"]
    assert not cluster.replaced


def _egress_of(template, group_id: str) -> list[dict]:
    resources = template.to_json()["Resources"]
    inline = resources[group_id]["Properties"].get("SecurityGroupEgress")
    separate = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::EC2::SecurityGroupEgress"
        and r["Properties"]["GroupId"] == {"Fn::GetAtt": [group_id, "GroupId"]}
    ]
    return [*(inline or []), *separate] if inline is not None else []


@pytest.mark.parametrize("context", [{}, {"capacityReservationId": RESERVATION}, P5], ids=["default", "odcr", "p5"])
def test_the_efa_security_group_states_its_egress(context):
    synth = synth_of(context)
    groups = synth.gpu.find_resources("AWS::EC2::SecurityGroup")
    (group_id,) = [i for i in groups if "EfaSecurityGroup" in i]
    egress = _egress_of(synth.gpu, group_id)
    # THEN the group states its egress (without any, EC2 adds allow-all to everywhere) ...
    assert egress, "no SecurityGroupEgress on the EFA security group: EC2's default allow-all egress stays"
    # ... and it allows nothing but EFA to itself: no 0.0.0.0/0 or ::/0
    assert not [e for e in egress if e.get("CidrIp") == "0.0.0.0/0" or e.get("CidrIpv6") == "::/0"], egress
    allowed = [e for e in egress if e.get("CidrIp") != "255.255.255.255/32"]
    assert allowed == [
        {
            "Description": "EFA to GPU nodes",
            "DestinationSecurityGroupId": {"Fn::GetAtt": [group_id, "GroupId"]},
            "GroupId": {"Fn::GetAtt": [group_id, "GroupId"]},
            "IpProtocol": "-1",
        }
    ], allowed


@pytest.mark.parametrize(
    "context, expected",
    [
        ({"capacityReservationId": RESERVATION}, {"MaxUnavailable": 2, "UpdateStrategy": "MINIMAL"}),
        ({"capacityReservationId": RESERVATION, "gpuNodeCount": 4}, {"MaxUnavailable": 4, "UpdateStrategy": "MINIMAL"}),
        ({}, {"MaxUnavailable": 2, "UpdateStrategy": "MINIMAL"}),
        (BLOCK_P5, {"MaxUnavailable": 2, "UpdateStrategy": "MINIMAL"}),
        ({"gpuNodeCount": 0}, {"MaxUnavailable": 1, "UpdateStrategy": "MINIMAL"}),
    ],
    ids=["odcr-2", "odcr-4", "on-demand", "capacity-block", "scaled-to-zero"],
)
def test_a_gpu_node_group_never_surges_nor_forces_an_update(context, expected):
    synth = synth_of(context)
    (nodegroup,) = synth.gpu.find_resources("AWS::EKS::Nodegroup").values()
    # THEN for every capacity type the old nodes go before new ones launch (no surge of GPU nodes that a quota, a
    # reservation or a Capacity Block has no room for), all at once ...
    assert nodegroup["Properties"].get("UpdateConfig") == expected
    # ... and a drain that a PodDisruptionBudget blocks fails the update instead of killing the job: on both groups
    (system,) = synth.cluster.find_resources("AWS::EKS::Nodegroup").values()
    assert nodegroup["Properties"]["ForceUpdateEnabled"] is False
    assert system["Properties"]["ForceUpdateEnabled"] is False


def test_the_vpc_reaches_s3_through_a_gateway_endpoint(default_synth):
    endpoints = default_synth.cluster.find_resources("AWS::EC2::VPCEndpoint")
    (endpoint,) = endpoints.values()
    props = endpoint["Properties"]
    # THEN S3 is a gateway endpoint (no NAT processing for checkpoints) on the route tables of every subnet
    assert props["VpcEndpointType"] == "Gateway"
    assert props["ServiceName"] == {"Fn::Join": ["", ["com.amazonaws.", {"Ref": "AWS::Region"}, ".s3"]]}
    tables = {i for i, r in default_synth.cluster.find_resources("AWS::EC2::RouteTable").items()}
    assert {t["Ref"] for t in props["RouteTableIds"]} == tables


# | `change` | cluster stack | GPU stack | ... (docs/changes.md's table: its first column is the change, as in CHANGES)
_DOC_ROW = re.compile(r"^\| `?(?P<change>[^|`]+?)`? \|(?P<rest>.*)\|$")


def doc_rows() -> dict[str, str]:
    rows = {}
    for line in DAY2_DOC.read_text().splitlines():
        match = _DOC_ROW.match(line)
        if match:
            rows[match["change"].strip()] = match["rest"]
    return rows


@pytest.mark.parametrize("change, before, after", CHANGES, ids=[c[0] for c in CHANGES])
def test_the_docs_say_what_the_diff_shows(change, before, after):
    rows = doc_rows()
    # THEN docs/changes.md has a row for the change ...
    assert change in rows, f"docs/changes.md has no row `{change}`"
    row = rows[change]
    diff = _gpu_diff(change)
    # ... that says the GPU nodes roll exactly when they do
    assert ("**GPU nodes roll**" in row) == (change in ROLLING_CHANGES), row
    # ... that says when the RayJob is re-applied (a deleted RayJob runs again)
    reapplied = diff is not None and reapplies_ray_job(diff)
    assert ("**RayJob re-applied**" in row) == reapplied, row
    # ... and names each node group replaced
    replaced = [c for d in _diff_of(change) for c in d.changes if c.type == "AWS::EKS::Nodegroup" and c.replaced]
    assert ("node group replaced" in row) == bool(replaced), row


@pytest.mark.parametrize("change, before, after", CHANGES, ids=[c[0] for c in CHANGES])
def test_deploy_check_reads_the_live_diff_as_this_table_does(change, before, after):
    """`ray-efa deploy-check --diff` (ops.deploy_check.read_diff) on what the real CLI printed for the change."""
    from ray_efa.ops.deploy_check import read_diff

    diffs = _diff_of(change)
    read = read_diff("".join(d.output for d in diffs))
    gpu = _gpu_diff(change)
    # THEN it sees the GPU nodes roll, the RayJob re-applied and the device stack swapped exactly when they are
    assert read.gpu_roll == (change in ROLLING_CHANGES)
    assert bool(read.reapplied_jobs) == (gpu is not None and reapplies_ray_job(gpu))
    assert bool(read.device_stack_switch) == change.startswith("deviceAllocation")
    # ... and every node group or launch template the deploy touches is one it names
    touched = {
        f"{d.stack}: {c.path.rsplit('/Resource', 1)[0]}"
        for d in diffs
        for c in d.changes
        if c.type in ("AWS::EKS::Nodegroup", "AWS::EC2::LaunchTemplate")
    }
    assert set(read.rolled_node_groups) == touched


def test_turning_the_job_off_keeps_the_settings_that_submit_reads():
    """trainingJob false is how runs come from `ray-efa submit` alone, and submit reads the deployment's settings from
    the `<jobName>-settings` ConfigMap: the deploy that turns the job off keeps that resource (updated in place, so
    CloudFormation neither deletes the object nor creates it twice), and so does scaling to zero."""
    for change in ("trainingJob true -> false", "gpuNodeCount 2 -> 0 (scale to zero)"):
        (diff,) = [d for d in _diff_of(change) if d.stack.endswith("-gpu")]
        by_path = {c.path: c for c in diff.changes}
        # THEN the settings ConfigMap is updated, not removed, and the RayJob is removed
        settings = by_path["TrainingJob/ConfigMap-train-efa-settings/Resource"]
        assert settings.op == "~" and not settings.replaced, settings
        # (a removed resource has no construct path in an in-process synth's template: its logical id)
        assert [c.op for c in diff.changes if c.path.startswith("TrainingJobRayJobtrainefa")] == ["-"]
    from tests.infra.test_workload import find

    _, _, config_map = find(synth_of({"trainingJob": False}).gpu, "ConfigMap", "train-efa-settings")
    assert json.loads(config_map["data"]["settings.json"])["trainingJob"] is False


def _guard_properties(template) -> dict:
    (guard,) = template.find_resources("Custom::RayEfa-JobDisruptionGuard").values()
    return guard["Properties"]


UNGUARDED_NODE_GROUPS: tuple[str, ...] = ()
"""Node groups no job guard covers: none (the GPU nodes have the GPU stack's, the system nodes, where the Ray heads
run, the cluster stack's)."""


@pytest.mark.parametrize("change, before, after", CHANGES, ids=[c[0] for c in CHANGES])
def test_deploy_check_refuses_a_roll_exactly_when_the_job_guard_will(change, before, after):
    """`ray-efa deploy-check` on the live diff and the job guard on the synthesized properties, a RayJob running on
    the nodes the stack had before: the same verdict on every change."""
    from ray_efa.infra.job_guard_handler import node_disruption
    from ray_efa.ops.deploy_check import ClusterState, node_rolls, read_diff

    old, new = synth_of(before), synth_of(after)
    diffs = _diff_of(change)
    read = read_diff("".join(d.output for d in diffs))
    state = ClusterState(
        ray_jobs={"ray/train-efa": "Running"},
        gpu_nodes=tuple(f"gpu-{i}" for i in range(old.settings.nodes.gpu_node_count)),
    )
    # (both stacks' guards: the GPU nodes' and the system nodes')
    guard = [
        *node_disruption(_guard_properties(old.gpu), _guard_properties(new.gpu)),
        *node_disruption(_guard_properties(old.cluster), _guard_properties(new.cluster)),
    ]
    unguarded = [c for d in diffs for c in d.changes if c.path in UNGUARDED_NODE_GROUPS]
    # THEN deploy-check says the nodes roll exactly when a guard will refuse, or an unguarded node group changes
    assert bool(node_rolls(read, state)) == bool(guard or unguarded), (node_rolls(read, state), guard, unguarded)
    # ... and in the guards' own words
    assert set(guard) <= set(node_rolls(read, state))
    # ... and every node group the deploy touches is one a guard covers
    touched = [c.path for d in diffs for c in d.changes if c.type == "AWS::EKS::Nodegroup"]
    assert set(touched) <= {"GpuNodes/Nodegroup", "Eks/Cluster/NodegroupSystemNodes"}, touched


def _infos(synth: Synthesized) -> list[str]:
    return [
        str(message.entry.data)
        for stack in synth.assembly.stacks
        for message in stack.messages
        if message.level == cdk.cx_api.SynthesisMessageLevel.INFO
    ]


def test_synth_says_that_a_tag_floats_and_not_once_a_digest_pins_it(default_synth):
    # GIVEN the default dlcImage, a tag THEN synth says it floats and how to pin it (an info: the documented deploy
    # synthesizes without warnings, tests/infra/test_deploy_ready.py)
    (info,) = [i for i in _infos(default_synth) if "names a tag, which AWS moves" in i]
    assert f"dlcImage={DLC_IMAGE.reference}@sha256:<digest>" in info
    # WHEN it is pinned by digest THEN it says nothing of the kind
    pinned = synth_of({"dlcImage": f"{DLC_IMAGE.reference}@sha256:{'0' * 64}"})
    assert not [i for i in _infos(pinned) if "names a tag" in i]


def _system_guard_change(diff: StackDiff) -> Change | None:
    return next((c for c in diff.changes if c.path == "SystemJobGuard/Resource"), None)


@pytest.mark.parametrize(
    "change, key",
    [
        ("kubernetesVersion 1.35 -> 1.36", "kubernetesVersion=1.36"),
        ("systemInstanceType m7i.xlarge -> m7i.2xlarge", "systemInstanceType=m7i.2xlarge"),
    ],
)
def test_what_rolls_the_system_nodes_reaches_their_guard_first(change, key):
    """The real CLI's diff of the cluster stack: the system nodes' guard is updated (so CloudFormation asks it, before
    the cluster and the node group, which wait for it) with the roll key and the digest changed."""
    (diff,) = [d for d in _diff_of(change) if d.stack.endswith("-cluster")]
    guard = _system_guard_change(diff)
    assert guard is not None and guard.op == "~" and not guard.replaced, diff.output[-3000:]
    assert "[~] RollKey" in guard.details and "[~] RollDigest" in guard.details, guard.details
    assert re.search(rf"\[\+\] (.* )?{re.escape(key)}( |$)", guard.details, re.MULTILINE), guard.details


def test_a_label_or_a_scaling_change_of_the_system_nodes_asks_their_guard_nothing(tmp_path):
    """EKS changes a node group's labels and size in place (no node rolls): the guard's properties stay, so
    CloudFormation sends it no update, and deploy-check lets the deploy through while a job runs."""
    from ray_efa.ops.deploy_check import ClusterState, node_rolls, read_diff

    old = synth_of({})
    for after in ({"systemNodeSelector": "role=system,pool=head"}, {"systemNodeCount": 2}):
        new = synth_of(after)
        template = tmp_path / "before.template.json"
        template.write_text(json.dumps(old.cluster.to_json()))
        output, changes = cdk_diff(str(template), new, old.settings.cluster_stack_name)
        (nodegroup,) = [c for c in changes if c.type == "AWS::EKS::Nodegroup"]
        # THEN the system node group is updated in place, its guard not at all ...
        assert nodegroup.op == "~" and not nodegroup.replaced, output[-3000:]
        assert not [c for c in changes if c.type == "Custom::RayEfa-JobDisruptionGuard"], output[-3000:]
        # ... and deploy-check sees no roll
        running = ClusterState(ray_jobs={"ray/train-efa": "Running"}, gpu_nodes=("gpu-0", "gpu-1"))
        assert node_rolls(read_diff(output), running) == [], after
