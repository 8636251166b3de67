"""``healthd list-checks``: the installed checks, where they come from, and whether they load."""

from __future__ import annotations

import argparse
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON list")


def run(args: argparse.Namespace) -> int:
    import json

    from healthd.plugin import BrokenCheck, discover

    specs = discover()
    rows: list[dict[str, Any]] = [
        {"name": s.name, "loaded": False, "description": s.error}
        if isinstance(s, BrokenCheck)
        else {"name": s.name, "loaded": True, "description": s.description}
        for s in specs
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        width = max((len(r["name"]) for r in rows), default=4)
        for row in rows:
            mark = "" if row["loaded"] else "BROKEN: "
            print(f"{row['name']:<{width}}  {mark}{row['description']}")
    return 0 if all(r["loaded"] for r in rows) else 3
