"""The NCCL/libfabric environment of each network (core.pod_env), shared by the manifests and the driver."""

from __future__ import annotations

from pathlib import Path

import pytest

from ray_efa.core import catalog, pod_env
from ray_efa.core.pod_env import GATE_LOG_SUBSYSTEMS, NETWORKS, expected_transport, network_env
from ray_efa.core.settings import Settings, SettingsError, setting_keys
from ray_efa.training.transport import EXPECTS
from ray_efa.training.transport import network_env as reexported


def test_efa_env_on_an_instance_without_gpudirect_rdma():
    # GIVEN g6.12xlarge (EFA, no GPUDirect RDMA)
    # WHEN the EFA environment is built
    env = network_env("efa", catalog.gpu_instance("g6.12xlarge"))
    # THEN it selects the OFI plugin on the efa provider, on eth0, with the INFO log, and no device RDMA
    assert env == {
        "FI_PROVIDER": "efa",
        "NCCL_NET_PLUGIN": "ofi",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "INFO",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }


@pytest.mark.parametrize("name", sorted(n for n, row in catalog.GPU_INSTANCES.items() if row.efa_capable))
def test_device_rdma_follows_the_catalog(name):
    # GIVEN every EFA instance type of the catalog
    env = network_env("efa", name)
    # THEN FI_EFA_USE_DEVICE_RDMA=1 appears exactly where GPUDirect RDMA exists (it aborts ranks on g5/g6/g6e)
    assert ("FI_EFA_USE_DEVICE_RDMA" in env) == catalog.use_device_rdma(catalog.gpu_instance(name))
    assert env.get("FI_EFA_USE_DEVICE_RDMA", "1") == "1"


def test_tcp_env_forces_nccls_socket_transport_and_keeps_the_plugin_out():
    env = network_env("tcp", "p5.48xlarge")
    assert env == {
        "NCCL_NET": "Socket",
        "FI_PROVIDER": "tcp",
        "NCCL_NET_PLUGIN": "none",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "INFO",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "NCCL_SOCKET_NTHREADS": "2",
        "NCCL_NSOCKS_PERTHREAD": "8",
    }


def test_tcp_env_sets_the_sockets_from_the_card_and_the_placement_group():
    # a pod's eth0 has no /sys/class/net/eth0/device: without these NCCL would open 1 socket a connection
    # p5en's card 0 is 200 Gbit/s: 20 flows of 10 Gbit/s in a placement group, 40 of 5 outside
    assert network_env("tcp", "p5en.48xlarge")["NCCL_SOCKET_NTHREADS"] == "3"
    outside = network_env("tcp", "p5en.48xlarge", placement_group=False)
    assert (outside["NCCL_SOCKET_NTHREADS"], outside["NCCL_NSOCKS_PERTHREAD"]) == ("5", "8")
    # EFA's env has neither: NCCL's socket transport carries nothing there
    assert not {"NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD"} & set(network_env("efa", "p5en.48xlarge"))


def test_each_call_returns_a_fresh_dict():
    env = network_env("efa", "g6.12xlarge")
    env["NCCL_DEBUG"] = "WARN"
    assert network_env("efa", "g6.12xlarge")["NCCL_DEBUG"] == "INFO"


def test_an_unknown_network_is_rejected_naming_the_allowed_values():
    with pytest.raises(ValueError, match=r"network must be one of efa, tcp, got 'ib'"):
        network_env("ib", "g6.12xlarge")


def test_an_instance_without_efa_is_rejected_by_the_catalog():
    with pytest.raises(catalog.CatalogError, match="no EFA support"):
        network_env("efa", "g6.xlarge")


def test_networks_are_the_settings_choices():
    assert NETWORKS == setting_keys()["network"][1].choices == ("efa", "tcp")


@pytest.mark.parametrize("network, expect", [("efa", "efa"), ("tcp", "socket")])
def test_each_network_names_the_transport_the_gate_expects(network, expect):
    assert expected_transport(network) == expect
    assert expect in EXPECTS


def test_transport_reexports_network_env():
    assert reexported is network_env


@pytest.mark.parametrize("value", ["INIT,NET", "init,net,env", "ALL", "^COLL,P2P", "INIT,BOOTSTRAP,ENV,NET"])
def test_an_nccl_debug_subsys_that_keeps_the_gates_lines_goes_to_the_pods(value):
    settings = Settings.from_context({"ncclDebugSubsys": value})
    assert settings.workload.nccl_debug_subsys == value
    assert network_env("efa", "g6.12xlarge", debug_subsys=value)["NCCL_DEBUG_SUBSYS"] == value
    assert "NCCL_DEBUG_SUBSYS" not in network_env("efa", "g6.12xlarge")  # unset: NCCL's default (INIT, BOOTSTRAP, ENV)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("INIT,BOOTSTRAP,ENV", "leaves out NET"),  # NCCL 2.29's default, written out: no NET
        ("COLL", "leaves out INIT and NET"),
        ("^NET", "leaves out NET"),
        ("^ALL", "leaves out INIT and NET"),
        ("INIT,NETT", "names no NCCL subsystem (NETT)"),
    ],
)
def test_an_nccl_debug_subsys_that_hides_the_gates_lines_is_refused_naming_the_setting(value, why):
    with pytest.raises(SettingsError) as raised:
        Settings.from_context({"ncclDebugSubsys": value})
    [problem] = raised.value.problems
    assert problem.key == "ncclDebugSubsys" and why in problem.message
    assert "must keep INIT and NET" in problem.message or "must be a comma list of INIT" in problem.message
    assert repr(value) in str(raised.value)  # the value itself


def test_nccl_does_not_log_every_subsystem_by_default_and_the_gate_says_which_it_needs():
    # NCCL 2.29.7 src/debug.cc: the default mask is INIT | BOOTSTRAP | ENV; the gate's lines are INIT (and INIT|NET)
    assert GATE_LOG_SUBSYSTEMS == ("INIT", "NET")
    assert "logs them all by default" not in (pod_env.__doc__ or "") + Path(pod_env.__file__).read_text()
