"""``healthd history``: what the node went through, from ``state_dir/history.sqlite``, without running a check.

It reads the store as a WAL reader, so it needs neither the state lock nor the
daemon's cooperation, and like ``healthd status`` it reads only
``[paths].state_dir`` from the config (no pydantic, no plugins). Three forms: a
table for people (one sanitized line per event; details quote text from the
node, which is hostile), ``--json`` (one document: events, open findings,
boots) and ``--jsonl`` (one event per line, streamed, for export; all of the
history unless ``--since`` is given). Exit codes: 0, also when there is no
history yet; 64 for a bad ``--since``; 66 when the database cannot be read;
78 for a config error.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import sys
import time
from typing import Any, Optional

from healthd.commands import add_config_argument
from healthd.commands.failure import exit_for
from healthd.commands.status import read_settings
from healthd.exitcodes import EX_USAGE
from healthd.store.historyreader import HistoryReader
from healthd.text import one_line

DEFAULT_SINCE = "7d"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d{1,9})([smhdw])")
_LATEST = 253_402_214_400.0  # 9999-12-31T00:00:00Z: printable as a local date in every zone


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--since",
        metavar="WHEN",
        help=f"a duration back from now (30m, 24h, 7d, 2w) or an ISO date/time (2024-05-01, local time unless "
        f"it has an offset); default {DEFAULT_SINCE}, and everything with --jsonl",
    )
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="print one JSON document")
    form.add_argument("--jsonl", action="store_true", help="export: one JSON event per line")
    add_config_argument(parser)


def parse_duration(text: str) -> Optional[float]:
    """Seconds in ``30m``, ``24h``, ``7d``, ``2w`` (also ``90s``); None when ``text`` is not such a duration."""
    match = _DURATION.fullmatch(text.strip())
    return float(int(match.group(1)) * _UNITS[match.group(2)]) if match else None


def parse_since(text: str, now: float) -> float:
    """Epoch seconds from ``7d``-style durations or an ISO date/time; ``ValueError`` naming the text otherwise."""
    value = text.strip()
    duration = parse_duration(value)
    if duration is not None:
        epoch = now - duration
    else:
        try:
            # fromisoformat takes "Z" only from Python 3.11.
            when = _dt.datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value)
            epoch = when.timestamp()  # a naive time is local time, as a person at the node means it
        except (ValueError, OverflowError):
            raise ValueError(
                f"--since {one_line(text, 60)!r}: expected a duration such as 30m, 24h, 7d or 2w, "
                "or an ISO date such as 2024-05-01 or 2024-05-01T08:00"
            ) from None
    if not 0 <= epoch <= _LATEST:
        # Nothing was recorded before 1970, and a time past 9999 cannot be printed as a date.
        raise ValueError(f"--since {one_line(text, 60)!r}: out of range (1970 to 9999)")
    return epoch


def _local(epoch: float) -> str:
    return _dt.datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="seconds")


def _line(event: dict[str, Any]) -> str:
    """One event for people; every field is node text or stored text, so each is reduced to one printable line."""
    kind = event["kind"]
    if kind in ("raised", "changed", "cleared", "ack"):
        what = f"{event['check']}/{event['code']} {event['subject']}"
    elif kind == "action":
        what = f"{event['code']} {event['subject']}"
    else:
        what = event["subject"]
    text = f"{_local(event['at'])}  {one_line(kind, 16):<16} {one_line(event['status'], 10):<8} {one_line(what, 200)}"
    message = one_line(event["message"], 300)
    return f"{text}: {message}" if message else text


def run(args: argparse.Namespace) -> int:
    now = time.time()
    since: Optional[float] = None
    if args.since is not None or not args.jsonl:
        try:
            since = parse_since(args.since or DEFAULT_SINCE, now)
        except ValueError as exc:
            print(f"healthd: {exc}", file=sys.stderr)
            return EX_USAGE
    try:
        state_dir, _, _ = read_settings(args.config)
        history = HistoryReader.open_readonly(state_dir)
        if history is None:
            if args.json:
                print(json.dumps({"node": None, "since": since, "events": [], "open_findings": [], "boots": []}))
            elif not args.jsonl:
                print(f"no history yet ({state_dir / 'history.sqlite'} does not exist)")
            return 0
        with history:
            return _print(history, since, args)
    except Exception as exc:
        return exit_for(exc)


def _print(history: HistoryReader, since: Optional[float], args: argparse.Namespace) -> int:
    events = history.events(since=since)
    if args.jsonl:
        for event in events:
            print(json.dumps(event.to_dict(), sort_keys=True))
            if getattr(sys.stdout, "gone", False):  # the reader left (`| head`): stop reading the database
                break
        return 0
    if args.json:
        document = {
            "node": history.node or None,
            "database": str(history.path),
            "since": since,
            "events": [e.to_dict() for e in events],
            "open_findings": [f.to_dict() for f in history.open_findings()],
            "boots": [b.to_dict() for b in history.boots()],
        }
        print(json.dumps(document, indent=2, sort_keys=True))
        return 0
    shown = 0
    for event in events:
        print(_line(event.to_dict()))
        shown += 1
        if getattr(sys.stdout, "gone", False):
            break
    if not shown and since is not None:
        print(f"no events since {_local(since)} in {history.path}")
    return 0
