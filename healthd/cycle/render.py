"""Renders a pass for people (a table) and for programs (versioned JSON, see docs/check-output.schema.json)."""

from __future__ import annotations

import time

from healthd import __version__
from healthd.text import one_line, pass_headline

TYPE_CHECKING = False  # not typing's: importing typing at run time would slow `healthd status` (bench/README.md)
if TYPE_CHECKING:
    from typing import Any, Mapping, Optional

    # Imported where used: `healthd status` renders saved documents with this module
    # and must not pay for the model's dataclasses.
    from healthd.model import CheckResult, Finding, PassResult

SCHEMA_VERSION = 1


def iso_time(epoch: float) -> str:
    """``epoch`` as healthd writes a time for people and in pass documents: ``YYYY-MM-DDTHH:MM:SSZ``, UTC.

    With ``time.gmtime``, not datetime: `healthd status` and the hook render without importing it.
    """
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


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
        "started_at": iso_time(result.started_at),
        "duration_seconds": round(result.duration_seconds, 6),
        "status": result.status.name,
        "exit_code": int(result.status),
        "checks": [result_to_dict(r) for r in result.results],
    }
    document.update(extra or {})
    return document


def state_label(status: str, state: object) -> str:
    """A check's STATUS column: a check that did not run is ``n/a`` or ``disabled``, never OK.

    ``state`` is a ``RunState`` value as the pass document carries it
    (docs/check-output.schema.json); a document without one (older than that
    field) shows its status as it is.
    """
    if state is None or state == "ran":
        return status
    if state == "not_applicable":
        return "n/a"
    if state == "disabled":
        return "disabled"
    return f"{status} ({one_line(state, 16)})"


def render_table(result: PassResult) -> str:
    """One line per check, then one indented line per problem and per acknowledged finding; a summary line last.

    Findings graded OK are notes (an informational Xid, a counter that cannot be
    read): the table counts them and leaves them to ``--json``, so the problems stand
    out. An acknowledged finding (healthd.plan.acks) is OK too, but no note: it is
    counted apart and listed with its real status, by whom and when it was acknowledged.
    Text that came from the node (reasons, subjects, messages) is made one
    printable line first, so a crafted mount source or log line cannot forge rows.
    """
    from healthd.model import Status

    rows = [("CHECK", "STATUS", "TIME", "DETAIL")]
    for check in result.results:
        problems = sum(1 for f in check.findings if f.status is not Status.OK)
        acked = sum(1 for f in check.findings if _acknowledged(f.details))
        notes = len(check.findings) - problems - acked
        counts = ((problems, "problem(s)"), (acked, "acknowledged"), (notes, "note(s)"))
        detail = ", ".join(f"{count} {what}" for count, what in counts if count) or one_line(check.reason)
        label = state_label(check.status.name, check.state.value)
        rows.append((one_line(check.check, 64), label, f"{check.duration_seconds * 1000:.0f}ms", detail))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}".rstrip() for r in rows]
    for check in result.results:
        for finding in check.findings:
            if finding.status is Status.OK and not _acknowledged(finding.details):
                continue
            code, subject = one_line(finding.code, 64), one_line(finding.subject, 200)
            line = f"  {finding.status.name:<8} {code} {subject}: {one_line(finding.message)}"
            lines.append(line + acknowledged_note(finding.details))
    lines.append(pass_headline(result.node, result.status.name, f"{result.duration_seconds:.2f}s"))
    return "\n".join(lines)


def _acknowledged(details: Mapping[str, Any]) -> bool:
    return details.get("acknowledged") is True


def acknowledged_note(details: Mapping[str, Any]) -> str:
    """`` (acknowledged WARNING by alice (sudo as root) at ...)`` for a finding a pass downgraded; "" for any other.

    ``details`` may come from disk (``healthd status``): each field is checked.
    """
    if not _acknowledged(details):
        return ""
    at, by = details.get("acknowledged_at"), details.get("acknowledged_by")
    was = one_line(details.get("acknowledged_status", "?"), 16)
    who = ""
    # A pass from before these two fields has neither.
    if isinstance(at, (int, float)) and not isinstance(at, bool) and isinstance(by, str):
        who = f" by {one_line(by, 100)} at {iso_time(at)}"
    return f" (acknowledged {was}{who})"


