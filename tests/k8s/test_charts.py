"""The cdk8s edge: every chart of k8s.workload synthesizes exactly the objects of the pure builders (k8s.objects), key
order included, so the other tests of this folder check the builders' objects without jsii and still check what
`ray-efa manifests` writes (and what infra/ and `ray-efa submit` apply, which are the builders' objects)."""

from __future__ import annotations

import json
from pathlib import Path

import cdk8s
import pytest

from ray_efa.core.settings import Settings
from ray_efa.k8s import objects, workload
from tests.k8s.conftest import BASE

pytestmark = pytest.mark.synth  # cdk8s charts, synthesized through jsii's node process

EXAMPLE_SRC = Path(__file__).resolve().parents[2] / "examples" / "own-training" / "src"
SETTINGS = {
    "default": Settings(),
    "p5-dra-tcp": BASE.replace(gpuInstanceType="p5.48xlarge", deviceAllocation="dra", network="tcp"),
    "p5en-kuberay-1.4.0": BASE.replace(gpuInstanceType="p5en.48xlarge", kuberayVersion="1.4.0"),
    "own-code-shared-volume": BASE.replace(
        trainFunction="own_training.train:train_func",
        codeDir=str(EXAMPLE_SRC),
        jobName="mlp-exp",
        sharedVolumeClaim="fsx-claim",
        sharedVolumeMountPath="/mnt/fsx",
        storagePath="/mnt/fsx/runs",
    ),
}
"""Settings that between them make every kind of object and every optional part: device claims, codeDir's ConfigMap,
a shared volume, pip packages, both networks, both KubeRay CRDs."""


def _text(chart_objects) -> str:
    """Objects as JSON text, keys in their order: equal texts are equal objects written the same way."""
    return json.dumps(chart_objects, indent=1)


@pytest.mark.parametrize("settings", SETTINGS.values(), ids=SETTINGS.keys())
def test_the_manifest_charts_are_the_builders_objects_in_apply_order(settings):
    # GIVEN settings WHEN dist/'s charts are synthesized
    charts = workload.build_manifests(cdk8s.App(), settings)
    # THEN each chart is, key for key and in order, the objects the pure builders make under the same chart id
    assert {chart.node.id: _text(chart.to_json()) for chart in charts} == {
        id: _text(built) for id, built in objects.manifest_objects(settings).items()
    }
    assert [chart.node.id for chart in charts] == list(objects.manifest_objects(settings))
    # ...each chart depending on the one before it, which numbers dist/'s files in apply order
    assert all(before in after.node.dependencies for before, after in zip(charts, charts[1:]))


@pytest.mark.parametrize("network", ["efa", "tcp"])
def test_the_stack_charts_are_the_builders_objects(network):
    settings = BASE.replace(network=network)
    charts = workload.build_workload(cdk8s.App(), settings)
    assert {chart.node.id: _text(chart.to_json()) for chart in charts} == {
        id: _text(built) for id, built in objects.workload_objects(settings).items()
    }
    assert charts[0] in charts[1].node.dependencies


def test_each_chart_on_its_own_is_the_builders_objects():
    settings = SETTINGS["own-code-shared-volume"].replace(storagePath="s3://bucket/runs")
    code, app = "s3://bucket/code.zip", "s3://bucket/app.zip"
    pairs = [
        (workload.namespace_chart(cdk8s.App(), settings), objects.namespace_objects(settings)),
        (
            workload.ray_cluster_chart(cdk8s.App(), settings, code_archive_uri=code),
            objects.ray_cluster_objects(settings, code_archive_uri=code),
        ),
        (
            workload.ray_job_chart(cdk8s.App(), settings, code_archive_uri=code, app_archive_uri=app),
            objects.ray_job_objects(settings, code_archive_uri=code, app_archive_uri=app),
        ),
        (workload.settings_chart(cdk8s.App(), settings), objects.settings_objects(settings)),
    ]
    for chart, built in pairs:
        assert _text(chart.to_json()) == _text(built), chart.node.id
    assert [chart.node.id for chart, _ in pairs] == ["namespace", "raycluster", "rayjob-efa", "settings-efa"]


def test_metadata_a_chart_would_drop_is_refused():
    # GIVEN an object with metadata the chart edge does not carry into cdk8s's ApiObject
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "finalizers": ["f"]}, "data": {}}
    # WHEN it is put into a chart THEN it is refused, naming the field, rather than written without it
    with pytest.raises(ValueError, match=r"ConfigMap x: metadata \['finalizers'\] is not carried into a chart"):
        workload.chart(cdk8s.App(), "c", [obj])
