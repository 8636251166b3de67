"""``healthd ack [CHECK-or-CODE ... | --all]``: acknowledge the findings of the last recorded pass.

Findings named by check or code are taken from the latest pass, a partial one
(``--only``, ``--active``, another config) included: the operator named them. Without
a name, ``ack`` lists what it would acknowledge and changes nothing (exit 64); ``--all``
acknowledges every finding of the node's last whole pass, the one ``healthd status``
shows, and never those of a partial pass nobody sees there. Either way it prints each
finding it acknowledged: status, check, code and subject.

An acknowledged finding is reported as OK (details ``acknowledged: true``) and no
longer drains the node, by the rules in ``healthd.plan.acks``: an ack names the
finding's key and event id, so a new event drains again, and it lapses once the
finding stops being reported. A node healthd drained for findings that are now all
acknowledged is resumed by the next pass.

``healthd ack --list`` shows what is acknowledged (finding, by whom, when) and ``healthd ack
--revoke CHECK-or-CODE-or-KEY ... | --all`` takes acknowledgements back: the next pass acts on
those findings again. Every ack and revocation records who gave it (``operator``).

``healthd ack --repaired SUBJECT`` ends a repair (docs/history.md, "Escalation"):
the hardware work on SUBJECT (a GPU's subject or UUID, an IB port, a mount) is done,
its repeat count starts again, and the next clean pass resumes the node.
"""

from __future__ import annotations

import argparse
import os
import pwd
import sys
import time
from typing import TYPE_CHECKING, Any

from healthd.commands import add_config_argument
from healthd.commands.failure import exit_for
from healthd.cycle.acks import STATE_NAME, AckStore
from healthd.cycle.engine import Engine
from healthd.cycle.pipeline import LAST_PASS, OTHER_PASS, POLICY_STATE
from healthd.cycle.render import iso_time
from healthd.exitcodes import EX_CANTCREAT, EX_NO_MATCH, EX_NOINPUT, EX_OK, EX_USAGE
from healthd.model import Status
from healthd.plan.acks import merge, refs_from_document, revoke
from healthd.plan.state import PolicyEvent, PolicyState, advance
from healthd.store.history import History
from healthd.store.lock import StateLock
from healthd.text import one_line

if TYPE_CHECKING:
    from pathlib import Path

    from healthd.cycle.acks import AckStore
    from healthd.cycle.engine import Engine
    from healthd.plan.acks import Ack, FindingRef


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "selectors",
        nargs="*",
        metavar="CHECK-or-CODE",
        help="check names or finding codes, of the latest pass (none: list the last whole pass's findings)",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="acknowledge every finding of the last whole pass (the one `healthd status` shows), CRITICAL included",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the acknowledged findings: by whom and when; change nothing"
    )
    parser.add_argument(
        "--revoke",
        action="store_true",
        help="take back the acknowledgements of the findings named (check, code, or key as --list shows it), or --all",
    )
    parser.add_argument(
        "--repaired",
        metavar="SUBJECT",
        help="the hardware work on SUBJECT is done: end the node's repair (see `healthd history`)",
    )
    add_config_argument(parser)


def _repaired(args: argparse.Namespace) -> int:
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
            # REPAIR_ENDED: the REPAIR drain is now healthd's to lift (rules._unrecorded_repair).
            policy.save(advance(state, PolicyEvent.REPAIR_ACKED).to_dict())
            with History.open(engine.config.paths.state_dir) as history:
                history.record_repaired(at=now, unit=repair.unit, subject=repair.subject, by=operator())
                problem = history.problem_finding("healthd")
    except ValueError as exc:  # a policy.json whose repair record cannot be advanced
        print(f"healthd: {exc}", file=sys.stderr)
        return EX_CANTCREAT
    except Exception as exc:
        return exit_for(exc, "nothing changed")
    if problem is not None:
        print(f"healthd: {problem.message}", file=sys.stderr)
    print(f"repaired {repair.subject} ({repair.code} x{repair.count}): the next clean pass puts the node back")
    return EX_OK


def _started(document: dict[str, Any]) -> str:
    """When a saved pass started, as text that sorts in time (``healthd.cycle.render``'s UTC form); "" when unknown."""
    started = document.get("started_at")
    return started if isinstance(started, str) else ""


