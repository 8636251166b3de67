"""Converts an LBNL NHC ``nhc.conf`` into healthd's TOML, for ``healthd import-nhc``, with NHC's meaning.

Each rule below is taken from the check's own code in NHC 1.4.3 (``scripts/lbnl_*.nhc``,
cited at each converter) so that the converted config fails a node exactly where NHC would,
and never drains one NHC passes. The file is read as NHC reads it (``healthd.config.nhcwords``).
A ``*`` target becomes the file's own tables; any other becomes a ``[[hosts]]`` section
with that match string, which ``healthd.config.hosts`` reads as NHC does (a ``/regex/`` is
compiled first, and a target that is not a valid match string is refused with its lines).

``tests/config/test_nhc_side_by_side.py`` holds that promise against NHC 1.4.3 itself, line by
line on one machine. Where healthd is stricter on purpose a note says so: a process given
without an owner counts only when root, a system account or ``process_users`` owns it (NHC
takes any owner's), a file owned by neither root nor the expected owner is UNKNOWN (NHC judges
it), and healthd's own gpu, xid and edac checks judge by their own rules.
A Jinja or Helm template is named as one: what only its renderer decides is not converted.

Every line, and every part of one, that is not converted is a ``Note`` with ``lost`` set:
NHC judges something there that the converted config does not. A note without it says
what healthd does differently without judging less (a repair action healthd leaves to
people, a default it adds). Nothing is dropped silently.

Pure: text in, a document for ``healthd.config.tomlwrite`` and the notes out; linear in the text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional

from healthd.config.hosts import HostMatchError, matcher
from healthd.config.nhcdmi import DMI_TYPES, field_file
from healthd.config.nhcwords import MAX_LINE, Line, Refused, Variables, assignments, logical_lines, shorten, words
from healthd.text import one_line


class Note(NamedTuple):
    """A line (or part of one) and what became of it: ``lost`` when NHC judges it and the config does not."""

    line: int
    text: str
    reason: str
    lost: bool = True

    def __str__(self) -> str:
        verdict = "not converted" if self.lost else "note"
        return f"line {self.line}: {self.text}\n  {verdict}: {one_line(self.reason, 400)}"


class Imported(NamedTuple):
    """The converted config (for ``healthd.config.tomlwrite.dumps``), the notes, and how many checks were converted."""

    document: dict[str, Any]
    notes: tuple[Note, ...]
    converted: int

    @property
    def lost(self) -> int:
        return sum(1 for note in self.notes if note.lost)


@dataclass
class _Target:
    """What one NHC target's lines add up to: check tables, and lists kept by identity (linear to build)."""

    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    lists: dict[tuple[str, str], dict[Any, Any]] = field(default_factory=dict)
    lines: list[int] = field(default_factory=list)

    def table(self, check: str) -> dict[str, Any]:
        return self.checks.setdefault(check, {})

    def add(self, check: str, key: str, item: Any, identity: Any = None) -> Any:
        """Append ``item`` to ``check.key`` unless one with its identity is there; the one kept."""
        self.table(check)
        entries = self.lists.setdefault((check, key), {})
        return entries.setdefault(item if identity is None else identity, item)

    def tables(self) -> dict[str, dict[str, Any]]:
        for (check, key), entries in self.lists.items():
            self.checks[check][key] = list(entries.values())
        return self.checks


class _Skip(Exception):
    """The whole line is not converted; the message says why."""


@dataclass
class _Context:
    """One line being converted: its words after the check's name, and the notes it gives."""

    line: Line
    args: list[str]
    notes: list[Note]

    def lost(self, reason: str) -> None:
        self.notes.append(Note(self.line.number, self.line.shown, reason, lost=True))

    def note(self, reason: str) -> None:
        self.notes.append(Note(self.line.number, self.line.shown, reason, lost=False))


def _getopts(ctx: _Context, spec: str) -> tuple[list[tuple[str, str]], list[str]]:
    """bash's getopts with NHC's option string (``":0rE:..."``): the options in order, then the operands."""
    options: list[tuple[str, str]] = []
    args, index = ctx.args, 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            index += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        index += 1
        letters = arg[1:]
        while letters:
            letter, letters = letters[0], letters[1:]
            where = spec.find(letter)
            if letter == ":" or where < 0:
                raise _Skip(f"unknown option -{letter}: NHC fails this line with 'Invalid option'")
            if spec[where + 1 : where + 2] != ":":
                options.append((letter, ""))
                continue
            if not letters and index >= len(args):
                raise _Skip(f"option -{letter} needs a value: NHC fails this line")
            value = letters or args[index]
            index += 0 if letters else 1
            options.append((letter, value))
            letters = ""
    return options, args[index:]


# NHC's match strings (scripts/common.nhc, mcheck): /regex/, a glob, or either after "!".
_MATCH_STRING = re.compile(r"[*?\[]|^/.*/$|^!")


def _plain(ctx: _Context, what: str, value: str) -> Optional[str]:
    """``value`` if it is a plain string; a match string is a lost condition (healthd compares exactly)."""
    if not _MATCH_STRING.search(value):
        return value
    ctx.lost(f"{what} {value!r} is an NHC match string; healthd compares the exact {what}, so it is left out")
    return None


def _repairs(ctx: _Context, options: list[tuple[str, str]], letters: str) -> None:
    for letter, _ in options:
        if letter in letters:
            ctx.note(f"-{letter} (an action NHC runs on the node) is left out: healthd drains, people repair")


def _nonfatal(options: list[tuple[str, str]]) -> None:
    if any(letter == "0" for letter, _ in options):
        raise _Skip("-0: NHC only logs this check's failure; every healthd finding drains, so it is not converted")


def _mount(rw: Optional[bool]) -> Callable[[_Context, _Target], None]:
    """``check_fs_mount`` and its ``_rw``/``_ro`` forms (scripts/lbnl_fs.nhc): each mount point present,
    with the source and type given (all ``-s``/``-t`` must match), rw or ro (an ``-o`` regex on the options)."""

    def convert(ctx: _Context, target: _Target) -> None:
        if ctx.args and ctx.args[0].startswith("/"):
            options, paths = _positional_mount(ctx, rw)
        else:
            options, paths = _getopts(ctx, ":0rE:F:O:e:f:o:s:t:")
            paths = [value for letter, value in options if letter == "f"] + paths
        _nonfatal(options)
        if any(letter == "F" for letter, _ in options):
            raise _Skip("-F: NHC first touches the path to trigger its automount; healthd only reads mountinfo")
        if not paths:
            raise _Skip("no mount point given")
        _repairs(ctx, options, "eErO")
        for letter, value in options:
            if letter == "o":
                ctx.lost(f"mount options {value!r}: healthd checks only rw or ro")
        spec: dict[str, Any] = {}
        for letter, key in (("t", "fstype"), ("s", "source")):
            for value in [v for opt, v in options if opt == letter]:
                exact = _plain(ctx, key, value)
                if exact is not None and spec.setdefault(key, exact) != exact:
                    ctx.lost(f"{key} {exact!r} and {spec[key]!r} on one line: no mount has both; kept the first")
        if rw is not None:
            spec["rw"] = rw
        for path in paths:
            _expect_mount(ctx, target, path, spec)

    return convert


def _positional_mount(ctx: _Context, rw: Optional[bool]) -> tuple[list[tuple[str, str]], list[str]]:
    """NHC's old syntax, ``mountpoint [source [fstype [options]]]``, as options (check_fs_mount's first branch).

    ``check_fs_mount_rw`` and ``_ro`` pass on only the first three words and their own rw/ro
    test, so a fourth is ignored there; ``check_fs_mount`` ignores a fifth.
    """
    path, rest = ctx.args[0], ctx.args[1:]
    kept = 2 if rw is not None else 3
    options = [("s", v) for v in rest[:1]] + [("t", v) for v in rest[1:2]] + [("o", v) for v in rest[2:kept]]
    if len(rest) > kept:
        ctx.note(f"{' '.join(rest[kept:])!r}: words NHC ignores on this line")
    return options, [path]


def _expect_mount(ctx: _Context, target: _Target, path: str, spec: dict[str, Any]) -> None:
    if not path.startswith("/"):
        ctx.lost(f"{path!r} is not an absolute mount point")
        return
    key = path.rstrip("/") or "/"
    earlier = target.add("mounts", "expect", {"path": path, **spec}, identity=key)
    for name, wanted in spec.items():
        if earlier.setdefault(name, wanted) != wanted:
            ctx.lost(f"{path}: {name} {wanted!r} contradicts {earlier[name]!r} from an earlier line: kept that")


