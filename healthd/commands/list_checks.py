"""``healthd list-checks``: the installed checks, where they come from, whether they load, and their trust switches.

A trust switch is a check setting that makes the check believe input it does not
believe by default (the ``xid`` check's ``accept_userspace_kmsg``); a check marks
one with ``json_schema_extra={"trust_switch": True}`` on the field. Each is listed
with its value in the config (``--config``, else the default config file when it
exists), so a switch left on where it should not be is seen.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Optional

from healthd.checks.plugin import BrokenCheck, CheckSpec, discover
from healthd.commands import add_config_argument
from healthd.config.cache import load_checks
from healthd.config.load import ConfigError
from healthd.exitcodes import EX_OK, EX_UNKNOWN


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON list")
    add_config_argument(parser)


def _switches(args: argparse.Namespace, specs: list[Any]) -> Optional[dict[str, dict[str, Any]]]:
    """Each loaded check's trust switches and their values; None (and a note) when the config is unusable."""
    try:
        settings = load_checks(args.config, specs=specs, store=False)[0].check_settings
    except ConfigError as exc:
        # Listing the checks must still work with a broken config: that is when it is needed.
        print(f"healthd: trust switches not shown, the config is unusable:\n{exc}", file=sys.stderr)
        return None
    switches: dict[str, dict[str, Any]] = {}
    for spec in specs:
        if not isinstance(spec, CheckSpec):
            continue
        fields = spec.settings_model().model_fields
        marked = [name for name, info in fields.items() if (info.json_schema_extra or {}) == {"trust_switch": True}]
        switches[spec.name] = {name: getattr(settings[spec.name], name) for name in marked}
    return switches


def run(args: argparse.Namespace) -> int:
    specs = discover()
    switches = _switches(args, specs)
    rows: list[dict[str, Any]] = [
        {"name": s.name, "loaded": False, "description": s.error}
        if isinstance(s, BrokenCheck)
        else {"name": s.name, "loaded": True, "description": s.description}
        for s in specs
    ]
    for row in rows:
        row["trust_switches"] = None if switches is None else switches.get(row["name"], {})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        width = max((len(r["name"]) for r in rows), default=4)
        for row in rows:
            mark = "" if row["loaded"] else "BROKEN: "
            print(f"{row['name']:<{width}}  {mark}{row['description']}")
            for name, value in (row["trust_switches"] or {}).items():
                state = "ON: trusts what it does not by default" if value is True else json.dumps(value)
                print(f"{'':<{width}}  {name} = {state}")
    return EX_OK if all(r["loaded"] for r in rows) else EX_UNKNOWN
