"""``healthd check --once``: one pass (checks, plan, Slurm action), a table or JSON, the Nagios exit code.

This is also the command slurmd runs as HealthCheckProgram: it needs no
environment beyond ``SLURMD_NODENAME`` and finishes within ``[runner].pass_timeout``
plus ``[slurm].act_splay`` plus ``[slurm].lock_timeout`` plus ``[slurm].budget`` (all
scontrol calls together), 55 s with the defaults, inside slurmd's 60 s kill
(docs/slurm.md). A GPU reset or ``[remediation] on_repair`` gets what is left of
those 55 s (``healthd.cycle.pipeline.ONE_SHOT_SECONDS``), and a SIGTERM (slurmd's kill)
takes the programs the pass runs with it (``healthd.checks.bounded.end_with_children``).

``--active`` runs the active checks instead, and only on a node that one ``sinfo``
read shows idle and drained (healthd.plan.active, healthd.cycle.activerun, docs/active.md);
never from the hook.

``--expect`` (one expectation tried, as NHC's ``-e``), ``--timeout`` and ``--debug`` build the
pass's engine in ``healthd.cycle.checkmodes`` (docs/commands.md, "Trying one expectation").
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import TYPE_CHECKING

from healthd.commands import add_config_argument
from healthd.exitcodes import EX_DATAERR, EX_OK, EX_TEMPFAIL, EX_USAGE

if TYPE_CHECKING:
    import argparse  # a command line spelled out is read without it (``healthd.cli.main.plain_command``)
    from pathlib import Path
    from typing import Optional, Union

    from healthd.cycle.engine import Engine


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # One pass is what `check` does; `--once` stays accepted because NHC-style wrappers,
    # cron lines and the docs of earlier releases spell it out.
    parser.add_argument("--once", action="store_true", help="run one pass and exit (the default; may be spelled out)")
    parser.add_argument("--json", action="store_true", help="print the versioned JSON document")
    parser.add_argument("--only", metavar="NAME[,NAME...]", help="run only these checks")
    parser.add_argument("--dry-run", action="store_true", help="decide but change nothing in Slurm")
    parser.add_argument(
        "--active",
        action="store_true",
        help="run the active checks (GPU diagnostics) alone; refused unless Slurm reports the node idle and drained",
    )
    parser.add_argument(
        "--force", action="store_true", help="with --active: run without asking Slurm (the operator vouches for it)"
    )
    parser.add_argument(
        "--expect",
        action="append",
        metavar="LINE",
        help="try one expectation, an NHC check ('check_fs_mount_rw -f /scratch') or NAME: TOML"
        " ('mounts: expect = [{path = \"/scratch\"}]'), laid on the config; runs only the checks named,"
        " as a dry run (repeatable)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing when all is well (exit 0)")
    parser.add_argument("--debug", action="store_true", help="log what each check read, at debug level")
    parser.add_argument("--timeout", type=_seconds, metavar="SECONDS", help="[runner].pass_timeout for this pass")
    add_config_argument(parser)


def _seconds(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def run(args: argparse.Namespace) -> int:
    from healthd.checks.bounded import end_with_children

    started = time.monotonic()
    with end_with_children():
        return _run(args, started)


def _run(args: argparse.Namespace, begun: float) -> int:
    from healthd.cycle.pipeline import ONE_SHOT_SECONDS, PassRequest, run_pass
    from healthd.cycle.render import action_lines, render_table

    _log_to_stderr(args.debug)
    tried = _trial(args)
    if isinstance(tried, int):
        return tried
    engine, expected, node_state = tried
    only = None if expected is None else list(expected)
    if args.only:
        only = [name.strip() for name in args.only.split(",") if name.strip()] + (only or [])
        unknown = sorted(set(only) - {spec.name for spec in engine.specs})
        if unknown:
            from healthd.text import did_you_mean, one_line

            names = [spec.name for spec in engine.specs]
            for name in unknown:
                guess = did_you_mean(name, names)
                print(f"healthd: --only: {one_line(name, 64)}: unknown check{guess}", file=sys.stderr)
            print(f"healthd: known checks: {', '.join(names)}", file=sys.stderr)
            return EX_USAGE
    if args.force and not args.active:
        print("healthd: --force goes with --active", file=sys.stderr)
        return EX_USAGE
    active = sorted(set(expected or ()) & engine.active_names())
    if active and not args.active:
        print(f"healthd: --expect: {', '.join(active)}: an active check, run with --active alone", file=sys.stderr)
        return EX_USAGE
    # A pass judged by expectations laid on the config must not change what Slurm holds (commands.md).
    dry_run = args.dry_run or expected is not None
    if args.active:
        from healthd.cycle.activerun import NotStarted, start
        from healthd.plan.active import refusal

        rule = None if args.force else refusal
        started = start(engine, rule, "check --once --active", dry_run=dry_run, only=only, node_state=node_state)
        if isinstance(started, NotStarted):
            print(f"healthd: not running the active checks: {started.why}", file=sys.stderr)
            return EX_TEMPFAIL
        outcome = started
    else:
        from healthd.cycle.daemonpass import running_config

        # A daemon running with another config is the node's: this pass is saved aside
        # (healthd.cycle.pipeline.run_pass).
        daemon_config = running_config(engine.config.paths.state_dir)
        aside = daemon_config is not None and daemon_config != engine.loaded.sha256
        only_names = None if only is None else tuple(only)
        request = PassRequest(only_names, dry_run=dry_run, aside=aside, deadline=begun + ONE_SHOT_SECONDS)
        outcome = run_pass(engine, request)
    if args.quiet and outcome.exit_code == EX_OK:
        return EX_OK
    if args.json:
        print(json.dumps(outcome.document, indent=2))
    else:
        print(render_table(outcome.result))
        print("\n".join(action_lines(outcome.document, time.time(), one_shot=True)))
    return outcome.exit_code


def _log_to_stderr(debug: bool) -> None:
    level = logging.DEBUG if debug else logging.WARNING
    if not logging.getLogger().handlers:
        logging.basicConfig(level=level, stream=sys.stderr, format="healthd: %(levelname)s: %(message)s")
    elif debug:
        logging.getLogger().setLevel(level)


def _trial(args: argparse.Namespace) -> Union[int, tuple[Engine, Optional[tuple[str, ...]], Optional[Path]]]:
    """The engine, the checks ``--expect`` names and the node's state directory it copied (None, None without it).

    Or the exit code of a line refused.
    """
    if not (args.expect or args.timeout is not None or args.debug):
        from healthd.cycle.engine import Engine

        return Engine.from_path(args.config), None, None
    from healthd.config.expectations import NotConverted
    from healthd.cycle.checkmodes import trial
    from healthd.text import one_line

    try:
        tried = trial(args.config, args.expect or (), args.timeout, args.debug)
    except NotConverted as exc:
        for reason in exc.reasons:
            print(f"healthd: {exc.label}: not converted: {one_line(reason, 400)}", file=sys.stderr)
        return EX_DATAERR
    if not args.quiet:
        for note in tried.notes:
            print(f"healthd: note: {one_line(note, 400)}", file=sys.stderr)
    return tried.engine, tried.names, tried.node_state
