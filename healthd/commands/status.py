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

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from healthd.commands import add_config_argument
from healthd.commands.failure import exit_for
from healthd.config.load import ConfigError, NodeSettings, node_settings, read_config
from healthd.exitcodes import EX_UNKNOWN, STATUS_CODES
from healthd.store.attempt import Attempt, read_attempt
from healthd.text import one_line, pass_headline

if TYPE_CHECKING:
    import argparse  # ``healthd status`` is usually parsed without it (``healthd.cli.main.plain_command``)


class StatusError(Exception):
    """Why the last pass cannot be shown; ``str()`` names the file and key."""


class StatusConfigError(StatusError):
    """The config itself is unusable: exit 78 like every other command."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the recorded pass document with its age")
    add_config_argument(parser)


def read_settings(path: Optional[Path]) -> NodeSettings:
    """The config's node settings (``healthd.config.load.node_settings``), defaults when there is no file."""
    try:
        return node_settings(*read_config(path))
    except ConfigError as exc:
        raise StatusConfigError(str(exc)) from None


def read_last_pass(state_dir: Path, node: str) -> dict[str, Any]:
    """The recorded pass of ``node``; raises ``UntrustedPath`` when the state directory or a file in it fails
    the trust rule, or the directory is another node's (``healthd.store.statenode``)."""
    from healthd.store.state import StateDir, read_entry, state_owner

    path = state_dir / "last-pass.json"
    # A last-pass.json that another user could have written could show a failing node as OK.
    StateDir(state_dir).refuse_untrusted()
    owner = state_owner(state_dir)
    if owner and owner != node:  # another node's pass is not this node's state
        from healthd.store.statenode import ForeignStateDir

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
        import datetime as _dt

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


def _render(document: dict[str, Any], age: float, now: float, limit: Optional[float], failed: Optional[Attempt]) -> str:
    """The record for people; ``limit`` is the age beyond which it is stale (None: it is fresh).

    ``failed``: a later attempt that could not save its pass: the record is then the last
    pass written, not the last pass, and the attempt is said beside it.
    """
    from healthd.cycle.render import action_lines, state_label

    last = "last written pass" if failed is not None else "last pass"
    when = f"{last} {age:.0f}s ago, at {_field(document, 'started_at')}"
    lines = [pass_headline(_field(document, "node"), _field(document, "status"), when)]
    if limit is not None:
        lines[0] += f": STALE, older than {limit:g}s"
    if failed is not None:
        lines.append(f"  {one_line(failed.text(), 800)}")
    checks = document.get("checks")
    for check in checks if isinstance(checks, list) else []:
        if not isinstance(check, dict):
            continue
        label = state_label(_field(check, "status", 16), check.get("state"))
        lines.append(f"  {_field(check, 'name', 64):<12} {label}")
        findings = check.get("findings")
        for finding in findings if isinstance(findings, list) else []:
            if isinstance(finding, dict):
                lines.append(
                    f"    {_field(finding, 'status', 16):<8} {_field(finding, 'code', 64)} "
                    f"{_field(finding, 'subject')}: {one_line(finding.get('message', ''))}"
                )
    if "action" in document:  # records older than the action section have none to show
        lines.extend(action_lines(document, now))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        from healthd.config.nodename import this_node

        state_dir, interval, configured = read_settings(args.config)
        document = read_last_pass(state_dir, this_node(configured))
    except Exception as exc:
        return exit_for(exc)
    now = time.time()
    age = age_seconds(document, now)
    limit = 2 * interval
    stale = age is None or age > limit
    attempt = read_attempt(state_dir)
    failed = attempt if attempt is not None and age is not None and attempt.failed_after(now - age) else None
    # A record's status is its Nagios code (healthd.exitcodes); a stale one is UNKNOWN, and so is one a
    # later pass could not replace: it is not what the node is now.
    code = EX_UNKNOWN if stale or failed is not None else STATUS_CODES[document["status"]]
    if args.json:
        last = attempt.to_dict() if attempt is not None else None
        shown = {"age_seconds": age, "stale": stale, "exit_code": code, "last_attempt": last, "last_pass": document}
        print(json.dumps({**shown, "last_attempt_failed": failed is not None}, indent=2))
    elif age is None:
        print(f"healthd: UNKNOWN: the recorded pass in {state_dir} has no readable 'started_at'", file=sys.stderr)
    else:
        print(_render(document, age, now, limit if stale else None, failed))
        if stale:
            print(
                f"healthd: UNKNOWN: stale: the last pass is {age:.0f}s old, more than two intervals ({limit:g}s,"
                f" [daemon].interval = {interval:g}s); is `healthd run` running?"
            )
    return code
