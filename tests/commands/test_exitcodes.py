"""Every exit code a command can return is in the table of docs/commands.md, and every code there is one the code
defines: all of them in ``healthd.exitcodes``, which no other module adds to."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Optional

from healthd_testkit.paths import PACKAGE_DIRS, REPO

import healthd.exitcodes
from healthd.commands import COMMANDS

SOURCES = [path for package in PACKAGE_DIRS for path in sorted(package.rglob("*.py"))]
EXIT_NAME = re.compile(r"EX_[A-Z_]+")
EXITS = ("exit", "_exit", "SystemExit")
# Where a command's exit code is made: the dispatcher, the hook, the daemon, a plugin command's stand-in,
# the prolog's and epilog's flows, each built-in command and each command a plugin contributes
# (pyproject.toml's healthd.commands).
COMMAND_MODULES = [
    REPO / "healthd" / "cli" / "main.py",
    REPO / "healthd" / "cli" / "parser.py",
    REPO / "healthd" / "cli" / "hook.py",
    REPO / "healthd" / "service" / "daemon.py",
    REPO / "healthd" / "cycle" / "jobhook.py",
    REPO / "healthd" / "cycle" / "prolog.py",
    REPO / "healthd" / "cycle" / "epilog.py",
    REPO / "healthd" / "checks" / "plugin.py",
    *(REPO / "healthd" / "commands" / f"{module}.py" for module, _ in COMMANDS.values()),
    *(
        REPO / Path(*module.split(".")).with_suffix(".py")
        for module in re.findall(
            r'^[\w-]+ = "([\w.]+):\w+"$',
            (REPO / "pyproject.toml").read_text().split('[project.entry-points."healthd.commands"]')[1].split("\n[")[0],
            re.M,
        )
    ),
]


def _defined() -> dict[str, int]:
    """Each code ``healthd.exitcodes`` defines, by name (the grades by theirs)."""
    codes = {name: value for name, value in vars(healthd.exitcodes).items() if EXIT_NAME.fullmatch(name)}
    return {**codes, **healthd.exitcodes.STATUS_CODES}


def _table() -> list[int]:
    text = (REPO / "docs" / "commands.md").read_text()
    section = text.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    return [int(code) for code in re.findall(r"^\| (\d+) \|", section, re.M)]


def _int(node: object) -> Optional[int]:
    """The integer ``node`` writes out, if it is one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def _literal_codes(path: Path) -> set[int]:
    """The integers a command module returns as they are written: ``return 0`` in a function that returns an int,
    and the argument of ``sys.exit``, ``os._exit``, ``SystemExit`` or a parser's ``exit``."""
    found: list[Optional[int]] = []
    tree = ast.parse(path.read_text())
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef) and ast.unparse(function.returns or ast.Constant(None)) == "int":
            found += [_int(node.value) for node in ast.walk(function) if isinstance(node, ast.Return)]
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and call.args and ast.unparse(call.func).split(".")[-1] in EXITS:
            found.append(_int(call.args[0]))
    return {code for code in found if code is not None}


def test_the_command_modules_are_all_found() -> None:
    assert all(path.exists() for path in COMMAND_MODULES)
    assert {"scan_log.py", "record_gpus.py", "jobs.py", "ack.py", "fleet.py"} <= {p.name for p in COMMAND_MODULES}


def test_no_module_defines_an_exit_code_of_its_own() -> None:
    """A code defined elsewhere would escape the table: each module takes its codes from healthd.exitcodes."""
    defined = _defined()
    strays = []
    for path in SOURCES:
        if path.name == "exitcodes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                strays += [
                    f"{path.name}: {t.id}"
                    for t in node.targets
                    if isinstance(t, ast.Name) and EXIT_NAME.fullmatch(t.id)
                ]
            elif isinstance(node, ast.Name) and EXIT_NAME.fullmatch(node.id) and node.id not in defined:
                strays.append(f"{path.name}: {node.id} is not in healthd.exitcodes")
    assert strays == []


def test_every_code_a_command_returns_is_in_the_table() -> None:
    returned = set(_defined().values())
    for path in COMMAND_MODULES:
        returned |= _literal_codes(path)
    assert sorted(returned - set(_table())) == []


def test_every_code_in_the_table_is_one_the_code_defines_and_is_listed_once() -> None:
    table = _table()
    assert len(table) == len(set(table)), "a code listed twice"
    assert sorted(set(table) - set(_defined().values())) == []
