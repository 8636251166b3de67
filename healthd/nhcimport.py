"""Converts an LBNL NHC ``nhc.conf`` into healthd's TOML, for ``healthd import-nhc``.

The syntax is NHC's (its README, "Configuration File Syntax" and "Built-in Checks"):
one ``TARGET || CHECK ARGS`` per line, ``#`` comments, a trailing backslash joining
the next line. A ``*`` target becomes the file's own tables; any other target
becomes a ``[[hosts]]`` section with that match string (``healthd.hosts`` accepts
NHC's globs, ``/regex/`` and ``{ranges}`` unchanged). Only checks healthd has an
equivalent for are converted; every other line, and every option of a converted
line that healthd does not share (NHC's repair actions, match strings where
healthd compares exact values), is reported with its line number and the reason,
and nothing is dropped silently.

Pure: text in, a document for ``healthd.tomlwrite`` and the notes out.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_MATCH_STRING = re.compile(r"[*?\[{]|^/.*/$|^!")


@dataclass(frozen=True)
class Note:
    """A line (or part of one) that was not converted, and why."""

    line: int
    text: str
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.text}\n  not converted: {self.reason}"


@dataclass
class _Target:
    """What one NHC target's lines add up to: healthd's check tables."""

    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    lines: list[int] = field(default_factory=list)

    def table(self, check: str) -> dict[str, Any]:
        return self.checks.setdefault(check, {})


@dataclass(frozen=True)
class Imported:
    """The converted config (for ``healthd.tomlwrite.dumps``), the notes, and how many checks were converted."""

    document: dict[str, Any]
    notes: tuple[Note, ...]
    converted: int


class _Skip(Exception):
    """This check, or an option of it, has no healthd equivalent; the message says why."""


@dataclass
class _Line:
    number: int
    text: str
    args: list[str]
    notes: list[Note]

    def note(self, reason: str) -> None:
        self.notes.append(Note(self.number, self.text, reason))


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each non-comment line, backslash continuations joined."""
    lines: list[tuple[int, str]] = []
    pending: Optional[tuple[int, str]] = None
    for number, raw in enumerate(text.splitlines(), start=1):
        if pending is None and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        start, sofar = pending if pending is not None else (number, "")
        if raw.endswith("\\"):
            pending = (start, sofar + raw[:-1])
            continue
        pending = None
        lines.append((start, sofar + raw))
    if pending is not None:
        lines.append(pending)
    return lines


def _options(line: _Line, flags: str, valued: str) -> tuple[dict[str, str], list[str]]:
    """getopt-style parsing of ``line.args``: the options given (flags map to "") and the operands."""
    given: dict[str, str] = {}
    args = list(line.args)
    operands: list[str] = []
    while args:
        arg = args.pop(0)
        if arg == "--":
            operands.extend(args)
            break
        if not arg.startswith("-") or len(arg) < 2:
            operands.append(arg)
            continue
        letter, rest = arg[1], arg[2:]
        if letter in valued:
            if not rest and not args:
                raise _Skip(f"option -{letter} needs a value")
            given.setdefault(letter, rest or args.pop(0))
            if letter in "fF":  # NHC's -f/-F take every mount point that follows
                operands.append(given.pop(letter))
        elif letter in flags:
            given[letter] = ""
            if rest:
                args.insert(0, "-" + rest)
        else:
            raise _Skip(f"unknown option -{letter}")
    return given, operands


def _exact(line: _Line, what: str, value: Optional[str]) -> Optional[str]:
    """``value`` if it is a plain string; a match string is noted and dropped (healthd compares exactly)."""
    if value is None or not _MATCH_STRING.search(value):
        return value
    line.note(f"{what} {value!r} is an NHC match string; healthd compares the exact {what}, so it is left out")
    return None


_ACTIONS = {"e": "-e (run on failure)", "E": "-E (run on success)"}
_MOUNT_ACTIONS = {**_ACTIONS, "r": "-r (remount)", "O": "-O (remount options)"}


def _drop_actions(line: _Line, given: dict[str, str], actions: dict[str, str] = _ACTIONS) -> None:
    for letter, what in actions.items():
        if letter in given:
            line.note(f"{what} is left out: healthd reports and drains, it does not repair nodes")
    if "0" in given:
        line.note("-0 (non-fatal) is left out: in healthd the check grades its own findings")


