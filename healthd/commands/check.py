"""``healthd check --once``: one pass, a table or JSON on stdout, the Nagios exit code."""

from __future__ import annotations

import argparse
import json
import sys

from healthd.cli import EX_USAGE, add_config_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--once", action="store_true", required=True, help="run one pass and exit (required)")
    parser.add_argument("--json", action="store_true", help="print the versioned JSON document")
    parser.add_argument("--only", metavar="NAME[,NAME...]", help="run only these checks")
    parser.add_argument("--dry-run", action="store_true", help="decide but change nothing in Slurm")
    add_config_argument(parser)


def run(args: argparse.Namespace) -> int:
    from healthd.engine import Engine
    from healthd.report import pass_to_dict, render_table

    engine = Engine.from_path(args.config)
    only = None
    if args.only:
        only = [name.strip() for name in args.only.split(",") if name.strip()]
        unknown = sorted(set(only) - {spec.name for spec in engine.specs})
        if unknown:
            known = ", ".join(spec.name for spec in engine.specs)
            print(f"healthd: --only names unknown check(s) {', '.join(unknown)} (known: {known})", file=sys.stderr)
            return EX_USAGE
    result = engine.run_pass(only)
    if args.json:
        print(json.dumps(pass_to_dict(result), indent=2))
    else:
        print(render_table(result))
    return int(result.status)
