"""The documentation stays true to the tree: a short README, an index of every page, links
and file names that exist, module names in pages and docstrings that exist, a module map
that names every module, and every check documented.

A check's documentation is the project's or its own. The checks shipped with healthd have a
section in docs/builtin-checks.md and their modules in docs/architecture.md's map; a check
that keeps a ``README.md`` in its own package (a new one, or a third party's) is documented
there, and that page names its modules instead. Either way the check is found through its
entry point, the same declaration that makes healthd run it, so no list of checks is kept by
hand (docs/architecture.md, "Adding a check").
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from healthd_testkit.paths import PACKAGE_DIRS, PACKAGE_ROOTS

from healthd.checks.plugin import ENTRY_POINT_GROUP, entry_points_of

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
# A short front door: what healthd is, install, run once, the tests, the ways to run it,
# the checks, where to go next. Depth lives in docs/.
README_MAX_LINES = 200
# Markdown links: [text](target), the target without its #anchor.
LINK = re.compile(r"\]\(([^)\s]+)\)")
# Code spans that name a file or folder of the repository.
# A `path:name` span names the file too; `NAME` is the recipe's placeholder for a new check.
PATH_SPAN = re.compile(r"`((?:healthd|checks|tests|docs|bench|deploy|packaging|fixtures)/[\w./-]*)(?::\w+)?`")


# A finding's key (`healthd/PASS_FAILED`) looks like a path but is a check and a code.
FINDING_KEY = re.compile(r".*/[A-Z][A-Z0-9_]*")
# What the guides write for a check of the reader's: `NAME`, and the example `widgets` check
# of CONTRIBUTING.md's recipe and docs/checks.md (tests/test_new_check.py writes it in a copy).
PLACEHOLDER = re.compile(r"NAME|\bwidgets\b")


def _pages() -> list[Path]:
    guides = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "CHANGELOG.md", REPO / "bench" / "README.md"]
    return [*guides, *sorted(DOCS.glob("*.md")), *sorted(REPO.glob("checks/healthd_checks/*/README.md"))]


def project_checks() -> dict[str, Path]:
    """Each check an entry point of ``healthd.checks`` declares whose module is in this tree: its package's folder."""
    found = {}
    for name, (module, _attr) in entry_points_of(ENTRY_POINT_GROUP).items():
        parts = module.split(".")
        path = PACKAGE_ROOTS.get(parts[0], REPO).joinpath(*parts).with_suffix(".py")
        if path.exists():
            found[name] = path.parent
    return found


def _own_page(package: Path) -> Path | None:
    """The check's own page, ``README.md`` in its package, when it keeps one."""
    page = package / "README.md"
    return page if page.exists() else None


def _guide_checks() -> set[str]:
    """The checks docs/builtin-checks.md has a section for: every `name` in a `## ` heading."""
    headings = [line for line in (DOCS / "builtin-checks.md").read_text().split("\n") if line.startswith("## ")]
    return {name for line in headings for name in re.findall(r"`([a-z][a-z0-9_]*)`", line)}


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


@pytest.mark.parametrize(
    "page", [p for p in _pages() if p.name != "CHANGELOG.md"], ids=lambda p: str(p.relative_to(REPO))
)
def test_every_file_a_page_names_exists(page: Path) -> None:
    """The CHANGELOG is left out: it names files as they were when it was written."""
    text = page.read_text()
    named = {
        span for span in PATH_SPAN.findall(text) if not PLACEHOLDER.search(span) and not FINDING_KEY.fullmatch(span)
    }
    missing = sorted(span for span in named if not (REPO / span.rstrip("/")).exists())
    assert not missing, f"{page.relative_to(REPO)} names files that do not exist: {missing}"


def test_the_module_map_names_every_module() -> None:
    """docs/architecture.md names every module, but those of a check documented in its own package, whose page does."""
    text = (DOCS / "architecture.md").read_text()
    pages = {package: page for package in project_checks().values() if (page := _own_page(package))}
    modules = [
        p
        for package in PACKAGE_DIRS
        for p in sorted(package.rglob("*.py"))
        if p.name not in ("__init__.py", "__main__.py")
    ]
    assert len(modules) > 100
    unnamed = []
    for module in modules:
        own = next((page for package, page in pages.items() if package in module.parents), None)
        if own is None and f"`{module.relative_to(REPO)}`" not in text:
            unnamed.append(str(module.relative_to(REPO)))
        elif own is not None and f"`{module.relative_to(own.parent)}`" not in own.read_text():
            unnamed.append(f"{module.relative_to(REPO)} (in {own.relative_to(REPO)})")
    assert not unnamed, f"docs/architecture.md does not name: {unnamed}"