def _percent(value: str) -> float:
    try:
        number = float(value[:-1]) if value.endswith("%") else math.nan
    except ValueError:
        number = math.nan
    if not 0 <= number <= 100:
        raise _Skip(f"{value!r} is not a percentage: healthd judges free space and inodes in percent")
    return number


def _usage(key: str, used: bool) -> Callable[[_Context, _Target], None]:
    """``check_fs_used``/``_free``/``_iused``/``_ifree MOUNT LIMIT`` (scripts/lbnl_fs.nhc): the one mount
    point named, judged while it is mounted (NHC passes when df does not list it).

    NHC reads df's ``Use%`` (``IUse%``), a whole number rounded up, with root's reserve left
    out; the config says ``free_space_as = "df"`` so that healthd counts the same way.
    """

    def convert(ctx: _Context, target: _Target) -> None:
        if len(ctx.args) != 2 or not ctx.args[0].startswith("/"):
            raise _Skip("expected a mount point and a limit")
        path, limit = ctx.args
        if not used and not limit.endswith("%"):
            return _free_size(ctx, target, key)
        number = _percent(limit)
        if not number.is_integer():
            raise _Skip(f"{limit!r}: NHC compares whole percentages (bash's -lt), and this one never compares")
        if used and number == 0:
            raise _Skip("0% used: NHC fails this line wherever the mount is, full or empty")
        # free N%: fails when 100 - Use% < N. used N%: fails when Use% >= N, so when 100 - Use% < 101 - N.
        free = 101.0 - number if used else number
        entry = target.add("mounts", "usage_limits", {"path": path}, identity=path.rstrip("/") or "/")
        before = entry.get(key)
        entry[key] = free if before is None else max(before, free)
        if before is not None and before != free:
            ctx.note(f"{path}: two limits on one mount; the stricter, {entry[key]:g}% free, is kept (NHC checks both)")

    return convert


# nhc_common_parse_count (scripts/common.nhc): a count, times 1000 per K, M, G, T, P or E after it.
_COUNT = re.compile(r"(\d+)([kKmMgGtTpPeE]?)")


def _free_size(ctx: _Context, target: _Target, key: str) -> None:
    """``check_fs_free MOUNT SIZE`` (df's Avail in kB below SIZE fails) and ``check_fs_ifree MOUNT COUNT``
    (IFree below COUNT fails), scripts/lbnl_fs.nhc: ``min_free_kib`` and ``min_free_inodes``."""
    path, limit = ctx.args
    if key == "min_free_percent":
        name, value = "min_free_kib", _kilobytes(limit)
    else:
        found = _COUNT.fullmatch(limit)
        if found is None:
            raise _Skip(f"{limit!r} is neither a percentage nor a count (NHC's K, M, G... are powers of 1000)")
        name, value = "min_free_inodes", int(found.group(1)) * 1000 ** "_kmgtpe".find(found.group(2).lower() or "_")
    entry = target.add("mounts", "usage_limits", {"path": path}, identity=path.rstrip("/") or "/")
    entry[name] = max(entry.get(name, 0), value)


# A process name as the kernel or the executable's file name has it; anything else is an argv match.
_PROCESS = re.compile(r"[A-Za-z0-9_.+@-][A-Za-z0-9_.+@:-]*")
_ARGV_FORM = re.compile(r"\*?/?([A-Za-z0-9_.+@-]+)")


def _process_name(ctx: _Context, options: dict[str, str], service: str) -> str:
    """NHC matches ``-m`` (default ``*DAEMON``, DAEMON from ``-d`` or the service) against argv[0].

    healthd names a process by its kernel command name or executable (``checks/healthd_checks/common/procs.py``;
    argv is the process's own to rewrite), so ``-m`` converts only in NHC's own form,
    ``*NAME`` or ``NAME``; anything else (``'sshd:'``, sshd's rewritten title) is refused.
    """
    match = options.get("m")
    if match is not None:
        found = _ARGV_FORM.fullmatch(match)
        if found is None:
            raise _Skip(
                f"-m {match!r} matches a process's argv, which healthd does not read (any process can rewrite"
                " its own); name the daemon's executable with -d instead"
            )
        return found.group(1)
    name = options.get("d") or service
    if not _PROCESS.fullmatch(name) or name.endswith(":"):
        raise _Skip(f"{name!r} is not a process name (the command name or the executable's file name)")
    return name


# useradd(8)'s account names, or a uid: what [checks.services] process_users accepts.
_ACCOUNT = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\$?|[0-9]+")


def _owner(ctx: _Context, target: _Target, name: str, owner: Optional[str], forbidden: bool) -> None:
    """NHC counts only a process ``owner`` owns (``ps``'s user, lbnl_ps.nhc): ``process_owners`` says the same."""
    if owner is None:
        if not forbidden:
            # Any user can name a process munged: the services check does not take a person's for the daemon.
            ctx.note(
                f"{name}: a process counts when root, a system account or one in process_users owns it (NHC: any"
                " owner); a daemon run by a person's account needs -u"
            )
        return
    if not _ACCOUNT.fullmatch(owner):
        ctx.lost(f"owner {owner!r} is an NHC match string; healthd takes accounts by name, so it is left out")
        return
    account: Any = int(owner) if owner.isdigit() else owner
    owners = target.table("services").setdefault("process_owners", {})
    if owners.setdefault(name, [account]) != [account]:
        # NHC asks for each line's owner; one process has one, so healthd keeps the first.
        ctx.lost(f"{name}: owner {owner} contradicts {owners[name][0]} from an earlier line: kept that")
    if forbidden and owner not in ("root", "0"):
        ctx.lost(
            f"owner {owner}: healthd counts a forbidden process only when a system account owns it"
            " (a person's process must not drain the node)"
        )


def _service(ctx: _Context, target: _Target) -> None:
    """``check_ps_service`` (scripts/lbnl_ps.nhc): a process must run, or with ``-s``, ``-k`` or ``-E``
    must not (NHC: "Logic is inverted; we DON'T want this process running")."""
    options, operands = _getopts(ctx, ":0E:SVcd:e:fkm:rsu:v")
    _nonfatal(options)
    given = dict(options)
    if "f" in given:
        raise _Skip("-f matches the whole command line, which healthd does not read (argv is the process's own)")
    if not operands:
        raise _Skip("no service name: NHC fails this line with 'Service name required'")
    name = _process_name(ctx, given, " ".join(operands))
    forbidden = any(letter in given for letter in "skE")
    _repairs(ctx, options, "SrceEksvV")
    _owner(ctx, target, name, given.get("u"), forbidden)
    target.add("services", "forbid_processes" if forbidden else "expect_processes", name)


def _daemon(forbidden: bool) -> Callable[[_Context, _Target], None]:
    """``check_ps_daemon``/``check_ps_blacklist NAME [OWNER [ARGS]]`` (scripts/lbnl_ps.nhc): NAME must
    (must not) run; NHC looks for NAME anywhere in the command line, healthd for the process itself."""

    def convert(ctx: _Context, target: _Target) -> None:
        if not 1 <= len(ctx.args) <= 3 or ctx.args[0].startswith("-"):
            raise _Skip("expected a process name, an optional owner and optional arguments")
        if len(ctx.args) == 3:
            raise _Skip(f"arguments {ctx.args[2]!r}: healthd does not read a process's argv")
        name = ctx.args[0]
        if not _PROCESS.fullmatch(name):
            raise _Skip(f"{name!r} is not a process name (the command name or the executable's file name)")
        owner = ctx.args[1] if len(ctx.args) > 1 else None
        if owner is not None and owner.isdigit() and not forbidden:
            # check_ps_daemon compares the owner's name as a string: a uid matches no process.
            raise _Skip(f"owner {owner}: NHC compares the owner's name, so a uid fails this line on every node")
        _owner(ctx, target, name, owner, forbidden)
        target.add("services", "forbid_processes" if forbidden else "expect_processes", name)

    return convert


# A port as NHC names it from /sys/class/infiniband/DEVICE/ports/N (nhc_hw_gather_data).
_PORT = re.compile(r"[A-Za-z0-9_.-]+:[0-9]+")


