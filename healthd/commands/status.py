"""``healthd status``: the node's last whole pass as recorded, without running any check.

It reads the ``last-pass`` state document directly and only the config keys it needs
(``[paths].state_dir``, ``[daemon].interval``, ``[slurm].node_name``: ``healthd.config.load.node_settings``),
so it neither imports pydantic nor loads the check plugins: it is cheap enough for
a monitoring agent or a Slurm prolog to call often. The exit code is the recorded
status (Nagios convention), or 3 (UNKNOWN) when there is no record, it cannot be
read, or it is older than two intervals (the daemon is not running its passes),
and 78 when the config, the state directory or a file in it fails the trust rule
(``healthd.store.trust``), or the directory is another node's (``healthd.store.statenode``): a record
others could have written is not shown, nor one of another node.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from healthd.commands import add_config_argument
from healthd.commands.failure import exit_for
from healthd.config.load import BUILT_IN, ConfigError, NodeSettings, node_settings, read_config, sha256_hex
from healthd.config.nodename import this_node
from healthd.cycle.render import acknowledged_note, action_lines, iso_time, state_label
from healthd.exitcodes import EX_UNKNOWN, STATUS_CODES
from healthd.store.attempt import Attempt, read_attempt
from healthd.store.state import StateDir, read_entry, state_owner
from healthd.store.statenode import ForeignStateDir
from healthd.store.trust import UntrustedPath
from healthd.text import one_line, pass_headline

if TYPE_CHECKING:
    import argparse

    from healthd.plan.ackview import (
        Given,  # ``healthd status`` is usually parsed without it (``healthd.cli.main.plain_command``)
    )


class StatusError(Exception):
    """Why the last pass cannot be shown; ``str()`` names the file and key."""


class StatusConfigError(StatusError):
    """The config itself is unusable: exit 78 like every other command."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the recorded pass document with its age")
    add_config_argument(parser)


def read_settings(path: Optional[Path]) -> NodeSettings:
    """The config's node settings (``healthd.config.load.node_settings``), defaults when there is no file."""
    return read_source(path)[0]


def read_source(path: Optional[Path]) -> tuple[NodeSettings, str, bytes]:
    """The config's node settings, its source name and its exact bytes (no file: the defaults, no bytes)."""
    try:
        source, raw = read_config(path)
        return node_settings(source, raw), source, raw
    except ConfigError as exc:
        raise StatusConfigError(str(exc)) from None


def config_warning(state_dir: Path, source: str, raw: bytes) -> Optional[str]:
    """One line when the config on disk is not one a full validation accepted; None when it is, or no file.

    Status never validates (pydantic: bench/README.md, the status figure). It compares the
    SHA-256 of the config's bytes with what the last full validation that used this state
    directory recorded (``healthd.config.cache``: ``config-verdict.json``, and the cached
    validation in ``config-cache.json``): the same bytes refused are named with the first
    problem; other bytes are said to be unvalidated. With no record at all (no full
    validation ever used this state directory) it says nothing: there is nothing to compare.
    """
    if source == BUILT_IN:
        return None
    digest = sha256_hex(raw)
    verdict = _state_document(state_dir, "config-verdict.json")
    if verdict.get("config_sha256") == digest:
        refused = verdict.get("refused")
        return None if refused is None else f"{source} would be refused by `healthd run`: {one_line(refused, 400)}"
    cached = _state_document(state_dir, "config-cache.json")
    if cached.get("config_sha256") == digest or not (verdict or cached):
        return None
    unchecked = "has changed since healthd last validated a config"
    return f"{source} {unchecked}; `healthd config validate` says whether it would be refused"


def _state_document(state_dir: Path, name: str) -> dict[str, Any]:
    """A JSON object from the state directory; {} when it is missing, unreadable, untrusted or not an object."""
    try:
        document = json.loads(read_entry(state_dir, name).decode("utf-8"))
    except (OSError, ValueError, UntrustedPath):
        return {}
    return document if isinstance(document, dict) else {}


def read_last_pass(state_dir: Path, node: str) -> dict[str, Any]:
    """The recorded pass of ``node``; raises ``UntrustedPath`` when the state directory or a file in it fails
    the trust rule, or the directory is another node's (``healthd.store.statenode``)."""
    path = state_dir / "last-pass.json"
    # A last-pass.json that another user could have written could show a failing node as OK.
    StateDir(state_dir).refuse_untrusted()
    owner = state_owner(state_dir)
    if owner and owner != node:  # another node's pass is not this node's state
        raise ForeignStateDir(state_dir, owner, node)
    try:
        document = json.loads(read_entry(state_dir, path.name).decode("utf-8"))
    except FileNotFoundError:
        attempt = read_attempt(state_dir)
        if attempt is not None and attempt.failed_after(0.0):
            raise StatusError(f"{path}: no pass recorded; {one_line(attempt.text(), 800)}") from None
        raise StatusError(f"{path}: no pass recorded yet (is `healthd run` running?)") from None
    except OSError as exc:
        raise StatusError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise StatusError(f"{path}: not a valid pass document: {exc}") from None
    # Any JSON type may stand where the status should be: only a string can name one.
    status = document.get("status") if isinstance(document, dict) else None
    if not isinstance(document, dict) or not isinstance(status, str) or status not in STATUS_CODES:
        raise StatusError(f"{path}: not a valid pass document: no known 'status'")
    return document


