"""The code's shape: small functions, and one meaning per class name, in healthd/ and checks/healthd_checks/.

A pass threaded through a dozen parameters, or a function a screen and a half long, is where
a race hides (CONTRIBUTING.md, "Small modules"). ``self``/``cls`` are not counted; a
keyword-only parameter is, and so are ``*args`` and ``**kwargs``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from typing import Union

import pytest
from healthd_testkit.paths import PACKAGE_DIRS, REPO

MAX_LINES = 60
MAX_PARAMETERS = 8


Function = Union[ast.FunctionDef, ast.AsyncFunctionDef]


def _functions() -> dict[str, list[Function]]:
    """Every function and method by ``path::Qualified.name`` (nested functions under their parent's name).

    A name may be defined more than once (a property's setter, a fallback in an except): all are kept.
    """
    found: dict[str, list[Function]] = defaultdict(list)

    def visit(node: ast.AST, prefix: str, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, prefix, where)  # a def inside an if, a try or a with still counts
                continue
            name = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                found[f"{where}::{name}"].append(child)
            visit(child, f"{name}.", where)

    for package in PACKAGE_DIRS:
        for path in sorted(package.rglob("*.py")):
            visit(ast.parse(path.read_text()), "", str(path.relative_to(REPO)))
    return found


def _lines(node: Function) -> int:
    return (node.end_lineno or node.lineno) - node.lineno + 1


def _parameters(node: Function) -> int:
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return len([n for n in names if n not in ("self", "cls")])


@pytest.fixture(scope="module")
def functions() -> dict[str, list[Function]]:
    return _functions()


def test_the_tree_is_read(functions: dict[str, list[Function]]) -> None:
    assert len(functions) > 500
    assert "healthd/service/metrics.py::HealthdCollector.update" in functions
    assert "healthd/cycle/childrun.py::run_with_deadline" in functions


def test_no_function_is_longer_than_sixty_lines(functions: dict[str, list[Function]]) -> None:
    lines = {where: max(_lines(node) for node in nodes) for where, nodes in functions.items()}
    long = {where: n for where, n in lines.items() if n > MAX_LINES}
    assert long == {}, "split these by meaning"


def test_no_function_takes_more_than_eight_parameters(functions: dict[str, list[Function]]) -> None:
    parameters = {where: max(_parameters(node) for node in nodes) for where, nodes in functions.items()}
    many = {where: n for where, n in parameters.items() if n > MAX_PARAMETERS}
    assert many == {}, "pass a value instead"


def _classes() -> dict[str, list[str]]:
    """Each module-level public class name -> the modules that define one."""
    found: dict[str, list[str]] = defaultdict(list)
    for package in PACKAGE_DIRS:
        for path in sorted(package.rglob("*.py")):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    found[node.name].append(str(path.relative_to(REPO)))
    return found


def test_each_public_class_name_means_one_thing() -> None:
    # Two classes named alike in two modules (the policy's Action and the Xid catalog's) make
    # every reader check which one an import brings. A module's private classes (_Group) are
    # its own business.
    classes = _classes()
    assert len(classes) > 100
    assert {name: modules for name, modules in classes.items() if len(modules) > 1} == {}


def _plain_record_problems(node: ast.ClassDef, module: ast.Module) -> list[str]:
    """Why the frozen dataclass ``node`` may not be a ``typing.NamedTuple`` (none: it is a plain record).

    The reasons CONTRIBUTING gives ("Records"): generic, subclassing or subclassed, a default
    factory, ``__post_init__``, a field or method named ``count`` or ``index`` (tuple methods), a field whose
    name starts with an underscore, or a module that serialises its records field by field with
    ``dataclasses.asdict`` or ``fields`` (the NVML readings of a snapshot).
    """
    source = ast.unparse(node)
    fields = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
    methods = {s.name for s in node.body if isinstance(s, ast.FunctionDef)}
    serialised = any(
        isinstance(n, ast.ImportFrom) and n.module == "dataclasses" and {a.name for a in n.names} & {"asdict", "fields"}
        for n in module.body
    )
    subclassed = any(
        isinstance(n, ast.ClassDef) and node.name in {ast.unparse(b).split("[")[0] for b in n.bases}
        for n in ast.walk(module)
    )
    reasons = {
        "bases": bool(node.bases),
        "subclassed": subclassed,
        "factory": "default_factory" in source,
        "post-init": "__post_init__" in source,
        "tuple method": bool({"count", "index"} & {*fields, *methods}),
        "underscore": any(f.startswith("_") for f in fields),
        "serialised": serialised,
    }
    return [reason for reason, applies in reasons.items() if applies]


def _frozen_dataclasses() -> dict[str, list[str]]:
    """Every ``@dataclass(frozen=True)`` class without other options, by ``path::Name``, with its problems."""
    found: dict[str, list[str]] = {}
    for package in PACKAGE_DIRS:
        for path in sorted(package.rglob("*.py")):
            module = ast.parse(path.read_text())
            for node in ast.walk(module):
                if not isinstance(node, ast.ClassDef):
                    continue
                frozen = [ast.unparse(d) for d in node.decorator_list] == ["dataclass(frozen=True)"]
                if frozen:
                    found[f"{path.relative_to(REPO)}::{node.name}"] = _plain_record_problems(node, module)
    return found


def test_plain_records_are_named_tuples() -> None:
    # Python 3.11 execs six generated methods to define a frozen dataclass (about 0.25 ms on the
    # benchmark machine) and one to define a NamedTuple (0.05 ms); a cold pass defines over a
    # hundred records (bench/README.md, "Records").
    classes = _frozen_dataclasses()
    assert len(classes) > 20
    assert sorted(name for name, problems in classes.items() if not problems) == []


def test_the_rules_see_what_they_judge() -> None:
    tree = ast.parse(
        "def f(a, b, /, c, *d, e, **g):\n    pass\n"
        "class C:\n    def m(self, a, b, c, d, e, f, g, h, i):\n        return 1\n"
    )
    f, c = tree.body
    assert isinstance(f, ast.FunctionDef) and isinstance(c, ast.ClassDef)
    assert _parameters(f) == 6 and _lines(f) == 2
    method = c.body[0]
    assert isinstance(method, ast.FunctionDef) and _parameters(method) == 9 > MAX_PARAMETERS
    records = ast.parse(
        "@dataclass(frozen=True)\nclass P:\n    a: int\n    b: str = ''\n"
        "@dataclass(frozen=True)\nclass Q:\n    index: int\n"
        "@dataclass(frozen=True)\nclass R(P):\n    c: dict = field(default_factory=dict)\n"
    )
    p, q, r = records.body
    assert isinstance(p, ast.ClassDef) and isinstance(q, ast.ClassDef) and isinstance(r, ast.ClassDef)
    assert _plain_record_problems(p, records) == ["subclassed"]
    assert _plain_record_problems(q, records) == ["tuple method"]
    assert _plain_record_problems(r, records) == ["bases", "factory"]
    assert _plain_record_problems(p, ast.parse("class P:\n    a: int\n")) == []
