"""The ``services`` check: required services are running and required kernel modules are loaded.

Where systemd is PID 1 a unit's state comes from ``systemctl show`` (``units``): a
unit being reloaded runs, one that systemd is starting or stopping is read again after
``transition_wait`` seconds and, if still moving, is UNKNOWN, never dead, until systemd's
timestamps show its daemon has not run for ``transition_limit`` seconds. Where it is
not (containers, some appliances, the test machines), it comes from the process table
under ``[paths].procfs``: a process counts as the service only when its name is the
daemon's (a plain name: one with a control character or bytes that are not UTF-8 is a
user's, ``procs.plain_name``), the owner of its /proc/PID (kept by the kernel) and its
real uid are root's, a system account's or an account the service is known to run as (or
one in ``process_users``), and, when ``process_exe`` names one, it runs that executable.
Any user can name a process ``munged``; only those accounts can own one. A process whose
status file is malformed is skipped and named in an OK note (``PROCESS_STATUS_SKIPPED``);
the others are still judged.

A service that is not running is CRITICAL by default: a node without slurmd or
munge cannot run jobs, and one without nvidia-persistenced or fabricmanager runs
them badly. The severity is configurable per service. ``gather`` asks systemd or
reads the process table and /proc/modules; ``judge`` compares that with
``[checks.services] expect`` and ``expect_kernel_modules``.
"""

from __future__ import annotations

import os
import pwd
import time
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Mapping, NamedTuple, Optional, Union

from healthd.checks.binaries import locate
from healthd.checks.plugin import CheckSpec, JudgeContext, NotApplicable, Staged, Unobserved, Verdict, read_parsed
from healthd.config.view import updated
from healthd.model import Finding, Status
from healthd.text import one_line, records

from ..common.procs import DELETED, Process, ProcessTable, read_processes, system_uid
from .units import RESTART_WAIT, Condition, UnitState, read_units

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext

    from .settings import ServicesSettings


class PackagedService(NamedTuple):
    """What a packaged service runs: its process names, and the accounts it runs as besides root."""

    processes: tuple[str, ...]
    users: tuple[str, ...] = ()


_MUNGE = PackagedService(("munged",), ("munge",))
_SLURM_USER = ("slurm",)
_DCGM = PackagedService(("nv-hostengine",), ("nvidia-dcgm",))
_FABRICMANAGER = PackagedService(("nv-fabricmanager",))
_CHRONY = PackagedService(("chronyd",), ("_chrony",))
_NTP = PackagedService(("ntpd",), ("ntpsec", "ntp"))
_OPENSM = PackagedService(("opensm",))

# Unit names as the packages ship them (Debian 12 unit files, NVIDIA's CUDA repository
# for the GPU daemons, MLNX_OFED for opensmd), with the process their unit starts and the
# account it runs as: the unit's User=, or the account the daemon switches to after
# starting as root. A unit not listed is looked for under its own name, owned by root.
DAEMONS: Mapping[str, PackagedService] = {
    # munge.service: ExecStart=/usr/sbin/munged, User=munge; /etc/init.d/munge: --chuid munge.
    "munge": _MUNGE,
    "munged": _MUNGE,
    # slurmctld and slurmdbd switch to SlurmUser, Debian's "slurm" account (uid 64030).
    "slurmctld": PackagedService(("slurmctld",), _SLURM_USER),
    "slurmdbd": PackagedService(("slurmdbd",), _SLURM_USER),
    # openssh-server: ssh.service (Alias=sshd.service) runs /usr/sbin/sshd as root.
    "ssh": PackagedService(("sshd",)),
    # nvidia-persistenced.service: nvidia-persistenced --user nvidia-persistenced.
    "nvidia-persistenced": PackagedService(("nvidia-persistenced",), ("nvidia-persistenced",)),
    # nvidia-fabricmanager.service runs /usr/bin/nv-fabricmanager as root.
    "nvidia-fabricmanager": _FABRICMANAGER,
    "nv-fabricmanager": _FABRICMANAGER,
    # datacenter-gpu-manager: nvidia-dcgm.service (dcgm.service before DCGM 2) runs
    # nv-hostengine, as root or with --service-account nvidia-dcgm.
    "nvidia-dcgm": _DCGM,
    "dcgm": _DCGM,
    # chrony.service (Alias=chronyd.service): chronyd drops root for _chrony.
    "chrony": _CHRONY,
    "chronyd": _CHRONY,
    # ntpsec.service (Alias=ntp.service ntpd.service) runs ntpd -u ntpsec; ntp before Debian 12 used -u ntp.
    "ntp": _NTP,
    "ntpd": _NTP,
    "ntpsec": _NTP,
    "rsyslog": PackagedService(("rsyslogd",)),
    "docker": PackagedService(("dockerd",)),
    "autofs": PackagedService(("automount",)),
    # nslcd.service: nslcd runs as the nslcd account (nslcd.conf "uid nslcd").
    "nslcd": PackagedService(("nslcd",), ("nslcd",)),
    # opensm.service (Debian) and opensmd.service (MLNX_OFED) both run opensm.
    "opensm": _OPENSM,
    "opensmd": _OPENSM,
}