def age_seconds(document: dict[str, Any], now: float) -> Optional[float]:
    """Seconds since the recorded pass finished, or None when its time cannot be read."""
    started = document.get("started_at")
    duration = document.get("duration_seconds", 0)
    if not isinstance(started, str) or not isinstance(duration, (int, float)):
        return None
    when = _utc_epoch(started)
    if when is None:
        try:
            parsed = _dt.datetime.fromisoformat(started.replace("Z", "+00:00"))
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=_dt.timezone.utc)
        when = parsed.timestamp()
    return now - when - float(duration)


# Days before each month in a common year.
_MONTH_START = (0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334)


def _utc_epoch(text: str) -> Optional[float]:
    """``YYYY-MM-DDTHH:MM:SSZ``, the form healthd records (``healthd.cycle.render``), as seconds since the epoch.

    None for any other text, which ``age_seconds`` hands to ``datetime.fromisoformat``:
    importing datetime costs ``healthd status`` about 2 ms, more than reading its own form here.
    """
    fields = (text[0:4], text[5:7], text[8:10], text[11:13], text[14:16], text[17:19])
    if len(text) != 20 or text[4::3] != "--T::Z" or not all(f.isascii() and f.isdigit() for f in fields):
        return None
    year, month, day, hour, minute, second = (int(f) for f in fields)
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    month_days = (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
    if not (year >= 1 and 1 <= month <= 12 and 1 <= day <= month_days[month - 1]):
        return None
    if hour > 23 or minute > 59 or second > 59:
        return None
    # Days from 1970-01-01 to the start of ``year`` (proleptic Gregorian, as datetime counts them): 477 leap
    # days fall before 1970.
    before = year - 1
    days = 365 * (year - 1970) + before // 4 - before // 100 + before // 400 - 477
    days += _MONTH_START[month - 1] + (1 if leap and month > 2 else 0) + day - 1
    return float(days * 86400 + hour * 3600 + minute * 60 + second)


def _field(mapping: dict[str, Any], key: str, limit: int = 200) -> str:
    # The document is read from disk: any field may hold any JSON type, or forged text.
    value = mapping.get(key)
    return "?" if value is None else one_line(value, limit)


def _render(
    document: dict[str, Any],
    age: float,
    now: float,
    limit: Optional[float],
    failed: Optional[Attempt],
    acks: dict[tuple[str, Optional[str]], Given],
) -> str:
    """The record for people; ``limit`` is the age beyond which it is stale (None: it is fresh).

    ``failed``: a later attempt that could not save its pass: the record is then the last
    pass written, not the last pass, and the attempt is said beside it. ``acks``: the
    acknowledgements stored now, which may be newer than the pass (``_ack_note``).
    """
    last = "last written pass" if failed is not None else "last pass"
    when = f"{last} {age:.0f}s ago, at {_field(document, 'started_at')}"
    lines = [pass_headline(_field(document, "node"), _field(document, "status"), when)]
    if limit is not None:
        lines[0] += f": STALE, older than {limit:g}s"
    if failed is not None:
        lines.append(f"  {one_line(failed.text(), 800)}")
    since = 0
    checks = document.get("checks")
    for check in checks if isinstance(checks, list) else []:
        if not isinstance(check, dict):
            continue
        label = state_label(_field(check, "status", 16), check.get("state"))
        lines.append(f"  {_field(check, 'name', 64):<12} {label}")
        findings = check.get("findings")
        for finding in findings if isinstance(findings, list) else []:
            if isinstance(finding, dict):
                note, covered = _ack_note(finding, acks)
                since += covered
                lines.append(
                    f"    {_field(finding, 'status', 16):<8} {_field(finding, 'code', 64)} "
                    f"{_field(finding, 'subject')}: {one_line(finding.get('message', ''))}{note}"
                )
    if "action" in document:  # records older than the action section have none to show
        action = document["action"]
        # A one-shot pass's pending action is retried by whichever pass comes next, not at a time of its own.
        one_shot = isinstance(action, dict) and action.get("one_shot") is True
        lines.extend(action_lines(document, now, one_shot=one_shot))
    if since:
        lines.append(_since_line(since, document))
    return "\n".join(lines)


def _ack_note(finding: dict[str, Any], acks: dict[tuple[str, Optional[str]], Given]) -> tuple[str, int]:
    """What a finding's acknowledgement is, as a suffix to its line; and 1 when it was given after the pass.

    The pass says who acknowledged a finding it downgraded (``acknowledged_by``; a record from
    before that field: the ``acks`` file, when it still holds the ack); an ack the file no
    longer holds was revoked (or lapsed). A finding the pass reported that an ack given
    since covers will not be acted on by the next pass, unless it comes back worse.
    """
    details = finding.get("details")
    acknowledged = isinstance(details, dict) and details.get("acknowledged") is True
    if not (acks or acknowledged):  # the common case: nothing to say, and nothing more to import
        return "", 0
    from healthd.plan.ackview import covering, finding_id

    if isinstance(details, dict) and acknowledged:
        held = acks.get(finding_id(finding))
        if held is not None and not isinstance(details.get("acknowledged_by"), str):  # a pass from before the field
            details = {**details, "acknowledged_by": held.by, "acknowledged_at": held.at}
        note = acknowledged_note(details)
        gone = "; no longer acknowledged: the next pass acts on it again"
        return (note if held is not None else f"{note[:-1]}{gone})"), 0
    given = covering(finding, acks)
    if given is None:
        return "", 0
    return f" (acknowledged since this pass by {one_line(given.by, 100)} at {iso_time(given.at)})", 1


def _since_line(since: int, document: dict[str, Any]) -> str:
    """What acks given after the pass change: the next pass's judgement of those findings, not this record."""
    from healthd.plan.ackview import POLICY_CHECK

    checks = document.get("checks")
    open_findings = sum(
        1
        for check in (checks if isinstance(checks, list) else [])
        if isinstance(check, dict) and check.get("name") != POLICY_CHECK and isinstance(check.get("findings"), list)
        for finding in check["findings"]
        if isinstance(finding, dict) and finding.get("status") != "OK"
    )
    if since >= open_findings:
        return (
            f"acknowledged since this pass: {'its finding' if since == 1 else f'all {since} of its findings'};"
            " the next pass runs the checks again and,"
            " should they find no more than this, acts on none of them (a node healthd took out for them is resumed)"
        )
    return (
        f"acknowledged since this pass: {since} of its {open_findings} findings; the next pass acts on those only"
        " should they come back worse or as a new event; the others still count"
    )


def read_acks(state_dir: Path) -> dict[tuple[str, Optional[str]], Given]:
    """The acknowledgements stored now (``healthd.plan.ackview``); none when the file is missing or unreadable."""
    document = _state_document(state_dir, "acks.json")
    if not document.get("acks"):  # none given: status imports nothing more (bench/README.md, the status figure)
        return {}
    from healthd.plan.ackview import stored_acks

    return stored_acks(document)


def run(args: argparse.Namespace) -> int:
    try:
        (state_dir, interval, configured), source, raw = read_source(args.config)
        document = read_last_pass(state_dir, this_node(configured))
    except Exception as exc:
        return exit_for(exc)
    # A warning only: the exit code is the node's recorded status, which a config not yet in use does not change.
    warning = config_warning(state_dir, source, raw)
    if warning is not None:
        print(f"healthd: warning: {warning}", file=sys.stderr)
    now = time.time()
    age = age_seconds(document, now)
    limit = 2 * interval
    stale = age is None or age > limit
    attempt = read_attempt(state_dir)
    failed = attempt if attempt is not None and age is not None and attempt.failed_after(now - age) else None
    acks = read_acks(state_dir)
    # A record's status is its Nagios code (healthd.exitcodes); a stale one is UNKNOWN, and so is one a
    # later pass could not replace: it is not what the node is now. An ack given since the pass does not
    # change it: the code is what the checks found, and only the next pass runs them again.
    code = EX_UNKNOWN if stale or failed is not None else STATUS_CODES[document["status"]]
    if args.json:
        last = attempt.to_dict() if attempt is not None else None
        shown = {"age_seconds": age, "stale": stale, "exit_code": code, "last_attempt": last, "last_pass": document}
        since = _acked_since(document, acks)
        print(json.dumps({**shown, "last_attempt_failed": failed is not None, "acknowledged_since": since}, indent=2))
    elif age is None:
        print(f"healthd: UNKNOWN: the recorded pass in {state_dir} has no readable 'started_at'", file=sys.stderr)
    else:
        print(_render(document, age, now, limit if stale else None, failed, acks))
        if stale:
            print(
                f"healthd: UNKNOWN: stale: the last pass is {age:.0f}s old, more than two intervals ({limit:g}s,"
                f" [daemon].interval = {interval:g}s); is `healthd run` running?"
            )
    return code


def _acked_since(document: dict[str, Any], acks: dict[tuple[str, Optional[str]], Given]) -> list[dict[str, Any]]:
    """The findings of the pass that acks given since it cover (``--json``): key, event, by whom, when."""
    if not acks:
        return []
    from healthd.plan.ackview import covering, finding_id

    found = []
    checks = document.get("checks")
    for check in checks if isinstance(checks, list) else []:
        findings = check.get("findings") if isinstance(check, dict) else None
        for finding in findings if isinstance(findings, list) else []:
            given = covering(finding, acks) if isinstance(finding, dict) else None
            if given is not None:
                key, event = finding_id(finding)
                found.append({"key": key, "event": event, "by": given.by, "at": given.at})
    return found