def _finding_line(ref: FindingRef) -> str:
    """One finding for people: its status, check, code and subject (and event), as the saved pass had them.

    The subject comes from what a check observed (a mount path, a process name): one safe line.
    """
    check, code, subject = [*ref.key.split("/", 2), "", ""][:3]
    status = ref.status.name if ref.status is not None else "?"
    event = f" (event {one_line(ref.event, 64)})" if ref.event is not None else ""
    return f"{status:<8} {one_line(check, 64)} {one_line(code, 64)} {one_line(subject)}{event}"


def _worst_first(ref: FindingRef) -> tuple[int, str]:
    return (-(ref.status.rank if ref.status is not None else 0), ref.key)


def _list(refs: list[FindingRef], document: dict[str, Any], path: Path) -> None:
    """What ``ack --all`` would acknowledge, CRITICAL findings counted apart: the operator sees what it would end."""
    when = one_line(_started(document) or "an unknown time", 64)
    count = f"{len(refs)} finding{'s' if len(refs) != 1 else ''}"
    print(f"the last whole pass ({path}, started {when}) has {count} that --all would acknowledge:")
    for ref in refs:
        print(f"  {_finding_line(ref)}")
    critical = sum(1 for ref in refs if ref.status is Status.CRITICAL)
    if critical:
        print(f"{critical} of them CRITICAL: acknowledged, a CRITICAL finding no longer keeps the node out of service")


def _whole_pass(engine: Engine) -> tuple[dict[str, Any], Path]:
    """The node's last whole pass, the one ``healthd status`` shows, and its file: all ``ack --all`` acts on."""
    last = engine.state.file(LAST_PASS)
    return last.load(), last.path


def _latest_pass(engine: Engine) -> tuple[dict[str, Any], Path]:
    """The latest pass, a partial one (``--only``, ``--active``, another config) included, and its file.

    A finding named by its check or code is the operator's choice, seen in whichever pass they ran.
    """
    last, other = engine.state.file(LAST_PASS), engine.state.file(OTHER_PASS)
    whole, aside = last.load(), other.load()
    later = (_started(aside), _saved_ns(other.path)) > (_started(whole), _saved_ns(last.path))
    return (aside, other.path) if later else (whole, last.path)


def _saved_ns(path: Path) -> int:
    """When ``path`` was last written (0 when it is not there): of two passes started the same second, the later."""
    try:
        return path.lstat().st_mtime_ns
    except OSError:
        return 0


