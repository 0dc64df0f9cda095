"""The catalog's kubelet reserve (catalog.node_allocatable, the one place it is computed) against EKS nodes as they
register: the recorded Nodes of tests/cluster/fixtures/nodes.json, which the control-plane tests' nodes are, and
the EKS AMI's published formula, checked on the node recorded from a real cluster.

The EKS AMI's formula (awslabs/amazon-eks-ami: nodeadm's kubelet config, formerly bootstrap.sh; EKS User Guide,
"Choose an optimal Amazon EC2 node instance type"): kube-reserved CPU is 6% of the first core, 1% of the second, 0.5%
of the third and fourth and 0.25% of every other; kube-reserved memory is 11 MiB per pod the node may run plus 255 MiB;
the hard eviction threshold memory.available is 100 MiB; allocatable is capacity less both.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ray_efa.core import catalog

NODES = Path(__file__).parents[1] / "cluster" / "fixtures" / "nodes.json"
RECORDED = "g5.8xlarge"
"""The type whose node is recorded from a real EKS cluster (aws/aws-k8s-tester pull request 471)."""


def _recorded() -> dict[str, dict]:
    return {
        n["metadata"]["labels"]["node.kubernetes.io/instance-type"]: n["status"]
        for n in json.loads(NODES.read_text())["items"]
    }


def _millicores(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(quantity) * 1000


def _mib(quantity: str) -> float:
    assert quantity.endswith("Ki"), quantity
    return int(quantity[:-2]) / 1024


def eks_reserved(vcpus: int, max_pods: int) -> tuple[float, int]:
    """(millicores, MiB) the EKS AMI's formula takes from capacity: kube-reserved and the eviction threshold."""
    steps = [60, 10, 5, 5][:vcpus]
    return sum(steps) + 2.5 * max(0, vcpus - 4), 11 * max_pods + 255 + 100


def test_the_recorded_real_node_is_the_eks_formula():
    status = _recorded()[RECORDED]
    capacity, allocatable = status["capacity"], status["allocatable"]
    cpu, memory = eks_reserved(int(capacity["cpu"]), int(capacity["pods"]))
    assert _millicores(capacity["cpu"]) - _millicores(allocatable["cpu"]) == math.ceil(cpu)
    assert _mib(capacity["memory"]) - _mib(allocatable["memory"]) == memory


@pytest.mark.parametrize(
    "instance", [*catalog.GPU_INSTANCES.values(), *catalog.SYSTEM_INSTANCES.values()], ids=lambda i: i.name
)
def test_the_catalog_never_counts_on_more_than_an_eks_node_offers(instance):
    # every type the catalog sizes pods for has a recorded node; the catalog's allocatable is at most the node's:
    # the same CPU (its reserve is EKS's formula, not a constant of its own), no more memory (it counts the kernel's
    # share of EC2's memory low, and maxPods at its cap)
    status = _recorded()[instance.name]
    millicores, mib = catalog.node_allocatable(instance)
    allocatable = status["allocatable"]
    assert millicores == _millicores(allocatable["cpu"]), instance.name
    assert mib <= _mib(allocatable["memory"]), instance.name
    assert int(status["capacity"]["cpu"]) == instance.vcpus
    assert int(allocatable.get("nvidia.com/gpu", 0)) == getattr(instance, "gpus", 0)
    assert int(allocatable.get("vpc.amazonaws.com/efa", 0)) == getattr(instance, "efa_interfaces", 0)