# What each acting decision does to the node (docs/slurm.md, "What healthd does to a node"):
# the infinitive for what healthd would do or is still trying, the past for what it did.
_ACTIONS = {
    "take_out_now": ("take the node out now", "took the node out now (DRAIN, then DOWN)"),
    "drain_after_jobs": ("drain the node after its jobs", "set the node to drain after its jobs (DRAIN)"),
    "resume": ("resume the node", "resumed the node (RESUME)"),
    "reboot": (
        "drain the node and have Slurm reboot it after its jobs",
        "drained the node; Slurm reboots it after its jobs (DRAIN, then scontrol reboot)",
    ),
}


# The headline's phrase for each kind of Slurm failure (``action.slurm_errors[].kind``,
# healthd.slurm.problem.SlurmFailure); a kind not here (``taken_over``) keeps a line of its own.
_SLURM_PHRASES = {
    "unreachable": "Slurm not reachable",
    "not_found": "Slurm not reachable",
    "read_failed": "Slurm read failed",
    "rejected": "Slurm refused the change",
}


def slurm_phrase(action: Mapping[str, Any], errors: int) -> tuple[str, Optional[int]]:
    """The first Slurm failure of ``action`` as one phrase, and where its text stands in ``action.errors``.

    Read from ``action.slurm_errors`` (its kind and detail), never from the error's text:
    a document from an older healthd, which has no such key, gets no phrase and shows
    its errors as lines. ``errors`` is how many ``action.errors`` holds; ("", None) when
    no failure has a phrase.
    """
    for item in _items(action.get("slurm_errors")):
        kind, detail, index = item.get("kind"), item.get("detail"), item.get("error")
        head = _SLURM_PHRASES.get(kind) if isinstance(kind, str) else None
        if head is None or not isinstance(detail, str):
            continue
        valid = isinstance(index, int) and not isinstance(index, bool) and 0 <= index < errors
        return f"{head} ({one_line(detail, 200)})", index if valid else None
    return "", None


