"""The instance catalog and the values derived from it, table-driven."""

from __future__ import annotations

import dataclasses

import pytest

from ray_efa.core import catalog
from ray_efa.core.catalog import network

# instance -> (GPUs, EFA interfaces, GPUDirect RDMA), as AWS states them (`aws ec2 describe-instance-types`: GpuInfo,
# NetworkInfo.EfaInfo.MaximumEfaInterfaces) and the maintainers' reference table outside the repository collects them
FACTS_TABLE = {
    "g5.48xlarge": (8, 1, False),
    "g6.12xlarge": (4, 1, False),
    "g6.48xlarge": (8, 1, False),
    "g6e.24xlarge": (4, 2, False),
    "g6e.48xlarge": (8, 4, False),
    "p4d.24xlarge": (8, 4, True),
    "p4de.24xlarge": (8, 4, True),
    "p5.48xlarge": (8, 32, True),
    "p5e.48xlarge": (8, 32, True),
    "p5en.48xlarge": (8, 16, True),
}


@pytest.mark.parametrize("name, facts", FACTS_TABLE.items())
def test_catalog_holds_every_row_of_the_facts_table(name, facts):
    row = catalog.gpu_instance(name)
    assert (row.gpus, row.efa_interfaces, row.gpudirect_rdma) == facts


@pytest.mark.parametrize("name", FACTS_TABLE)
def test_efa_interfaces_one_per_network_card(name):
    row = catalog.gpu_instance(name)
    interfaces = catalog.efa_network_interfaces(row)
    assert len(interfaces) == row.efa_interfaces
    assert interfaces[0] == {"NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "efa"}
    # secondary cards: efa-only (no IP) where the row says so, efa elsewhere
    secondary = "efa-only" if row.efa_only_secondary else "efa"
    assert all(i["DeviceIndex"] == 1 and i["InterfaceType"] == secondary for i in interfaces[1:])
    assert [i["NetworkCardIndex"] for i in interfaces] == list(range(row.efa_interfaces))


@pytest.mark.parametrize("name", FACTS_TABLE)
def test_worker_pod_takes_all_gpus_and_efa_and_leaves_room_for_the_node(name):
    row = catalog.gpu_instance(name)
    pod = catalog.worker_pod_resources(row)
    assert (pod.gpus, pod.efa) == (row.gpus, row.efa_interfaces)
    assert 0 < pod.cpu <= row.vcpus - 2
    assert 0 < pod.memory_gib <= row.memory_gib - 8
    assert 0 < pod.shm_gib < pod.memory_gib


def test_g6_12xlarge_worker_pod():
    assert catalog.worker_pod_resources(catalog.gpu_instance("g6.12xlarge")) == catalog.WorkerPodResources(
        cpu=44, memory_gib=176, gpus=4, efa=1, shm_gib=44
    )


@pytest.mark.parametrize(
    "name, expected",
    [
        ("g6.12xlarge", False),
        ("g6e.48xlarge", False),
        ("p4d.24xlarge", True),
        ("p5.48xlarge", True),
        ("p5en.48xlarge", True),
        ("g5.48xlarge", False),
    ],
)
def test_device_rdma_only_with_gpudirect(name, expected):
    assert catalog.use_device_rdma(catalog.gpu_instance(name)) is expected


@pytest.mark.parametrize(
    "name",
    [
        name
        for name, row in catalog.GPU_INSTANCES.items()
        if row.efa_capable and not row.gpudirect_rdma and row.network_gbps / 8 * catalog.EFA_LINE_SHARE >= 3.0
    ],
)
def test_without_gpudirect_rdma_the_floor_is_what_a_healthy_host_staged_node_reaches_not_the_line_rate(name):
    # GIVEN a family without GPUDirect RDMA: 40 to 400 Gbit/s, 1 to 4 EFA cards
    row = catalog.gpu_instance(name)
    healthy = catalog.healthy_efa_busbw(row)
    # THEN a healthy pair reaches the host-staged measurement (nccl-tests on g6e: 3 GB/s), whatever its cards add up
    # to, and the floor is the margin of that: at most 2.5 GB/s (g6e.48xlarge's half line rate was 25)
    assert healthy.gb_s == catalog.HOST_STAGED_EFA_GB_S == 3.0
    assert catalog.allreduce_floor_gbps(row) == 1.5 <= 2.5
    assert "aws/aws-ofi-nccl#547" in healthy.source and "no GPUDirect RDMA" in healthy.source
    assert f"{row.efa_interfaces} EFA" in healthy.source


def test_a_single_card_slower_than_the_host_path_is_held_to_its_line_rate():
    # g6.8xlarge: one 25 Gbit/s card, 3.125 GB/s, 2.5 at EFA's share: below the host-staged 3 GB/s
    row = catalog.gpu_instance("g6.8xlarge")
    assert catalog.healthy_efa_busbw(row).gb_s == pytest.approx(25 / 8 * catalog.EFA_LINE_SHARE)
    assert catalog.allreduce_floor_gbps(row) == 1.25


def test_with_gpudirect_rdma_the_floor_scales_with_every_efa_card():
    # p4d: 4 x 100 Gbit/s; p5: 32 x 100; p5en: 16 x 200: the aggregate line rate at the family's published share
    # at 1 GiB (core.catalog.network: p4d 0.8, nccl#527; p5 0.6), then the margin
    for name, gbps, share in (("p4d.24xlarge", 400, 0.8), ("p5.48xlarge", 3200, 0.6), ("p5en.48xlarge", 3200, 0.6)):
        row = catalog.gpu_instance(name)
        assert network.efa_share(row)[0] == share
        assert catalog.allreduce_floor_gbps(row) == pytest.approx(gbps / 8 * share * catalog.FLOOR_MARGIN)
        assert "GPUDirect RDMA" in catalog.healthy_efa_busbw(row).source
    assert catalog.allreduce_floor_gbps(catalog.gpu_instance("p4d.24xlarge")) == 20.0  # 2 x p4d reach 57 (nccl#527)


def test_the_intra_node_link_caps_what_a_healthy_node_reaches():
    # GIVEN a described type whose GPUs talk at 10 GB/s inside the node, with 3,200 Gbit/s of EFA
    row = catalog.describe_gpu_instance({**B300, "gpuLinkGbS": 10})
    # THEN the ring through its GPUs, not the network, sets the floor
    assert catalog.healthy_efa_busbw(row).gb_s == 10 and "intra-node" in catalog.healthy_efa_busbw(row).source
    assert catalog.allreduce_floor_gbps(row) == 5.0


@pytest.mark.parametrize(
    "device, gpu",
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A10G", "A10G"),
    ],
)
def test_gpu_from_torch_device_name(device, gpu):
    found = catalog.gpu_for_device_name(device)
    assert found is not None and found.name == gpu


