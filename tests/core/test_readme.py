"""The README stays a page read in ten minutes: the quickstart is the two commands, first; the reference lives in
docs/ (tests/test_docs_site.py builds it and checks the README's links into it)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_readme_quickstart_is_the_two_commands():
    quickstart = README.split("## Quickstart", 1)[1].split("##", 1)[0]
    block = quickstart.split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in block.splitlines()] == ["make demo", "make test"]
    # and it is the first section a reader meets, right after the one-paragraph overview
    sections = [line for line in README.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Quickstart", sections[:3]


def test_readme_is_short_and_says_where_the_reference_is():
    assert len(README.splitlines()) <= 250
    sections = [line[3:] for line in README.splitlines() if line.startswith("## ")]
    assert sections == [
        "Quickstart",
        "Your own training",
        "Deploy, run, destroy",
        "Embedding in a platform repository",
        "Reference",
        "Development",
    ]
    # the reference is the docs pages, not generated tables copied into the README
    assert "<!-- BEGIN" not in README
