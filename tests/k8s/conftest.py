"""Fixtures of the k8s tests: the charts' objects, built once per session per settings, with lookups into them.

The objects come from the pure builders (k8s.objects.manifest_objects), not a cdk8s synth: no jsii, so these tests run
in `make test-fast`. tests/k8s/test_charts.py (marked synth) proves a cdk8s synth of the charts is these objects."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ray_efa.core.settings import Settings
from ray_efa.k8s.names import CODE_MOUNT_PATH
from ray_efa.k8s.objects import manifest_objects
from tests.settings_cache import per_settings

INSTANCE_TYPES = ("g6.12xlarge", "g6e.48xlarge", "p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge")
"""The same GPU types as the infra tests."""

BASE = Settings().replace(
    gpuNodeCount=3,
    jobTtlSecondsAfterFinished=123,
    jobActiveDeadlineSeconds=4567,
    jobBackoffLimit=2,
    pipPackages="einops==0.8.1,tabulate==0.9.0",
)
"""Non-default values wherever a default would hide a field that is not read from the settings."""


@dataclass(frozen=True)
class Synth:
    """The objects of every chart of build_manifests for one Settings, by chart id (namespace, raycluster, rayjob-efa,
    rayjob-tcp): k8s.objects.manifest_objects, which the charts wrap."""

    settings: Settings
    charts: dict[str, list[dict[str, Any]]]

    def objects(self) -> Iterator[dict[str, Any]]:
        for manifests in self.charts.values():
            yield from manifests

    def one(self, kind: str, name: str) -> dict[str, Any]:
        (obj,) = [o for o in self.objects() if o["kind"] == kind and o["metadata"]["name"] == name]
        return obj

    @property
    def ray_cluster(self) -> dict[str, Any]:
        (obj,) = [o for o in self.charts["raycluster"] if o["kind"] == "RayCluster"]
        return obj

    def ray_job(self, network: str) -> dict[str, Any]:
        (obj,) = [o for o in self.charts[f"rayjob-{network}"] if o["kind"] == "RayJob"]
        return obj

    def cluster_specs(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(owner, RayClusterSpec) of the RayCluster and of each RayJob's own cluster."""
        yield "RayCluster", self.ray_cluster["spec"]
        for network in ("efa", "tcp"):
            yield f"RayJob {network}", self.ray_job(network)["spec"]["rayClusterSpec"]

    def pod_templates(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(where, pod template) of every pod of every Ray object: heads, workers and submitters."""
        for owner, spec in self.cluster_specs():
            yield f"{owner} head", spec["headGroupSpec"]["template"]
            for group in spec["workerGroupSpecs"]:
                yield f"{owner} worker {group['groupName']}", group["template"]
        for network in ("efa", "tcp"):
            yield f"RayJob {network} submitter", self.ray_job(network)["spec"]["submitterPodTemplate"]


@per_settings
def synthesize(settings: Settings) -> Synth:
    """The objects of every chart for `settings`, once per process (xdist workers each keep their own cache)."""
    return Synth(settings=settings, charts=manifest_objects(settings))


@pytest.fixture(scope="session", params=INSTANCE_TYPES)
def synth(request) -> Synth:
    return synthesize(BASE.replace(gpuInstanceType=request.param))


@pytest.fixture(scope="session")
def default_synth() -> Synth:
    return synthesize(BASE)


def container(template: dict[str, Any]) -> dict[str, Any]:
    """The one container of a Ray pod template."""
    (c,) = template["spec"]["containers"]
    return c


NOT_NETWORK_ENV = (
    "PYTHONPATH",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "RAY_EFA_MODEL_CACHE",
    "HF_HUB_CACHE",
    "PYTHONUNBUFFERED",
)
"""Env of every Ray container that is not the network's: the shipped code, the AWS region, the model caches, stdio."""


def env(template: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(template).get("env", [])}


def volume_at(template: dict[str, Any], mount_path: str) -> dict[str, Any]:
    """The volume mounted at `mount_path` in the pod's container."""
    (mount,) = [m for m in container(template)["volumeMounts"] if m["mountPath"] == mount_path]
    (volume,) = [v for v in template["spec"]["volumes"] if v["name"] == mount["name"]]
    return volume


def head(spec: dict[str, Any]) -> dict[str, Any]:
    return spec["headGroupSpec"]


def worker_group(spec: dict[str, Any]) -> dict[str, Any]:
    (group,) = spec["workerGroupSpecs"]
    return group


def projected_config_maps(volume: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    """ConfigMap name -> items, of a projected volume (the code and the settings ConfigMaps)."""
    return {source["configMap"]["name"]: source["configMap"]["items"] for source in volume["projected"]["sources"]}


def mounted_items(template: dict[str, Any]) -> list[dict[str, str]]:
    """Every item (key, path) of the ConfigMaps projected at the code mount, in order."""
    return [item for items in projected_config_maps(volume_at(template, CODE_MOUNT_PATH)).values() for item in items]


def materialize_code(synth, network: str, root: Path) -> Path:
    """Write the job's ConfigMaps to `root` the way the kubelet mounts them: each item's key at the item's path."""
    config_maps = {o["metadata"]["name"]: o for o in synth.charts[f"rayjob-{network}"] if o["kind"] == "ConfigMap"}
    head = synth.ray_job(network)["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    sources = projected_config_maps(volume_at(head, CODE_MOUNT_PATH))
    assert set(sources) == set(config_maps)
    for name, items in sources.items():
        for item in items:
            target = root / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(config_maps[name]["data"][item["key"]])
    return root


def fetch_like_the_pods(archive: bytes, tmp_path: Path, *, name: str = "code.zip") -> Path:
    """Run the init container's script (k8s.user_code.FETCH_SCRIPT) on `archive`, stored as `name` and served by
    pyarrow's local filesystem in place of S3 (the same calls); returns the folder it unpacked into.
    subprocess.CalledProcessError when the script fails (its stderr says why)."""
    import subprocess
    import sys

    from ray_efa.k8s.user_code import FETCH_SCRIPT

    (tmp_path / "bucket").mkdir()
    (tmp_path / "bucket" / name).write_bytes(archive)
    script = FETCH_SCRIPT.replace(
        "fs.S3FileSystem(region=os.environ['AWS_REGION'])",
        f"fs.SubTreeFileSystem({str(tmp_path)!r}, fs.LocalFileSystem())",
    )
    assert script != FETCH_SCRIPT, "the init container's script no longer opens S3 as this helper expects"
    dest = tmp_path / "user"
    subprocess.run(
        [sys.executable, "-c", script, f"s3://bucket/{name}", str(dest)],
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    return dest
