"""The Slurm adapter: the only code in healthd that runs scontrol and sinfo.

Pure parsers turn ``sinfo -O`` lines (every version from 21.08) into ``NodeInfo``
and ``NodeGroup``, and ``scontrol -o show node`` (every version; one line per node)
and ``scontrol --json show node`` (23.02 and later) into ``NodeInfo``. A pass reads
its node with sinfo: scontrol loads the whole node table even for one node (see
docs/scale.md, "Reads"). ``SlurmClient``
runs the commands through ``healthd.slurm.command``: with an argument list (no command
line is ever built), found in absolute places (the HealthCheckProgram has no PATH),
``SLURM_CONF`` from the config and a deadline on every call that a hung filesystem
cannot outlast. It knows nothing of healthd's policy: which reason to write and whose
a reason is are decided in ``healthd.slurm.reasons``. It is called by ``healthd.cycle.execute``
(the pass's reads and writes), by the active checks' last read of the node
(``healthd.cycle.activerun``) and by ``fleet lemons --drain`` (``healthd.fleet.drain``), which
tests/test_layering.py allows alone.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

from healthd.slurm.command import ClientTimedOut, NotRun, not_run, run_client
from healthd.slurm.command import SlurmError as SlurmError
from healthd.slurm.command import SlurmNotFound as SlurmNotFound
from healthd.slurm.hostlist import HostlistError, contains
from healthd.slurm.nodestate import NodeGroup, NodeInfo
from healthd.slurm.ping import PING_ARGS, PROBE_ATTEMPTS, PROBE_GAP, PROBE_SECONDS, refused_everywhere
from healthd.slurm.problem import DETAIL_LIMIT, SlurmFailure
from healthd.text import one_line

if TYPE_CHECKING:
    from healthd.config.models import SlurmSettings

# What `scontrol reboot nextstate=` accepts in 22.05 to 24.11 (scontrol(1)).
REBOOT_NEXT_STATES = ("DOWN", "RESUME")


_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:]*)=")
# Slurm appends " [user@time]" to a reason it prints; on 22.05 Comment=, Extra=,
# InstanceId=, InstanceType= and ReservationName= may follow on the same line, so the
# reason ends at the first such stamp, not at the end of the line.
_REASON_STAMP = re.compile(r"\s\[(?P<user>[^@\]\s]*)@(?P<time>[^\]\s]+)\]")
# Fields scontrol (22.05 node_info.c) prints after Reason=; used only when a reason has no stamp.
_AFTER_REASON = re.compile(r"\s(?:Comment|Extra|InstanceId|InstanceType|ReservationName)=")


# sinfo -O fields ("|" after each, no padding); the free-text reason comes last, so a
# "|" in it cannot shift the others. StateComplete (21.08+) is base state plus flags.
NODE_FIELDS = ("NodeList", "Partition", "StateComplete", "TimeStamp", "UserLong", "Reason")
# UserLong splits the groups by who set the reason too, so a group is enough to stand for one node's state.
GROUP_FIELDS = ("Partition", "Nodes", "StateComplete", "TimeStamp", "UserLong", "NodeList", "Reason")


def sinfo_format(fields: tuple[str, ...]) -> str:
    """``-O`` argument: ``Field:0|`` for each field but the last, whose text runs to the end of the line."""
    return ",".join([f"{f}:0|" for f in fields[:-1]] + [f"{fields[-1]}:0"])


def parse_state(text: str) -> tuple[str, frozenset[str]]:
    """``MIXED+DRAIN+REBOOT_REQUESTED`` -> ("MIXED", {"DRAIN", "REBOOT_REQUESTED"})."""
    parts = [p.strip().upper() for p in text.strip().rstrip("*~#!%$@^-").split("+") if p.strip()]
    if not parts:
        raise SlurmError(f"empty node state {text!r}")
    return parts[0], frozenset(parts[1:])


def _stamp_time(text: str) -> Optional[float]:
    """``2024-01-01T00:00:00`` (slurmctld's local time, no zone) as epoch seconds; None if unreadable.

    Only ever compared with other stamps from the same slurmctld, so the zone cancels out.
    """
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def split_reason(text: str) -> tuple[str, str, str, Optional[float]]:
    """``healthd: X [root@2024-01-01T00:00:00] Comment=c`` -> ("healthd: X", "root", " Comment=c", <time>).

    Returns the reason, the user who set it, the rest of the line after the reason
    and when the reason was set (None when there is no stamp).
    """
    match = _REASON_STAMP.search(text)
    if match is not None:
        return text[: match.start()].strip(), match["user"], text[match.end() :], _stamp_time(match["time"])
    after = _AFTER_REASON.search(text)
    if after is not None:
        return text[: after.start()].strip(), "", text[after.start() :], None
    return text.strip(), "", "", None


def _fields(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    matches = list(_KEY.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        fields[match[1]] = text[match.end() : end].strip()
    return fields


def parse_show_node_line(line: str) -> NodeInfo:
    """One line of ``scontrol -o show node``.

    Values may contain spaces (``OS=Linux 6.1 #1 SMP``, a reason), so the line is
    split on ``Key=`` tokens; the free text of ``Reason=`` is cut out first, up to
    Slurm's ``[user@time]`` stamp, because it may hold anything.
    """
    line = line.strip()
    if not line.startswith("NodeName="):
        raise SlurmError(f"not a `scontrol -o show node` line: {line[:80]!r}")
    head, sep, reason_text = line.partition(" Reason=")
    reason, user, tail, when = split_reason(reason_text) if sep else ("", "", "", None)
    fields = {**_fields(tail), **_fields(head)}
    if "State" not in fields:
        raise SlurmError(f"no State= in `scontrol -o show node` line for {fields.get('NodeName', '?')}")
    state, flags = parse_state(fields["State"])
    partitions = fields.get("Partitions", "")
    return NodeInfo(
        name=fields["NodeName"],
        state=state,
        flags=flags,
        reason=reason,
        reason_user=user,
        partitions=tuple(p for p in partitions.split(",") if p and p != "(null)"),
        reason_time=when,
        # 22.05 prints BootTime=None while a node powers up and Unknown before it registers.
        boot_time=_stamp_time(fields.get("BootTime", "")),
        # Printed only while a reboot is pending (node_info.c: with REBOOT_REQUESTED/ISSUED).
        next_state=_next_state(fields.get("NextState", "")),
    )


def _next_state(value: Any) -> str:
    """``NextState=DOWN`` (text), ``["RESUME"]`` (JSON lists) or ``"invalid"``: the state after a reboot, or ""."""
    if isinstance(value, list):
        value = "+".join(str(v) for v in value)
    text = str(value or "").strip().upper()
    return "" if text in ("", "INVALID", "N/A", "(NULL)") else text


def parse_show_node_text(text: str) -> list[NodeInfo]:
    r"""``scontrol -o show node``: one node per line.

    slurmctld keeps a reason verbatim (``scontrol update Reason=$'a\nb'``). 22.05's
    scontrol prints such a reason's first line, then the ``[user@time]`` stamp, then the
    other lines joined by blanks (seen on the test cluster), so the reason read here is
    its first line: enough to tell whose it is, which is all this read is used for
    beside the boot time and next state. A build that printed the newline as is would
    still be read: a line that does not start a node continues the one before (``_lines``).
    """
    lines = _lines(text, lambda line: line.lstrip().startswith("NodeName="), "scontrol -o show node")
    return [parse_show_node_line(line) for line in lines]


def _lines(text: str, starts: Callable[[str], bool], what: str) -> list[str]:
    r"""The records of a command's output, where only the last field is free text that may hold a newline.

    A line that does not start a record (``starts``) is the rest of the previous
    record's free text, and is joined to it with its newline. Split at ``\n`` alone:
    ``str.splitlines`` also splits at ``\x0b``, ``\x0c``, ``\x1c``-``\x1e``, ``\x85`` and the
    Unicode separators, which a reason may hold and Slurm prints as they are (``_run``
    reads a ``\r`` as a newline). Text before the first record is not the command's
    output: a ``SlurmError``.
    """
    records: list[str] = []
    for line in text.split("\n"):
        if starts(line):
            records.append(line)
        elif records:
            records[-1] += "\n" + line
        elif line.strip():
            raise SlurmError(f"not a `{what}` line: {line[:80]!r}")
    return records


def _user(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _epoch(value: Any) -> Optional[float]:
    """``reason_changed_at``: a number (23.02) or ``{"set": true, "number": N}`` (23.11 and later)."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


# What sinfo (print.c) prints in the fields before the reason: names, a count, a state and a
# time, one token each, and the user as ``name(uid)``, ``Unk(uid)`` or ``Unknown`` (a name
# from the user database may hold a blank). Blanks around a field are allowed: they are stripped.
_SINFO_TOKEN = re.compile(r"\s*\S+\s*")
_SINFO_CHECKS = {
    "Nodes": re.compile(r"\s*\d+\s*"),
    "StateComplete": re.compile(r"\s*[A-Za-z_+*~#!%$@^-]+\s*"),
    "UserLong": re.compile(r"\s*(?:Unknown|[^|]*\(\d+\))\s*"),
}


def _starts_row(line: str, fields: tuple[str, ...]) -> bool:
    """Whether ``line`` starts a row of ``sinfo -O fields``; if not, it is the rest of the reason before it.

    Every field but the last is one token (``Nodes`` a number, ``StateComplete`` a state):
    a line of a reason's text would have to copy a whole row to pass.
    """
    row = line.split("|", len(fields) - 1)
    checks = [_SINFO_CHECKS.get(name, _SINFO_TOKEN) for name in fields[:-1]]
    return len(row) == len(fields) and all(check.fullmatch(value) for check, value in zip(checks, row))


def _sinfo_rows(text: str, fields: tuple[str, ...]) -> list[list[str]]:
    """The rows of ``sinfo -O fields``; a reason (the last field) may run over several lines (``_lines``)."""
    lines = _lines(text, lambda line: _starts_row(line, fields), f"sinfo -O {','.join(fields)}")
    return [line.split("|", len(fields) - 1) for line in lines]


def _sinfo_reason(text: str) -> str:
    """sinfo prints ``none`` for a node without a reason."""
    reason = text.strip()
    return "" if reason == "none" else reason


def _sinfo_user(text: str) -> str:
    """sinfo's ``UserLong`` is ``root(0)``, or ``Unknown`` when no reason was set."""
    return text.split("(")[0].strip() if text.strip() != "Unknown" else ""


def _partition(text: str) -> str:
    return text.strip().rstrip("*")  # sinfo marks the default partition with "*"


def parse_sinfo_node(text: str, name: str) -> Optional[NodeInfo]:
    """``sinfo -h -N -n NAME -O <NODE_FIELDS>``: one line per partition of the node; None if none.

    sinfo has no boot time and no next state: both stay unset (``show_node`` reads them).
    """
    rows = [r for r in _sinfo_rows(text, NODE_FIELDS) if r[0].strip() == name]
    if not rows:
        return None
    _, _, state_text, stamp, user, reason = rows[0]
    state, flags = parse_state(state_text)
    return NodeInfo(
        name=name,
        state=state,
        flags=flags,
        reason=_sinfo_reason(reason),
        reason_user=_sinfo_user(user),
        partitions=tuple(dict.fromkeys(_partition(r[1]) for r in rows if _partition(r[1]))),
        reason_time=_stamp_time(stamp.strip()),
    )


def parse_sinfo_groups(text: str) -> list[NodeGroup]:
    """``sinfo -h [-p P | --all] -O <GROUP_FIELDS>``: one ``NodeGroup`` per line."""
    groups = []
    for partition, count, state_text, stamp, user, nodelist, reason in _sinfo_rows(text, GROUP_FIELDS):
        state, flags = parse_state(state_text)
        groups.append(
            NodeGroup(
                partition=_partition(partition),
                count=int(count),
                state=state,
                flags=flags,
                reason=_sinfo_reason(reason),
                reason_time=_stamp_time(stamp.strip()),
                nodelist=nodelist.strip(),
                reason_user=_sinfo_user(user),
            )
        )
    return groups


def node_in_groups(groups: list[NodeGroup], name: str) -> Optional[NodeInfo]:
    """Node ``name`` as the groups of a sinfo of its partitions show it; None when it is in none of them.

    A node in several partitions is in one group of each, all with its state and
    reason: the first gives those, all of them its partitions (no boot time, as
    ``parse_sinfo_node``). The node is looked up in each group's host list without
    expanding it (``hostlist.contains``: expanding a group of 100,000 nodes took 40 ms).
    """
    try:
        mine = [g for g in groups if contains(g.nodelist, name)]
    except HostlistError as exc:
        raise SlurmError(f"sinfo: {exc}") from None
    if not mine:
        return None
    first = mine[0]
    return NodeInfo(
        name=name,
        state=first.state,
        flags=first.flags,
        reason=first.reason,
        reason_user=first.reason_user,
        partitions=tuple(dict.fromkeys(g.partition for g in mine if g.partition)),
        reason_time=first.reason_time,
    )


def parse_show_node_json(text: str) -> list[NodeInfo]:
    """``scontrol --json show node`` (data_parser v0.0.39 of 23.02 and later).

    ``state`` is a list of strings whose first element is the base state
    (``["IDLE", "DRAIN"]``); older parsers gave one ``+``-joined string.
    """
    try:
        document = json.loads(text)
        nodes = document["nodes"]
        if not isinstance(nodes, list):
            raise TypeError("nodes is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        raise SlurmError(f"unparseable `scontrol --json show node` output: {exc}") from None
    result = []
    for index, node in enumerate(nodes):
        try:
            raw_state = node["state"]
            if isinstance(raw_state, list):
                state, flags = parse_state("+".join(str(s) for s in raw_state))
            else:
                state, flags = parse_state(str(raw_state))
            partitions = node.get("partitions") or []
            result.append(
                NodeInfo(
                    name=str(node["name"]),
                    state=state,
                    flags=flags,
                    reason=str(node.get("reason") or "").strip(),
                    reason_user=_user(node.get("reason_set_by_user")),
                    partitions=tuple(str(p) for p in partitions),
                    reason_time=_epoch(node.get("reason_changed_at")),
                    boot_time=_epoch(node.get("boot_time")),
                    next_state=_next_state(node.get("next_state_after_reboot")),
                )
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise SlurmError(f"`scontrol --json show node`: node #{index} lacks {exc}") from None
    return result


class PartitionNodes(NamedTuple):
    """A partition's node count and host list, as ``scontrol show partition`` prints them (TotalNodes, Nodes)."""

    size: int
    nodelist: str


def parse_partitions(text: str) -> dict[str, PartitionNodes]:
    """``scontrol -o --all show partition``: one line per partition; a line without a name or count is refused.

    An empty partition prints ``Nodes=(null)``: no host list.
    """
    partitions = {}
    for line in _lines(text, lambda line: line.startswith("PartitionName="), "scontrol -o show partition"):
        fields = _fields(line)
        try:
            size = int(fields["TotalNodes"])
        except (KeyError, ValueError):
            raise SlurmError(f"no TotalNodes= in `scontrol -o show partition` line {line[:80]!r}") from None
        nodelist = fields.get("Nodes", "")
        partitions[fields["PartitionName"]] = PartitionNodes(size, "" if nodelist == "(null)" else nodelist)
    return partitions


def _version(text: str) -> tuple[int, int]:
    match = re.search(r"(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else (0, 0)


def command_failed(program: str, command: str, message: str) -> SlurmError:
    """``command`` answered with an error: slurmctld refused a change (``scontrol update``), or could not be used.

    scontrol and sinfo report a missing or broken slurm.conf, or an unreachable
    slurmctld, as several ``PROGRAM: error: ...`` lines ending in one ``PROGRAM: fatal: ...``
    (``message`` joins them into one line): the fatal part says what stopped it, and is
    the detail; the whole message stays in the error's text.
    """
    parts = [part.strip() for part in one_line(message).split(f"{program}: ") if part.strip()]
    fatal = [part[len("fatal:") :] for part in parts if part.startswith("fatal:")]
    errors = [part[len("error:") :] for part in parts if part.startswith("error:")]
    cause = one_line(fatal[-1] if fatal else errors[0] if errors else one_line(message), DETAIL_LIMIT)
    kind = SlurmFailure.REJECTED if command.startswith("scontrol update") else SlurmFailure.UNREACHABLE
    return SlurmError(f"`{command}` failed: {message}", kind, command, f"{program}: {cause}")


class SlurmClient:
    """Runs scontrol for one node's needs. Every call is one RPC to slurmctld except ``--version``.

    ``output_format`` is "json", "text" or None (not known yet: asked from
    ``scontrol --version`` on first use); the caller may keep it between passes.
    After ``start_budget`` every call's timeout is also cut to what is left of one
    budget shared by all calls, so a pass's Slurm work has a fixed worst case.
    ``probe_first`` (one-shot commands): before the first RPC, ``scontrol ping``
    (``healthd.slurm.ping``) may show at once that every slurmctld refuses the
    connection; the probe is not one of ``calls``.
    """

    def __init__(
        self,
        settings: SlurmSettings,
        output_format: Optional[str] = None,
        monotonic: Callable[[], float] = time.monotonic,
        *,
        probe_first: bool = False,
    ) -> None:
        self.settings = settings
        self.output_format = output_format if output_format in ("json", "text") else None
        self.calls: list[tuple[str, ...]] = []
        self._monotonic = monotonic
        self._deadline: Optional[float] = None
        self._probe = probe_first

    def start_budget(self, seconds: Optional[float] = None) -> None:
        """From now on all calls together take at most ``seconds`` (default ``[slurm].budget``)."""
        self._deadline = self._monotonic() + (self.settings.budget if seconds is None else seconds)

    def _timeout(self, command: str) -> float:
        if self._deadline is None:
            return self.settings.timeout
        remaining = self._deadline - self._monotonic()
        if remaining <= 0:
            budget = f"this pass's Slurm time budget ([slurm].budget = {self.settings.budget:g}s) is used up"
            raise not_run(command, budget)
        return min(self.settings.timeout, remaining)

    def _run(self, *args: str, program: str = "scontrol") -> str:
        """Run ``program`` (scontrol or sinfo); ``calls`` records scontrol's arguments, sinfo's with "sinfo" first.

        ``healthd.slurm.command`` finds the command and checks slurm.conf in the child, so a
        hung filesystem under either costs this pass the timeout, never a hang.
        """
        command = f"{program} {' '.join(args)}"
        if self._probe and args != ("--version",):
            self._probe = False
            self._refused()
        timeout = self._timeout(command)
        self.calls.append(tuple(args) if program == "scontrol" else (program, *args))
        try:
            finished = run_client(program, args, self.settings.bin_dir, self.settings.conf, timeout, command)
        except NotRun:
            self.calls.pop()  # nothing reached slurmctld
            raise
        if finished.returncode != 0:
            message = " ".join((finished.err or finished.out).split())[:300] or f"exit status {finished.returncode}"
            raise command_failed(program, command, message)
        return finished.out

    def _refused(self) -> None:
        """Raise ``SlurmError`` (unreachable) when ``scontrol ping`` shows every slurmctld refusing the connection.

        Any other answer, a failure or no answer within ``PROBE_SECONDS`` says nothing:
        the read then runs with its full ``[slurm].timeout`` (docs/slurm.md). A probe
        stuck in the kernel after SIGKILL is raised: a hung filesystem under scontrol or
        slurm.conf, which no read could pass (``healthd.slurm.command``).
        """
        command = "scontrol ping"
        where = None
        # Twice, a second apart: a slurmctld restarting or failing over refuses for a moment, and a
        # take-out must not be skipped for that (sinfo's own retries would have reached it).
        for attempt in range(PROBE_ATTEMPTS):
            if attempt:
                time.sleep(PROBE_GAP)
            where = self._ping(command)
            if where is None:
                return
        said = f"slurmctld {where} refused the connection"
        raise SlurmError(f"`{command}`: {said}", SlurmFailure.UNREACHABLE, command, said)

    def _ping(self, command: str) -> Optional[str]:
        """Where every slurmctld refused ``scontrol ping``, or None for any other answer (or none in time)."""
        try:
            timeout = min(PROBE_SECONDS, self._timeout(command))
            finished = run_client("scontrol", PING_ARGS, self.settings.bin_dir, self.settings.conf, timeout, command)
        except ClientTimedOut as exc:
            if exc.stuck is not None:
                raise
            return None
        except SlurmError:
            return None
        return refused_everywhere(f"{finished.out}\n{finished.err}")

    def uses_json(self) -> bool:
        """JSON output exists from 23.02 (``scontrol --version`` is local, not an RPC)."""
        if self.output_format is None:
            version = _version(self._run("--version"))
            self.calls.pop()
            self.output_format = "json" if version >= (23, 2) else "text"
        return self.output_format == "json"

    def node(self, name: str) -> NodeInfo:
        """One node, without its boot time: ``sinfo -N -n NAME`` (a single-node request to slurmctld).

        ``--all`` counts hidden partitions too. A node in no partition is not listed
        by sinfo: ``show_node`` then answers (and says whether slurmctld knows it).
        """
        text = self._run("-h", "--all", "-N", "-n", name, "-O", sinfo_format(NODE_FIELDS), program="sinfo")
        node = parse_sinfo_node(text, name)
        return node if node is not None else self.show_node(name)

    def all_groups(self) -> list[NodeGroup]:
        """Every partition's nodes grouped as ``partitions`` groups them (``sinfo --all``, hidden partitions too).

        One read that answers for the node (``node_in_groups``) and for the circuit
        breaker at once: slurmctld packs the whole node table for ``-p`` too, so
        leaving it out costs slurmctld nothing more (docs/scale.md, "Reads").
        """
        return parse_sinfo_groups(self._run("-h", "--all", "-O", sinfo_format(GROUP_FIELDS), program="sinfo"))

    def partitions(self, names: tuple[str, ...]) -> list[NodeGroup]:
        """The nodes of ``names`` grouped by partition, state and reason (``sinfo -p``): the circuit breaker's read."""
        if not names:
            return []
        fields = sinfo_format(GROUP_FIELDS)
        return parse_sinfo_groups(self._run("-h", "-p", ",".join(names), "-O", fields, program="sinfo"))

    def partition_nodes(self) -> dict[str, PartitionNodes]:
        """Every partition's size and host list (``scontrol -o --all show partition``).

        One REQUEST_PARTITION_INFO: it packs the partitions' compressed host lists, never
        the node table, 0.2-0.35 ms at 100,000 nodes (docs/scale.md, "Reads").
        """
        return parse_partitions(self._run("-o", "--all", "show", "partition"))

    def show_node(self, name: str) -> NodeInfo:
        """One node with its boot time and next state (``scontrol show node``: slurmctld packs the whole table)."""
        nodes = self._show(name)
        for node in nodes:
            if node.name == name:
                return node
        raise SlurmError(f"slurmctld does not know node {name!r}")

    def _show(self, name: str) -> list[NodeInfo]:
        target = [name]
        if self.uses_json():
            try:
                return parse_show_node_json(self._run("--json", "show", "node", *target))
            except SlurmNotFound:
                raise
            except SlurmError:
                # Builds without the data_parser plugins reject --json (or print what
                # we cannot parse); -o works in every version. If it answers, keep it.
                nodes = parse_show_node_text(self._run("-o", "show", "node", *target))
                self.output_format = "text"
                return nodes
        return parse_show_node_text(self._run("-o", "show", "node", *target))

    def drain(self, name: str, reason: str) -> None:
        self._run("update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}")

    def down(self, name: str, reason: str) -> None:
        self._run("update", f"NodeName={name}", "State=DOWN", f"Reason={reason}")

    def resume(self, name: str) -> None:
        self._run("update", f"NodeName={name}", "State=RESUME")

    def reboot(self, name: str, reason: str, nextstate: Optional[str] = "DOWN", asap: bool = True) -> None:
        """``scontrol reboot [ASAP] [nextstate=NEXT] reason=REASON NAME``.

        slurmctld waits until the node is idle, then has its slurmd run RebootProgram;
        ASAP also drains it at once, so no new job starts meanwhile. ``reason`` is one
        argument, spaces and all: 22.05 stores it as ``Reason=`` verbatim. 22.05 accepts
        nextstate RESUME or DOWN only (scontrol(1)).

        Observed on 22.05: ASAP or a nextstate make the node lose DRAIN when it
        registers after the reboot, and with ``ReturnToService=2`` a DOWN node returns to
        service (reason cleared) about a second later. To keep the node out until a
        clean pass, drain it first and call with ``asap=False, nextstate=None``: it then
        comes back IDLE+DRAIN with ``<reason> : reboot issued``.
        """
        if nextstate is not None and nextstate not in REBOOT_NEXT_STATES:
            raise ValueError(f"reboot nextstate must be one of {', '.join(REBOOT_NEXT_STATES)}, not {nextstate!r}")
        options = (["ASAP"] if asap else []) + ([f"nextstate={nextstate}"] if nextstate else [])
        self._run("reboot", *options, f"reason={reason}", name)

    def cancel_reboot(self, name: str) -> None:
        """``scontrol cancel_reboot NAME``: withdraw a reboot not yet issued.

        Slurm also undrains the node and clears its reason when the DRAIN came from an
        ASAP reboot (scontrol(1)). A reboot already issued cannot be cancelled: slurmctld
        answers with an error.
        """
        self._run("cancel_reboot", name)