def test_unknown_device_has_no_peak():
    assert catalog.gpu_for_device_name("cpu") is None


@pytest.mark.parametrize(
    "name, message",
    [
        ("m7i.xlarge", "m7i.xlarge has no GPU; choose one of: g5.12xlarge"),
        ("g6.xlarge", "g6.xlarge has 1 x L4 but no EFA support"),
        ("p9.96xlarge", "unknown GPU instance type 'p9.96xlarge'; known: "),
    ],
)
def test_unusable_gpu_types_are_refused_with_the_choices(name, message):
    with pytest.raises(catalog.CatalogError, match=message):
        catalog.gpu_instance(name)


def test_efa_plugin_allowlist_lookup():
    assert catalog.efa_plugin_supports("p5.48xlarge", "v0.5.30")
    with pytest.raises(
        catalog.CatalogError, match="no allowlist recorded for aws-efa-k8s-device-plugin chart 'v0.5.32'"
    ):
        catalog.efa_plugin_supports("p5.48xlarge", "v0.5.32")


ALLOWLISTS = {"v0.5.9": frozenset({"p4d.24xlarge"}), "v0.5.10": frozenset({"p4d.24xlarge", "p5.48xlarge"})}


def test_efa_plugin_problem_names_the_version_that_lists_the_type():
    assert catalog.efa_plugin_problem("p5.48xlarge", "v0.5.10", ALLOWLISTS) is None
    assert catalog.efa_plugin_problem("p5.48xlarge", "v0.5.9", ALLOWLISTS) == (
        "its allowlist does not hold p5.48xlarge, so the plugin would schedule on no node; use efaDevicePluginVersion v0.5.10"
    )
    assert "no recorded chart version lists it" in (
        catalog.efa_plugin_problem("g6.12xlarge", "v0.5.9", ALLOWLISTS) or ""
    )


# -- the open catalog ------------------------------------------------------------------------------------------------

# From AWS's "Specifications for Amazon EC2 accelerated computing instances" (performance and network tables):
# instance -> (GPUs, vCPUs, memory GiB, network cards = EFA interfaces, Gbit/s)
AC_SPECS = {
    "g5.8xlarge": (1, 32, 128, 1, 25),
    "g5.16xlarge": (1, 64, 256, 1, 25),
    "g5.24xlarge": (4, 96, 384, 1, 50),
    "g6.8xlarge": (1, 32, 128, 1, 25),
    "g6.16xlarge": (1, 64, 256, 1, 25),
    "g6.24xlarge": (4, 96, 384, 1, 50),
    "g6e.8xlarge": (1, 32, 256, 1, 25),
    "g6e.12xlarge": (4, 48, 384, 1, 100),
    "g6e.16xlarge": (1, 64, 512, 1, 35),
    "p5.4xlarge": (1, 16, 256, 1, 100),
    "p6-b200.48xlarge": (8, 192, 2048, 8, 3200),
}