def _infiniband(ctx: _Context, target: _Target) -> None:
    """``check_hw_ib RATE [DEVICE:PORT]`` (scripts/lbnl_hw.nhc): some port ACTIVE and LinkUp, at RATE,
    and that port when one is named. NHC names ports ``device:port`` from the sysfs path."""
    if len(ctx.args) != 2:
        raise _Skip(
            "without a port NHC asks that any one port run at this rate, and healthd judges every port:"
            " name each port as DEVICE:PORT, as nhc-genconf writes them"
        )
    rate_text, port = ctx.args
    if not rate_text.isdigit() or int(rate_text) <= 0:
        raise _Skip(f"rate {rate_text!r} is not a whole positive number of Gb/s")
    if not _PORT.fullmatch(port):
        raise _Skip(
            f"{port!r} is not DEVICE:PORT: NHC compares it with device:port names (mlx5_0:1), so this line"
            " fails on every node"
        )
    rates = target.table("infiniband").setdefault("expect_rates_gbps", {})
    target.add("infiniband", "expect_ports", port)
    if rates.setdefault(port, int(rate_text)) != int(rate_text):
        ctx.lost(f"{port} at {rate_text} Gb/s contradicts {rates[port]} Gb/s from an earlier line: kept that")


def _cpuinfo(ctx: _Context, target: _Target) -> None:
    """``check_hw_cpuinfo [sockets] [cores] [threads]`` (scripts/lbnl_hw.nhc): the counts NHC reads.

    NHC counts /proc/cpuinfo its own way (``nhc_hw_gather_data``): where no line has a
    ``physical id`` (arm64, NVIDIA Grace) every processor is a socket, so a GB200 file says
    ``check_hw_cpuinfo 128 128 128``. ``cpu_count_as = "nhc"`` makes the host check count so.
    """
    if not 1 <= len(ctx.args) <= 3 or not all(arg.isdigit() for arg in ctx.args):
        raise _Skip("expected up to three whole numbers: sockets, cores, threads")
    if "0" in (arg.lstrip("0") or "0" for arg in ctx.args):
        # NHC compares each given count with the node's (`-ne`): 0 fails every running node.
        raise _Skip("a count of 0 matches no running node (NHC would fail every node with it)")
    sockets, cores, threads = ([int(arg) for arg in ctx.args] + [0, 0])[:3]
    table = target.table("host")
    table["cpu_count_as"] = "nhc"
    table["expect_sockets"] = sockets
    if threads:
        table["expect_cpus"] = threads
        if cores and threads % cores == 0:
            table["expect_threads_per_core"] = threads // cores
        elif cores:
            ctx.lost(f"{threads} threads on {cores} cores is no whole number per core: the core count is left out")
    elif cores:
        ctx.lost("cores without threads: healthd counts online CPUs (threads), so the core count is left out")


# nhc_common_parse_size (scripts/common.nhc): kB unless K, M, G, T, P or E follows, a B after it optional.
_SIZE = re.compile(r"(\d+)([kKmMgGtTpPeE]?)[bB]?")
_POWERS = {"": 0, "k": 0, "m": 1, "g": 2, "t": 3, "p": 4, "e": 5}


def _kilobytes(text: str) -> int:
    found = _SIZE.fullmatch(text)
    if found is None:
        raise _Skip(f"size {text!r} is not a whole number of kB, or of K, M, G, T, P, E (NHC's sizes)")
    return int(found.group(1)) << (10 * _POWERS[found.group(2).lower()])


def _gib(kilobytes: int, rounding: Callable[[float], float]) -> float:
    # Three decimals, rounded away from a false failure: the minimum down, the maximum up.
    return rounding(kilobytes / 2**20 * 1000) / 1000


def _physmem(ctx: _Context, target: _Target) -> None:
    """``check_hw_physmem MIN MAX [FUDGE]`` (scripts/lbnl_hw.nhc): MemTotal + FUDGE >= MIN and
    MemTotal - FUDGE <= MAX, FUDGE a percentage of MemTotal or a size."""
    if not 2 <= len(ctx.args) <= 3:
        raise _Skip("expected a minimum, a maximum and an optional fudge")
    low, high = _kilobytes(ctx.args[0]), _kilobytes(ctx.args[1])
    fudge = ctx.args[2] if len(ctx.args) == 3 else "0"
    percent = _percent(fudge) if fudge.endswith("%") else None
    slack = 0 if percent is not None else _kilobytes(fudge)
    maximum = _gib(high + slack, math.ceil)
    if maximum <= 0:
        # NHC fails every node whose MemTotal is above the maximum: 0 is every running node.
        raise _Skip("a maximum of 0 matches no running node (NHC would fail every node with it)")
    # A minimum under a thousandth of a GiB holds on any running node: it is left out, not written as 0.
    minimum = _gib(low - slack, math.floor) if low > slack else 0.0
    table = target.table("host")
    if percent is not None:
        table["memory_tolerance_percent"] = percent
    if minimum > 0:
        table["expect_memory_gib"] = minimum
    table["expect_memory_max_gib"] = maximum


def _swap(ctx: _Context, target: _Target) -> None:
    """``check_hw_swap MIN MAX [FUDGE]`` (scripts/lbnl_hw.nhc): fails when SwapTotal + FUDGE < MIN or
    SwapTotal - FUDGE > MAX, so the range, widened by a fudge given as a size, is exact in kB."""
    if not 2 <= len(ctx.args) <= 3:
        raise _Skip("expected a minimum, a maximum and an optional fudge")
    fudge = ctx.args[2] if len(ctx.args) == 3 else "0"
    low, high = _kilobytes(ctx.args[0]), _kilobytes(ctx.args[1])
    if fudge.endswith("%"):
        # "no swap" with a fudge (Azure's `check_hw_swap 0kB 0kB 3%`): SwapTotal less under all of
        # it is above 0 exactly when SwapTotal is, so the fudge changes nothing there.
        if low or high or not _percent(fudge) < 100:
            raise _Skip(f"fudge {fudge!r}: a percentage of the swap found is converted only for 0 0; give a size")
        fudge = "0"
    slack = _kilobytes(fudge)
    table = target.table("host")
    if low > slack:
        table["expect_swap_gib"] = (low - slack) / 2**20
    table["expect_swap_max_gib"] = (high + slack) / 2**20


def _free(key: str) -> Callable[[_Context, _Target], None]:
    """``check_hw_swap_free MIN`` (SwapFree) and ``check_hw_mem_free MIN`` (MemFree + Buffers + Cached
    + SwapFree), scripts/lbnl_hw.nhc: fails when the free kB are below MIN."""

    def convert(ctx: _Context, target: _Target) -> None:
        if len(ctx.args) != 1:
            raise _Skip("expected one minimum size")
        table = target.table("host")
        minimum = _kilobytes(ctx.args[0]) / 2**20
        table[key] = max(minimum, table.get(key, 0.0))

    return convert


def _loadavg(ctx: _Context, target: _Target) -> None:
    """``check_ps_loadavg L1 [L5 [L15]]`` (scripts/lbnl_ps.nhc): fails when a load average, cut to a
    whole number, is at least its limit (bash's ``-ge`` on whole numbers)."""
    if not ctx.args:
        raise _Skip("no limit given: NHC judges nothing")
    if len(ctx.args) > 3:
        ctx.note(f"{' '.join(ctx.args[3:])!r}: NHC reads three load averages and ignores more limits")
    for minutes, limit in zip((1, 5, 15), ctx.args):
        if not limit:
            continue  # NHC skips an empty limit (-n)
        if not limit.isdigit() or len(limit) > 9:
            raise _Skip(f"limit {limit!r} is not a whole number: bash's -ge cannot compare it")
        if int(limit) == 0:
            raise _Skip("a limit of 0 matches no running node (NHC would fail every node with it)")
        target.table("host")[f"max_load_{minutes}m"] = float(limit)


