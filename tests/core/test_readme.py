"""The README's generated tables match the code (regenerate with `python tools/settings_table.py --write`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("settings_table", ROOT / "tools" / "settings_table.py")
settings_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(settings_table)


@pytest.mark.parametrize("name", settings_table.TABLES)
def test_readme_table_is_current(name):
    readme = (ROOT / "README.md").read_text()
    assert settings_table.readme_section(readme, name) == settings_table.TABLES[name](), (
        f"README.md's {name} table is stale: run `python tools/settings_table.py --write`")


def test_readme_quickstart_is_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("##", 1)[0]
    assert "make demo" in quickstart and "make test" in quickstart
    # and it is the first section a reader meets, right after the one-paragraph overview
    sections = [line for line in readme.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Quickstart", sections[:3]