@pytest.mark.parametrize("name, specs", AC_SPECS.items())
def test_every_added_row_matches_the_aws_specification(name, specs):
    row = catalog.gpu_instance(name)
    assert (row.gpus, row.vcpus, row.memory_gib, row.efa_interfaces, row.network_gbps) == specs


def test_p6_b200_is_eight_b200_with_eight_efa_cards_and_gpudirect_rdma():
    row = catalog.gpu_instance("p6-b200.48xlarge")
    assert row.gpu.name == "B200" and row.gpu.peak_bf16_tflops == 2250.0 and row.gpudirect_rdma
    interfaces = catalog.efa_network_interfaces(row)
    assert [i["InterfaceType"] for i in interfaces] == ["efa"] + ["efa-only"] * 7
    b200 = catalog.gpu_for_device_name("NVIDIA B200")
    assert catalog.gpu_link(row).gb_s == 900.0 and b200 is not None and b200.name == "B200"


def test_every_built_in_efa_row_is_one_the_efa_device_plugin_lists_and_has_a_gpu_link():
    listed = catalog.EFA_DEVICE_PLUGIN_ALLOWLISTS["v0.5.30"]
    for name, row in catalog.GPU_INSTANCES.items():
        if row.efa_capable:
            assert name in listed, name
            assert catalog.gpu_link(row).gb_s > 0


B300 = {
    "name": "p6-b300.48xlarge",
    "gpus": 8,
    "gpuName": "B300",
    "gpuMemoryGib": 268,
    "peakBf16Tflops": 2250,
    "memoryBandwidthGbS": 8000,
    "vcpus": 192,
    "memoryGib": 4096,
    "efaInterfaces": 16,
    "networkGbps": 6400,
    "usdPerHour": 150.0,
    "gpudirectRdma": True,
    "gpuLinkGbS": 900,
}


def test_a_described_type_gets_every_derived_value_a_built_in_row_gets():
    row = catalog.describe_gpu_instance(B300)
    assert row.described and row.gpu.name == "B300" and catalog.gpu_link(row).gb_s == 900
    assert len(catalog.efa_network_interfaces(row)) == 16 and catalog.use_device_rdma(row)
    assert (
        catalog.worker_pod_resources(row).efa == 16 and catalog.allreduce_floor_gbps(row) == 240.0
    )  # 6400 / 8 x 0.6 x 0.5
    # a GPU the catalog knows brings its facts: no memory or peak needed
    known = catalog.describe_gpu_instance(
        {k: v for k, v in B300.items() if k not in ("gpuMemoryGib", "peakBf16Tflops", "memoryBandwidthGbS")}
        | {"gpuName": "B200", "name": "p6-b200x.48xlarge"}
    )
    assert known.gpu == catalog.GPUS["B200"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"efaInterfaces": 0}, "efaInterfaces must be >= 1: p6-b300.48xlarge needs EFA"),
        ({"gpus": 0}, "gpus must be >= 1"),
        ({"name": "p5.48xlarge"}, "name p5.48xlarge is in the catalog already"),
        ({"name": "B300 box"}, "name must be an EC2 instance type"),
        ({"usdPerHour": "cheap"}, "usdPerHour must be a number"),
        ({"peakBf16Tflops": None}, "peakBf16Tflops is required for a GPU the catalog does not know"),
        ({"nvlink": True}, "unknown keys nvlink"),
    ],
)
def test_a_described_type_is_checked_like_a_built_in_row(change, message):
    description = {k: v for k, v in {**B300, **change}.items() if v is not None}
    with pytest.raises(catalog.CatalogError, match=message):
        catalog.describe_gpu_instance(description)


def test_a_row_built_in_python_is_checked_and_can_be_added_by_name():
    row = catalog.describe_gpu_instance(B300)
    try:
        assert catalog.add_gpu_instance(row) is row and catalog.gpu_instance("p6-b300.48xlarge") == row
        assert catalog.add_gpu_instance(row) is row  # the same row twice is fine
        no_efa = dataclasses.replace(row, name="p6-b300x.48xlarge", efa_interfaces=0)
        with pytest.raises(catalog.CatalogError, match="efaInterfaces must be >= 1"):
            catalog.usable_gpu_instance(no_efa)
        with pytest.raises(catalog.CatalogError, match="in the catalog with other facts"):
            catalog.usable_gpu_instance(dataclasses.replace(catalog.gpu_instance("p5.48xlarge"), usd_per_hour=1.0))
    finally:
        catalog.GPU_INSTANCES.pop("p6-b300.48xlarge", None)


# -- one contract: a row holds every fact of its type, and built-in and described rows get the same defaults ------


