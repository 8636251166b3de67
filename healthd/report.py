"""Renders a pass for people (a table) and for programs (versioned JSON, see docs/json-output.md)."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Optional

from healthd import __version__
from healthd.model import CheckResult, Finding, PassResult, RunState, Status
from healthd.text import one_line

SCHEMA_VERSION = 1


def _iso(epoch: float) -> str:
    return _dt.datetime.fromtimestamp(epoch, tz=_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def finding_to_dict(finding: Finding) -> dict[str, Any]:
    return {
        "check": finding.check,
        "status": finding.status.name,
        "code": finding.code,
        "subject": finding.subject,
        "message": finding.message,
        "details": dict(finding.details),
    }


def result_to_dict(result: CheckResult) -> dict[str, Any]:
    return {
        "name": result.check,
        "status": result.status.name,
        "state": result.state.value,
        "duration_seconds": round(result.duration_seconds, 6),
        "reason": result.reason,
        "findings": [finding_to_dict(f) for f in result.findings],
    }


def pass_to_dict(result: PassResult, extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The ``check --once --json`` document; ``extra`` adds top-level sections (e.g. ``action``)."""
    document: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "healthd_version": __version__,
        "node": result.node,
        "started_at": _iso(result.started_at),
        "duration_seconds": round(result.duration_seconds, 6),
        "status": result.status.name,
        "exit_code": int(result.status),
        "checks": [result_to_dict(r) for r in result.results],
    }
    document.update(extra or {})
    return document


def _state_label(result: CheckResult) -> str:
    if result.state is RunState.RAN:
        return result.status.name
    if result.state in (RunState.NOT_APPLICABLE, RunState.DISABLED):
        return "n/a" if result.state is RunState.NOT_APPLICABLE else "disabled"
    return f"{result.status.name} ({result.state.value})"


def render_table(result: PassResult) -> str:
    """One line per check, then one indented line per problem; a summary line last.

    Findings graded OK are notes (an informational Xid, a counter that cannot be
    read): the table counts them and leaves them to ``--json``, so the problems stand
    out. Text that came from the node (reasons, subjects, messages) is made one
    printable line first, so a crafted mount source or log line cannot forge rows.
    """
    rows = [("CHECK", "STATUS", "TIME", "DETAIL")]
    for check in result.results:
        problems = sum(1 for f in check.findings if f.status is not Status.OK)
        notes = len(check.findings) - problems
        detail = ", ".join(
            part for part in (f"{problems} problem(s)" if problems else "", f"{notes} note(s)" if notes else "") if part
        )
        detail = detail or one_line(check.reason)
        rows.append((one_line(check.check, 64), _state_label(check), f"{check.duration_seconds * 1000:.0f}ms", detail))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}".rstrip() for r in rows]
    for check in result.results:
        for finding in check.findings:
            if finding.status is Status.OK:
                continue
            code, subject = one_line(finding.code, 64), one_line(finding.subject, 200)
            lines.append(f"  {finding.status.name:<8} {code} {subject}: {one_line(finding.message)}")
    lines.append(f"{one_line(result.node, 200)}: {result.status.name} ({result.duration_seconds:.2f}s)")
    return "\n".join(lines)