def _mount(rw: Optional[bool]) -> Callable[[_Line, _Target], None]:
    def convert(line: _Line, target: _Target) -> None:
        given, operands = _options(line, "0rF", "tsoOeEfF")
        if given.get("o"):
            line.note(f"mount options {given['o']!r} are left out: healthd checks only rw/ro")
        fstype, source = given.get("t"), given.get("s")
        if line.args and not line.args[0].startswith("-"):
            # The older positional form: mountpoint [source] [fstype] [options].
            operands, rest = operands[:1], operands[1:]
            source = rest[0] if rest else None
            fstype = rest[1] if len(rest) > 1 else None
            if len(rest) > 2:
                line.note(f"mount options {rest[2]!r} are left out: healthd checks only rw/ro")
        if not operands:
            raise _Skip("no mount point given")
        _drop_actions(line, given, _MOUNT_ACTIONS)
        fstype, source = _exact(line, "fstype", fstype), _exact(line, "source", source)
        expect = target.table("mounts").setdefault("expect", [])
        for path in operands:
            spec: dict[str, Any] = {"path": path}
            spec.update({k: v for k, v in (("fstype", fstype), ("source", source), ("rw", rw)) if v is not None})
            # healthd takes one expectation per mount path: NHC's lines about one mount add up.
            earlier = next((e for e in expect if e["path"].rstrip("/") == path.rstrip("/")), None)
            if earlier is None:
                expect.append(spec)
                continue
            for key, wanted in spec.items():
                if key != "path" and earlier.setdefault(key, wanted) != wanted:
                    line.note(f"{path}: {key} {wanted!r} contradicts {earlier[key]!r} from an earlier line: kept that")

    return convert


def _percent(value: str, what: str) -> float:
    if not value.endswith("%"):
        raise _Skip(f"{what} {value!r} is a size: healthd judges free space in percent (min_free_percent)")
    try:
        return float(value[:-1])
    except ValueError:
        raise _Skip(f"{what} {value!r} is not a percentage") from None


def _free(used: bool) -> Callable[[_Line, _Target], None]:
    def convert(line: _Line, target: _Target) -> None:
        if len(line.args) != 2:
            raise _Skip("expected a mount point and a limit")
        percent = _percent(line.args[1], "limit")
        free = 100.0 - percent if used else percent
        table = target.table("mounts")
        before = table.get("min_free_percent")
        if before is not None and before != free:
            line.note(f"healthd has one min_free_percent for all mounts: kept {min(before, free):g}%")
        table["min_free_percent"] = free if before is None else min(before, free)

    return convert


def _service(line: _Line, target: _Target) -> None:
    given, operands = _options(line, "0fSrcsk", "udmeE")
    if "s" in given or "k" in given:
        raise _Skip("-s/-k ask that the service NOT run; healthd checks only that services run")
    if len(operands) != 1:
        raise _Skip("expected one service name")
    _drop_actions(line, given)
    for letter in "Src":
        if letter in given:
            line.note(f"-{letter} (start or restart the service) is left out: healthd does not repair nodes")
    if "u" in given:
        line.note(f"-u {given['u']} is left out: healthd checks a service's state, not its owner")
    table = target.table("services")
    expect = table.setdefault("expect", [])
    if operands[0] not in expect:
        expect.append(operands[0])
    process = given.get("d") or _exact(line, "process name", given.get("m"))
    if process:
        table.setdefault("process_names", {})[operands[0]] = [process]


def _daemon(line: _Line, target: _Target) -> None:
    if not 1 <= len(line.args) <= 2 or line.args[0].startswith("-"):
        raise _Skip("expected a daemon name and an optional owner")
    if len(line.args) == 2:
        line.note(f"the owner {line.args[1]} is left out: healthd checks a service's state, not its owner")
    expect = target.table("services").setdefault("expect", [])
    if line.args[0] not in expect:
        expect.append(line.args[0])


def _infiniband(line: _Line, target: _Target) -> None:
    """``check_hw_ib RATE [DEVICE]``: the device's port 1 at its own rate, or without one every port at RATE."""
    if not 1 <= len(line.args) <= 2:
        raise _Skip("expected a rate in Gb/s and an optional device")
    try:
        rate = int(line.args[0])
    except ValueError:
        raise _Skip(f"rate {line.args[0]!r} is not a whole number of Gb/s") from None
    if rate <= 0:
        raise _Skip(f"rate {rate} is not a positive number of Gb/s")
    if len(line.args) == 2 and ":" in line.args[1]:
        raise _Skip(f"device {line.args[1]!r} is not a device name such as mlx5_0")
    table = target.table("infiniband")
    if len(line.args) == 2:
        # A rate per device: NDR400 compute HCAs beside NDR200 storage ones are each checked at their own.
        port = f"{line.args[1]}:1"
        if port not in table.setdefault("expect_ports", []):
            table["expect_ports"].append(port)
        table.setdefault("expect_rates_gbps", {})[port] = rate
        line.note(f"device {line.args[1]} is taken as its port 1 ({port})")
        return
    common = table.get("expect_rate_gbps")
    if common is not None and common != rate:
        raise _Skip(f"healthd has one rate for all ports, already {common}; name the device to give this one its own")
    table["expect_rate_gbps"] = rate


def _cpuinfo(line: _Line, target: _Target) -> None:
    """``check_hw_cpuinfo [sockets] [cores] [threads]``: NHC's totals, healthd's sockets, CPUs and threads per core."""
    if not 1 <= len(line.args) <= 3 or not all(arg.isdigit() for arg in line.args):
        raise _Skip("expected up to three whole numbers: sockets, cores, threads")
    sockets, cores, threads = ([int(arg) for arg in line.args] + [0, 0])[:3]
    table = target.table("host")
    table["expect_sockets"] = sockets
    if threads:
        table["expect_cpus"] = threads
        if cores and threads % cores == 0:
            table["expect_threads_per_core"] = threads // cores
        elif cores:
            line.note(f"{threads} threads on {cores} cores is no whole number per core: threads per core left out")
    elif cores:
        line.note("cores without threads: healthd counts online CPUs (threads), so the core count is left out")


