"""The ``files`` check: each file of ``expect_files`` is there or not, with the type, owner, mode, age and lines set.

NHC 1.4.3's check_file_test, check_file_stat and check_file_contents (scripts/lbnl_file.nhc)
in one table per file. ``gather`` asks a child process (``probe.py``) with a deadline, so a file
on a hung mount is UNKNOWN, not a hung pass; ``judge`` is pure. A file owned by neither root
nor the expected owner may have been made by any user in a world-writable directory: it is
UNKNOWN (``FILE_FOREIGN``), neither satisfying nor failing an expectation, unless the
expectation sets ``any_owner``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Optional, Union

from healthd.checks.plugin import CheckSpec, NotApplicable, Staged, Unobserved, Verdict
from healthd.config.hosts import matcher
from healthd.model import Finding, Status
from healthd_checks.mounts.fsprobe import read_until

if TYPE_CHECKING:
    from healthd.checks.plugin import CheckContext, JudgeContext

    from .settings import FileExpectation, FilesSettings

PROBE = Path(__file__).with_name("probe.py")
# Seconds the parent waits past the child's own deadline before it kills it.
_MARGIN = 2.0
_ABSENT = (errno.ENOENT, errno.ENOTDIR)
_TYPES = {
    "file": stat.S_ISREG, "directory": stat.S_ISDIR, "symlink": stat.S_ISLNK, "block": stat.S_ISBLK,
    "char": stat.S_ISCHR, "fifo": stat.S_ISFIFO, "socket": stat.S_ISSOCK,
}  # fmt: skip


class Stat(NamedTuple):
    """What ``stat`` or ``lstat`` said of a path, with the owner's and group's names where they have one."""

    mode: int
    uid: int
    gid: int
    size: int
    mtime: float
    user: Optional[str]
    group: Optional[str]


class FileSeen(NamedTuple):
    """One path as the probe saw it: its lstat (None: absent), its stat (None: a dangling link), access, text."""

    path: str
    link: Optional[Stat]
    target: Optional[Stat]
    access: tuple[bool, bool, bool] = (False, False, False)
    text: Optional[str] = None
    truncated: bool = False


class Files(NamedTuple):
    """What ``gather`` saw, by path: the file, or why it could not be seen."""

    seen: Mapping[str, Union[FileSeen, Unobserved]]


def _stat(raw: Optional[Mapping[str, Any]]) -> Optional[Stat]:
    if raw is None:
        return None
    return Stat(int(raw["mode"]), int(raw["uid"]), int(raw["gid"]), int(raw["size"]), float(raw["mtime"]),
                raw["user"], raw["group"])  # fmt: skip


def parse_answer(path: str, raw: Mapping[str, Any]) -> Union[FileSeen, Unobserved]:
    """One path's answer from the probe: a ``FileSeen``, or an ``Unobserved`` for what it could not look at."""
    if raw.get("lstat") is None:
        if raw.get("errno") in _ABSENT:
            return FileSeen(path, None, None)
        return Unobserved("FILE_UNREADABLE", path, f"cannot stat {path}: {raw.get('error')}")
    link, target = _stat(raw["lstat"]), _stat(raw.get("stat"))
    if target is None:
        return FileSeen(path, link, None)
    if "read_error" in raw:
        return Unobserved("FILE_UNREADABLE", path, f"cannot read {path}: {raw['read_error']}")
    access = raw["access"]
    return FileSeen(path, link, target, (bool(access[0]), bool(access[1]), bool(access[2])), raw.get("text"),
                    bool(raw.get("truncated")))  # fmt: skip


def _ask(request: dict[str, Any], deadline: float) -> tuple[Optional[Any], str, Optional[subprocess.Popen[bytes]]]:
    """The probe's answer (None if it gave none), why not, and the child, killed whatever it is doing."""
    argv = [sys.executable, "-I", "-S", str(PROBE), json.dumps(request)]
    try:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True, env={"LC_ALL": "C"}, cwd="/",
        )  # fmt: skip
    except OSError as exc:
        return None, f"the file probe did not start: {exc}", None
    try:
        output, closed = read_until(process, time.monotonic() + deadline + _MARGIN)
    finally:
        # A thread stuck in the kernel keeps the child alive after it answered: SIGKILL ends it
        # as soon as the kernel lets that thread go, and nobody waits for it meanwhile.
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        assert process.stdout is not None
        process.stdout.close()
    try:
        return json.loads(output), "", process
    except ValueError:
        return None, "the file probe gave no answer" if closed else "the file probe did not answer in time", process