def operator() -> str:
    """Who gives an ack, for the ack store and the history: the real uid's name, and who ran sudo for it.

    sudo(8) sets ``SUDO_USER`` to the login name of the user who invoked it; operators
    acknowledge through sudo, so ``root`` alone would name no one. The variable is what
    the environment says, not proof: whoever runs this as root could set anything.
    """
    uid = os.getuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid without a passwd entry (a container's)
        name = f"uid {uid}"
    sudo = one_line(os.environ.get("SUDO_USER", ""), 64)
    return f"{sudo} (sudo as {name})" if sudo and sudo != name else name


def run(args: argparse.Namespace) -> int:
    given = {"--list": args.list, "--revoke": args.revoke, "--repaired": args.repaired is not None}
    ways = [name for name, on in given.items() if on]
    if len(ways) > 1:
        print(f"healthd: {' and '.join(ways)} do not go together", file=sys.stderr)
        return EX_USAGE
    if args.list and (args.selectors or args.all):
        print("healthd: --list takes neither CHECK-or-CODE arguments nor --all", file=sys.stderr)
        return EX_USAGE
    if args.list or args.revoke:
        return _listed(args)
    if args.repaired is not None:
        if args.selectors or args.all:
            print("healthd: --repaired takes neither CHECK-or-CODE arguments nor --all", file=sys.stderr)
            return EX_USAGE
        return _repaired(args)
    if args.all and args.selectors:
        print("healthd: name checks or codes, or give --all (every finding), not both", file=sys.stderr)
        return EX_USAGE

    engine = Engine.from_path(args.config)
    document, path = _latest_pass(engine) if args.selectors else _whole_pass(engine)
    for problem in engine.state.drain_problems():
        print(f"healthd: {problem}", file=sys.stderr)
    if not document:
        what = f"pass in {path}" if args.selectors else f"whole pass in {path} (one run with --only or --active is not)"
        print(f"healthd: no recorded {what}; run `healthd check --once` first", file=sys.stderr)
        return EX_NOINPUT
    # The worst first: a CRITICAL finding is the one an operator must not acknowledge unseen.
    refs = sorted(refs_from_document(document, args.selectors), key=_worst_first)
    if not refs:
        wanted = one_line(" ".join(args.selectors)) or "any check"
        which = "latest pass" if args.selectors else "last whole pass"
        print(f"healthd: the {which} has no unacknowledged finding for {wanted}", file=sys.stderr)
        return EX_NO_MATCH
    if not args.selectors and not args.all:
        _list(refs, document, path)
        print("healthd: nothing acknowledged: --all acknowledges these; or name checks or codes", file=sys.stderr)
        return EX_USAGE
    return _acknowledge(engine, refs)


def _unchanged(exc: Exception, engine: Engine, undone: str) -> int:
    """Why a change to the acks failed, said and turned into an exit code: the lock's own OSError, else the ladder."""
    if isinstance(exc, OSError):
        print(f"healthd: cannot lock {engine.config.paths.state_dir}: {exc.strerror or exc}; {undone}", file=sys.stderr)
        return EX_CANTCREAT
    return exit_for(exc, undone)


def _acknowledge(engine: Engine, refs: list[FindingRef]) -> int:
    """Save an ack for each of ``refs`` and record it in the history, under the state lock; say what was acked."""
    store = AckStore(engine.state.file(STATE_NAME))
    try:
        with StateLock(engine.config.paths.state_dir, engine.config.slurm.lock_timeout):
            now = time.time()
            acks, ack_problems = store.load()
            by = operator()
            store.save(merge(acks, refs, now, by))
            with History.open(engine.config.paths.state_dir) as history:
                history.record_ack(at=now, refs=refs, by=by)
                problems = [f.message for f in [history.problem_finding("healthd")] if f is not None]
    except Exception as exc:
        return _unchanged(exc, engine, "nothing acknowledged")
    for problem in [*ack_problems, *problems]:
        print(f"healthd: {problem}", file=sys.stderr)
    for ref in refs:
        print(f"acknowledged {_finding_line(ref)}")
    return EX_OK


def _listed(args: argparse.Namespace) -> int:
    """``--list`` and ``--revoke``: the acknowledgements themselves, whatever the last pass was."""
    if args.revoke and bool(args.selectors) == bool(args.all):
        print("healthd: --revoke takes the findings to revoke (check, code or key), or --all", file=sys.stderr)
        return EX_USAGE
    engine = Engine.from_path(args.config)
    store = AckStore(engine.state.file(STATE_NAME))
    if args.revoke:
        return _revoke(engine, store, args.selectors)
    acks, problems = store.load()
    for problem in problems:
        print(f"healthd: {problem}", file=sys.stderr)
    if not acks:
        print(f"no acknowledged finding in {store.state.path}")
        return EX_OK
    count = f"{len(acks)} acknowledged finding{'s' if len(acks) != 1 else ''}"
    # apply_acks (healthd.plan.acks): an ack ends with its finding, never by the clock.
    print(f"{count} in {store.state.path}; each lapses once its check runs and no longer reports it, none by time:")
    for ack in sorted(acks, key=lambda a: _worst_first(a.ref)):
        print(f"  {_given_line(ack)}")
    return EX_OK


def _given_line(ack: Ack) -> str:
    """One ack for people: its finding, who gave it and when, and the key ``--revoke`` takes."""
    key = one_line(ack.ref.key)
    return f"{_finding_line(ack.ref)} by {one_line(ack.by, 100)} at {iso_time(ack.at)} [key {key}]"


def _revoke(engine: Engine, store: AckStore, selectors: list[str]) -> int:
    """Take back the acks ``selectors`` name (every one with none), under the state lock; record who did."""
    revoked: tuple[Ack, ...] = ()
    problems: list[str] = []
    try:
        with StateLock(engine.config.paths.state_dir, engine.config.slurm.lock_timeout):
            acks, read = store.load()
            problems.extend(read)
            kept, revoked = revoke(acks, selectors)
            if revoked:
                store.save(kept)
                with History.open(engine.config.paths.state_dir) as history:
                    history.record_ack(at=time.time(), refs=[a.ref for a in revoked], by=operator(), revoked=True)
                    problems.extend(f.message for f in [history.problem_finding("healthd")] if f is not None)
    except Exception as exc:
        return _unchanged(exc, engine, "nothing revoked")
    for problem in problems:
        print(f"healthd: {problem}", file=sys.stderr)
    if not revoked:
        wanted = one_line(" ".join(selectors)) or "any finding"
        print(f"healthd: no acknowledgement in {store.state.path} matches {wanted}", file=sys.stderr)
        return EX_NO_MATCH
    for ack in revoked:
        print(f"revoked {_given_line(ack)}")
    print("the next pass acts on these findings again")
    return EX_OK