def _items(value: object) -> list[dict[str, Any]]:
    """The objects of a JSON list read from disk, skipping whatever else it holds."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _drain_held(document: Mapping[str, Any]) -> bool:
    """Whether the pass holds a take-out back by the circuit breaker (its ``DRAIN_HELD`` finding)."""
    return any(
        finding.get("code") == "DRAIN_HELD"
        for check in _items(document.get("checks"))
        for finding in _items(check.get("findings"))
    )


# A one-shot (``check``, the hook's own pass) has no next pass of its own: it says who retries, not when.
ONE_SHOT_RETRY = "the next pass retries it (daemon, hook or healthd check)"


def _next_try(when: object, now: float) -> str:
    if isinstance(when, bool) or not isinstance(when, (int, float)):
        return "next try on a later pass"
    return f"next try in {when - now:.0f}s" if when > now else "next try on the next pass"


def action_lines(document: Mapping[str, Any], now: float, *, one_shot: bool = False) -> list[str]:
    """The ``action`` section of a pass document for people: one headline, then any other errors.

    The headline says what healthd did to the node, or would have done (dry run,
    Slurm disabled), or is still trying (pending, with the next retry), or why it
    held back (circuit breaker, hysteresis), and, in one phrase, why Slurm could not
    be used. ``document`` may come from disk (``healthd status``): every field is
    checked and made one printable line. ``one_shot``: the pass was this command's
    own, so a pending action names who retries it instead of when.
    """
    action = document.get("action")
    if not isinstance(action, dict):
        return ["action: none recorded (the pass failed before a decision)"]
    headline, rest = _headline(document, action, now, one_shot)
    lines = [headline]
    keys = [one_line(ack.get("key"), 100) for ack in _items(action.get("acknowledged"))]
    if keys:
        lines.append(f"acknowledged by the node's resume in Slurm: {', '.join(keys)}")
    lines.extend(f"action error: {error}" for error in rest)
    return lines


def _headline(
    document: Mapping[str, Any], action: dict[str, Any], now: float, one_shot: bool = False
) -> tuple[str, list[str]]:
    """The headline of ``action_lines`` and the errors it leaves for lines of their own."""

    def text(key: str, limit: int = 200) -> str:
        value = action.get(key)
        return "" if value is None else one_line(value, limit)

    decision, intended = text("decision", 32), text("intended", 32)
    explanation, reason = text("explanation", 300), text("reason", 100)
    raw = action.get("errors")
    raw_errors: list[object] = raw if isinstance(raw, list) else []
    # The first Slurm error goes into the headline as one phrase; any other error gets its own line.
    problem, phrased = slurm_phrase(action, len(raw_errors))
    rest = [one_line(e, 400) for i, e in enumerate(raw_errors) if isinstance(e, str) and i != phrased]
    would, did = _ACTIONS.get(intended if decision == "hold" else decision, ("", ""))
    then = f" (would {would})" if would else ""
    why = f" ({explanation}; reason {reason!r})" if reason else f" ({explanation})" if explanation else ""

    dry = action.get("dry_run") is True
    label = "dry run" if dry else "action"
    if decision == "hold" and _drain_held(document):
        body = f"HELD by the circuit breaker, the node stays in service: {explanation}{then}"
    elif decision == "hold":
        body = f"waiting before acting: {explanation}{then}"
    elif not would:
        body = f"nothing to do ({explanation or decision or 'no decision recorded'})"
    elif action.get("applied") is True:
        body = f"{did}{why}"
    elif dry:
        body = f"would {would}{why}" + ("" if problem else "; nothing was changed in Slurm")
    elif action.get("slurm_enabled") is False:
        body = f"not sent, [slurm] enabled = false: would {would}{why}"
    elif action.get("pending") is True:
        retry = ONE_SHOT_RETRY if one_shot else _next_try(action.get("next_retry"), now)
        body = f"PENDING: {would}{why}: {problem or 'backing off after a Slurm failure'}; {retry}"
        problem = ""
    else:
        body = f"{would} was not done{why}"
    line = f"{problem}; {label}: {body}" if problem else f"{label}: {body}"
    node_state = text("node_state", 64)
    if node_state:
        node_reason = text("node_reason", 100)
        line += f"; node is {node_state}" + (f" with reason {node_reason!r}" if node_reason else "")
    return line, rest


def pass_summary(document: Mapping[str, Any], now: float, *, head: str, one_shot: bool = False) -> str:
    """The one-line summary of a pass: ``head``, its first non-OK findings, and what it did to the node.

    The daemon's ``STATUS=`` and log line and the hook's output line are this line
    with their own ``head``. The action's headline (``action_lines``) follows when
    there is something to tell (an action, a dry run, an error), then the number of
    errors it does not name (``action_lines`` lists them). ``document`` may come from disk: every field is
    checked, and the whole line is made one printable line. ``one_shot`` as in ``action_lines``.
    """
    bad = [
        f"{finding.get('check')}/{finding.get('code')} {finding.get('subject')}"
        for check in _items(document.get("checks"))
        for finding in _items(check.get("findings"))
        if finding.get("status") != "OK"
    ]
    text = head
    if bad:
        text += f": {', '.join(bad[:3])}" + (f" (+{len(bad) - 3} more)" if len(bad) > 3 else "")
    action = document.get("action")
    if isinstance(action, dict) and (
        action.get("decision") not in (None, "none") or action.get("errors") or action.get("dry_run")
    ):
        headline, rest = _headline(document, action, now, one_shot)
        text += f"; {headline}"
        if rest:
            text += f"; {len(rest)} error(s)"
    return one_line(text, 1000)
