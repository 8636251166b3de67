"""``healthd baseline OUT.toml``: write a config that expects what this known-good node has.

Each installed check that can (``CheckSpec.baseline``) reads the node and says which
settings would expect exactly that: the GPUs, the InfiniBand ports and their rate,
the mounts and their types, the services running. The result is a starting point
for an operator to review and deploy to nodes of the same kind; ``--match`` writes
it as a ``[[hosts]]`` section (docs/hosts.md) to paste into a cluster-wide file.
A check that fails while reading is named, and left out, never guessed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from healthd.checks.plugin import CheckSpec, NotApplicable
from healthd.commands import add_config_argument
from healthd.config.tomlwrite import dumps
from healthd.cycle.engine import Engine, node_name
from healthd.exitcodes import EX_CANTCREAT, EX_SOFTWARE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output", type=Path, metavar="OUT.toml", help="the config to write (never overwritten)")
    parser.add_argument("--match", metavar="PATTERN", help="write it as a [[hosts]] section for these nodes")
    add_config_argument(parser)


def _observe(engine: Any) -> tuple[dict[str, Any], list[str]]:
    """Each check's baseline settings, and what went wrong reading them."""
    tables: dict[str, Any] = {}
    problems: list[str] = []
    for prepared in engine.prepare():
        spec = prepared.spec
        if not isinstance(spec, CheckSpec) or spec.baseline is None or prepared.context is None:
            continue
        try:
            found = dict(spec.baseline(prepared.context))
        except NotApplicable as exc:
            tables[spec.name] = {"#": f"not applicable on this node: {exc}", "enabled": False}
            continue
        except Exception as exc:  # a broken reader must not cost the other checks their baseline
            problems.append(f"{spec.name}: {type(exc).__name__}: {exc}")
            continue
        if found:
            tables[spec.name] = found
    return tables, problems


def run(args: argparse.Namespace) -> int:
    engine = Engine.from_path(args.config)
    tables, problems = _observe(engine)
    for problem in problems:
        print(f"healthd: baseline of {problem}; left out", file=sys.stderr)
    node = node_name(engine.config)
    comment = f"baseline of {node}, a node known to be good: review before deploying to nodes of its kind"
    document: dict[str, Any]
    if args.match:
        document = {"hosts": [{"#": comment, "match": args.match, "checks": tables}]}
    else:
        document = {"checks": {"#": comment, **tables}}
    try:
        with open(args.output, "x", encoding="utf-8") as out:
            out.write(dumps(document))
    except OSError as exc:
        print(f"healthd: cannot create {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return EX_CANTCREAT
    print(f"healthd: wrote the baseline of {node} ({len(tables)} check(s)) to {args.output}", file=sys.stderr)
    return EX_SOFTWARE if problems and not tables else 0
