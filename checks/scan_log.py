"""``healthd scan-log FILE``: list the Xid events in a saved kernel log; exit with the worst grade.

FILE may be a ``dmesg``, ``dmesg -r``, ``journalctl -k`` or /dev/kmsg dump, or ``-``
for stdin. Grades come from the same catalog as the ``xid`` check, with the
overrides of the config (``--config``, else the default config file when it exists,
as for every other command); its ``accept_userspace_kmsg`` switch applies too.
A command the xid plugin contributes (``healthd.commands`` entry point); the scanner
is imported only when it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Mapping, Optional

from healthd.cli import add_config_argument
from healthd.model import Status
from healthd.plugin import CommandSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="saved kernel log, or - for stdin")
    parser.add_argument("--json", action="store_true", help="print a JSON document instead of a table")
    add_config_argument(parser)


def _settings(args: argparse.Namespace) -> tuple[Optional[Mapping[str, Status]], bool]:
    """The ``[checks.xid]`` overrides and ``accept_userspace_kmsg`` of the config."""
    from healthd.config import load_config
    from healthd.engine import settings_models
    from healthd.plugin import discover

    settings = load_config(args.config, settings_models(discover())).check_settings.get("xid")
    overrides: Optional[Mapping[str, Status]] = getattr(settings, "overrides", None)
    return overrides, getattr(settings, "accept_userspace_kmsg", False) is True


def run(args: argparse.Namespace) -> int:
    from .xid_scan import scan, worst_grade

    overrides, accept_userspace = _settings(args)
    name = "<stdin>" if args.file == "-" else args.file
    try:
        if args.file == "-":
            entries = scan(sys.stdin, overrides, accept_userspace)
        else:
            with open(args.file, encoding="utf-8", errors="replace") as handle:
                entries = scan(handle, overrides, accept_userspace)
    except OSError as exc:
        print(f"healthd: cannot read {name}: {exc.strerror or exc}", file=sys.stderr)
        return int(Status.UNKNOWN)
    status: Status = worst_grade(entries)
    if args.json:
        document: dict[str, Any] = {
            "file": name,
            "status": status.name,
            "exit_code": int(status),
            "accept_userspace_kmsg": accept_userspace,
            "events": [entry.to_dict() for entry in entries],
        }
        print(json.dumps(document, indent=2))
    else:
        for entry in entries:
            written = " (written by userspace)" if entry.origin.value == "userspace" else ""
            print(
                f"{name}:{entry.line}: {entry.entry.grade.name:<8} {entry.code:<10} {entry.gpu:<14} "
                f"{entry.entry.bucket.value}: {entry.event.text}{written}"
            )
        trusted = "; records written by userspace counted (accept_userspace_kmsg)" if accept_userspace else ""
        print(f"{name}: {len(entries)} event(s), {status.name}{trusted}")
    return int(status)


COMMAND = CommandSpec(
    name="scan-log",
    help="list the Xid events in a saved kernel log; exit with the worst grade",
    add_arguments=add_arguments,
    run=run,
)
