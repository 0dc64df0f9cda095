"""The preflight's all-reduce floor (core.preflight_floor): from the catalog over EFA, the socket model over TCP, or
the preflightMinBusbwGbps setting."""

from __future__ import annotations

import pytest

from ray_efa.core import catalog, perf
from ray_efa.core.preflight_floor import floor_gbps, preflight_floor
from ray_efa.core.settings import Settings


def test_floor_comes_from_the_catalog_unless_the_setting_overrides_it():
    settings = Settings.from_context({})
    assert floor_gbps(settings) == catalog.allreduce_floor_gbps(settings.nodes.gpu_instance)
    assert floor_gbps(Settings.from_context({"preflightMinBusbwGbps": "3.5"})) == 3.5
    configured = preflight_floor(Settings.from_context({"preflightMinBusbwGbps": "3.5", "network": "tcp"}))
    assert configured.as_dict() == {
        "floor_gb_s": 3.5,
        "source": "setting preflightMinBusbwGbps",
        "network": "tcp",
        "healthy_gb_s": None,
        "margin": None,
        "judged": True,
    }


@pytest.mark.parametrize("instance", ["g6e.24xlarge", "g6e.48xlarge"])
def test_a_healthy_g6e_job_is_not_held_to_half_its_line_rate(instance):
    # 200 and 400 Gbit/s of EFA, but no GPUDirect RDMA: nccl-tests on g6e max out at 3 GB/s (aws/aws-ofi-nccl#547),
    # where half the line rate asked 12.5 and 25 GB/s
    floor = preflight_floor(Settings.from_context({"gpuInstanceType": instance}))
    assert floor.network == "efa" and floor.floor_gb_s <= 2.5
    assert floor.source.startswith("catalog: no GPUDirect RDMA") and "aws/aws-ofi-nccl#547" in floor.source


@pytest.mark.parametrize("placement", [{}, {"capacityReservationId": "cr-0123456789abcdef0"}])
def test_the_tcp_job_gets_the_socket_models_floor_never_the_efa_floor(placement):
    # GIVEN the TCP comparison run on the default 2 x g6.12xlarge, in a placement group or not
    settings = Settings.from_context({"network": "tcp", **placement})
    floor = preflight_floor(settings)
    instance, in_group = settings.nodes.gpu_instance, settings.nodes.use_placement_group
    # THEN its floor is the margin of the socket model's link with the sockets the job opens: under 1.5 GB/s
    assert floor.network == "tcp" and floor.floor_gb_s <= 1.5
    assert floor.floor_gb_s == round(perf.socket_gb_s(instance, placement_group=in_group) * catalog.FLOOR_MARGIN, 2)
    assert floor.floor_gb_s != preflight_floor(settings.replace(network="efa")).floor_gb_s
    assert "2 threads x 8 sockets" in floor.source and ("in a" if in_group else "outside a") in floor.source


def test_a_single_node_floor_is_reported_but_not_judged():
    assert preflight_floor(Settings.from_context({"gpuNodeCount": 1})).judged is False
    assert preflight_floor(Settings.from_context({})).judged is True
