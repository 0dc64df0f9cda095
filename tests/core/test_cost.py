from __future__ import annotations

import pytest

from ray_efa.core.cost import hourly_cost
from ray_efa.core.settings import Settings


def test_default_cost_breakdown():
    cost = hourly_cost(Settings())
    assert cost.gpu_nodes == pytest.approx(2 * 4.6016)
    assert cost.system_nodes == pytest.approx(0.2016)
    assert (cost.control_plane, cost.nat_gateways) == (0.10, 0.045)
    assert cost.total == pytest.approx(9.55, abs=0.01)
    assert cost.without_gpu_stack == pytest.approx(cost.total - cost.gpu_nodes)


def test_cost_scales_with_gpu_nodes_and_skips_nat_of_an_existing_vpc():
    cost = hourly_cost(
        Settings.from_context({"gpuInstanceType": "p5.48xlarge", "gpuNodeCount": 4, "vpcId": "vpc-0123456789abcdef0"})
    )
    assert cost.gpu_nodes == pytest.approx(4 * 55.04)
    assert cost.nat_gateways == 0
