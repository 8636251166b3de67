"""The ``services`` check: required services are running and required kernel modules are loaded.

Where systemd is PID 1 a unit's state comes from ``systemctl is-active``; where it
is not (containers, and the test machines), from the process table by name. A
service that is not running is CRITICAL by default: a node without slurmd or munge
cannot run jobs, and one without nvidia-persistenced or fabricmanager runs them
badly. The severity is configurable per service.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterable, Literal

from pydantic import Field

from healthd.binaries import locate
from healthd.model import Finding, Status
from healthd.plugin import CheckContext, CheckSettings, CheckSpec, NotApplicable

Grade = Literal["WARNING", "CRITICAL"]


class ServicesSettings(CheckSettings):
    severity: Grade = Field(default="CRITICAL", description="grade of a service that is not running")
    severities: dict[str, Grade] = Field(default_factory=dict, description="per-service grade, by unit name")
    process_names: dict[str, list[str]] = Field(
        default_factory=dict, description="process names that count as the service when systemd is not PID 1"
    )
    manager: Literal["auto", "systemd", "process"] = "auto"


class ModulesError(ValueError):
    """/proc/modules does not have the documented shape."""


def parse_modules(text: str, source: str) -> frozenset[str]:
    """Loaded module names from /proc/modules (name, size, refcount, deps, state, address)."""
    names = set()
    for number, line in enumerate(text.splitlines(), start=1):
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


def _unit(name: str) -> str:
    return name if "." in name else f"{name}.service"


def systemd_is_pid1() -> bool:
    # sd_booted(3): systemd is the init system exactly when this directory exists.
    return os.path.isdir("/run/systemd/system")


def _systemd_states(units: list[str], timeout: float) -> dict[str, str]:
    systemctl = locate("systemctl")
    out = subprocess.run(
        [systemctl, "is-active", "--", *(_unit(u) for u in units)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    ).stdout.split()
    if len(out) != len(units):
        raise RuntimeError(f"systemctl is-active returned {len(out)} states for {len(units)} units")
    return dict(zip(units, out))


def _process_states(services: list[str], names: dict[str, list[str]]) -> dict[str, str]:
    import psutil

    running: set[str] = set()
    for process in psutil.process_iter(["name", "cmdline", "status"]):
        info = process.info
        if info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        running.add(info.get("name") or "")
        cmdline = info.get("cmdline") or []
        if cmdline:
            running.add(os.path.basename(cmdline[0]))
    states = {}
    for service in services:
        wanted = names.get(service) or [service.removesuffix(".service")]
        # /proc/PID/comm keeps only 15 characters, so compare truncated names too.
        found = any(w in running or w[:15] in running for w in wanted)
        states[service] = "active" if found else "inactive"
    return states


def _service_findings(ctx: CheckContext[ServicesSettings]) -> Iterable[Finding]:
    services = ctx.node.services
    if not services:
        return
    settings = ctx.settings
    use_systemd = settings.manager == "systemd" or (settings.manager == "auto" and systemd_is_pid1())
    if use_systemd:
        states = _systemd_states(services, max(1.0, settings.timeout / 2))
        how = "systemd"
    else:
        states = _process_states(services, settings.process_names)
        how = "process table"
    for service in services:
        state = states[service]
        if state == "active":
            continue
        grade = Status[settings.severities.get(service, settings.severity)]
        code = "SERVICE_FAILED" if state == "failed" else "SERVICE_INACTIVE"
        yield ctx.finding(grade, code, service, f"{service} is {state} (per {how})", state=state, source=how)


def _module_findings(ctx: CheckContext[ServicesSettings]) -> Iterable[Finding]:
    required = ctx.node.kernel_modules
    if not required:
        return
    source = Path(ctx.paths.procfs) / "modules"
    try:
        loaded = parse_modules(source.read_text(encoding="utf-8", errors="replace"), str(source))
    except OSError as exc:
        yield ctx.finding(Status.UNKNOWN, "MODULES_UNREADABLE", str(source), f"cannot read {source}: {exc}")
        return
    except ModulesError as exc:
        yield ctx.finding(Status.UNKNOWN, "MODULES_MALFORMED", str(source), str(exc))
        return
    loaded = frozenset(_normalise_module(m) for m in loaded)
    for module in required:
        if _normalise_module(module) not in loaded:
            yield ctx.finding(Status.CRITICAL, "MODULE_NOT_LOADED", module, f"kernel module {module} is not loaded")


def run(ctx: CheckContext[ServicesSettings]) -> list[Finding]:
    if not ctx.node.services and not ctx.node.kernel_modules:
        raise NotApplicable("no services or kernel modules configured in [node]")
    return [*_service_findings(ctx), *_module_findings(ctx)]


CHECK = CheckSpec(
    name="services",
    description="required services running (systemd or process table) and kernel modules loaded",
    settings=ServicesSettings,
    run=run,
)