def gather(ctx: CheckContext[FilesSettings]) -> Files:
    """All the I/O: one probe child for every file, which answers at ``read_timeout`` what it has seen."""
    expected = ctx.settings.expect_files
    if not expected:
        raise NotApplicable("no files to check")
    paths = sorted({e.path for e in expected})
    # The probe left stuck on each path (``ctx.memory`` lives as long as the daemon): no new one
    # starts for a path while it lives, so a hung mount costs one stuck process however many passes run.
    stuck_by_path: dict[str, subprocess.Popen[bytes]] = ctx.memory.setdefault("stuck", {})
    stuck = {p for p in paths if p in stuck_by_path and stuck_by_path[p].poll() is None}
    limit = ctx.settings.read_timeout
    seen: dict[str, Union[FileSeen, Unobserved]] = {
        p: Unobserved("FILE_HUNG", p, f"an earlier probe of {p} (pid {stuck_by_path[p].pid}) is still stuck")
        for p in stuck
    }
    todo = [p for p in paths if p not in stuck]
    if not todo:
        return Files(seen)
    reads = {e.path for e in expected if e.lines}
    request = {"deadline": limit, "max_bytes": ctx.settings.max_read_bytes,
               "files": [{"path": p, "read": p in reads} for p in todo]}  # fmt: skip
    answers, why, process = _ask(request, limit)
    for path in todo:
        raw = answers.get(path) if isinstance(answers, dict) else None
        if raw is not None:
            stuck_by_path.pop(path, None)
            seen[path] = parse_answer(path, raw)
        elif isinstance(answers, dict):
            if process is not None and process.poll() is None:
                stuck_by_path[path] = process
            seen[path] = Unobserved("FILE_HUNG", path, f"no answer about {path} within {limit:g} s (a hung mount?)")
        else:
            seen[path] = Unobserved("FILE_PROBE_FAILED", path, why)
    return Files(seen)


def _owner_ok(want: str, uid: int, user: Optional[str]) -> bool:
    return want == str(uid) or want == user


def _foreign(file: FileSeen, want: FileExpectation) -> Optional[int]:
    """The uid of the path or its target where neither root nor the expected owner owns it, unless any owner will do."""
    if want.any_owner:
        return None
    for st in (file.link, file.target):
        if st is not None and st.uid != 0 and not (want.owner is not None and _owner_ok(want.owner, st.uid, st.user)):
            return st.uid
    return None


def _properties(file: FileSeen, target: Stat, want: FileExpectation, now: float) -> list[tuple[str, str]]:
    """(code, message) of each property of an existing file (``target``: its stat) that is not as expected."""
    wrong: list[tuple[str, str]] = []
    if want.type is not None:
        mode = file.link.mode if want.type == "symlink" and file.link is not None else target.mode
        if not _TYPES[want.type](mode):
            wrong.append(("FILE_TYPE", f"{file.path} is not a {want.type}"))
    for flag, name, have in zip(("readable", "writable", "executable"), "rwx", file.access):
        if getattr(want, flag) is not None and getattr(want, flag) != have:
            wrong.append(("FILE_ACCESS", f"{file.path} is {'' if have else 'not '}{flag} (-{name})"))
    if want.nonempty is not None and want.nonempty != (target.size > 0):
        wrong.append(("FILE_SIZE", f"{file.path} has {target.size} bytes"))
    for flag, bit in (("setuid", stat.S_ISUID), ("setgid", stat.S_ISGID), ("sticky", stat.S_ISVTX)):
        if getattr(want, flag) is not None and getattr(want, flag) != bool(target.mode & bit):
            wrong.append(("FILE_MODE", f"{file.path}'s {flag} bit is {'set' if target.mode & bit else 'clear'}"))
    own = target if want.follow or file.link is None else file.link
    wrong.extend(_stat_properties(file.path, own, want, now))
    return wrong


