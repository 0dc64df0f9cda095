"""Print the README's generated tables: every setting (core.settings) and the EFA GPU instance types (core.catalog).

    python tools/settings_table.py            print both
    python tools/settings_table.py --write    update README.md in place

The README holds them between <!-- BEGIN X --> and <!-- END X --> markers; tests/core/test_readme.py fails when they
differ from what this prints, so the tables cannot drift from the code.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ray_efa.core import catalog  # noqa: E402
from ray_efa.core.settings import Settings, setting_keys  # noqa: E402


def _cell(value) -> str:
    if value is None:
        return "unset"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "(none)"
    return str(value).replace("|", "\\|")


def settings_table() -> str:
    defaults = Settings().to_context()
    rows = ["| section | key (`-c key=value`) | default | allowed | what |", "|---|---|---|---|---|"]
    for key, (section, info) in setting_keys().items():
        allowed = ", ".join(map(str, info.choices)) if info.choices else ""
        rows.append(f"| {section} | `{key}` | `{_cell(defaults[key])}` | {allowed} | {info.doc} |")
    return "\n".join(rows)


def instances_table() -> str:
    allowed = catalog.EFA_DEVICE_PLUGIN_ALLOWLISTS[Settings().addons.efa_device_plugin_version]
    rows = ["| `gpuInstanceType` | GPUs | GPU memory | vCPU / GiB | EFA interfaces | GPUDirect RDMA | worker pod CPU / memory / shm | "
            "EFA plugin default | USD/h per node |", "|---|---|---|---|---|---|---|---|---|"]
    for name, row in catalog.GPU_INSTANCES.items():
        if not row.efa_capable:
            continue
        pod = catalog.worker_pod_resources(row)
        rows.append(
            f"| `{name}` | {row.gpus} x {row.gpu.name} | {row.gpu.memory_gib:g} GiB | {row.vcpus} / {row.memory_gib} | "
            f"{row.efa_interfaces} | {'yes' if row.gpudirect_rdma else 'no'} | {pod.cpu} / {pod.memory_gib} GiB / {pod.shm_gib} GiB | "
            f"{'listed' if name in allowed else 'NOT listed'} | {row.usd_per_hour:.2f} |"
        )
    return "\n".join(rows)


TABLES = {"SETTINGS": settings_table, "INSTANCES": instances_table}


def readme_section(readme: str, name: str) -> str:
    match = re.search(rf"<!-- BEGIN {name} -->\n(.*?)\n<!-- END {name} -->", readme, re.S)
    return match.group(1) if match else ""


def main() -> None:
    if "--write" in sys.argv:
        path = ROOT / "README.md"
        text = path.read_text()
        for name, make in TABLES.items():
            text = text.replace(f"<!-- BEGIN {name} -->\n{readme_section(text, name)}\n<!-- END {name} -->",
                                f"<!-- BEGIN {name} -->\n{make()}\n<!-- END {name} -->")
        path.write_text(text)
    else:
        for make in TABLES.values():
            print(make(), end="\n\n")


if __name__ == "__main__":
    main()
