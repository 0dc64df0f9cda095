"""Build sysfs trees laid out as the kernel's efa driver lays them out, for the counter tests.

/sys/class/infiniband/<dev> is a symlink into the PCI device's folder; <dev>/device links back to the PCI function,
whose `driver` links to the efa driver and whose `vendor` is Amazon's 0x1d0f; the counters are one decimal number per
file in ports/<port>/hw_counters/, named as in amzn-drivers kernel/linux/efa/src/efa_verbs.c (EFA_DEFINE_PORT_STATS),
beside the rdma core's `lifespan` file. /sys/class/infiniband_verbs/uverbsN/ibdev names the device of each
/dev/infiniband/uverbsN (drivers/infiniband/core/uverbs_main.c, ibdev_show).

`hw_counters=False` lays out what a pod's own /sys shows: the compat copy of each device that the RDMA core makes for a
network namespace other than the host's, with its ports but no hw_counters (drivers/infiniband/core/sysfs.c
setup_port: `if (port_num && is_full_dev)`).
"""

from __future__ import annotations

import os
from pathlib import Path

from ray_efa.training.efa_counters import PORT_COUNTERS


def make_efa_sysfs(
    base: Path,
    devices: dict[str, dict[str, int | str]],
    *,
    guid_prefix: str = "0a1b:2c3d:4e5f",
    uverbs: int | None = None,
    mlx5: bool = False,
    hw_counters: bool = True,
    pod_devices: tuple[str, ...] | None = None,
) -> tuple[Path, Path]:
    """(sysfs root /sys/class/infiniband, /dev/infiniband) under `base`, one EFA device per entry of `devices` with
    its counters (every other efa counter 0); the node's uverbsN map to the devices in order, and the pod holds
    `uverbs` of them (default all), or those of `pod_devices`."""
    sys_root = base / "sys"
    klass = sys_root / "class" / "infiniband"
    klass.mkdir(parents=True, exist_ok=True)
    drivers = sys_root / "bus" / "pci" / "drivers"
    (drivers / "efa").mkdir(parents=True, exist_ok=True)
    (drivers / "mlx5_core").mkdir(parents=True, exist_ok=True)
    for index, (name, values) in enumerate(devices.items()):
        pci = sys_root / "devices" / "pci0000:00" / f"0000:00:{0x1D + index:02x}.0"
        _device(klass, pci, name, drivers / "efa", "0x1d0f", f"{guid_prefix}:{index:04x}")
        hw = pci / "infiniband" / name / "ports" / "1" / "hw_counters"
        hw.parent.mkdir(parents=True)
        (hw.parent / "state").write_text("4: ACTIVE\n")
        if hw_counters:
            hw.mkdir()
            (hw / "lifespan").write_text("10\n")
            for counter in PORT_COUNTERS:
                (hw / counter).write_text(f"{values.get(counter, 0)}\n")
        verbs = sys_root / "class" / "infiniband_verbs" / f"uverbs{index}"
        verbs.mkdir(parents=True)
        (verbs / "ibdev").write_text(f"{name}\n")
    if mlx5:  # another RDMA device on the host: IB counters live in ports/1/counters, not hw_counters
        pci = sys_root / "devices" / "pci0000:00" / "0000:00:10.0"
        _device(klass, pci, "mlx5_0", drivers / "mlx5_core", "0x15b3", "b8ce:f603:00aa:0001")
        counters = pci / "infiniband" / "mlx5_0" / "ports" / "1" / "counters"
        counters.mkdir(parents=True)
        (counters / "port_xmit_data").write_text("123456\n")
    dev = base / "dev" / "infiniband"
    dev.mkdir(parents=True, exist_ok=True)
    names = list(devices)
    held = range(len(devices) if uverbs is None else uverbs) if pod_devices is None else map(names.index, pod_devices)
    for i in held:
        (dev / f"uverbs{i}").write_text("")
    return klass, dev


def _device(klass: Path, pci: Path, name: str, driver: Path, vendor: str, guid: str) -> None:
    folder = pci / "infiniband" / name
    folder.mkdir(parents=True)
    (pci / "vendor").write_text(vendor + "\n")
    _link(pci / "driver", driver)
    _link(folder / "device", pci)
    (folder / "node_guid").write_text(guid + "\n")
    (folder / "node_type").write_text("1: CA\n")
    _link(klass / name, folder)


def _link(link: Path, target: Path) -> None:
    """A relative link, as sysfs makes them (`../../devices/...`): it resolves wherever the tree is mounted."""
    link.symlink_to(os.path.relpath(target, link.parent))


def set_counter(klass: Path, device: str, counter: str, value: int | str) -> None:
    (klass / device / "ports" / "1" / "hw_counters" / counter).write_text(f"{value}\n")
