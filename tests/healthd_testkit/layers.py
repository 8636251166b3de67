"""The import graph of healthd and its checks, read from the source: modules, packages and their layers.

``tests/test_layering.py`` holds the rules on it; ``bench/bench_layers.py`` counts it. Every
import counts, those inside functions included: an import hidden in a function is still a
dependency. Imports under ``if TYPE_CHECKING:`` never run and name types only: they are a
graph of their own (``import_graph(type_only=True)``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from healthd_testkit.paths import REPO

PACKAGES = ("healthd", "healthd_checks")

# The packages from the bottom up; a package imports only those of its own layer or below, and never
# one that imports it back. docs/architecture.md draws the same layers. A top-level module of
# healthd (``healthd.model``) is a package of its own here, and so is each check's package.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("healthd", "healthd.boot", "healthd.exitcodes", "healthd.model", "healthd.text"),
    ("healthd.store",),
    ("healthd.checks",),
    ("healthd.config",),
    ("healthd.slurm", "healthd_checks"),
    ("healthd.plan",),
    ("healthd.cycle", "healthd.fleet"),
    ("healthd.service",),
    ("healthd.commands",),
    ("healthd.cli",),
    ("healthd.__main__",),
)


def import_graph(repo: Path = REPO, *, type_only: bool = False) -> dict[str, set[str]]:
    """Each module of ``repo``'s packages -> the modules of those packages it imports.

    Without ``type_only``, the imports that run; with it, those under ``if TYPE_CHECKING:`` alone.
    """
    paths = {_module(root, p): p for root in _roots(repo) for p in sorted(root.rglob("*.py"))}
    known = set(paths)
    return {name: _imports(path, name, known, type_only) for name, path in paths.items()}


def _roots(repo: Path) -> list[Path]:
    """The folders of ``PACKAGES`` in ``repo``: the checks under checks/, or at the top in a tree from before."""
    return [next(p for p in (repo / "checks" / name, repo / name) if p.is_dir()) for name in PACKAGES]


def _module(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(path: Path, name: str, known: set[str], type_only: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    typing_only = _type_checking_lines(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if (getattr(node, "lineno", 0) in typing_only) != type_only:
            continue
        if isinstance(node, ast.Import):
            found.update(_resolve(alias.name, known) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                stem = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*stem, *([node.module] if node.module else [])])
            found.add(_resolve(base, known))
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known)
    found.discard(name)
    return {m for m in found if m in known}


def _resolve(name: str, known: set[str]) -> str:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def package_of(module: str) -> str:
    """The package ``module`` belongs to: a subpackage of ``healthd`` or ``healthd_checks``, or the module itself."""
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and parts[1] not in _TOP_MODULES):
        return ".".join(parts[:2])
    return module


# healthd's modules outside any subpackage: each is a package of its own in the package graph.
_TOP_MODULES = frozenset(name.rpartition(".")[2] for layer in LAYERS for name in layer if name.count(".") == 1)


def packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The package graph of a module graph: which packages each package's modules import."""
    found: dict[str, set[str]] = {}
    for module, targets in graph.items():
        package = package_of(module)
        found.setdefault(package, set()).update(package_of(t) for t in targets)
        found[package].discard(package)
    return found


def layer_of(package: str) -> int:
    """The index in ``LAYERS`` of ``package`` (each check's package is in ``healthd_checks``'s layer)."""
    name = "healthd_checks" if package.startswith("healthd_checks") else package
    return next(i for i, layer in enumerate(LAYERS) if name in layer)


def lazy_imports(repo: Path = REPO) -> set[tuple[str, str]]:
    """(module, what it imports) for each import inside a function that runs (not under ``if TYPE_CHECKING:``).

    What is imported is the name as written, a relative import's made absolute: ``importlib.metadata``,
    ``healthd.cycle.gpureset``, ``healthd_checks.nvml.snapshot``.
    """
    found: set[tuple[str, str]] = set()
    for root in _roots(repo):
        for path in sorted(root.rglob("*.py")):
            name = _module(root, path)
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            tree = ast.parse(path.read_text())
            typing_only = _type_checking_lines(tree)
            for function in ast.walk(tree):
                if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.update((name, t) for t in _imported(function, package, typing_only))
    return found


def _imported(function: ast.AST, package: str, typing_only: set[int]) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(function):
        if getattr(node, "lineno", 0) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            stem = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            names.add(".".join([*stem, *([node.module] if node.module else [])]))
    return names
