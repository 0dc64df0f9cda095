"""Print the docs' generated tables: every setting (core.settings) and the EFA GPU instance types (core.catalog),
and the lists of types and families their prose names (Capacity Blocks, efa-only cards, GPUDirect RDMA).

    python tools/settings_table.py            print them
    python tools/settings_table.py --write    update every page of docs/ that holds one, in place

A page holds each between <!-- BEGIN X --> and <!-- END X --> markers, wherever it sits (docs/settings.md holds
SETTINGS, docs/instances.md INSTANCES); tests/test_docs_site.py fails when one differs from what this prints, or when
no page holds it, so the tables cannot drift from the code.
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
    if isinstance(value, dict):  # a node selector, as `-c` takes it; an empty object as JSON
        return ",".join(f"{k}={v}" for k, v in value.items()) or "{}"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "(none)"
    return str(value).replace("|", "\\|")


def _prose(text: str) -> str:
    """Markdown of a description: `<` outside code spans escaped, so that `<name>` shows instead of being a tag."""
    parts = text.split("`")
    return "`".join(part if i % 2 else part.replace("<", "&lt;") for i, part in enumerate(parts))


def settings_table() -> str:
    defaults = Settings().to_context()
    rows = ["| section | key (`-c key=value`) | default | allowed | what |", "|---|---|---|---|---|"]
    for key, (section, info) in setting_keys().items():
        allowed = ", ".join(map(str, info.choices)) if info.choices else ""
        rows.append(f"| {section} | `{key}` | `{_cell(defaults[key])}` | {allowed} | {_prose(info.doc)} |")
    return "\n".join(rows)


def _efa_rows() -> list[catalog.GpuInstanceType]:
    return [row for row in catalog.GPU_INSTANCES.values() if row.efa_capable]


def instances_table() -> str:
    allowed = catalog.EFA_DEVICE_PLUGIN_ALLOWLISTS[Settings().addons.efa_device_plugin_version]
    rows = [
        "| `gpuInstanceType` | GPUs | GPU memory | vCPU / GiB | EFA interfaces | GPUDirect RDMA | GPU link | "
        "secondary cards | Capacity Blocks | worker pod CPU / memory / shm | EFA plugin default | USD/h per node |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in _efa_rows():
        pod = catalog.worker_pod_resources(row)
        secondary = "-" if row.efa_interfaces == 1 else "`efa-only`" if row.efa_only_secondary else "`efa`"
        rows.append(
            f"| `{row.name}` | {row.gpus} x {row.gpu.name} | {row.gpu.memory_gib:g} GiB | {row.vcpus} / {row.memory_gib} | "
            f"{row.efa_interfaces} | {'yes' if row.gpudirect_rdma else 'no'} | {row.gpu_link.name} | {secondary} | "
            f"{'yes' if row.capacity_blocks else 'no'} | {pod.cpu} / {pod.memory_gib} GiB / {pod.shm_gib} GiB | "
            f"{'listed' if row.name in allowed else 'NOT listed'} | {row.usd_per_hour:.2f} |"
        )
    return "\n".join(rows)


def _and(names: list[str]) -> str:
    names = list(dict.fromkeys(names))  # once each, in the catalog's order
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)


# Lists inside the pages' prose, from the same rows (one line each between the markers).
LISTS = {
    "CAPACITY_BLOCK_TYPES": lambda: ", ".join(row.name for row in _efa_rows() if row.capacity_blocks),
    "EFA_ONLY_FAMILIES": lambda: _and(
        [row.family for row in _efa_rows() if row.efa_only_secondary and row.efa_interfaces > 1]
    ),
    "GPUDIRECT_RDMA_FAMILIES": lambda: _and([row.family for row in _efa_rows() if row.gpudirect_rdma]),
    "HOST_STAGED_FAMILIES": lambda: _and([row.family for row in _efa_rows() if not row.gpudirect_rdma]),
}

TABLES = {"SETTINGS": settings_table, "INSTANCES": instances_table, **LISTS}


def _marked(name: str) -> re.Pattern[str]:
    # A table sits on lines of its own between the markers, a list inside a line.
    return re.compile(rf"(<!-- BEGIN {name} -->\n?)(.*?)(\n?<!-- END {name} -->)", re.S)


DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """The Markdown pages that may hold generated sections: docs/ and its subfolders."""
    return sorted(DOCS.rglob("*.md"))


def marked_sections(text: str, name: str) -> list[str]:
    """What sits between each pair of `name`'s markers in `text`, in order."""
    return [match.group(2) for match in _marked(name).finditer(text)]


def main() -> None:
    if "--write" in sys.argv:
        for path in pages():
            text = path.read_text(encoding="utf-8")
            updated = text
            for name, make in TABLES.items():
                updated = _marked(name).sub(lambda m, make=make: m.group(1) + make() + m.group(3), updated)
            if updated != text:
                path.write_text(updated, encoding="utf-8")
                print(f"wrote {path.relative_to(ROOT)}")
    else:
        for name, make in TABLES.items():
            print(f"{name}:\n{make()}" if name in LISTS else make(), end="\n\n")


if __name__ == "__main__":
    main()