def test_secondary_cards_are_efa_only_on_the_rows_that_say_so():
    # p5.48xlarge's 31 secondary cards save 31 private IPs; g6e.48xlarge and p4d keep `efa` (an IP per card)
    assert (
        catalog.gpu_instance("p5.48xlarge").efa_only_secondary
        and catalog.gpu_instance("p5en.48xlarge").efa_only_secondary
    )
    assert not catalog.gpu_instance("g6e.48xlarge").efa_only_secondary
    assert not catalog.gpu_instance("p4d.24xlarge").efa_only_secondary


def test_a_described_type_with_g6e_48xlarge_facts_builds_the_same_launch_template_interfaces():
    # GIVEN the facts of g6e.48xlarge as AWS's specification page gives them, described under another name and
    # another family (so nothing can come from a table by family); efaOnlySecondary and gpuLinkGbS left unsaid
    built_in = catalog.gpu_instance("g6e.48xlarge")
    described = catalog.describe_gpu_instance(
        {
            "name": "x6e.48xlarge",
            "gpus": 8,
            "gpuName": "L40S",
            "vcpus": 192,
            "memoryGib": 1536,
            "efaInterfaces": 4,
            "networkGbps": 400,
            "usdPerHour": 30.1312,
        }
    )
    # THEN its launch template gets the same interfaces: efa on every card, as the built-in row
    assert catalog.efa_network_interfaces(described) == catalog.efa_network_interfaces(built_in)
    assert [i["InterfaceType"] for i in catalog.efa_network_interfaces(described)] == ["efa"] * 4
    # and every other fact but its name and the charts that list it is the built-in row's
    assert (
        dataclasses.replace(described, name=built_in.name, described=False, allowlisted_by=built_in.allowlisted_by)
        == built_in
    )


@pytest.mark.parametrize("name", [name for name, row in catalog.GPU_INSTANCES.items() if row.efa_capable])
def test_every_built_in_row_described_again_is_the_same_row(name):
    # GIVEN a built-in row's own description (every key), under a name the catalog does not build in
    row = catalog.gpu_instance(name)
    described = catalog.describe_gpu_instance({**catalog.description_of(row), "name": "x" + name})
    # THEN it is the same row: the same defaults, link and interfaces, whichever way the type came in
    assert dataclasses.replace(described, name=name, described=False, allowlisted_by=row.allowlisted_by) == row
    assert catalog.efa_network_interfaces(described) == catalog.efa_network_interfaces(row)


def test_the_views_by_family_and_name_are_the_rows_facts():
    rows = catalog.GPU_INSTANCES.values()
    assert (
        catalog.CAPACITY_BLOCK_INSTANCES
        == {row.name for row in rows if row.capacity_blocks}
        == {"p4d.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge"}
    )  # EC2 User Guide, Capacity Blocks
    assert catalog.EFA_ONLY_FAMILIES == {row.family for row in rows if row.efa_only_secondary}
    for row in rows:
        assert catalog.GPU_LINKS[row.family] == row.gpu_link == catalog.gpu_link(row)
    # each family has one link and one efa-only choice, so the views by family lose nothing
    for family in catalog.GPU_LINKS:
        same = [row for row in rows if row.family == family]
        assert len({row.gpu_link for row in same}) == 1 and len({row.efa_only_secondary for row in same}) == 1


def test_chart_allowlists_are_the_rows_and_the_types_without_a_row():
    from ray_efa.core import addons

    for chart, allowlists in (
        (catalog.EFA_PLUGIN_CHART, catalog.EFA_DEVICE_PLUGIN_ALLOWLISTS),
        (catalog.EFA_DRA_CHART, addons.EFA_DRA_DRIVER_ALLOWLISTS),
    ):
        assert allowlists, chart
        for version, names in allowlists.items():
            key = f"{chart} {version}"
            rows = {row.name for row in catalog.GPU_INSTANCES.values() if key in row.allowlisted_by}
            assert names == rows | catalog.CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW[key]
            assert not catalog.CHART_ALLOWLISTED_TYPES_WITHOUT_A_ROW[key] & set(catalog.GPU_INSTANCES)
    assert (
        addons.EFA_DEVICE_PLUGIN.chart == catalog.EFA_PLUGIN_CHART
        and addons.EFA_DRA_DRIVER.chart == catalog.EFA_DRA_CHART
    )


def test_a_described_type_is_listed_by_the_charts_that_list_its_name():
    row = catalog.describe_gpu_instance(B300)
    assert row.allowlisted_by == {f"{catalog.EFA_PLUGIN_CHART} v0.5.30", f"{catalog.EFA_DRA_CHART} 1.0.0"}
    assert catalog.efa_plugin_supports(row.name, "v0.5.30") and not catalog.efa_plugin_supports(row.name, "v0.5.29")
