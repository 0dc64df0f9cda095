"""A GPU type is one record (core.catalog.families): everything keyed by instance type, family or GPU name derives from it.

The proof adds a throwaway family, built from the record type alone, to FAMILIES in core/catalog/families.py of a copy of
the package, as a contributor adds one, and edits nothing else: in a fresh Python process on that copy, the catalog's
lookups and views, the step model's constants, the EFA share, the chart allowlists, the price check, the memory plan's
advice, `ray-efa plan` and a synth of both stacks all pick it up.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa.core import catalog
from ray_efa.core.catalog import families, gpu_constants, network

ROOT = Path(__file__).resolve().parents[2]

# A throwaway family: facts invented for this test (g7e's name, so that the chart allowlists that already list
# g7e.48xlarge show they need no edit; the numbers are not a record of the real g7e).
FAKE_FAMILY = """

# A throwaway family (tests/core/test_gpu_families.py)
from ray_efa.core.catalog.types import EfaShare, Gpu, GpuConstants, GpuFamily, GpuLink, InstanceSize  # noqa: E402

FAKE = GpuFamily(
    name="g7e", gpu_link=GpuLink(name="PCIe Gen5 x16", gb_s=64.0), gpudirect_rdma=True,
    gpu=Gpu(name="FAKE-96", memory_gib=94.97, peak_bf16_tflops=500.0, device_names=("FAKE-96",),
            memory_bandwidth_gb_s=1792.0, peak_fp8_tflops=1000.0),
    constants=GpuConstants(compute_efficiency=0.41, compute_status="assumed", compute_source="a test's prior",
                           fp8_compute_efficiency=0.27, fp8_status="assumed", fp8_source="a test's prior"),
    efa_share=EfaShare(0.55, "assumed", "a test's share"),
    sizes=(InstanceSize(name="g7e.48xlarge", gpus=8, vcpus=192, memory_gib=2048, efa_interfaces=4, network_gbps=1600,
                        usd_per_hour=40.0),),
)
FAMILIES = (*FAMILIES, FAKE)
"""

PROBE = """
import contextlib, io, json, sys
import aws_cdk as cdk
from aws_cdk.assertions import Template
from ray_efa.core import addons, catalog, prices
from ray_efa.core.catalog import gpu_constants, network
from ray_efa.core.settings import Settings, SettingsError
from ray_efa.core.strategy import check_fits
from ray_efa.infra.app import build_stacks, feature_flags
from tests.core.test_memory import smallest_bigger_gpu_that_fits
from tests.ops.cli_helpers import run_cli

row = catalog.gpu_instance("g7e.48xlarge")
out = {
    "row": [row.gpus, row.gpu.name, row.efa_interfaces, row.gpu_link.name, row.usd_per_hour, row.gpudirect_rdma],
    "gpus": "FAKE-96" in catalog.GPUS, "device": catalog.gpu_for_device_name("NVIDIA FAKE-96").name,
    "link": catalog.GPU_LINKS["g7e"].gb_s, "described_link": 64.0 in catalog.RECORDED_LINKS,
    "interfaces": len(catalog.efa_network_interfaces(row)), "pod": catalog.worker_pod_resources(row).efa,
    "constants": gpu_constants.constants_for("FAKE-96").compute_efficiency,
    "share": network.EFA_SHARE["g7e"][0], "floor": catalog.allreduce_floor_gbps(row),
    "plugin": sorted(v for v, names in catalog.EFA_DEVICE_PLUGIN_ALLOWLISTS.items() if "g7e.48xlarge" in names),
    "dra": sorted(v for v, names in addons.EFA_DRA_DRIVER_ALLOWLISTS.items() if "g7e.48xlarge" in names),
    "beyond": any("g7e.48xlarge" in names for names in catalog.CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW.values()),
    "price_problems": prices.price_record_problems(),
}
settings = Settings.from_context({"compile": False, "lossChunkSize": 0, "microBatch": 1, "seqLen": 16384,
                                  "gradAccumulation": 1, "precision": "bf16", "activationCheckpointing": False})
out["smallest"] = smallest_bigger_gpu_that_fits(settings)
try:
    check_fits(settings)
except SettingsError as error:
    out["advice"] = error.problems[0].message
stdout = io.StringIO()
with contextlib.redirect_stdout(stdout):
    out["plan_exit"] = run_cli("plan", "-c", "gpuInstanceType=g7e.48xlarge", "--json")
plan = json.loads(stdout.getvalue())
out["plan"] = [plan["settings"]["gpuInstanceType"]["value"],
               plan["performance"]["efa"]["constants"]["compute_efficiency"]["value"]]