def _system_uid(account: str) -> Optional[int]:
    """The uid of a built-in account, when it is a system account on this node.

    Debian Policy 9.2.2 reserves uids 0-999 and 60000-64999 for system accounts
    (``procs.system_uid``; Debian's slurm is 64030). A person's account that happens to be called
    "munge" (say, from a directory service on a node without the package) has a
    uid outside both ranges and does not count.
    """
    try:
        uid = pwd.getpwnam(account).pw_uid
    except KeyError:
        return None
    return uid if system_uid(uid) else None


def _configured_accounts(entries: Iterable[Union[int, str]]) -> tuple[dict[int, str], list[str]]:
    """``process_users`` as uid -> label, and the names this node has no account for."""
    owners: dict[int, str] = {}
    unknown: list[str] = []
    for entry in entries:
        if isinstance(entry, int):
            owners[entry] = f"uid {entry}"
            continue
        try:
            owners[pwd.getpwnam(entry).pw_uid] = entry
        except KeyError:
            unknown.append(entry)
    return owners, unknown


def _per_service(mapping: Mapping[str, Any], service: str) -> Any:
    """The value for ``service`` in a per-service table, whether keyed ``munge`` or ``munge.service``."""
    base = service.removesuffix(".service")
    for key in (service, base, f"{base}.service"):
        if key in mapping:
            return mapping[key]
    return None


class ProcessRule(NamedTuple):
    """What counts as one service's process: its names, its owners' uids and, if set, its executable."""

    names: tuple[str, ...]
    owners: Mapping[int, str]
    exe: Optional[str] = None
    exe_paths: frozenset[str] = frozenset()


class Sighting(NamedTuple):
    """What the process table shows of one service: running, or why the processes named like it do not count."""

    running: bool
    other_owners: tuple[int, ...] = ()
    other_exes: tuple[str, ...] = ()  # "" where the exe link could not be read


def find_service(rule: ProcessRule, processes: Iterable[Process]) -> Sighting:
    """Whether a live process with one of the rule's names, owners and executables exists (pure)."""
    other_owners: set[int] = set()
    other_exes: set[str] = set()
    for process in processes:
        if not process.alive or not any(process.named(name) for name in rule.names):
            continue
        # The owner of /proc/PID (the effective uid, which the kernel keeps) says first
        # whether an ordinary user runs it, whatever its status file reads (procs).
        if process.users and process.owner not in rule.owners:
            other_owners.add(process.owner)
            continue
        # The real uid is who started the process. A setuid-root binary run by a user
        # has effective uid 0 and the user's real uid: it is the user's, not root's.
        # A daemon that drops privileges (setuid(2) as root) changes both.
        if process.status.real_uid not in rule.owners:
            other_owners.add(process.status.real_uid)
            continue
        # After a package upgrade the running daemon's binary is unlinked and the link
        # reads "PATH (deleted)": still the daemon that was started from PATH, and only
        # root can unlink a file in a root-owned directory.
        exe = process.exe.removesuffix(DELETED) if process.exe else None
        if rule.exe_paths and exe not in rule.exe_paths:
            other_exes.add(process.exe or "")
            continue
        return Sighting(running=True)
    return Sighting(running=False, other_owners=tuple(sorted(other_owners)), other_exes=tuple(sorted(other_exes)))