def _dmi(ctx: _Context, target: _Target) -> None:
    """``check_dmi_data_match [-! | -n | !] [-h HANDLE] [-t TYPE] MATCH`` (scripts/lbnl_dmi.nhc): some line
    ``TYPE: FIELD: value`` of dmidecode's matches (with ``-n``, none does), judged on the strings
    /sys/class/dmi/id has (``healthd.config.nhcdmi``; a match that could meet any other is refused)."""
    options, operands = _getopts(ctx, ":!h:nt:")
    if any(letter == "h" for letter, _ in options):
        raise _Skip("-h names dmidecode's handles, which /sys/class/dmi/id does not number")
    negated = any(letter in "!n" for letter, _ in options)
    if operands[:1] == ["!"]:
        negated, operands = True, operands[1:]
    match = " ".join(operands)
    if not match:
        raise _Skip("no match string")
    try:
        type_string, _, _ = field_file(match)
    except ValueError as exc:
        raise _Skip(str(exc)) from None
    for letter, value in options:
        if letter == "t" and DMI_TYPES.get(value, value) != type_string:
            raise _Skip(f"-t {value} names another DMI type than the match string's {type_string!r}")
    try:
        matcher(match)
    except HostMatchError as exc:
        raise _Skip(str(exc)) from None
    target.add("host", "forbid_dmi" if negated else "expect_dmi", match)


# An interface name as the kernel allows it (dev_valid_name: 1-15 bytes, no '/', ':' or blank),
# printable, and no glob (NHC compares it unquoted, as a pattern).
_INTERFACE = re.compile(r"(?!\.\.?$)[^/:\s*?\[\x00-\x1f\x7f]{1,15}")


def _ethernet(ctx: _Context, target: _Target) -> None:
    """``check_hw_eth DEVICE`` (scripts/lbnl_hw.nhc): a name in /proc/net/dev, up or not."""
    if len(ctx.args) != 1:
        raise _Skip("expected one network interface name")
    if not _INTERFACE.fullmatch(ctx.args[0]):
        raise _Skip(f"{ctx.args[0]!r} is not one interface name (NHC compares it as a glob)")
    target.add("host", "expect_interfaces", ctx.args[0])


def _enable(check: str, what: str) -> Callable[[_Context, _Target], None]:
    """A check healthd has its own code for: its table, enabled, and a note saying how it differs."""

    def convert(ctx: _Context, target: _Target) -> None:
        if ctx.args:
            ctx.note(f"arguments {' '.join(ctx.args)!r} left out: healthd's {check} check grades by its own rules")
        target.table(check)["enabled"] = True
        ctx.note(f"converted to healthd's {check} check: {what}")

    return convert


def _gpu_count(ctx: _Context, target: _Target) -> None:
    """``check_gpu_count N [rocm]`` (azurehpc-health-checks, customTests/azure_gpu_count.nhc): the GPUs the node
    must show, counted by ``nvidia-smi --list-gpus``, or by ``rocm-smi`` with ``rocm``."""
    if len(ctx.args) == 2 and ctx.args[1] == "rocm":
        raise _Skip(_AMD)
    if len(ctx.args) != 1 or not ctx.args[0].isdigit():
        raise _Skip("expected one whole number of GPUs")
    count = int(ctx.args[0])
    # [checks.gpu] expect_gpus allows 0 to 64 (checks/healthd_checks/gpu/settings.py): no node has more.
    if count > 64:
        raise _Skip(f"{count} GPUs: no node has more than 64 ([checks.gpu] expect_gpus)")
    target.table("gpu")["expect_gpus"] = count


# azurehpc-health-checks (github.com/Azure/azurehpc-health-checks, customTests/azure_*.nhc): Azure's own
# functions for its GPU and HPC VM images, the most deployed GPU extension of NHC. docs/nhc.md has the table.
_AMD = "AMD GPUs (rocm-smi): healthd's GPU checks read NVIDIA's NVML only"


def _whole(ctx: _Context, index: int, default: int, low: int, high: int) -> int:
    """Argument ``index``, a whole number from ``low`` to ``high`` (``default`` if absent), or the line is refused."""
    if len(ctx.args) <= index:
        return default
    text = ctx.args[index]
    if not text.isdigit() or not low <= int(text) <= high:
        raise _Skip(f"argument {index + 1} {text!r}: expected a whole number from {low} to {high}")
    return int(text)


def _gpu_ecc(ctx: _Context, target: _Target) -> None:
    """``check_gpu_ecc [DRAM_MAX [SRAM_MAX]]`` (azure_gpu_ecc.nhc): a pending or failed row remap fails the node, as
    any uncorrected SRAM error does, and more than DRAM_MAX of a DRAM ECC count (corrected or not).

    healthd's gpu check fails the row remaps (ROW_REMAP_PENDING, ROW_REMAP_FAILED) and uncorrected
    errors (ECC_UNCORRECTED) by its own rules; DRAM_MAX becomes ``ecc_aggregate_corrected_max``
    (NVML's lifetime count, SRAM's included: Azure fails SRAM's above SRAM_MAX, far below it).
    """
    if len(ctx.args) > 2:
        raise _Skip("expected at most two numbers: the DRAM and the SRAM ECC error limits")
    table = target.table("gpu")
    table["enabled"] = True
    if ctx.args:
        table["ecc_aggregate_corrected_max"] = _whole(ctx, 0, 0, 0, 2**63 - 1)
    ctx.note(
        "converted to healthd's gpu check: row remaps pending or failed, uncorrected ECC errors"
        + (" and ecc_aggregate_corrected_max" if ctx.args else "")
        + "; Azure's SRAM limit and V100 page-retirement path are healthd's own rules (RETIRED_PAGES_*)"
    )


def _clock_throttling(ctx: _Context, target: _Target) -> None:
    """``check_gpu_clock_throttling`` (azure_gpu_clock_throttling.nhc) only logs a throttled GPU: it never fails."""
    ctx.note("Azure's check only logs a throttled GPU and never fails the node, so nothing is added; healthd's"
             " gpu check, where enabled, reports hardware slowdown as CLOCK_HW_SLOWDOWN")  # fmt: skip


def _nvlink_status(ctx: _Context, target: _Target) -> None:
    """``check_nvlink_status`` (azure_gpu_nvlink.nhc): any inactive NVLink fails; a node without NVLink passes."""
    target.table("nvlink")["enabled"] = True
    ctx.note("converted to healthd's nvlink check: a GPU with some links inactive is NVLINK_DOWN, a node"
             " without NVLink passes; set expect_active_links to fail a GPU whose links are all down, as Azure"
             " does")  # fmt: skip


def _link_flapping(ctx: _Context, target: _Target) -> None:
    """``check_ib_link_flapping [HOURS [COUNT [LOG...]]]`` (azure_ib_link_flapping.nhc): COUNT or more 'lost carrier'
    lines for one ib* interface in the syslog within HOURS (24, 5) fail the node. healthd counts the port's own
    link_downed counter over ``flap_window`` against ``flap_downs``, with the same ``>=``."""
    table = target.table("infiniband")
    table["enabled"] = True
    # [checks.infiniband] flap_window is at most 7 days, flap_downs 1 to 255 (healthd_checks/infiniband/settings.py).
    table["flap_window"] = float(_whole(ctx, 0, 24, 1, 7 * 24) * 3600)
    table["flap_downs"] = _whole(ctx, 1, 5, 1, 255)
    logs = ", so the log files named are not read" if ctx.args[2:] else ""
    ctx.note("converted to healthd's infiniband check: link_downed increments per port (IB_LINK_FLAPPING), not"
             f" the syslog's 'lost carrier' lines{logs}")  # fmt: skip


def _nvme_count(ctx: _Context, target: _Target) -> None:
    """``check_nvme_count N`` (azure_nvme_count.nhc: exactly N ``/dev/nvme*n1``), ``check_num_nvme_devs N`` (DeepOps'
    deepops.nhc: ``nvme list`` shows N namespaces): one namespace per drive, as on the nodes they are written for."""
    if len(ctx.args) != 1:
        raise _Skip("expected one whole number of NVMe drives (the check fails the line without one)")
    target.table("disks")["expect_nvme"] = _whole(ctx, 0, 0, 0, 256)
    ctx.note("converted to [checks.disks] expect_nvme: NVMe controllers in sysfs, where the line counts"
             " namespaces (one per drive on the nodes it was written for)")  # fmt: skip


_ACTIVE = (
    " as healthd's active check, run only on a drained, idle node: turn on [active] at_epilog or when_drained"
    " for healthd to start it by itself, or run healthd check --once --active (docs/active.md)"
)
# nccl-tests' message sizes (its parsesize): whole bytes, or K, M or G after a whole number.
_NCCL_SIZE = re.compile(r"[1-9][0-9]{0,12}[KMG]?")
# [checks.nccl] retries is at most 4 (checks/healthd_checks/nccl/settings.py); one run may take
# run_timeout (60 s) and [checks.*] timeout is at most 600 s.
_NCCL_MAX_RUNS, _NCCL_RUN_TIMEOUT = 5, 60.0


