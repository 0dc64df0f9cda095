"""Compliance and correctness checks on the synthesized templates: cdk-nag, cfn-lint, Helm values keys."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks

from ray_efa.infra.device_plugins import device_plugin_values
from ray_efa.infra.kuberay import kuberay_values
from tests.shared_reference import chart_values, recorded_charts, reference_path

# -- cdk-nag ----------------------------------------------------------------------------------------------------


def validation_report(synth) -> dict[str, dict]:
    report = json.loads((Path(synth.assembly.directory) / "validation-report.json").read_text())
    return {plugin["pluginName"]: plugin for plugin in report["pluginReports"]}


_DELIBERATE_WARNINGS = ("Annotation::ray-efa:no-admin-principal", "Annotation::ray-efa:publicEndpointOpen")


def test_nag_passes_with_only_reasoned_acknowledgements(synthesized):
    # GIVEN a synth with AwsSolutionsChecks (the fixture's app.synth() raises on any unacknowledged finding)
    plugins = validation_report(synthesized)
    # THEN the AwsSolutions pack ran and every plugin found nothing unacknowledged (the warnings the report also
    # carries are the deliberate "no adminPrincipalArns" and "public endpoint open" annotations: these synths set
    # neither adminPrincipalArns nor publicAccessCidrs)
    assert "AwsSolutions" in plugins
    for plugin in plugins.values():
        violations = [v for v in plugin["violations"] if v["ruleName"] not in _DELIBERATE_WARNINGS]
        assert plugin["conclusion"] == "success" and violations == [], violations


def test_every_acknowledgement_names_the_finding_and_a_specific_reason(default_synth):
    suppressed = validation_report(default_synth)["AwsSolutions"]["suppressedViolations"]
    assert {v["ruleName"].split("[")[0] for v in suppressed} == {
        "AwsSolutions-IAM4",
        "AwsSolutions-IAM5",
        "AwsSolutions-L1",
        "AwsSolutions-S1",
    }
    for violation in suppressed:
        assert (
            violation["acknowledgedId"] == f"AwsSolutions::{violation['ruleName']}"
        )  # the finding itself, not the rule
        assert len(violation["reason"]) > 40, violation["reason"]  # a specific reason, not a shrug


def test_nag_fails_an_unacknowledged_finding(tmp_path):
    # GIVEN an app with the same checks and a bucket without server access logs (AwsSolutions-S1)
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Noncompliant")
    s3.Bucket(stack, "Bucket")
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    # THEN synthesis fails: the check really runs and really gates
    with pytest.raises(RuntimeError, match="AwsSolutions-S1"):
        app.synth()


# -- cfn-lint ---------------------------------------------------------------------------------------------------


def lint(template_path: Path, region: str = "us-east-2") -> list:
    """cfn-lint's default rules for the stack's region, as `cfn-lint --regions us-east-2 TEMPLATE` runs them."""
    from cfnlint.api import ManualArgs, lint

    return lint(template_path.read_text(), config=ManualArgs(regions=[region]))


def errors(matches) -> list[str]:
    return [f"{m.rule.id} {m.message} ({m.path})" for m in matches if m.rule.severity == "error"]


def test_cfn_lint_finds_no_errors(synthesized):
    directory = Path(synthesized.assembly.directory)
    for stack in (synthesized.stacks.cluster, synthesized.stacks.gpu):
        matches = lint(directory / stack.template_file)
        assert errors(matches) == [], errors(matches)


def test_cfn_lint_catches_an_error(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text(
        json.dumps(
            {
                "Resources": {
                    "Lt": {
                        "Type": "AWS::EC2::LaunchTemplate",
                        "Properties": {"LaunchTemplateData": {"MetadataOptions": {"HttpTokens": "sometimes"}}},
                    }
                }
            }
        )
    )
    assert errors(lint(broken))


# -- Helm values: Helm ignores unknown keys silently, so check ours against each chart's values.yaml ----------------


def chart_keys(folder: str) -> set[str]:
    return set(chart_values(folder))


@pytest.mark.parametrize("folder", ["nvidia-device-plugin-0.20.0", "aws-efa-k8s-device-plugin-v0.5.30"])
def test_device_plugin_values_are_keys_of_the_chart(folder):
    assert set(device_plugin_values()) <= chart_keys(folder)


def test_kuberay_values_are_keys_of_the_chart():
    # 1.7.0 declares nodeSelector; 1.4.0's template reads it without declaring it (PROVENANCE.md)
    assert set(kuberay_values()) <= chart_keys("kuberay-operator-1.7.0")
    assert "nodeSelector" in recorded_charts()["kuberay-operator-1.4.0"]["template_reads"]
    provenance = reference_path("helm-values", "PROVENANCE.md")
    assert provenance is None or "`.Values.nodeSelector`" in provenance.read_text()


def test_efa_chart_allowlist_holds_every_efa_gpu_type_the_catalog_records():
    from ray_efa.core import catalog

    values = chart_values("aws-efa-k8s-device-plugin-v0.5.30")
    allowlist = set(values["supportedInstanceLabels"]["values"])
    recorded = catalog.EFA_DEVICE_PLUGIN_ALLOWLISTS["v0.5.30"]
    efa_gpu_types = {name for name, row in catalog.GPU_INSTANCES.items() if row.efa_capable}
    # Every EFA GPU type we record as allowed really is in the chart, and vice versa for catalog types.
    assert recorded <= allowlist
    assert efa_gpu_types & allowlist == recorded & efa_gpu_types


def test_nvidia_default_affinity_matches_gpu_node_label():
    from ray_efa.core.scheduling import GPU_NODE_LABELS

    values = chart_values("nvidia-device-plugin-0.20.0")
    terms = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    wanted = [{"key": k, "operator": "In", "values": [v]} for k, v in GPU_NODE_LABELS.items()]
    assert any(term["matchExpressions"][0] in wanted for term in terms)
