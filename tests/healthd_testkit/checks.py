"""Helpers for tests of one check: configs that leave out every other installed check, a check's context,
and the contract of a check's parsers.

``only_checks`` keeps a pass from judging this machine; ``check_context`` runs a check
over fixture roots with its state in the test's own directory; ``FixtureNode`` is a node
made of fixture copies and stand-in programs whose passes a test drives with a clock;
``raises_only`` holds a parser to its one documented error; ``mounted`` says whether a path is
a mount point in this process's namespace, read as the mounts check reads mountinfo.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, MutableMapping, Optional

from healthd.checks.plugin import CheckContext, CheckSpec, S, discover
from healthd.config.models import Paths
from healthd.model import Finding
from healthd.store.state import StateFile
from healthd.text import read_kernel_text
from healthd_checks.common.mountinfo import find_mount, parse_mountinfo


def mounted(path: str) -> bool:
    """Whether ``path`` is a mount point in /proc/self/mountinfo.

    Split on newline alone, as bytes: another test's FUSE mount point may hold a ``\r`` or a
    byte that is not UTF-8, which a text-mode read would cut or refuse.
    """
    source = "/proc/self/mountinfo"
    return find_mount(parse_mountinfo(read_kernel_text(source, "surrogateescape"), source).entries, path) is not None


def only_checks(*kept: str) -> str:
    """``[checks.NAME] enabled = false`` for every installed check not in ``kept`` (a new check cannot slip in)."""
    return "".join(f"[checks.{spec.name}]\nenabled = false\n" for spec in discover() if spec.name not in kept)


def raises_only(parse: Callable[[str, str], object], error: type[Exception], text: str) -> None:
    """``parse(text, "fuzz")`` returns, or raises ``error`` naming the source first; anything else fails the test.

    For property tests: a parser of a kernel file meets arbitrary text and must say where it stopped.
    """
    try:
        parse(text, "fuzz")
    except error as exc:
        assert str(exc).startswith("fuzz:"), exc


def check_context(
    name: str,
    settings: S,
    root: Path,
    *,
    clock: Callable[[], float] = time.time,
    memory: Optional[MutableMapping[str, Any]] = None,
    **paths: Path,
) -> CheckContext[S]:
    """The context of one check's pass: its state kept under ``root/state``, its roots (``sysfs=`` ...) in ``paths``."""
    state_dir = root / "state"
    return CheckContext(
        name=name,
        settings=settings,
        paths=Paths(state_dir=state_dir, **paths),
        state=StateFile(state_dir, f"check-{name}"),
        memory={} if memory is None else memory,
        clock=clock,
    )


class FixtureNode:
    """A node under a test's ``root``: copies of fixture trees, stand-in programs, and passes of one check.

    Passes share one ``memory`` (what a daemon keeps between passes) and read ``clock``.
    """

    def __init__(self, root: Path, clock: Callable[[], float]) -> None:
        self.root = root
        self.clock = clock
        self.memory: dict[str, Any] = {}

    def copy(self, fixture: Path, relative: str) -> Path:
        """A copy of the fixture tree at ``root/relative``, for the test to change."""
        target = self.root / relative
        shutil.copytree(fixture, target)
        return target

    def own_as_the_kernel(self, procfs: Path) -> None:
        """Give each task directory under ``procfs`` the owner the kernel gives /proc/PID: its effective uid.

        fs/proc/base.c ``task_dump_owner``; the uid comes from the ``Uid:`` line of the
        directory's own status file (none: root's). Needs root, like any chown to another uid.
        """
        for status in sorted(procfs.glob("[0-9]*/status")) + sorted(procfs.glob("[0-9]*/task/[0-9]*/status")):
            lines = status.read_text().split("\n")
            uids = next((line.split("\t")[1:] for line in lines if line.startswith("Uid:\t")), [])
            os.chown(status.parent, int(uids[1]) if len(uids) == 4 else 0, -1)

    def program(self, name: str, script: str) -> Path:
        """An executable shell script ``root/bin/NAME``: a real program standing in for a vendor tool."""
        path = self.root / "bin" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"#!/bin/sh\n{script}\n")
        path.chmod(0o755)
        return path

    def passes(self, spec: CheckSpec[S], settings: S, **roots: Path) -> list[Finding]:
        """One pass of ``spec`` over ``roots`` (``sysfs=``, ``procfs=``, ``kmsg=``)."""
        ctx = check_context(spec.name, settings, self.root, clock=self.clock, memory=self.memory, **roots)
        return list(spec.run(ctx))
