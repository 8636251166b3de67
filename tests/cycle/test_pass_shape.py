"""A pass is a few values, not a long list of parameters (docs/architecture.md, "One pass").

What the caller asks (``PassRequest``) and what a pass calls out to (``PassTools``) travel
as one value each, so no function of the pass's plumbing takes more than 8 parameters or
runs over 60 lines (CONTRIBUTING.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import healthd

ROOT = Path(healthd.__file__).parent
PLUMBING = ("cycle/pipeline.py", "service/daemon.py")


def _functions(relative: str) -> list[tuple[str, int, int]]:
    """(name, parameters without self, lines) of each function in ``relative``."""
    tree = ast.parse((ROOT / relative).read_text(), relative)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
            count = len(names) - (1 if names[:1] == ["self"] else 0)
            found.append((node.name, count, (node.end_lineno or node.lineno) - node.lineno + 1))
    return found


@pytest.mark.parametrize("relative", PLUMBING)
def test_no_function_of_the_pass_takes_more_than_8_parameters_or_60_lines(relative: str) -> None:
    too_big = [(name, count, lines) for name, count, lines in _functions(relative) if count > 8 or lines > 60]
    assert too_big == []


def test_run_pass_takes_the_engine_a_request_and_tools() -> None:
    counts = {name: count for name, count, _ in _functions("cycle/pipeline.py")}
    assert counts["run_pass"] == 3
    assert counts["_locked_pass"] == 3
    assert counts["failed_pass"] == 4  # and what the pass's steps had met before it raised