def _first(items: Iterable[str], limit: int = 3) -> str:
    listed = list(items)
    more = f" and {len(listed) - limit} more" if len(listed) > limit else ""
    return ", ".join(listed[:limit]) + more


def absent_message(service: str, rule: ProcessRule, sighting: Sighting, unknown_accounts: Iterable[str]) -> str:
    """One line saying what was looked for, what was ignored and which setting fixes a mismatch."""
    names = "/".join(rule.names)
    owners = " or ".join(dict.fromkeys(rule.owners.values()))
    running = f" running {rule.exe}" if rule.exe else ""
    parts = [f"{service} is inactive (per process table): no process named {names} owned by {owners}{running}"]
    if sighting.other_owners:
        parts.append(
            f"ignored {names} owned by {_first(f'uid {uid}' for uid in sighting.other_owners)}"
            " (if the daemon runs as that account, add it to [checks.services] process_users)"
        )
    if sighting.other_exes:
        exes = _first(repr(exe) if exe else "an unreadable executable" for exe in sighting.other_exes)
        hint = "if that is the daemon, name it in [checks.services] process_exe"
        parts.append(f"ignored {names} running {exes} ({hint})")
    if not sighting.other_owners and not sighting.other_exes:
        parts.append(
            f'if the daemon runs under another name, set [checks.services] process_names = {{ "{service}" = ["NAME"] }}'
        )
    unknown = list(unknown_accounts)
    if unknown:
        parts.append(f"[checks.services] process_users names no account on this node: {_first(unknown)}")
    return "; ".join(parts)


def service_rule(service: str, settings: ServicesSettings, configured: Mapping[int, str]) -> ProcessRule:
    """The built-in names and accounts of ``service`` (DAEMONS), overridden and extended by the settings."""
    base = service.removesuffix(".service")
    daemon = DAEMONS.get(base, PackagedService((base,)))
    names = _per_service(settings.process_names, service) or daemon.processes
    owners = {0: "root"}
    for account in daemon.users:
        uid = _system_uid(account)
        if uid is not None:
            owners.setdefault(uid, account)
    for uid, label in configured.items():
        owners.setdefault(uid, label)
    exe = _per_service(settings.process_exe, service)
    # /proc/PID/exe shows the resolved path (/usr/sbin/munged where /sbin is a link to usr/sbin).
    paths = frozenset({exe, os.path.realpath(exe)}) if exe else frozenset()
    return ProcessRule(names=tuple(names), owners=owners, exe=exe, exe_paths=paths)


class ModulesError(ValueError):
    """/proc/modules does not have the documented shape."""


def parse_modules(text: str, source: str) -> frozenset[str]:
    """Loaded module names from /proc/modules (name, size, refcount, deps, state, address)."""
    names = set()
    for number, line in enumerate(records(text), start=1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) < 3 or not fields[1].isdigit():
            raise ModulesError(f"{source}:{number}: expected 'NAME SIZE REFCOUNT ...', got {line[:80]!r}")
        names.add(fields[0])
    return frozenset(names)


def _normalise_module(name: str) -> str:
    # The kernel treats '-' and '_' in module names as the same character (kernel/params.c).
    return name.replace("-", "_")


def systemd_is_pid1() -> bool:
    # sd_booted(3): systemd is the init system exactly when this directory exists.
    return os.path.isdir("/run/systemd/system")


def _grade(settings: ServicesSettings, service: str) -> Status:
    return Status[_per_service(settings.severities, service) or settings.severity]