def _floor(ctx: _Context, unit: str) -> float:
    """The first argument, a bandwidth above 0 (Azure's scripts compare it with bc), or the line is refused."""
    text = ctx.args[0] if ctx.args else ""
    value = float(text) if re.fullmatch(r"[0-9]{1,9}(\.[0-9]{0,9})?", text) else math.nan
    if not value > 0:
        raise _Skip(f"expected a bandwidth in {unit} above 0 first, not {text!r}")
    return value


def _nccl(key: str) -> Callable[[_Context, _Target], None]:
    """``check_nccl_allreduce BW [REPEATS [SIZE] [TOPO]]`` and ``check_nccl_allreduce_ib_loopback`` (the same words),
    customTests/azure_nccl_allreduce.nhc and azure_nccl_allreduce_ib_loopback.nhc at commit 0e0a1ac: nccl-tests'
    ``all_reduce_perf -b SIZE -e SIZE -f 2 -g 1 -c 1`` on every GPU (the loopback with NCCL_SHM_DISABLE,
    NCCL_P2P_DISABLE and NCCL_NET_GDR_LEVEL=5); the node fails when no run of REPEATS reaches BW GB/s of
    ``Avg bus bandwidth``, or at once on a ``FAILED`` line. Azure's earlier scripts (commit 0611432) take
    TOPO before SIZE: a word with a ``/`` is the topology file, either way.
    """

    def convert(ctx: _Context, target: _Target) -> None:
        floor = _floor(ctx, "GB/s")
        if len(ctx.args) > 4:
            raise _Skip("expected a bandwidth, repeats, a message size and a topology file at most")
        repeats = _whole(ctx, 1, 1, 1, 1000)
        table = target.table("nccl")
        table[key] = floor
        for word in ctx.args[2:]:
            _nccl_word(ctx, table, word)
        retries = max(table.get("retries", 0), min(repeats, _NCCL_MAX_RUNS) - 1)
        if repeats > _NCCL_MAX_RUNS:
            ctx.note(f"{repeats} repeats: healthd runs at most {_NCCL_MAX_RUNS} (retries = 4), so it may fail a node"
                     " a later run would have passed")  # fmt: skip
        if retries:
            table["retries"] = retries
        runs = (1 + retries) * (2 if {"min_busbw_gbps", "ib_loopback_min_busbw_gbps"} <= set(table) else 1)
        if runs * _NCCL_RUN_TIMEOUT > 300:  # [checks.nccl] timeout's default
            table["timeout"] = runs * _NCCL_RUN_TIMEOUT
        what = "through the node's own HCAs " if key.startswith("ib_") else ""
        ctx.note(f"converted to [checks.nccl] {key}: all_reduce_perf's average bus bandwidth {what}on every GPU"
                 f" sysfs lists (Azure counts nvidia-smi's), every sum checked{_ACTIVE}")  # fmt: skip

    return convert


def _nccl_word(ctx: _Context, table: dict[str, Any], word: str) -> None:
    """A message size (``16G``) or a topology file (``/opt/microsoft/ndv5-topo.xml``) of an NCCL line."""
    if "/" not in word:
        if not _NCCL_SIZE.fullmatch(word):
            raise _Skip(f"{word!r} is neither a message size nccl-tests reads (16G) nor a topology file")
        if table.setdefault("size_min", word) != word:
            ctx.note(f"message size {word}: the earlier line's {table['size_min']} is kept (one size for both runs)")
        table.setdefault("size_max", table["size_min"])
        return
    if not word.startswith("/"):
        raise _Skip(f"topology file {word!r} is not an absolute path")
    if table.setdefault("topo_file", word) != word:
        ctx.note(f"topology file {word}: the earlier line's {table['topo_file']} is kept (one NCCL_TOPO_FILE)")


def _ib_bw(gdr: bool) -> Callable[[_Context, _Target], None]:
    """``check_ib_bw_gdr BW [SKU]`` and ``check_ib_bw_non_gdr BW [MSG_SIZE]`` (customTests/azure_ib_write_bw_gdr.nhc,
    azure_ib_write_bw_non_gdr.nhc at commit 0e0a1ac): perftest's ``ib_write_bw`` from each InfiniBand HCA to itself,
    ``-x 0 -F --report_gbits --perform_warm_up``; with GPUDirect ``-s 8388608 --use_cuda=I`` (the I-th HCA, the
    I-th GPU), without ``-s MSG_SIZE (1048576) -D 10 -q 2``. A ``BW average[Gb/sec]`` below BW fails the node.
    """

    def convert(ctx: _Context, target: _Target) -> None:
        floor = _floor(ctx, "Gb/s")
        if len(ctx.args) > 2:
            raise _Skip("expected a bandwidth and one more word at most")
        table = target.table("ib_bandwidth")
        if table.setdefault("use_cuda", gdr) != gdr:
            raise _Skip("an earlier line measures the HCAs the other way (with or without GPUDirect): one"
                        " ib_bandwidth check, whose settings that line already gave")  # fmt: skip
        table["min_gbps"] = floor
        if gdr:
            table["message_size"] = 8388608
            if ctx.args[1:]:
                ctx.note(f"{ctx.args[1]!r} (the VM size Azure's earlier script chose its NUMA table by) is left out:"
                         " the I-th HCA writes with the I-th GPU, as Azure's current script pairs them")  # fmt: skip
        else:
            table.update(message_size=_whole(ctx, 1, 1048576, 1, 2**30), duration=10, queue_pairs=2)
        # Azure runs its own builds, $AZ_NHC_ROOT/bin/ib_write_bw (with CUDA) and ib_write_bw_nongdr.
        how = "with GPUDirect (set ib_write_bw to a perftest built with CUDA, as Azure's own) " if gdr else ""
        ctx.note(f"converted to [checks.ib_bandwidth] min_gbps: ib_write_bw {how}from each InfiniBand HCA to itself"
                 f"{_ACTIVE}")  # fmt: skip

    return convert


def _vbios(ctx: _Context, target: _Target) -> None:
    """``check_vbios_version VERSION`` (azure_gpu_vbios.nhc): every GPU's VBIOS is VERSION."""
    if len(ctx.args) != 1:
        raise _Skip("expected one VBIOS version")
    target.add("gpu", "expect_vbios", ctx.args[0])


def _gpu_health(tool: str) -> Callable[[_Context, _Target], None]:
    """``check_nv_healthmon`` (lbnl_nv.nhc), ``check_nvsmi_healthmon`` (csc_nvidia_smi.nhc): ``tool`` must exit 0.

    Without a driver or a GPU it cannot (nvidia-smi: "No devices were found", exit 6; a missing
    tool, 127), so NHC fails such a node: the gpu check is enabled with ``min_gpus = 1``,
    which fails where no GPU answers, as ``expect_gpus`` would but without fixing the count.
    """
    enable = _enable("gpu", f"GPU health through NVML instead of {tool}'s exit code, at least one GPU (min_gpus)")

    def convert(ctx: _Context, target: _Target) -> None:
        enable(ctx, target)
        target.table("gpu").setdefault("min_gpus", 1)

    return convert


# bash's test operators (check_file_test, scripts/lbnl_file.nhc) as [checks.files] keys.
_FILE_TESTS: dict[str, tuple[str, Any]] = {
    "e": ("exists", True), "a": ("exists", True), "f": ("type", "file"), "d": ("type", "directory"),
    "L": ("type", "symlink"), "h": ("type", "symlink"), "b": ("type", "block"), "c": ("type", "char"),
    "p": ("type", "fifo"), "S": ("type", "socket"), "r": ("readable", True), "w": ("writable", True),
    "x": ("executable", True), "s": ("nonempty", True), "u": ("setuid", True), "g": ("setgid", True),
    "k": ("sticky", True),
}  # fmt: skip


def _expect_file(target: _Target, path: str, keys: dict[str, Any], lines: list[str]) -> None:
    """Add ``keys`` and ``lines`` to the expectation about ``path``; a key another line set otherwise is refused."""
    if not path.startswith("/"):
        raise _Skip(f"{path!r} is not an absolute path: NHC's working directory is not healthd's")
    item = target.add("files", "expect_files", {"path": path, "severity": "CRITICAL"}, identity=path)
    for key, value in keys.items():
        if item.get(key, value) != value:
            raise _Skip(f"{path}: {key} {value!r} contradicts {item[key]!r} from an earlier line")
    item.update(keys)
    if lines:
        item["lines"] = [*item.get("lines", []), *lines]


