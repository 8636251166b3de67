"""``healthd ack [CHECK-or-CODE ...]``: acknowledge the findings of the last recorded pass.

An acknowledged finding is reported as OK (details ``acknowledged: true``) and no
longer drains the node, by the rules in ``healthd.acks``: an ack names the
finding's key and event id, so a new event drains again, and it lapses once the
finding stops being reported. A node healthd drained for findings that are now all
acknowledged is resumed by the next pass.
"""

from __future__ import annotations

import argparse
import sys
import time

from healthd.cli import add_config_argument
from healthd.exitcodes import EX_CANTCREAT, EX_NO_MATCH, EX_NOINPUT, EX_OK, EX_TEMPFAIL


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "selectors", nargs="*", metavar="CHECK-or-CODE", help="check names or finding codes (default: all findings)"
    )
    add_config_argument(parser)


def run(args: argparse.Namespace) -> int:
    from healthd.acks import STATE_NAME, AckStore, merge, refs_from_document
    from healthd.cycle import LAST_PASS
    from healthd.engine import Engine
    from healthd.state import StateError
    from healthd.statelock import LockTimeout, StateLock

    engine = Engine.from_path(args.config)
    last = engine.state.file(LAST_PASS)
    document = last.load()
    for problem in engine.state.drain_problems():
        print(f"healthd: {problem}", file=sys.stderr)
    if not document:
        print(f"healthd: no recorded pass in {last.path}; run `healthd check --once` first", file=sys.stderr)
        return EX_NOINPUT
    refs = refs_from_document(document, args.selectors)
    if not refs:
        wanted = " ".join(args.selectors) or "any check"
        print(f"healthd: the last pass has no unacknowledged finding for {wanted}", file=sys.stderr)
        return EX_NO_MATCH
    store = AckStore(engine.state.file(STATE_NAME))
    try:
        with StateLock(engine.config.paths.state_dir, engine.config.slurm.lock_timeout):
            store.save(merge(store.load(), refs, time.time(), "cli"))
    except LockTimeout as exc:
        print(f"healthd: {exc}; nothing acknowledged, try again", file=sys.stderr)
        return EX_TEMPFAIL
    except StateError as exc:
        print(f"healthd: {exc}", file=sys.stderr)
        return EX_CANTCREAT
    except OSError as exc:
        print(f"healthd: cannot lock {engine.config.paths.state_dir}: {exc.strerror or exc}", file=sys.stderr)
        return EX_CANTCREAT
    for problem in store.problems:
        print(f"healthd: {problem}", file=sys.stderr)
    for ref in refs:
        event = f" (event {ref.event})" if ref.event is not None else ""
        print(f"acknowledged {ref.key}{event}")
    return EX_OK