def test_every_check_is_documented() -> None:
    """A section in docs/builtin-checks.md, or a README.md in the check's own package."""
    checks = project_checks()
    assert {"mounts", "xid", "gpu"} <= set(checks)
    guide = _guide_checks()
    undocumented = sorted(name for name, package in checks.items() if name not in guide and not _own_page(package))
    assert not undocumented, f"checks with neither a section in docs/builtin-checks.md nor a README.md: {undocumented}"


def test_the_built_in_checks_page_documents_only_checks_that_exist() -> None:
    stale = sorted(_guide_checks() - set(project_checks()))
    assert not stale, f"docs/builtin-checks.md has sections for checks no entry point declares: {stale}"


# -- Module names in pages and docstrings ------------------------------------------------------------------------------

# Where Python code lives, each with the folder its dotted names start from.
SOURCES = {**PACKAGE_ROOTS, "healthd_testkit": REPO / "tests"}
CODE = ("healthd", "checks", "tests", "bench")
CHECKS = PACKAGE_ROOTS["healthd_checks"] / "healthd_checks"
# A module by its file (`tests/slurm/cluster.py`, written bare in a docstring) or by its dotted name.
FILE = re.compile(r"(?<![\w./-])((?:healthd|checks/healthd_checks|tests|bench)/[\w./-]*\.py)\b")
DOTTED = re.compile(r"(?<![\w./-])((?:healthd|healthd_checks|healthd_testkit)(?:\.[A-Za-z_]\w*)+)")
# What follows a dot in a file's name, not a module's (`healthd.toml`, `daemon.lock`).
SUFFIXES = frozenset({"py", "toml", "json", "md", "yml", "yaml", "prom", "service", "rules", "lock", "example", "d"})
# A module by its old flat name (`xid_catalog`, `job_scope.owner`): a check package's name, singular or
# plural, an underscore, more; the form every check module had before each check became a package.
SPAN = re.compile(r"``?([a-z][a-z0-9]*_\w*)((?:\.\w+)*)``?")


def _top_level_names(module: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _dotted_exists(name: str) -> bool:
    """Whether ``a.b.c`` is a module, or a name a module defines (``healthd.store.trust.untrusted_reason``)."""
    parts = name.split(".")
    root = SOURCES[parts[0]]
    for end in range(len(parts), 0, -1):
        path = root.joinpath(*parts[:end])
        module = path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__init__.py"
        if module.exists():
            rest = parts[end:]
            return not rest or rest[0] in SUFFIXES or rest[0] in _top_level_names(module)
    return False


def _code_words() -> set[str]:
    """Every identifier the code uses and every string literal that is one word, docstrings left out."""
    words: set[str] = set()
    for path in (p for folder in CODE for p in (REPO / folder).rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                words.add(node.id)
            elif isinstance(node, ast.Attribute):
                words.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                words.add(node.name)
            elif isinstance(node, ast.arg):
                words.add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                words.add(node.value)
    return words


@pytest.fixture(scope="module")
def code_words() -> set[str]:
    return _code_words()


def _flat_name_is_stale(head: str, words: set[str]) -> bool:
    """Whether ``head`` is a check module's old flat name: a module of that name now lives in the check's
    package (the xid check's catalog module, now ``xid/catalog.py``), or the name is nowhere in the code."""
    checks = {p.name for p in CHECKS.iterdir() if (p / "__init__.py").exists()}
    package, _, rest = head.partition("_")
    folder = next((name for name in (package, package + "s") if name in checks), None)
    if folder is None:
        return False
    return (CHECKS / folder / f"{rest}.py").exists() or head not in words


def stale_module_names(text: str, words: set[str]) -> list[str]:
    """The modules ``text`` names, by file, dotted name or old flat name, that do not exist."""
    stale = [name for name in FILE.findall(text) if not PLACEHOLDER.search(name) and not (REPO / name).exists()]
    stale += [name for name in DOTTED.findall(text) if not PLACEHOLDER.search(name) and not _dotted_exists(name)]
    stale += [head + tail for head, tail in SPAN.findall(text) if _flat_name_is_stale(head, words)]
    return stale


def _docstrings() -> list[tuple[str, str]]:
    """(``path:line``, docstring) of every module, class and function of the code."""
    found = []
    for path in sorted(p for folder in CODE for p in (REPO / folder).rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                text = ast.get_docstring(node, clean=False)
                if text:
                    found.append((f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 1)}", text))
    return found


def test_every_module_a_docstring_names_exists(code_words: set[str]) -> None:
    stale = [f"{where}: {name}" for where, text in _docstrings() for name in stale_module_names(text, code_words)]
    assert not stale, "docstrings name modules that do not exist:\n" + "\n".join(stale)


@pytest.mark.parametrize(
    "page", [p for p in _pages() if p.name != "CHANGELOG.md"], ids=lambda p: str(p.relative_to(REPO))
)
def test_every_module_a_page_names_exists(page: Path, code_words: set[str]) -> None:
    stale = stale_module_names(page.read_text(), code_words)
    assert not stale, f"{page.relative_to(REPO)} names modules that do not exist: {stale}"