def _file_test(ctx: _Context, target: _Target) -> None:
    """``check_file_test [-!] -OP... FILE...`` (scripts/lbnl_file.nhc): each ``test -OP FILE`` true; with ``-!``
    at least one false, which healthd says only for one file and ``-e``: it must not exist."""
    flags = [arg[1:] for arg in ctx.args if arg.startswith("-") and arg != "-!"]
    files = [arg for arg in ctx.args if not arg.startswith("-")]
    if not flags or not files:
        raise _Skip("NHC fails this line: 'Missing parameters'")
    for flag in flags:
        if flag not in _FILE_TESTS:
            raise _Skip(f"-{flag}: healthd has no such file property (-O -G -N -t judge the running shell's ids,"
                        " times or terminal)")  # fmt: skip
    keys = dict(_FILE_TESTS[flag] for flag in flags)
    types = {_FILE_TESTS[flag][1] for flag in flags if _FILE_TESTS[flag][0] == "type"}
    if len(types) > 1:
        raise _Skip(f"{sorted(types)}: healthd's file has one type (a symlink to a file is type symlink)")
    if "-!" in ctx.args:
        if len(files) != 1 or set(keys) != {"exists"}:
            raise _Skip("-! passes where any one test fails; healthd says only that one file must not exist (-! -e)")
        keys = {"exists": False}
    for path in files:
        _expect_file(target, path, keys, [])
    _owned(ctx)


def _owned(ctx: _Context) -> None:
    ctx.note("a file owned by neither root nor the expected owner is UNKNOWN, where NHC judges it: a user may have"
             " made it (any_owner = true judges any owner's)")  # fmt: skip


def _file_contents(ctx: _Context, target: _Target) -> None:
    """``check_file_contents FILE MATCH...`` (scripts/lbnl_file.nhc): each match string some line's, a ``!`` one
    no line's. A file NHC cannot read has no lines: it fails only a line with a positive match."""
    if len(ctx.args) < 2:
        raise _Skip("expected a file and at least one match string")
    path, lines = ctx.args[0], ctx.args[1:]
    for match in lines:
        try:
            matcher(match[1:] if match.startswith("!") else match)
        except HostMatchError as exc:
            raise _Skip(str(exc)) from None
    positive = any(not match.startswith("!") for match in lines)
    # An unreadable file with only negated matches passes in NHC: healthd then need not find it.
    _expect_file(target, path, {} if positive else {"exists": "optional"}, lines)
    _owned(ctx)


def _bash_number(text: str) -> int:
    """A number as bash's arithmetic reads it (0NNN octal, 0xNN hex, else decimal); ``ValueError`` otherwise."""
    if re.fullmatch(r"0[0-7]*", text):
        return int(text, 8)
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", text):
        return int(text, 16)
    if re.fullmatch(r"[1-9][0-9]*", text):
        return int(text)
    raise ValueError(text)


_STAT_KEYS = {"G": "group", "g": "group", "U": "owner", "u": "owner", "n": "max_age_s", "o": "min_age_s"}


def _file_stat(ctx: _Context, target: _Target) -> None:
    """``check_file_stat [-u UID] [-U USER] [-g GID] [-G GROUP] [-m MODE] [-M MODE] [-n S] [-o S] FILE...``
    (scripts/lbnl_file.nhc). ``-m``/``-M`` are bash arithmetic: ``644`` is decimal, which is why NHC wants ``0644``."""
    options, files = _getopts(ctx, ":D:G:M:N:O:T:U:d:g:m:n:o:t:u:")
    if not files:
        raise _Skip("no file named")
    # NHC runs stat without -L: a symbolic link's own owner, mode and times, a dangling one too.
    keys: dict[str, Any] = {"follow": False}
    for letter, value in options:
        if letter in "DdTtNO":
            raise _Skip(f"-{letter}: healthd does not judge a file's device numbers or ctime")
        if letter in "mM":
            try:
                bits = _bash_number(value)
            except ValueError:
                raise _Skip(f"-{letter} {value!r} is not a number bash reads") from None
            if bits > 0o7777:
                raise _Skip(f"-{letter} {value!r} is {bits:o} in octal: no file has such permissions")
            keys["mode" if letter == "m" else "mode_includes"] = f"{bits:04o}"
        elif letter in "no":
            if not value.isdigit():
                raise _Skip(f"-{letter} {value!r} is not a whole number of seconds")
            keys[_STAT_KEYS[letter]] = float(value)
        else:
            keys[_STAT_KEYS[letter]] = value
    for path in files:
        _expect_file(target, path, keys, [])
    _owned(ctx)


CONVERTERS: dict[str, Callable[[_Context, _Target], None]] = {
    "check_fs_mount": _mount(None),
    "check_fs_mount_rw": _mount(True),
    "check_fs_mount_ro": _mount(False),
    "check_fs_used": _usage("min_free_percent", used=True),
    "check_fs_free": _usage("min_free_percent", used=False),
    "check_fs_iused": _usage("min_free_inodes_percent", used=True),
    "check_fs_ifree": _usage("min_free_inodes_percent", used=False),
    "check_ps_service": _service,
    "check_ps_daemon": _daemon(forbidden=False),
    "check_ps_blacklist": _daemon(forbidden=True),
    "check_hw_ib": _infiniband,
    "check_hw_cpuinfo": _cpuinfo,
    "check_hw_physmem": _physmem,
    "check_hw_eth": _ethernet,
    "check_hw_swap": _swap,
    "check_hw_swap_free": _free("min_free_swap_gib"),
    "check_hw_mem_free": _free("min_free_memory_gib"),
    "check_ps_loadavg": _loadavg,
    "check_dmi_data_match": _dmi,
    "check_file_test": _file_test,
    "check_file_contents": _file_contents,
    "check_file_stat": _file_stat,
    "check_gpu_count": _gpu_count,
    "check_gpu_xid": _enable("xid", "Xid errors from the kernel log, graded by NVIDIA's Xid catalog"),
    "check_gpu_ecc": _gpu_ecc,
    "check_gpu_clock_throttling": _clock_throttling,
    "check_nvlink_status": _nvlink_status,
    "check_ib_link_flapping": _link_flapping,
    "check_nccl_allreduce": _nccl("min_busbw_gbps"),
    "check_nccl_allreduce_ib_loopback": _nccl("ib_loopback_min_busbw_gbps"),
    "check_ib_bw_gdr": _ib_bw(gdr=True),
    "check_ib_bw_non_gdr": _ib_bw(gdr=False),
    "check_nvme_count": _nvme_count,
    "check_vbios_version": _vbios,
    "check_nv_healthmon": _gpu_health("nvidia-healthmon"),
    "check_nvsmi_healthmon": _gpu_health("nvidia-smi"),
    # NVIDIA DeepOps' own functions (roles/nhc/files/deepops.nhc): nvidia-smi -L | wc -l must equal N.
    "check_nv_gpu_count": _gpu_count,
    # nvidia-smi --query-gpu=retired_pages.pending says Yes: healthd's RETIRED_PAGES_PENDING. Without
    # nvidia-smi the grep finds nothing and NHC passes, as the gpu check does where no GPU is.
    "check_nv_retired_pages": _enable("gpu", "a pending retired page is RETIRED_PAGES_PENDING through NVML"),
    # `nvme list | grep /dev/nvme | wc -l` must equal N: one line per namespace, as Azure's count.
    "check_num_nvme_devs": _nvme_count,
    # journalctl's Xids of the last hour but 94; healthd's xid check grades each by NVIDIA's catalog.
    "check_xid_errors": _enable("xid", "Xid errors from the kernel log, graded by NVIDIA's Xid catalog"),
    "check_hw_mcelog": _enable(
        "edac", "memory errors from EDAC and the kernel log, with its own corrected-error rate per DIMM"
    ),
}