class ServicesObservation(NamedTuple):
    """What systemd or the process table says of the services, and which modules are loaded.

    ``systemd`` holds each unit's states when systemd was asked, ``reread_after`` the
    seconds waited before the units that were moving were read again (None: they were
    not) and ``read_at`` CLOCK_MONOTONIC in microseconds after the last read, the clock of
    systemd's ``*TimestampMonotonic``; otherwise ``rules`` says what counts as each service
    in ``processes``.
    ``services_problem`` says why neither could be read.
    """

    systemd: Optional[tuple[UnitState, ...]] = None
    reread_after: Optional[float] = None
    read_at: int = 0
    processes: tuple[Process, ...] = ()
    rules: Mapping[str, ProcessRule] = MappingProxyType({})
    unknown_accounts: tuple[str, ...] = ()
    services_problem: Optional[Unobserved] = None
    modules: frozenset[str] = frozenset()
    modules_problem: Optional[Unobserved] = None
    table: Union[tuple[Process, ...], Unobserved, None] = None
    table_owners: frozenset[int] = frozenset()
    skipped: tuple[str, ...] = ()
    named_owners: Mapping[str, frozenset[int]] = MappingProxyType({})


def _process_table(procfs: Path) -> Union[ProcessTable, Unobserved]:
    try:
        table = read_processes(procfs)
    except OSError as exc:
        return Unobserved("PROCESSES_UNREADABLE", str(procfs), f"cannot list processes: {exc}")
    if table.skipped and not table.processes:
        # Not one status file in the kernel's format: the reader, not a process, is wrong.
        return Unobserved("PROCESS_STATUS_MALFORMED", str(procfs), table.skipped[0])
    return table


def _gather_processes(ctx: CheckContext[ServicesSettings]) -> ServicesObservation:
    table = _process_table(Path(ctx.paths.procfs))
    if isinstance(table, Unobserved):
        return ServicesObservation(services_problem=table)
    configured, unknown = _configured_accounts(ctx.settings.process_users)
    rules = {service: service_rule(service, ctx.settings, configured) for service in ctx.settings.expect}
    return ServicesObservation(
        processes=table.processes, rules=rules, unknown_accounts=tuple(unknown), skipped=table.skipped
    )


def _gather_named_processes(ctx: CheckContext[ServicesSettings], observed: ServicesObservation) -> ServicesObservation:
    """The process table for ``expect_processes`` and ``forbid_processes`` (read once, whatever the init system)."""
    settings = ctx.settings
    if not settings.expect_processes and not settings.forbid_processes:
        return observed
    owners, _ = _configured_accounts(settings.process_users)
    # An account this node does not have owns no process: its name resolves to no uid.
    named = {name: frozenset(_configured_accounts(accounts)[0]) for name, accounts in settings.process_owners.items()}
    observed = observed._replace(table_owners=frozenset(owners), named_owners=MappingProxyType(named))
    if observed.rules:
        return observed._replace(table=observed.processes)
    table = _process_table(Path(ctx.paths.procfs))
    if isinstance(table, Unobserved):
        return observed._replace(table=table)
    return observed._replace(table=table.processes, skipped=table.skipped)


def _gather_systemd(ctx: CheckContext[ServicesSettings]) -> ServicesObservation:
    """Every unit's states, the moving ones read once more after ``transition_wait``, within the check's timeout.

    A restart (deactivating, then activating) or a slow start lasts seconds; a second
    look sees most of them through. Two reads of ``timeout / 4`` and the wait must end
    before the check's deadline, with a tenth of it to spare.
    """
    settings = ctx.settings
    started = time.monotonic()
    try:
        systemctl = str(settings.systemctl) if settings.systemctl is not None else locate("systemctl")
    except FileNotFoundError as exc:
        return ServicesObservation(services_problem=Unobserved("SYSTEMCTL_FAILED", "systemctl", str(exc)))
    read_timeout = settings.timeout / 4
    states = read_units(ctx.memory, systemctl, settings.expect, read_timeout)
    if isinstance(states, Unobserved):
        return ServicesObservation(services_problem=states)
    moving = [state.unit for state in states if state.condition is Condition.MOVING]
    left = settings.timeout * 0.9 - read_timeout - (time.monotonic() - started)
    if not moving or left < settings.transition_wait:
        return ServicesObservation(systemd=states, read_at=_monotonic_us())
    time.sleep(settings.transition_wait)
    again = read_units(ctx.memory, systemctl, moving, read_timeout)
    if isinstance(again, Unobserved):
        return ServicesObservation(services_problem=again)
    later = iter(again)
    merged = tuple(next(later) if state.condition is Condition.MOVING else state for state in states)
    return ServicesObservation(systemd=merged, reread_after=settings.transition_wait, read_at=_monotonic_us())


