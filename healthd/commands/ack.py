"""``healthd ack [CHECK-or-CODE ...]``: acknowledge the findings of the last recorded pass.

An acknowledged finding is reported as OK (details ``acknowledged: true``) and no
longer drains the node, by the rules in ``healthd.acks``: an ack names the
finding's key and event id, so a new event drains again, and it lapses once the
finding stops being reported. A node healthd drained for findings that are now all
acknowledged is resumed by the next pass.

``healthd ack --repaired SUBJECT`` ends a repair (docs/history.md, "Escalation"):
the hardware work on SUBJECT (a GPU's subject or UUID, an IB port, a mount) is done,
its repeat count starts again, and the next clean pass resumes the node.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from typing import Any

from healthd.cli import add_config_argument
from healthd.exitcodes import EX_CANTCREAT, EX_NO_MATCH, EX_NOINPUT, EX_OK, EX_TEMPFAIL, EX_USAGE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "selectors", nargs="*", metavar="CHECK-or-CODE", help="check names or finding codes (default: all findings)"
    )
    parser.add_argument(
        "--repaired",
        metavar="SUBJECT",
        help="the hardware work on SUBJECT is done: end the node's repair (see `healthd history`)",
    )
    add_config_argument(parser)


def _repaired(args: argparse.Namespace) -> int:
    from healthd.engine import Engine
    from healthd.history import History
    from healthd.pipeline import POLICY_STATE
    from healthd.policy import PolicyState
    from healthd.state import StateError
    from healthd.statelock import LockTimeout, StateLock

    engine = Engine.from_path(args.config)
    subject = args.repaired
    try:
        with StateLock(engine.config.paths.state_dir, engine.config.slurm.lock_timeout):
            policy = engine.state.file(POLICY_STATE)
            state, damaged = PolicyState.read(policy.load())
            for bad in damaged:
                print(f"healthd: {policy.path}: {bad}", file=sys.stderr)
            repair = state.repair
            if repair is None or not repair.names(subject):
                now_in = f"it is in repair for {repair.subject} ({repair.unit})" if repair else "it is not in repair"
                print(f"healthd: nothing to do: {now_in}", file=sys.stderr)
                return EX_NO_MATCH
            now = time.time()
            # repair_ended: the REPAIR drain is now healthd's to lift (policy._unrecorded_repair).
            policy.save(replace(state, repair=None, repair_ended=True).to_dict())
            with History.open(engine.config.paths.state_dir) as history:
                history.record_repaired(at=now, unit=repair.unit, subject=repair.subject, by="cli")
                problem = history.problem_finding("healthd")
    except LockTimeout as exc:
        print(f"healthd: {exc}; nothing changed, try again", file=sys.stderr)
        return EX_TEMPFAIL
    except (StateError, ValueError) as exc:
        print(f"healthd: {exc}", file=sys.stderr)
        return EX_CANTCREAT
    if problem is not None:
        print(f"healthd: {problem.message}", file=sys.stderr)
    print(f"repaired {repair.subject} ({repair.code} x{repair.count}): the next clean pass puts the node back")
    return EX_OK


def _started(document: dict[str, Any]) -> str:
    """When a saved pass started, as text that sorts in time (``healthd.render``'s UTC form); "" when unknown."""
    started = document.get("started_at")
    return started if isinstance(started, str) else ""


def run(args: argparse.Namespace) -> int:
    if args.repaired is not None:
        if args.selectors:
            print("healthd: --repaired takes no CHECK-or-CODE arguments", file=sys.stderr)
            return EX_USAGE
        return _repaired(args)
    from healthd.acks import STATE_NAME, AckStore, merge, refs_from_document
    from healthd.engine import Engine
    from healthd.history import History
    from healthd.pipeline import LAST_PASS, OTHER_PASS
    from healthd.state import StateError
    from healthd.statelock import LockTimeout, StateLock

    engine = Engine.from_path(args.config)
    last = engine.state.file(LAST_PASS)
    # The latest pass, a partial one (--only) included: its findings are the node's as much as a whole pass's.
    document = max(last.load(), engine.state.file(OTHER_PASS).load(), key=_started)
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
            now = time.time()
            store.save(merge(store.load(), refs, now, "cli"))
            with History.open(engine.config.paths.state_dir) as history:
                history.record_ack(at=now, refs=refs, by="cli")
                problems = [f.message for f in [history.problem_finding("healthd")] if f is not None]
    except LockTimeout as exc:
        print(f"healthd: {exc}; nothing acknowledged, try again", file=sys.stderr)
        return EX_TEMPFAIL
    except StateError as exc:
        print(f"healthd: {exc}", file=sys.stderr)
        return EX_CANTCREAT
    except OSError as exc:
        print(f"healthd: cannot lock {engine.config.paths.state_dir}: {exc.strerror or exc}", file=sys.stderr)
        return EX_CANTCREAT
    for problem in [*store.problems, *problems]:
        print(f"healthd: {problem}", file=sys.stderr)
    for ref in refs:
        event = f" (event {ref.event})" if ref.event is not None else ""
        print(f"acknowledged {ref.key}{event}")
    return EX_OK