# Checks with no healthd equivalent whose reason is worth more than "none": what they run, and what to use.
REFUSED: dict[str, str] = {
    # LBNL NHC 1.4.3's own (scripts/lbnl_*.nhc) that healthd does not convert.
    "check_cmd_output": "runs a command the config names, as root, on every pass; healthd runs no such"
    " command (the one it runs from a config, [remediation] on_repair, is an operator's repair under its"
    " own trust rules): write the test as a check plugin (CONTRIBUTING.md)",
    "check_cmd_status": "runs a command the config names, as root, on every pass; healthd runs no such"
    " command: write the test as a check plugin (CONTRIBUTING.md)",
    "check_cmd_dmesg": "greps dmesg's output for a pattern; healthd's kernlog, xid and edac checks grade the"
    " kernel log by what each message means",
    "check_ps_unauth_users": "compares every process's owner with the users of the jobs on the node, which"
    " NHC asks the resource manager for on every run; Slurm's pam_slurm_adopt keeps users without a job"
    " off a node, and a user's process is no fault of the node",
    "check_ps_userproc_lineage": "asks that each user's process descend from the resource manager's daemon;"
    " Slurm's cgroups and pam_slurm_adopt confine users' processes, and a user's process is no fault of the node",
    "check_ps_cpu": "judges one process's CPU share; what a user's job uses is no fault of the node",
    "check_ps_mem": "judges one process's memory; what a user's job uses is no fault of the node",
    "check_ps_physmem": "judges one process's resident memory; what a user's job uses is no fault of the node",
    "check_ps_time": "judges one process's CPU time; what a user's job uses is no fault of the node",
    "check_ps_kswapd": "judges kswapd's CPU time, which follows the jobs' memory pressure, not the node's health",
    "check_hw_mem": "judges MemTotal + SwapTotal as one sum; use check_hw_physmem and check_hw_swap",
    "check_hw_physmem_free": "judges MemFree + Buffers + Cached without swap; use check_hw_mem_free",
    "check_hw_gm": "checks Myrinet GM, which no node healthd runs on has",
    "check_fs_size": "compares a filesystem's total size, which healthd does not judge",
    "check_fs_inodes": "compares a filesystem's total inodes, which healthd does not judge",
    "check_moab_sched": "asks Moab's scheduler; healthd works with Slurm",
    "check_moab_rm": "asks Moab's resource manager; healthd works with Slurm",
    "check_moab_torque": "asks Torque; healthd works with Slurm",
    "check_net_socket": "looks for a listening socket with netstat or ss; list the daemon that owns it in"
    " [checks.services] expect_processes",
    "check_net_ping": "pings hosts from each node, which judges the network and the other hosts, not this node",
    "check_dmi_raw_data_match": "greps dmidecode's whole output, most of which /sys/class/dmi/id does not"
    " have; write it as check_dmi_data_match 'TYPE: FIELD: value' where sysfs has the field",
    # azurehpc-health-checks (customTests/azure_*.nhc). The active ones load the GPUs or the fabric on
    # every NHC run; healthd loads a node only in an active check on a drained, idle node (docs/active.md).
    "check_gpu_bw": "measures host-GPU and GPU-GPU bandwidth (nvbandwidth) on every run; healthd measures"
    " PCIe bandwidth only as an active check on a drained idle node: [checks.dcgm] level = 2 with"
    " expected = { DEVICE_ID = { pcie_bandwidth_gbps_min = N } }, keyed by the GPU's PCI device ID,"
    " which this line does not give (docs/active.md)",
    "check_cuda_bw": "measures host-GPU bandwidth on every run (Azure's earlier name for check_gpu_bw); healthd"
    " measures PCIe bandwidth only as an active check on a drained idle node: [checks.dcgm] level = 2 with"
    " expected pcie_bandwidth_gbps_min per GPU device ID (docs/active.md)",
    "check_cpu_stream": "runs the STREAM memory benchmark on every run; healthd has no CPU memory bandwidth check",
    "check_hw_topology": "compares lstopo's PCI devices and NUMA nodes with a topology file Azure picks by the VM"
    " size it asks Azure's metadata service for; list the PCI addresses that must be present in"
    " [checks.pcie] expect_devices",
    "check_gpu_persistence": "turns persistence mode on (nvidia-smi -pm 1) where it is off: a repair, which"
    " healthd leaves to the node's own setup (nvidia-persistenced)",
    "check_app_gpu_clocks": "sets the GPUs' application clocks to their maximum: a repair, which healthd"
    " leaves to the node's own setup",
    "check_rccl_allreduce": _AMD,
    "check_gpu_xgmi": _AMD,
    # NVIDIA DeepOps (roles/nhc/files/deepops.nhc).
    "check_nv_drv_version": "greps the first line of /proc/driver/nvidia/version for a pattern, where"
    " healthd compares whole versions: list the exact versions in [checks.host] expect_driver",
    "check_nv_pcie_link_width": "holds every GPU's current PCIe width to one number; healthd's gpu check"
    " compares each GPU's width with its own maximum (PCIE_WIDTH_DEGRADED)",
    "check_nv_dcgmi_diag": "runs DCGM's diagnostic on a node that may be running jobs; healthd runs DCGM"
    " diagnostics only as active checks on a drained, idle node ([active])",
    "check_ipoib_up": "reads ibdev2netdev (MLNX_OFED) for a pattern; list the IPoIB interface in"
    " [checks.host] expect_ethernet, which asks that it exist and be up",
    "check_ib_link_ber": "reads the bit error rate with mlxlink (MLNX_OFED), which healthd does not run",
    "check_num_numa_nodes": "counts NUMA nodes with lscpu; healthd does not count them",
    "check_num_nvme_devices": "is not defined (DeepOps' example DGX A100 config calls it, deepops.nhc defines"
    " check_num_nvme_devs): NHC 1.4.3 runs no such function and passes the line on every node; to count NVMe"
    " drives write check_num_nvme_devs N, which becomes [checks.disks] expect_nvme",
}


# Every check LBNL NHC 1.4.3 defines (``function check_*`` in its scripts/*.nhc): each is in
# CONVERTERS or REFUSED and in docs/nhc.md; tests/config/test_nhc_side_by_side.py holds the list to NHC's scripts.
NHC_143_CHECKS = (
    *("check_cmd_dmesg", "check_cmd_output", "check_cmd_status", "check_dmi_data_match", "check_dmi_raw_data_match"),
    *("check_file_contents", "check_file_stat", "check_file_test", "check_fs_free", "check_fs_ifree"),
    *("check_fs_inodes", "check_fs_iused", "check_fs_mount", "check_fs_mount_ro", "check_fs_mount_rw"),
    *("check_fs_size", "check_fs_used", "check_hw_cpuinfo", "check_hw_eth", "check_hw_gm", "check_hw_ib"),
    *("check_hw_mcelog", "check_hw_mem", "check_hw_mem_free", "check_hw_physmem", "check_hw_physmem_free"),
    *("check_hw_swap", "check_hw_swap_free", "check_moab_rm", "check_moab_sched", "check_moab_torque"),
    *("check_net_ping", "check_net_socket", "check_nv_healthmon", "check_nvsmi_healthmon", "check_ps_blacklist"),
    *("check_ps_cpu", "check_ps_daemon", "check_ps_kswapd", "check_ps_loadavg", "check_ps_mem", "check_ps_physmem"),
    *("check_ps_service", "check_ps_time", "check_ps_unauth_users", "check_ps_userproc_lineage"),
)


# Every check azurehpc-health-checks defines (``function check_*`` in its customTests/*.nhc, commit
# 0e0a1ac of 2026-05-01, less its helpers check_ecc, check_SDBE_ecc, check_nvBW_gpu_bw,
# check_rocm_gpu_bw, check_nvlink_enabled and check_all_reduce_dependencies, which no config
# names), and check_cuda_bw, its earlier name for check_gpu_bw: each is in CONVERTERS or REFUSED
# and in docs/nhc.md. csc_nvidia_smi.nhc's check_nvsmi_healthmon is NHC's own.
AZURE_CHECKS = (
    *("check_app_gpu_clocks", "check_cpu_stream", "check_cuda_bw", "check_gpu_bw", "check_gpu_clock_throttling"),
    *("check_gpu_count", "check_gpu_ecc", "check_gpu_persistence", "check_gpu_xgmi", "check_gpu_xid"),
    *("check_hw_topology", "check_ib_bw_gdr", "check_ib_bw_non_gdr", "check_ib_link_flapping"),
    *("check_nccl_allreduce", "check_nccl_allreduce_ib_loopback", "check_nvlink_status", "check_nvme_count"),
    *("check_rccl_allreduce", "check_vbios_version"),
)


