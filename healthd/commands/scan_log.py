"""``healthd scan-log FILE``: list the Xid events in a saved kernel log; exit with the worst grade.

FILE may be a ``dmesg`` (plain, ``-r``, ``-x``, ISO times), ``journalctl -k``, syslog, Talos or
/dev/kmsg dump, or ``-`` for stdin. Grades come from the same catalog as the ``xid`` check,
with the overrides of the config that ``--config`` names (no other: the command reads
nothing of the node it runs on); its ``accept_userspace_kmsg`` switch applies too.
A command the xid plugin contributes (``healthd.commands`` entry point); the scanner
is imported only when it runs. A file is scanned in constant memory (``healthd_checks.xid.scan.scan_stream``)
and each event is written as it is found: compact JSON, indented only with ``--pretty``
(which builds the document whole).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Iterable, Mapping, Optional

from healthd.checks.plugin import CommandSpec
from healthd.commands import add_config_argument
from healthd.config.cache import load_checks
from healthd.model import Status, worst
from healthd_checks.xid.scan import scan_stream

if TYPE_CHECKING:
    from healthd_checks.xid.scan import ScanEntry


_FLUSH_CHARS = 1 << 16
_DESCRIBED = 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="saved kernel log, or - for stdin")
    parser.add_argument("--json", action="store_true", help="print a JSON document instead of a table")
    parser.add_argument("--pretty", action="store_true", help="with --json: indent the document for people")
    add_config_argument(
        parser, help="config whose [checks.xid] overrides apply (default: none; the node's own config is not read)"
    )


def _settings(args: argparse.Namespace) -> tuple[Optional[Mapping[str, Status]], bool]:
    """The ``[checks.xid]`` overrides and ``accept_userspace_kmsg`` of the config named by ``--config``, if any.

    An offline tool reads nothing of the node it runs on: no default config, and no state
    directory (so not the config cache there either), which makes a saved log (often another
    node's) grade the same on any machine, and leaves a node where healthd runs untouched.
    """
    if args.config is None:
        return None, False

    loaded, _ = load_checks(args.config, use_cache=False, store=False, load=False)
    settings = loaded.check_settings.get("xid")
    overrides: Optional[Mapping[str, Status]] = getattr(settings, "overrides", None)
    return overrides, getattr(settings, "accept_userspace_kmsg", False) is True


def _write_json(name: str, entries: Iterable[ScanEntry], accept_userspace: bool, pretty: bool) -> Status:
    """The document, streamed one event at a time (compact), or built whole and indented (``pretty``)."""
    status = Status.OK
    if pretty:
        events = []
        for entry in entries:
            status = worst((status, entry.entry.grade))
            events.append(entry.to_dict())
        document = {"file": name, "accept_userspace_kmsg": accept_userspace, "events": events}
        print(json.dumps({**document, "status": status.name, "exit_code": int(status)}, indent=2))
        return status
    compact = json.JSONEncoder(separators=(",", ":")).encode
    parts = [f'{{"file":{compact(name)},"accept_userspace_kmsg":{compact(accept_userspace)},"events":[']
    size = 0
    # Each event is ``to_dict`` encoded: its located part, then its described part, which a flood
    # repeats (the scanner gives a repeated message the same event object, and the catalog the
    # same entry) and which is encoded once per distinct pair of objects. They are kept with
    # their encoding, so their ids stay theirs; bounded: emptied when full.
    described: dict[tuple[int, int, Optional[str]], tuple[str, object, object]] = {}
    for number, entry in enumerate(entries):
        status = worst((status, entry.entry.grade))
        key = (id(entry.event), id(entry.entry), entry.uuid)
        known = described.get(key)
        if known is None:
            if len(described) >= _DESCRIBED:
                described.clear()
            known = described[key] = (compact(entry.described())[1:], entry.event, entry.entry)
        parts.append(f"{',' if number else ''}{compact(entry.located())[:-1]},{known[0]}")
        size += len(parts[-1])
        if size > _FLUSH_CHARS:  # a few large writes, whatever the stream's buffering
            sys.stdout.write("".join(parts))
            parts, size = [], 0
    parts.append(f'],"status":{compact(status.name)},"exit_code":{int(status)}}}\n')
    sys.stdout.write("".join(parts))
    return status


def _write_table(name: str, entries: Iterable[ScanEntry], accept_userspace: bool) -> Status:
    status = Status.OK
    count = 0
    for entry in entries:
        status = worst((status, entry.entry.grade))
        count += 1
        written = " (written by userspace)" if entry.origin.value == "userspace" else ""
        print(
            f"{name}:{entry.line}: {entry.entry.grade.name:<8} {entry.code:<10} {entry.gpu:<14} "
            f"{entry.entry.bucket.value}: {entry.event.text}{written}"
        )
    trusted = "; records written by userspace counted (accept_userspace_kmsg)" if accept_userspace else ""
    print(f"{name}: {count} event(s), {status.name}{trusted}")
    return status


def run(args: argparse.Namespace) -> int:
    overrides, accept_userspace = _settings(args)
    name = "<stdin>" if args.file == "-" else args.file
    try:
        handle = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8", errors="replace")  # noqa: SIM115
    except OSError as exc:
        print(f"healthd: cannot read {name}: {exc.strerror or exc}", file=sys.stderr)
        return int(Status.UNKNOWN)
    # Events are written as they are found, so a read error may come after some of them:
    # it is reported, and the exit code says the file could not be read whole.
    try:
        entries = scan_stream(handle, overrides, accept_userspace)
        if args.json:
            status = _write_json(name, entries, accept_userspace, args.pretty)
        else:
            status = _write_table(name, entries, accept_userspace)
    except OSError as exc:
        print(f"healthd: cannot read {name}: {exc.strerror or exc}", file=sys.stderr)
        return int(Status.UNKNOWN)
    finally:
        if handle is not sys.stdin:
            handle.close()
    return int(status)


COMMAND = CommandSpec(
    name="scan-log",
    help="list the Xid events in a saved kernel log; exit with the worst grade",
    add_arguments=add_arguments,
    run=run,
)
