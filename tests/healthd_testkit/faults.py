"""Helpers of the fault-injection suite: injected checks, a healthd harness, a daemon in a thread.

Faults that live inside a check are injected through small test checks registered
directly with the Engine (``fault`` reports what its JSON file says, ``boom``
raises, ``stall`` blocks in Python until released, ``kstat`` calls statvfs on a
path and so blocks in the kernel on a hung mount). Everything else runs for real:
the runner, the cycle, the daemon loop, scontrol against the test cluster of
tests/healthd_testkit/cluster.py (started once per session, only when a test asks for it).
"""

from __future__ import annotations

import functools
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from healthd.checks.plugin import BrokenCheck, CheckContext, CheckSettings, CheckSpec, discover
from healthd.config.cache import load_checks
from healthd.cycle.engine import Engine
from healthd.model import Finding, Status
from healthd.service.daemon import Daemon, DaemonHooks, PassOutcome, run_one_pass
from healthd.service.sdnotify import Notifier
from healthd_testkit.paths import Below
from healthd_testkit.waiting import wait_for

# Released at the end of every test, so a check stalled in Python never outlives it.
STALL_RELEASE = threading.Event()


class FaultSettings(CheckSettings):
    file: str = ""


def _run_fault(ctx: CheckContext[FaultSettings]) -> list[Finding]:
    ctx.state.load()  # a corrupt state file of this check is noticed and reported
    items = json.loads(Path(ctx.settings.file).read_text()) if ctx.settings.file else []
    return [
        ctx.finding(Status.parse(i["status"]), i["code"], i["subject"], "injected", **i.get("details", {}))
        for i in items
    ]


class StallSettings(CheckSettings):
    stall: bool = True


def _run_stall(ctx: CheckContext[StallSettings]) -> list[Finding]:
    if ctx.settings.stall:
        STALL_RELEASE.wait()
    return []


def _run_boom(ctx: CheckContext[CheckSettings]) -> list[Finding]:
    raise RuntimeError("injected failure")


class KstatSettings(CheckSettings):
    path: str = "/"


def _run_kstat(ctx: CheckContext[KstatSettings]) -> list[Finding]:
    os.statvfs(ctx.settings.path)  # deliberately in the check's thread: blocks in the kernel on a hung mount
    return []


@functools.cache
def installed_hardware(code: str) -> bool:
    """The fault check stands in for the installed checks: its code is a hardware fault where theirs is."""
    return any(isinstance(spec, CheckSpec) and spec.is_hardware(code) for spec in discover())


FAULT = CheckSpec(
    name="fault",
    description="reports injected findings",
    settings=FaultSettings,
    run=_run_fault,
    hardware=installed_hardware,
)
STALL = CheckSpec(name="stall", description="blocks in Python", settings=StallSettings, run=_run_stall)
BOOM = CheckSpec(name="boom", description="raises", settings=CheckSettings, run=_run_boom)
KSTAT = CheckSpec(name="kstat", description="statvfs in the check thread", settings=KstatSettings, run=_run_kstat)


def builtin(*names: str) -> list[CheckSpec[Any] | BrokenCheck]:
    """The installed checks called ``names``, loaded through the entry points as healthd does."""
    found = {spec.name: spec for spec in discover()}
    return [found[name] for name in names]


@dataclass
class Harness:
    """healthd on one node: its config file, state dir, specs and (optionally) the test cluster."""

    root: Path
    specs: Sequence[CheckSpec[Any] | BrokenCheck]
    slurm_conf: Optional[Path] = None
    node: str = "node1"
    slurm_extra: str = ""
    paths: str = ""
    extra: str = ""
    pass_timeout: float = 5
    reports: list[PassOutcome] = field(default_factory=list)

    config = Below("healthd.toml")
    state_dir = Below("state")
    fault_file = Below("faults.json")

    def faults(self, *items: tuple[str, str, str]) -> None:
        rows = [{"status": s, "code": c, "subject": subject} for s, c, subject in items]
        self.fault_file.write_text(json.dumps(rows))

    def text(self) -> str:
        enabled = "true" if self.slurm_conf is not None else "false"
        conf = f'conf = "{self.slurm_conf}"\n' if self.slurm_conf is not None else ""
        fault = f'[checks.fault]\nfile = "{self.fault_file}"\n' if any(s.name == "fault" for s in self.specs) else ""
        return (
            f'[paths]\nstate_dir = "{self.state_dir}"\n{self.paths}\n'
            f'[slurm]\nenabled = {enabled}\n{conf}node_name = "{self.node}"\ntimeout = 3\n'
            f"act_splay = 0\n{self.slurm_extra}\n"
            "[policy]\nmax_out_fraction = 1.0\n"
            f"[runner]\npass_timeout = {self.pass_timeout}\n"
            "[daemon]\ninterval = 1\nsplay = false\n"
            f"{fault}{self.extra}\n"
        )

    def write(self) -> Path:
        if not self.fault_file.exists():
            self.faults()
        self.config.write_text(self.text(), encoding="utf-8")
        return self.config

    def engine(self, path: Optional[Path] = None) -> Engine:
        return Engine(*load_checks(path or self.write(), specs=self.specs, store=False))

    def daemon(self, **kwargs: Any) -> Daemon:
        def record(engine: Engine, dry_run: bool) -> PassOutcome:
            report = run_one_pass(engine, dry_run)
            self.reports.append(report)
            return report

        self.write()
        hooks = DaemonHooks(
            pass_function=record,
            engine_factory=lambda path: Engine(*load_checks(path, specs=self.specs, store=False)),
        )
        return Daemon(self.config, notifier=Notifier({}), hooks=hooks, **kwargs)

    def wait_passes(self, count: int, timeout: float = 30.0) -> list[PassOutcome]:
        wait_for(lambda: len(self.reports) >= count, timeout, f"{count} passes")
        return self.reports


def codes(report: PassOutcome) -> dict[str, tuple[Status, str]]:
    """``check/CODE`` -> (status, subject) of every finding of a pass."""
    return {f"{f.check}/{f.code}": (f.status, f.subject) for f in report.result.findings}


@dataclass
class DaemonThread:
    daemon: Daemon
    thread: threading.Thread
    exit_code: list[int]

    def stop(self, timeout: float = 10.0) -> int:
        self.daemon.request_stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the daemon did not stop"
        return self.exit_code[0]


@dataclass(frozen=True)
class DaemonKit:
    """A daemon test's tools: ``make`` a Daemon, ``start`` it in a thread, write a ``config``, ``wait`` for it."""

    make: Callable[..., Daemon]
    start: Callable[[Daemon], DaemonThread]
    config: Callable[..., Path]
    wait: Callable[..., None]
