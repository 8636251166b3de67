"""The documentation stays true to the tree: a short README, an index of every page, links
and file names that exist, and a module map that names every module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
# A short front door: what healthd is, install, run once, the tests, the ways to run it,
# the checks, where to go next. Depth lives in docs/.
README_MAX_LINES = 200
# Markdown links: [text](target), the target without its #anchor.
LINK = re.compile(r"\]\(([^)\s]+)\)")
# Code spans that name a file or folder of the repository.
# A `path:name` span names the file too; `NAME` is the recipe's placeholder for a new check.
PATH_SPAN = re.compile(r"`((?:healthd|healthd_checks|tests|docs|bench|deploy|packaging|fixtures)/[\w./-]*)(?::\w+)?`")


def _pages() -> list[Path]:
    guides = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "CHANGELOG.md", REPO / "bench" / "README.md"]
    return [*guides, *sorted(DOCS.glob("*.md"))]


def _slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def test_the_readme_is_a_short_front_door() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move depth to docs/"


def test_the_docs_index_names_every_page() -> None:
    index = (DOCS / "README.md").read_text()
    linked = {target.split("#")[0] for target in LINK.findall(index)}
    pages = [p.name for p in sorted(DOCS.iterdir()) if p.suffix in (".md", ".json") and p.name != "README.md"]
    missing = [name for name in pages if name not in linked]
    assert not missing, f"docs/README.md does not index: {missing}"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: broken links {broken}"


@pytest.mark.parametrize("name", ["CONTRIBUTING.md", "docs/architecture.md", "docs/checks.md"])
def test_every_file_a_guide_names_exists(name: str) -> None:
    text = (REPO / name).read_text()
    named = {span for span in PATH_SPAN.findall(text) if "NAME" not in span}
    missing = sorted(span for span in named if not (REPO / span.rstrip("/")).exists())
    assert not missing, f"{name} names files that do not exist: {missing}"


def test_the_module_map_names_every_module() -> None:
    text = (DOCS / "architecture.md").read_text()
    modules = [
        p
        for package in ("healthd", "healthd_checks")
        for p in sorted((REPO / package).rglob("*.py"))
        if p.name not in ("__init__.py", "__main__.py")
    ]
    assert len(modules) > 100
    unnamed = [str(p.relative_to(REPO)) for p in modules if f"`{p.relative_to(REPO)}`" not in text]
    assert not unnamed, f"docs/architecture.md does not name: {unnamed}"
