"""What each day-2 change does to a running deployment, by the real CDK CLI's `cdk diff`, offline.

For each change a user makes, both stacks are synthesized before and after (the session's cached synths), and
`cdk diff --app <after cloud assembly> --template <before template> STACK --exclusively` compares them with no AWS
account. Nothing long-lived may be replaced or removed: the VPC, its subnets, route tables and NAT, the EKS cluster,
the system node group, the KMS key and the checkpoint bucket. The table printed (pytest -s) is docs/changes.md,
"What a change does to a running deployment".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from ray_efa.core.context import PROJECT_ROOT
from tests.infra.conftest import Synthesized, synthesize

CDK = PROJECT_ROOT / "node_modules" / ".bin" / "cdk"
RESERVATION = "cr-0123456789abcdef0"

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
    ("chart versions (kuberay, NVIDIA and EFA plugins)", {},
     {"kuberayVersion": "1.4.0", "nvidiaDevicePluginVersion": "0.19.0", "efaDevicePluginVersion": "v0.5.29"}),
    ("dlcImage", {}, {"dlcImage": "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0"}),
    ("a training setting (steps 20 -> 40)", {}, {"steps": 40}),
    ("systemInstanceType m7i.xlarge -> m7i.2xlarge", {}, {"systemInstanceType": "m7i.2xlarge"}),
    ("deviceAllocation device-plugin -> dra (GPU nodes at zero)", {"gpuNodeCount": 0},
     {"gpuNodeCount": 0, "deviceAllocation": "dra"}),
]

EXPECTED_REPLACEMENTS = {
    # EKS cannot change a node group's instance types: a new system type is a new system node group, under a new
    # name (it carries the type), created before the old one is deleted.
    "systemInstanceType m7i.xlarge -> m7i.2xlarge": {"Eks/Cluster/NodegroupSystemNodes"},
}
"""Long-lived resources a change replaces on purpose, by construct path."""

LONG_LIVED_TYPES = {
    "AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::EC2::RouteTable", "AWS::EC2::SubnetRouteTableAssociation",
    "AWS::EC2::NatGateway", "AWS::EC2::EIP", "AWS::EC2::InternetGateway", "AWS::EKS::Cluster", "AWS::KMS::Key",
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


_NAME_PROPERTIES = {"AWS::EKS::Nodegroup": "NodegroupName", "AWS::EKS::Cluster": "Name", "AWS::S3::Bucket": "BucketName",
                    "AWS::EC2::LaunchTemplate": "LaunchTemplateName", "AWS::IAM::Role": "RoleName"}


def custom_name_kept(change: Change, before: dict, after: dict) -> bool:
    """CloudFormation cannot replace a resource whose custom name stays the same ("cannot update a stack when a
    custom-named resource requires replacing"): the update fails."""
    key = _NAME_PROPERTIES.get(change.type)
    old, new = before.get(change.logical_id, {}), after.get(change.logical_id, {})
    name = old.get("Properties", {}).get(key) if key else None
    return change.replaced and name is not None and name == new.get("Properties", {}).get(key)


def cdk_diff(before: Synthesized | str, after: Synthesized, stack: str) -> tuple[str, list[Change]]:
    """The real CDK CLI's diff of `stack` from `before`'s template (or a template file) to `after`'s assembly."""
    template = (before if isinstance(before, str)
                else os.path.join(before.assembly.directory, f"{stack}.template.json"))
    env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    result = subprocess.run(
        [str(CDK), "diff", "--app", after.assembly.directory, "--template", template, stack, "--exclusively",
         "--no-notices", "--no-color"],
        cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300,
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
                changes.append(Change(header["op"], header["type"], header["path"], header["id"],
                                      "replace" in marker or "replace" in "\n".join(block), "\n".join(block)))
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


@pytest.mark.parametrize("change, before, after", CHANGES, ids=[c[0] for c in CHANGES])
def test_a_day2_change_never_replaces_what_the_cluster_is_built_on(change, before, after):
    old, new = synth_of(before), synth_of(after)
    rows = []
    replaced: set[str] = set()
    for stack in (old.settings.cluster_stack_name, old.settings.gpu_stack_name):
        template_old = old.cluster if stack.endswith("-cluster") else old.gpu
        template_new = new.cluster if stack.endswith("-cluster") else new.gpu
        if template_old.to_json() == template_new.to_json():
            rows.append(f"  {stack}: no change")
            continue
        output, changes = cdk_diff(old, new, stack)
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
    if old.gpu.to_json() == new.gpu.to_json():
        return
    _, changes = cdk_diff(old, new, old.settings.gpu_stack_name)
    replaced = {c.logical_id: 1 for c in changes if c.replaced and c.type == "AWS::EC2::PlacementGroup"}
    in_use = placement_groups_in_use(old, {})
    for group, zone in placement_groups_in_use(new, replaced).items():
        # THEN a group kept (same logical id, not replaced) serves the same AZ before and after
        assert in_use.get(group, zone) == zone, f"{change}: placement group {group[0]} kept across {in_use[group]} -> {zone}"


def test_moving_the_gpu_az_changes_the_gpu_stack_alone():
    old, new = synth_of({}), synth_of({"gpuAvailabilityZone": "us-east-2c"})
    # THEN the cluster stack is the same template (no subnet, NAT or system node group moves) ...
    assert old.cluster.to_json() == new.cluster.to_json()
    # ... and in the GPU stack only the GPU node group and what is tied to its AZ change
    _, changes = cdk_diff(old, new, old.settings.gpu_stack_name)
    # (the settings ConfigMap holds every setting, the AZ too)
    assert {c.path for c in changes} == {"GpuNodes/Nodegroup", "GpuNodes/PlacementGroup",
                                         "TrainingJob/ConfigMap-train-efa-settings/Resource"}
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
    (chart,) = [r for r in resources.values()
                if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Chart"] == "kuberay-operator"]
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
