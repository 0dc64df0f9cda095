"""The reference site (mkdocs.yml, docs/): `mkdocs build --strict` passes, and it fails on a broken link, a missing
anchor or a page left out of the nav; every relative link of the README lands on a file, and on a heading of the
built page; the generated tables of the pages match the code; tables and lists render whole.

Regenerate the tables with `python tools/settings_table.py --write`.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
spec = importlib.util.spec_from_file_location("settings_table", ROOT / "tools" / "settings_table.py")
assert spec is not None and spec.loader is not None
settings_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(settings_table)


def _build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of `project`/mkdocs.yml into `site`, as `make docs` runs it."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(project / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = _build(ROOT, out)
    assert result.returncode == 0, result.stderr[-4000:]
    return out


def test_the_site_builds_strictly_with_every_page(site):
    # every Markdown page of docs/ became a page of the site (the strict build refuses one left out of the nav)
    for page in DOCS.rglob("*.md"):
        assert _built_page(site, page).is_file(), page


def _copy_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    shutil.copytree(DOCS, project / "docs")
    return project


@pytest.mark.parametrize(
    ("breakage", "named"),
    [
        ("link", "no-such-page.md"),
        ("anchor", "#no-such-heading"),
        ("orphan", "orphan.md"),
    ],
)
def test_the_strict_build_fails_on_what_would_break_a_reader(tmp_path, breakage, named):
    # GIVEN a copy of the site's sources with one thing broken
    project = _copy_project(tmp_path)
    settings = project / "docs" / "settings.md"
    if breakage == "link":
        settings.write_text(settings.read_text() + "\nSee [a page](no-such-page.md).\n")
    elif breakage == "anchor":
        settings.write_text(settings.read_text() + "\nSee [a heading](deploy.md#no-such-heading).\n")
    else:
        (project / "docs" / "orphan.md").write_text("# A page no nav names\n")
    # WHEN it is built as `make docs` builds it
    result = _build(project, tmp_path / "site")
    # THEN the build fails, naming what broke
    assert result.returncode != 0
    assert named in result.stderr, result.stderr[-2000:]


def _built_page(site: Path, page: Path) -> Path:
    """Where mkdocs (use_directory_urls) writes docs/<page>.md: <site>/<page>/index.html, index.md at the top."""
    relative = page.relative_to(DOCS).with_suffix("")
    return site / "index.html" if relative.name == "index" else site / relative / "index.html"


def _relative_links(markdown: str) -> list[str]:
    """The targets of the Markdown links and images that point into the repository, not at a URL or this page."""
    without_code = re.sub(r"```.*?```", "", markdown, flags=re.S)
    targets = re.findall(r"\]\(([^)\s]+)\)", without_code)
    return [t for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_every_readme_link_lands_on_a_file_and_a_heading(site):
    # GIVEN the README's links (relative, so that they work on GitHub as well)
    links = _relative_links((ROOT / "README.md").read_text())
    assert any(link.startswith("docs/settings.md") for link in links), "the README no longer links the reference"
    for link in links:
        path, _, anchor = link.partition("#")
        # THEN each names a file of the repository
        assert (ROOT / path).exists(), link
        # and each anchor into a page is a heading of that page as the site builds it (GitHub's anchors: mkdocs.yml)
        if anchor:
            html = _built_page(site, ROOT / path).read_text()
            assert f'id="{anchor}"' in html, link


def test_the_readme_links_every_page():
    # GIVEN the pages of the site (the strict build keeps each in the nav)
    pages = {page.relative_to(ROOT).as_posix() for page in DOCS.rglob("*.md")} - {"docs/index.md"}
    # THEN the README's Reference section says where each one is
    reference = (ROOT / "README.md").read_text().split("\n## Reference\n", 1)[1].split("\n## ", 1)[0]
    linked = {link.partition("#")[0] for link in _relative_links(reference)}
    assert pages <= linked, f"add a row for each to the README's Reference table: {sorted(pages - linked)}"


@pytest.mark.parametrize("name", settings_table.TABLES)
def test_generated_sections_are_current(name):
    # GIVEN every page of docs/ that holds the section's markers
    found = [
        (page, section)
        for page in settings_table.pages()
        for section in settings_table.marked_sections(page.read_text(encoding="utf-8"), name)
    ]
    # THEN at least one does, and each holds what the code prints now
    assert found, f"no page of docs/ holds <!-- BEGIN {name} --> ... <!-- END {name} -->"
    for page, section in found:
        assert section == settings_table.TABLES[name](), (
            f"{page.relative_to(ROOT)}'s {name} is stale: run `python tools/settings_table.py --write`"
        )


def render_problems(markdown: str) -> list[str]:
    """Tables and lists that Python-Markdown (the site) would not render whole: a table row right after a paragraph
    (it joins the paragraph), a table without its header separator, a list right after a paragraph (no blank line:
    it stays in the paragraph, though GitHub renders it)."""
    problems = []
    lines = markdown.split("\n")
    fenced = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced or i == 0:
            continue
        previous = lines[i - 1]
        if line.startswith("|") and not previous.startswith("<!-- "):
            if not previous.strip():
                if i + 1 == len(lines) or not re.match(r"^\|(\s*:?-+:?\s*\|)+\s*$", lines[i + 1]):
                    problems.append(f"line {i + 1}: a table without its header separator")
            elif not previous.startswith("|"):
                problems.append(f"line {i + 1}: a table row right after a paragraph")
        if re.match(r"(- |\* |\d+\. )", line) and previous.strip() and not re.match(r"(\s+|- |\* |\d+\. )", previous):
            problems.append(f"line {i + 1}: a list right after a paragraph")
    return problems


def test_the_render_check_finds_a_table_cut_by_a_paragraph():
    # GIVEN a table whose last row follows a paragraph that was put inside it, and a list glued to its paragraph
    broken = "| a | b |\n|---|---|\n| 1 | 2 |\n\nA paragraph put in between.\n| 3 | 4 |\n\nText:\n- item\n"
    assert render_problems(broken) == [
        "line 6: a table row right after a paragraph",
        "line 9: a list right after a paragraph",
    ]


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))], ids=lambda p: p.name)
def test_tables_and_lists_render_whole(page):
    assert render_problems(page.read_text(encoding="utf-8")) == []