def _monotonic_us() -> int:
    # systemd's *TimestampMonotonic properties count microseconds of CLOCK_MONOTONIC
    # (sd_event/dual_timestamp); ask for that clock by name rather than trust time.monotonic().
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def _gather_services(ctx: CheckContext[ServicesSettings]) -> ServicesObservation:
    settings = ctx.settings
    if not settings.expect:
        return ServicesObservation()
    if settings.manager == "systemd" or (settings.manager == "auto" and systemd_is_pid1()):
        return _gather_systemd(ctx)
    return _gather_processes(ctx)


def gather(ctx: CheckContext[ServicesSettings]) -> ServicesObservation:
    settings = ctx.settings
    if not (
        settings.expect or settings.expect_kernel_modules or settings.expect_processes or settings.forbid_processes
    ):
        raise NotApplicable("no services, processes or kernel modules configured in [checks.services]")
    observed = _gather_named_processes(ctx, _gather_services(ctx))
    if not settings.expect_kernel_modules:
        return observed
    source = Path(ctx.paths.procfs) / "modules"
    loaded = read_parsed(source, parse_modules, "MODULES", "replace")
    if isinstance(loaded, Unobserved):
        return observed._replace(modules_problem=loaded)
    return observed._replace(modules=loaded)


def span(seconds: float) -> str:
    """``6m12s``, ``2h5m``, ``3d4h``: a duration in its two largest units."""
    whole = max(int(seconds), 0)
    parts = [(whole // 86400, "d"), (whole // 3600 % 24, "h"), (whole // 60 % 60, "m"), (whole % 60, "s")]
    first = next((i for i, (value, _) in enumerate(parts) if value), len(parts) - 1)
    return "".join(f"{value}{unit}" for value, unit in parts[first : first + 2] if value or unit == "s")


def _moving_finding(
    state: UnitState, observed: ServicesObservation, jc: JudgeContext[ServicesSettings], details: dict[str, Any]
) -> Finding:
    """UNKNOWN for a unit being started or stopped, or its severity once its daemon has not run for transition_limit."""
    name, described = state.unit, state.described
    since = state.moving_since()
    limit = jc.settings.transition_limit
    age = (observed.read_at - since.at) / 1e6 if since.at is not None and since.at <= observed.read_at else None
    if since.restarts:
        details["restarts"] = since.restarts
    if age is not None:
        details["moving_for_s"] = round(age, 1)
        if age > limit:
            # A daemon that cannot start must take the node out: systemd retries a hung start
            # for ever (TimeoutStartSec=, then Restart=), and the jobs sent here would fail.
            if since.restarts:
                ran = "since boot" if since.at == 0 else f"for {span(age)}"
                message = (
                    f"{name} is {described} and has not run {ran}: systemd restarted it"
                    f" {since.restarts} time{'s' if since.restarts > 1 else ''} without it coming up (per systemd)"
                )
            else:
                message = (
                    f"{name} has been {state.active} for {span(age)} (now {state.sub}),"
                    f" over transition_limit {limit:g}s (per systemd)"
                )
            return jc.finding(_grade(jc.settings, name), "SERVICE_STUCK", name, message, **details)
    # Being started or stopped: a restart or reload by configuration management lands on every
    # node at once, and taking them all out for it would requeue a fleet's jobs.
    reread_after = observed.reread_after
    when = f"still {described} after {reread_after:g}s" if reread_after is not None else described
    if age is not None:
        how_long = f"without a running daemon for {span(age)} of transition_limit {limit:g}s"
    elif since.at is not None:
        how_long = "for how long is not known: systemd's timestamp is ahead of this host's CLOCK_MONOTONIC"
    else:
        how_long = f"for how long is not known: {since.unknown}"
    message = f"{name} is {when}: systemd is starting or stopping it; whether it will run is not known yet ({how_long})"
    return jc.finding(Status.UNKNOWN, "SERVICE_IN_TRANSITION", name, message, **details)


def _unit_finding(
    state: UnitState, observed: ServicesObservation, jc: JudgeContext[ServicesSettings]
) -> Optional[Finding]:
    """None for a unit whose daemon runs; its severity for one that does not; UNKNOWN for one still moving."""
    condition = state.condition
    if condition is Condition.RUNNING:
        return None
    name, described = state.unit, state.described
    details: dict[str, Any] = {"state": state.active, "substate": state.sub, "unit": state.id, "source": "systemd"}
    if condition is Condition.MOVING:
        return _moving_finding(state, observed, jc, details)
    if not state.installed:
        code, message = "SERVICE_NOT_FOUND", f"{name} is not installed: systemd has no unit {state.id} (per systemd)"
    elif state.active == "failed":
        code, message = "SERVICE_FAILED", f"{name} is {described} (per systemd)"
    elif state.sub in RESTART_WAIT:
        code = "SERVICE_INACTIVE"
        message = f"{name} is not running: it exited and systemd waits to restart it, {described} (per systemd)"
    else:
        code, message = "SERVICE_INACTIVE", f"{name} is {described} (per systemd)"
    return jc.finding(_grade(jc.settings, name), code, name, message, **details)


def _service_findings(observed: ServicesObservation, jc: JudgeContext[ServicesSettings]) -> Iterable[Finding]:
    settings = jc.settings
    if observed.services_problem is not None:
        yield observed.services_problem.finding(jc)
        return
    if observed.systemd is not None:
        for state in observed.systemd:
            finding = _unit_finding(state, observed, jc)
            if finding is not None:
                yield finding
        return
    for service, rule in observed.rules.items():
        sighting = find_service(rule, observed.processes)
        if sighting.running:
            continue
        yield jc.finding(
            _grade(settings, service),
            "SERVICE_INACTIVE",
            service,
            absent_message(service, rule, sighting, observed.unknown_accounts),
            state="inactive",
            source="process table",
            ignored_other_owners=len(sighting.other_owners),
            ignored_other_exes=len(sighting.other_exes),
            skipped_processes=len(observed.skipped),
        )


def _owned(process: Process, accounts: frozenset[int]) -> bool:
    """Whether root, a system account or one of ``accounts`` owns ``process``: both its /proc/PID and its real uid."""
    return all(system_uid(uid) or uid in accounts for uid in (process.owner, process.status.real_uid))


def _owned_as_named(process: Process, accounts: frozenset[int], only: Optional[frozenset[int]]) -> bool:
    """With ``only`` (``process_owners``): whether those accounts own ``process``, both its /proc/PID and its
    real uid; without, ``_owned``."""
    if only is None:
        return _owned(process, accounts)
    return process.owner in only and process.status.real_uid in only


def _skipped_note(observed: ServicesObservation, jc: JudgeContext[ServicesSettings]) -> Iterable[Finding]:
    """An OK note naming the status files skipped as malformed; every other process was still judged."""
    if not observed.skipped:
        return
    shown = "; ".join(one_line(reason, 160) for reason in observed.skipped[:3])
    more = f" and {len(observed.skipped) - 3} more" if len(observed.skipped) > 3 else ""
    message = f"{len(observed.skipped)} process(es) skipped, their status not in the kernel's format: {shown}{more}"
    yield jc.finding(Status.OK, "PROCESS_STATUS_SKIPPED", "process table", message, count=len(observed.skipped))


def _process_findings(observed: ServicesObservation, jc: JudgeContext[ServicesSettings]) -> Iterable[Finding]:
    """``expect_processes`` that do not run and ``forbid_processes`` that do, as NHC's check_ps_service judges them.

    A process counts when its command name or executable's file name is the one named
    (``procs.Process.named``) and it is alive. One that must run counts when root, a
    system account or one of ``process_users`` owns it: any user can name a process
    ``munged``. One that must not run counts only when root or a system account owns
    it: a user who names a process ``telnetd`` must not be able to drain the node.
    ``process_owners`` narrows either to the accounts it names (NHC's ``check_ps_service -u``).
    """
    table, settings = observed.table, jc.settings
    if table is None:
        return
    if isinstance(table, Unobserved):
        yield table.finding(jc)
        return
    alive = [process for process in table if process.alive]
    owners = observed.table_owners
    for name in settings.expect_processes:
        only = observed.named_owners.get(name)
        if not any(p.named(name) and _owned_as_named(p, owners, only) for p in alive):
            whose = f"process_owners.{name}" if only is not None else "root, a system account or one in process_users"
            message = f"no process {name} runs (owned by {whose})"
            yield jc.finding(
                _grade(settings, name),
                "PROCESS_MISSING",
                name,
                message,
                source="process table",
                skipped_processes=len(observed.skipped),
            )
    for name in settings.forbid_processes:
        only = observed.named_owners.get(name)
        pids = [
            p.pid
            for p in alive
            if p.named(name) and _owned(p, frozenset()) and (only is None or _owned_as_named(p, frozenset(), only))
        ]
        if pids:
            message = f"process {name} runs (pid {_first(str(pid) for pid in pids)}), and must not"
            yield jc.finding(
                _grade(settings, name), "PROCESS_FORBIDDEN", name, message, pid=pids[0], processes=len(pids)
            )


def _module_findings(observed: ServicesObservation, jc: JudgeContext[ServicesSettings]) -> Iterable[Finding]:
    if observed.modules_problem is not None:
        yield observed.modules_problem.finding(jc)
        return
    loaded = frozenset(_normalise_module(m) for m in observed.modules)
    for module in jc.settings.expect_kernel_modules:
        if _normalise_module(module) not in loaded:
            yield jc.finding(Status.CRITICAL, "MODULE_NOT_LOADED", module, f"kernel module {module} is not loaded")


def judge(observed: ServicesObservation, jc: JudgeContext[ServicesSettings]) -> Verdict:
    findings = (
        *_service_findings(observed, jc),
        *_process_findings(observed, jc),
        *_skipped_note(observed, jc),
        *_module_findings(observed, jc),
    )
    return Verdict(findings)


# What a GPU cluster node runs (Slurm, munge, the NVIDIA daemons, time and remote access)
# and the kernel modules its jobs need: the baseline expects those it finds running or loaded.
BASELINE_SERVICES = (
    "slurmd",
    "munge",
    "sshd",
    "chronyd",
    "nvidia-persistenced",
    "nvidia-fabricmanager",
    "nvidia-dcgm",
)
BASELINE_MODULES = ("nvidia", "nvidia_uvm", "nvidia_peermem", "ib_core", "ib_uverbs", "mlx5_core", "mlx5_ib")


def baseline(ctx: CheckContext[ServicesSettings]) -> dict[str, Any]:
    """The services of ``BASELINE_SERVICES`` (and the ones configured) that run, and the modules loaded."""
    candidates = list(dict.fromkeys([*ctx.settings.expect, *BASELINE_SERVICES]))
    modules = list(dict.fromkeys([*ctx.settings.expect_kernel_modules, *BASELINE_MODULES]))
    settings = updated(ctx.settings, **{"expect": candidates, "expect_kernel_modules": modules})
    probe = replace(ctx, settings=settings)
    verdict = judge(gather(probe), JudgeContext(ctx.name, settings, ctx.clock()))
    unobserved = [f for f in verdict.findings if f.status is Status.UNKNOWN]
    if unobserved:
        raise OSError(unobserved[0].message)
    stopped = {f.subject for f in verdict.findings if f.code.startswith("SERVICE_")}
    unloaded = {f.subject for f in verdict.findings if f.code == "MODULE_NOT_LOADED"}
    return {
        "expect": [s for s in candidates if s not in stopped],
        "expect_kernel_modules": [m for m in modules if m not in unloaded],
    }


CHECK = CheckSpec(
    name="services",
    description="required services running (systemd or process table) and kernel modules loaded",
    settings="healthd_checks.services.settings:ServicesSettings",
    baseline=baseline,
    run=Staged(gather, judge),
)
