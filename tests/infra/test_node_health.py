"""GPU node health in the synthesized stacks: EKS node auto repair (NodeRepairConfig) on both managed node groups
and the eks-node-monitoring-agent add-on, on by default and off by their settings (infra.node_health)."""

from __future__ import annotations

from tests.infra.conftest import synthesize


def _nodegroups(template) -> list[dict]:
    return [r["Properties"] for r in template.find_resources("AWS::EKS::Nodegroup").values()]


def _addons(template) -> dict[str, dict]:
    return {r["Properties"]["AddonName"]: r["Properties"] for r in template.find_resources("AWS::EKS::Addon").values()}


def test_both_node_groups_repair_themselves_and_the_agent_reports_their_health_by_default(default_synth):
    # THEN the GPU node group and the system node group have node auto repair on
    (gpu,) = _nodegroups(default_synth.gpu)
    (system,) = _nodegroups(default_synth.cluster)
    assert gpu["NodeRepairConfig"] == {"Enabled": True}
    assert system["NodeRepairConfig"] == {"Enabled": True}
    # AND the cluster stack installs the node monitoring agent, kept on the nodes if the stack goes
    agent = _addons(default_synth.cluster)["eks-node-monitoring-agent"]
    assert agent["PreserveOnDelete"] is True
    assert "eks-node-monitoring-agent" not in _addons(default_synth.gpu)


def test_the_settings_turn_repair_and_the_agent_off():
    synth = synthesize(nodeRepair=False, nodeMonitoringAgent=False)
    assert [ng["NodeRepairConfig"] for ng in _nodegroups(synth.gpu) + _nodegroups(synth.cluster)] == [
        {"Enabled": False},
        {"Enabled": False},
    ]
    assert "eks-node-monitoring-agent" not in _addons(synth.cluster)