# NHC's sizes are in kB unless a unit follows (its README: "check_hw_physmem 1k 1TB").
_KB = {"": 1, "k": 1, "kb": 1, "m": 2**10, "mb": 2**10, "g": 2**20, "gb": 2**20, "t": 2**30, "tb": 2**30}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)([a-z]*)")


def _kilobytes(text: str) -> float:
    found = _SIZE.fullmatch(text.strip().lower())
    if found is None or found.group(2) not in _KB:
        raise _Skip(f"size {text!r} is not a number of kB (or k, MB, GB, TB)")
    return float(found.group(1)) * _KB[found.group(2)]


def _physmem(line: _Line, target: _Target) -> None:
    """``check_hw_physmem min max [fudge]``: healthd expects at least ``min`` of MemTotal."""
    if not 2 <= len(line.args) <= 3:
        raise _Skip("expected a minimum, a maximum and an optional fudge")
    minimum = _kilobytes(line.args[0])
    target.table("host")["expect_memory_gib"] = round(minimum / 2**20, 3)
    line.note(f"the maximum {line.args[1]} is left out: healthd expects at least an amount of memory")
    if len(line.args) == 3:
        line.note(f"the fudge {line.args[2]} is left out: write the minimum you accept")


# The names interfaces ordinarily get (eth0, eno1, ens1f0np0, bond0.100); anything else is
# left for a person rather than guessed at.
_INTERFACE = re.compile(r"[A-Za-z0-9_.@-]{1,15}")


def _ethernet(line: _Line, target: _Target) -> None:
    """``check_hw_eth DEVICE``: the interface must exist; healthd's host check also wants its link up."""
    if len(line.args) != 1:
        raise _Skip("expected one network interface name")
    name = line.args[0]
    if not _INTERFACE.fullmatch(name):
        raise _Skip(f"{name!r} is not a plain network interface name")
    expect = target.table("host").setdefault("expect_ethernet", [])
    if name not in expect:
        expect.append(name)
    line.note(f"{name} must also be up in healthd (ETHERNET_DOWN), not only exist as NHC checks")


CONVERTERS: dict[str, Callable[[_Line, _Target], None]] = {
    "check_fs_mount": _mount(None),
    "check_fs_mount_rw": _mount(True),
    "check_fs_mount_ro": _mount(False),
    "check_fs_free": _free(used=False),
    "check_fs_used": _free(used=True),
    "check_ps_service": _service,
    "check_ps_daemon": _daemon,
    "check_hw_ib": _infiniband,
    "check_hw_cpuinfo": _cpuinfo,
    "check_hw_physmem": _physmem,
    "check_hw_eth": _ethernet,
}


def convert(text: str) -> Imported:
    """Convert nhc.conf ``text``; see the module docstring."""
    targets: dict[str, _Target] = {}
    notes: list[Note] = []
    converted = 0
    for number, logical in _logical_lines(text):
        target_text, sep, command = logical.partition("||")
        shown = " ".join(logical.split())
        if not sep:
            notes.append(Note(number, shown, "no 'TARGET || CHECK' separator"))
            continue
        target = target_text.strip() or "*"
        try:
            words = shlex.split(command, comments=True)
        except ValueError as exc:
            notes.append(Note(number, shown, f"cannot split the command: {exc}"))
            continue
        if not words:
            notes.append(Note(number, shown, "no check after '||'"))
            continue
        if _VARIABLE.match(words[0]):
            notes.append(Note(number, shown, "an NHC variable: healthd's settings are its own TOML keys"))
            continue
        handler = CONVERTERS.get(words[0])
        if handler is None:
            notes.append(Note(number, shown, f"{words[0]} has no healthd equivalent"))
            continue
        line = _Line(number, shown, words[1:], [])
        entry = targets.setdefault(target, _Target())
        try:
            handler(line, entry)
        except _Skip as exc:
            notes.append(Note(number, shown, str(exc)))
            continue
        entry.lines.append(number)
        notes.extend(line.notes)
        converted += 1
    return Imported(_document(targets), tuple(notes), converted)


def _document(targets: dict[str, _Target]) -> dict[str, Any]:
    base = targets.pop("*", None)
    document: dict[str, Any] = {}
    if base is not None:
        document["checks"] = {"#": f"converted from nhc.conf lines {_lines(base)}", **base.checks}
    hosts = [
        {"#": f"from nhc.conf lines {_lines(entry)}", "match": match, "checks": entry.checks}
        for match, entry in targets.items()
        if entry.checks
    ]
    if hosts:
        document["hosts"] = hosts
    return document


def _lines(target: _Target) -> str:
    return ", ".join(str(n) for n in target.lines)