def _stat_properties(path: str, target: Stat, want: FileExpectation, now: float) -> list[tuple[str, str]]:
    """NHC's check_file_stat: owner, group, permission bits, modification age."""
    wrong: list[tuple[str, str]] = []
    if want.owner is not None and not _owner_ok(want.owner, target.uid, target.user):
        wrong.append(("FILE_OWNER", f"{path} is owned by {target.user or target.uid}, not {want.owner}"))
    if want.group is not None and not _owner_ok(want.group, target.gid, target.group):
        wrong.append(("FILE_GROUP", f"{path}'s group is {target.group or target.gid}, not {want.group}"))
    bits = stat.S_IMODE(target.mode)
    if want.mode is not None and bits != int(want.mode, 8):
        wrong.append(("FILE_MODE", f"{path} has permissions {bits:04o}, not {want.mode}"))
    if want.mode_includes is not None and bits & int(want.mode_includes, 8) != int(want.mode_includes, 8):
        wrong.append(("FILE_MODE", f"{path} has permissions {bits:04o}, without all of {want.mode_includes}"))
    age = now - target.mtime
    if want.max_age_s is not None and age > want.max_age_s:
        wrong.append(("FILE_AGE", f"{path} was modified {age:.0f} s ago, more than {want.max_age_s:g} s"))
    if want.min_age_s is not None and age < want.min_age_s:
        wrong.append(("FILE_AGE", f"{path} was modified {age:.0f} s ago, less than {want.min_age_s:g} s"))
    return wrong


def file_lines(text: str) -> list[str]:
    """The lines as NHC's ``while read LINE`` gives them: split on newlines, blanks and tabs trimmed at both ends."""
    pieces = text.split("\n")
    if pieces and pieces[-1] == "":
        pieces.pop()
    return [piece.strip(" \t") for piece in pieces]


def _contents(file: FileSeen, want: FileExpectation) -> Union[tuple[str, str], Unobserved, None]:
    """NHC's check_file_contents: the first match string not as expected, an ``Unobserved``, or None."""
    if not want.lines:
        return None
    if file.text is None:
        return Unobserved("FILE_UNREADABLE", file.path, f"{file.path} is not a regular file to read lines of")
    lines = file_lines(file.text)
    for match in want.lines:
        negated = match.startswith("!")
        test = matcher(match[1:] if negated else match)
        hit = next((n for n, line in enumerate(lines, 1) if test(line)), None)
        if negated and hit is not None:
            return ("FILE_CONTENTS", f"{file.path} line {hit} matches {match[1:]!r}")
        if file.truncated and (negated or hit is None):
            why = f"{file.path} is longer than max_read_bytes, and {match!r} may lie past it"
            return Unobserved("FILE_TOO_LARGE", file.path, why)
        if not negated and hit is None:
            return ("FILE_CONTENTS", f"{file.path} has no line matching {match!r}")
    return None


def _judge_one(file: FileSeen, want: FileExpectation, jc: JudgeContext[FilesSettings]) -> list[Finding]:
    grade = Status[want.severity]
    if file.link is None or (file.target is None and want.type != "symlink" and want.follow):
        if want.exists is not True:
            return []
        what = "does not exist" if file.link is None else "is a dangling symbolic link"
        return [jc.finding(grade, "FILE_MISSING", file.path, f"{file.path} {what}")]
    uid = _foreign(file, want)
    if uid is not None:
        why = f"{file.path} is owned by uid {uid}, not root or the expected owner: a user may have made it"
        return [jc.finding(Status.UNKNOWN, "FILE_FOREIGN", file.path, why)]
    if want.exists is False:
        return [jc.finding(grade, "FILE_PRESENT", file.path, f"{file.path} exists and should not")]
    if file.target is None:  # a dangling link, judged as itself
        wrong = _stat_properties(file.path, file.link, want, jc.now)
    else:
        wrong = _properties(file, file.target, want, jc.now)
    found = [jc.finding(grade, code, file.path, message) for code, message in wrong]
    contents = _contents(file, want)
    if isinstance(contents, Unobserved):
        found.append(contents.finding(jc))
    elif contents is not None:
        found.append(jc.finding(grade, contents[0], file.path, contents[1]))
    return found


def judge(seen: Files, jc: JudgeContext[FilesSettings]) -> Verdict:
    """Pure: each expectation against its file; what could not be seen is UNKNOWN."""
    findings: list[Finding] = []
    for want in jc.settings.expect_files:
        file = seen.seen[want.path]
        if isinstance(file, Unobserved):
            findings.append(file.finding(jc))
        else:
            findings.extend(_judge_one(file, want, jc))
    return Verdict(tuple(findings))


CHECK: CheckSpec[FilesSettings] = CheckSpec(
    name="files",
    description="files exist with the type, owner, mode, age and lines they should",
    settings="healthd_checks.files.settings:FilesSettings",
    run=Staged(gather, judge),
)