# Azure's NCCL lines name their topology file under $AZ_NHC_ROOT, which Azure's own wrapper sets
# (run-health-checks.sh, its containers' ENV), not NHC: that word is left out, the rest converted.
_TOPOLOGY_LINES = frozenset({"check_nccl_allreduce", "check_nccl_allreduce_ib_loopback"})
_TOPOLOGY_VARIABLE = (
    "{word!r} names a file under a variable of Azure's own wrapper, not NHC's: left out. NCCL reads the topology"
    " itself; on a VM that hides it, set [checks.nccl] topo_file to the file"
)


def _without_topology_variable(line: Line, variables: Variables) -> Optional[tuple[list[str], str]]:
    """An NCCL line's words without its topology file's, when only that word names an unknown variable."""
    raw = line.check.split()
    dropped = [word for word in raw[3:] if "$" in word]
    if raw[0] not in _TOPOLOGY_LINES or len(dropped) != 1 or "/" not in dropped[0]:
        return None
    try:
        return words(" ".join(word for word in raw if word != dropped[0]), line.target, variables), dropped[0]
    except Refused:
        return None


class _Converter:
    """The state of one conversion: targets, variables, notes."""

    def __init__(self) -> None:
        self.targets: dict[str, _Target] = {}
        self.variables = Variables()
        self.notes: list[Note] = []
        self.converted = 0
        self.bad_targets: dict[str, str] = {}

    def lost(self, line: Line, reason: str) -> None:
        self.notes.append(Note(line.number, line.shown, reason))

    def target_problem(self, target: str) -> Optional[str]:
        if target not in self.bad_targets and target != "*":
            try:
                matcher(target)
                self.bad_targets[target] = ""
            except HostMatchError as exc:
                self.bad_targets[target] = f"the target is not a valid NHC match string: {exc}"
        return self.bad_targets.get(target) or None

    def line(self, line: Line) -> None:
        if line.too_long:
            return self.lost(line, f"longer than {MAX_LINE} characters: no NHC check is; not read")
        if not line.check:
            return self.lost(line, "no 'TARGET || CHECK' separator, or no check after it")
        problem = self.target_problem(line.target)
        if problem:
            return self.lost(line, problem)
        try:
            items = words(line.check, line.target, self.variables)
        except Refused as exc:
            # A check healthd refuses anyway is refused for its own reason, not for a word of its arguments.
            name = line.check.split(maxsplit=1)[0]
            why = REFUSED.get(name)
            kept = _without_topology_variable(line, self.variables)
            if kept is None:
                return self.lost(line, f"{name} has no healthd equivalent: {why}" if why else str(exc))
            items, word = kept
            self.notes.append(Note(line.number, line.shown, _TOPOLOGY_VARIABLE.format(word=word), lost=False))
        if not items:
            return self.lost(line, "no check after '||'")
        pairs = assignments(items)
        if pairs is not None:
            return self.assign(line, pairs)
        self.check(line, items)

    def assign(self, line: Line, pairs: list[tuple[str, str]]) -> None:
        for name, value in pairs:
            self.variables.assign(line.target, name, value)
            # MARK_OFFLINE (nhc: nhcmain_finalize_env, default 1) decides whether NHC drains at all.
            if name == "MARK_OFFLINE" and value != "1":
                self.lost(line, f"{name}={value}: NHC does not drain on a failure; [policy] dry_run = true does that")
        self.notes.append(Note(line.number, line.shown, "an NHC variable: used to expand later lines", lost=False))

    def check(self, line: Line, items: list[str]) -> None:
        handler = CONVERTERS.get(items[0])
        if handler is None:
            why = REFUSED.get(items[0])
            return self.lost(line, f"{items[0]} has no healthd equivalent{': ' + why if why else ''}")
        ctx = _Context(line, items[1:], [])
        target = self.targets.setdefault(line.target, _Target())
        try:
            handler(ctx, target)
        except _Skip as exc:
            return self.lost(line, str(exc))
        target.lines.append(line.number)
        self.notes.extend(ctx.notes)
        self.converted += 1


# Jinja's (Ansible's) and Go template's (Helm's) delimiters: {{ expression }}, {% statement %}, {# comment #}.
_TEMPLATE_TAG = re.compile(r"\{([{%#])-?\s*([A-Za-z_]*)")
# Statements that open a block, closed by end<word> (Jinja) or by "end" (Go templates).
_TEMPLATE_BLOCKS = frozenset({"if", "for", "macro", "call", "filter", "with", "block", "raw", "range", "define"})
TEMPLATE = (
    "this file is a template (Jinja, as Ansible renders it, or Go's, as Helm does), not an nhc.conf:"
    " render it for a node first and convert what it renders; lines whose presence or words only the"
    " renderer decides are not converted"
)


def _template_lines(text: str) -> dict[int, str]:
    """Line number -> why only a template's renderer can say what NHC would read there (empty: no template)."""
    found: dict[int, str] = {}
    blocks: list[tuple[str, int]] = []
    in_comment = False
    for number, raw in enumerate(text.split("\n"), start=1):
        tags = _TEMPLATE_TAG.findall(raw[:MAX_LINE])
        if tags or in_comment:
            found[number] = "template syntax: only the template's renderer decides what this line says"
        elif blocks:
            word, start = blocks[-1]
            found[number] = (
                f"inside the template's '{word}' block of line {start}: its renderer decides whether NHC sees it"
            )
        in_comment = in_comment and "#}" not in raw
        for kind, word in tags:
            if kind == "#":
                in_comment = "#}" not in raw
            elif word in _TEMPLATE_BLOCKS:
                blocks.append((word, number))
            elif blocks and word in ("end", f"end{blocks[-1][0]}"):
                blocks.pop()
    return found


def convert(text: str) -> Imported:
    """Convert nhc.conf ``text``; see the module docstring."""
    state = _Converter()
    templated = _template_lines(text)
    if templated:
        first = min(templated)
        shown = text.split("\n", first)[first - 1]
        state.notes.append(Note(first, shorten(shown.strip()), TEMPLATE))
    for line in logical_lines(text):
        why = templated.get(line.number)
        if why is None:
            state.line(line)
        else:
            state.lost(line, why)
    return Imported(_document(state.targets), tuple(state.notes), state.converted)


def convert_check(text: str) -> Imported:
    """One NHC check as ``nhc -e`` takes it (``check_fs_mount_rw -f /scratch``, no target), for ``healthd check
    --expect``: its own ``{"checks": ...}`` tables, and notes (``lost`` ones when it is not converted whole).

    ``convert``'s file-wide thresholds set to nothing are left out: the check is added to a
    config whose own thresholds still hold. A usage limit keeps ``free_space_as = "df"``, which
    its percentage means (``_usage``).
    """
    check = text.strip(" \t\r")
    state = _Converter()
    line = Line(1, "*", check, shorten(check), too_long=len(check) > MAX_LINE)
    if not check or "\n" in check or "||" in check:
        state.lost(line, "expected one NHC check on one line, without a target, as nhc -e takes it")
    else:
        state.line(line)
    if not state.converted and not any(note.lost for note in state.notes):
        state.lost(line, "an NHC variable, not a check")
    tables = state.targets.get("*", _Target()).tables()
    if "usage_limits" in tables.get("mounts", {}):
        tables["mounts"]["free_space_as"] = "df"
    return Imported({"checks": tables}, tuple(state.notes), state.converted)


def _document(targets: dict[str, _Target]) -> dict[str, Any]:
    base = targets.pop("*", _Target())
    checks = base.tables()
    # NHC judges space and inodes only on the mounts a check_fs_* line names: the file-wide
    # thresholds healthd applies to / and every expected mount are set to nothing.
    mounts = checks.setdefault("mounts", {})
    mounts.update({"min_free_percent": 0.0, "min_free_inodes_percent": 0.0, "free_space_as": "df"})
    lines = f"converted from nhc.conf lines:{_lines(base)}" if base.lines else "converted from nhc.conf"
    document: dict[str, Any] = {"checks": {"#": lines, **checks}}
    hosts = [
        {"#": f"from nhc.conf lines:{_lines(entry)}", "match": match, "checks": entry.tables()}
        for match, entry in targets.items()
        if entry.lines
    ]
    if hosts:
        document["hosts"] = hosts
    return document


def _lines(target: _Target) -> str:
    """The line numbers, on lines of their own, 12 to a line and at most 200, so the comment stays readable."""
    numbers = [str(n) for n in target.lines[:200]]
    rows = [", ".join(numbers[i : i + 12]) for i in range(0, len(numbers), 12)]
    more = f" and {len(target.lines) - 200} more" if len(target.lines) > 200 else ""
    return "\n" + ",\n".join(rows) + more