app = cdk.App(outdir=sys.argv[1], context=feature_flags())
stacks = build_stacks(app, Settings.from_context({"gpuInstanceType": "g7e.48xlarge"}))
app.synth()
(template,) = Template.from_stack(stacks.gpu).find_resources("AWS::EC2::LaunchTemplate").values()
data = template["Properties"]["LaunchTemplateData"]
out["synth"] = [data["InstanceType"], [i["InterfaceType"] for i in data["NetworkInterfaces"]]]
print("PROBE " + json.dumps(out))
"""


@pytest.mark.spawn
def test_a_family_added_as_one_record_reaches_every_derived_place(tmp_path):
    # GIVEN a throwaway family (8 x a 95 GiB GPU, 4 EFA cards, g7e.48xlarge), added to FAMILIES and nowhere else, in a
    # copy of the package (ray_efa/ with its links, and the folders they point to)
    copy = tmp_path / "checkout"
    for name in ("ray_efa", *(p.name for p in (ROOT / "ray_efa").iterdir() if p.is_symlink())):
        shutil.copytree(ROOT / name, copy / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "cdk.json", copy)  # the CDK app's feature flags, which the synth reads beside the package
    families_py = copy / "core" / "catalog" / "families.py"
    families_py.write_text(families_py.read_text() + FAKE_FAMILY)
    # WHEN a fresh Python process imports that copy (its folder first on the path; this checkout's tests/ after it)
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "cdk.out")],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("PROBE ")]
    out = json.loads(line.removeprefix("PROBE "))
    # THEN the catalog's lookups and views have it: the row, its GPU, its link, its interfaces and pod
    assert out["row"] == [8, "FAKE-96", 4, "PCIe Gen5 x16", 40.0, True]
    assert out["gpus"] and out["device"] == "FAKE-96" and out["link"] == 64.0 and out["described_link"]
    assert out["interfaces"] == 4 and out["pod"] == 4
    # the step model's constants, the EFA share and the preflight floor are the record's
    assert out["constants"] == 0.41 and out["share"] == 0.55
    # (the floor: half of the record's share of 200 GB/s, capped by its 64 GB/s link)
    assert out["floor"] == pytest.approx(min(1600 / 8 * 0.55, 64.0) * 0.5)
    # the chart allowlists that list g7e.48xlarge hold the row, with no edit to them
    assert out["plugin"] == ["v0.5.30"] and out["dra"] == ["1.0.0"] and not out["beyond"]
    # the price check names the record that has no price row yet
    assert out["price_problems"] == [
        "g7e.48xlarge: a GPU type without a row in core/data/on_demand_prices.csv (add one per recorded region)"
    ]
    # the memory plan's advice names it as the smallest bigger GPU that fits (p5e.48xlarge before it), as the memory
    # test derives it
    assert out["smallest"] == "gpuInstanceType=g7e.48xlarge" and out["smallest"] in out["advice"]
    # `ray-efa plan` plans it with its constants, and both stacks synthesize its launch template
    assert out["plan_exit"] == 0 and out["plan"] == ["g7e.48xlarge", 0.41]
    assert out["synth"] == ["g7e.48xlarge", ["efa", "efa", "efa", "efa"]]


def test_the_records_are_the_catalogs_rows_and_tables():
    # every row is a size of one record, and every table keyed by family or GPU name is the records'
    sizes = {size.name: family for family in families.FAMILIES for size in family.sizes}
    assert sorted(sizes) == sorted(catalog.BUILT_IN_GPU_INSTANCES)
    for name, row in catalog.BUILT_IN_GPU_INSTANCES.items():
        family = sizes[name]
        assert (row.family, row.gpu, row.gpu_link, row.gpudirect_rdma) == (
            family.name,
            family.gpu,
            family.gpu_link,
            family.gpudirect_rdma,
        )
        assert gpu_constants.constants_for(row.gpu.name) == family.constants
    assert network.EFA_SHARE == {f.name: f.efa_share for f in families.FAMILIES if f.efa_share is not None}
    assert catalog.GPUS == {f.gpu.name: f.gpu for f in families.FAMILIES}


def test_a_record_is_checked_when_it_is_made():
    family = families.FAMILIES[0]
    with pytest.raises(catalog.CatalogError, match="every size is named g5.<size>"):
        catalog.GpuFamily(
            **{
                **_fields(family),
                "sizes": (
                    catalog.InstanceSize(
                        name="g9.xlarge",
                        gpus=1,
                        vcpus=4,
                        memory_gib=16,
                        efa_interfaces=0,
                        network_gbps=10,
                        usd_per_hour=1.0,
                    ),
                ),
            }
        )
    with pytest.raises(catalog.CatalogError, match="GPUDirect RDMA"):
        catalog.GpuFamily(**{**_fields(family), "efa_share": network.EFA_SHARE["p5"]})


def _fields(family: catalog.GpuFamily) -> dict[str, object]:
    return {name: getattr(family, name) for name in catalog.GpuFamily.__dataclass_fields__}
