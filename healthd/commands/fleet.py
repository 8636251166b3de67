"""``healthd fleet report`` and ``healthd fleet lemons``: fleet reliability from Slurm accounting (docs/fleet.md).

Both read the same inputs: ``--jobs FILE --events FILE`` (the parsable output of
the sacct and sacctmgr commands in docs/fleet.md, ``-`` for standard input) and
optionally ``--submit-lines FILE`` (sacct's JobID and SubmitLine, read twice), or
``--live``, which runs those commands with ``[slurm] bin_dir``. ``healthd.fleet.inputs``
reads either (streamed, never whole), and ``healthd.fleet.analyze.analyze`` analyses them.
``lemons --drain`` is a dry run unless ``--apply`` is given. Exit codes: 0; 64
for a bad option; 65 for an input that cannot be analysed (empty, a column
missing); 66 for a file that cannot be read; 69 when Slurm cannot be asked;
73 when the HTML file cannot be written; 78 for a config error.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from healthd.commands import add_config_argument
from healthd.commands.history import parse_duration, parse_since
from healthd.config.cache import load_checks
from healthd.exitcodes import EX_CANTCREAT, EX_DATAERR, EX_NOINPUT, EX_UNAVAILABLE, EX_USAGE
from healthd.fleet import backtest_render, inputs, render, sample
from healthd.fleet.analyze import FleetSettings, analyze
from healthd.fleet.backtest import BacktestSettings, backtest
from healthd.fleet.causes import DEFAULT_CAUSES, CauseRules
from healthd.fleet.html import page
from healthd.fleet.lemons import Floors
from healthd.fleet.progress import bar
from healthd.fleet.sacct import FleetInputError
from healthd.slurm.command import SlurmError
from healthd.store.atomicfile import replace_file
from healthd.text import one_line

if TYPE_CHECKING:
    from healthd.config.sections import Config

DEFAULT_LIVE_SINCE = "30d"
MAX_FLOOR = 1_000_000  # beyond any fleet's nodes, days, incidents or failures of one node
LIVE_TIMEOUT = 300.0


class _Usage(Exception):
    """A bad combination of options, said in words."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="fleet_command", metavar="SUBCOMMAND")
    sub.required = True
    report = sub.add_parser("report", help="failures attributed to causes, MTTF by job size, ETTR, lemon nodes")
    _inputs(report)
    form = report.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="print the versioned JSON document")
    form.add_argument("--html", type=Path, metavar="FILE", help="write one self-contained HTML page with the plots")
    backtest = sub.add_parser(
        "backtest", help="replay the window in steps: large-job failures avoided by draining the lemons, and the cost"
    )
    _inputs(backtest)
    shown = backtest.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print the versioned JSON document")
    shown.add_argument("--html", type=Path, metavar="FILE", help="write the report's HTML page with a backtest section")
    backtest.add_argument("--every", default="7d", metavar="DUR", help="time between steps (7d)")
    backtest.add_argument("--min-gpus", type=int, default=512, metavar="N", help="a large job's GPUs (512)")
    backtest.add_argument(
        "--drain-silent", action="store_true", help="drain silent lemons too, as lemons --drain --drain-silent"
    )
    sample = sub.add_parser(
        "sample", help="write a synthetic fleet's accounting to DIR, to try the other subcommands on"
    )
    sample.add_argument("dir", type=Path, metavar="DIR", help="where jobs.txt, events.txt and submit-lines.txt go")
    sample.add_argument("--nodes", type=int, default=200, metavar="N", help="nodes of 8 GPUs (200)")
    sample.add_argument("--days", type=float, default=30.0, metavar="DAYS", help="days of accounting (30)")
    sample.add_argument("--seed", type=int, default=1, metavar="N", help="another seed, another fleet (1)")
    lemons = sub.add_parser("lemons", help="list the flagged lemon nodes; --drain takes them out")
    _inputs(lemons)
    lemons.add_argument("--json", action="store_true", help="print the lemon nodes (and drain steps) as JSON")
    lemons.add_argument("--drain", action="store_true", help="drain the flagged nodes (a dry run without --apply)")
    lemons.add_argument("--apply", action="store_true", help="with --drain: really send the drains")
    lemons.add_argument(
        "--drain-silent",
        action="store_true",
        help="with --drain: drain silent lemons too (flagged on job failures alone, no incident evidence)",
    )


def _inputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=Path, metavar="FILE", help="sacct -P output (see README); - for stdin")
    parser.add_argument("--events", type=Path, metavar="FILE", help="sacctmgr -P show event output (see README)")
    parser.add_argument(
        "--submit-lines", type=Path, metavar="FILE", help="sacct -P -o JobID,SubmitLine output: the -x signal"
    )
    parser.add_argument(
        "--scripts", type=Path, metavar="FILE", help="sacct -B -j IDS output: the batch jobs' #SBATCH node options"
    )
    parser.add_argument("--live", action="store_true", help="run sacct and sacctmgr from [slurm] bin_dir")
    parser.add_argument(
        "--since", metavar="WHEN", help=f"runs that ended after: 30d, 12h or an ISO date (--live: {DEFAULT_LIVE_SINCE})"
    )
    parser.add_argument("--until", metavar="WHEN", help="runs that ended before: a duration back from now or a date")
    parser.add_argument(
        "--window-before", default="10m", metavar="DUR", help="cause may start this long before a run's end (10m)"
    )
    parser.add_argument("--window-after", default="5m", metavar="DUR", help="or this long after it (5m)")
    parser.add_argument(
        "--incident-gap", default="5m", metavar="DUR", help="events on a node this close are one incident (5m)"
    )
    parser.add_argument("--checkpoint-interval", default="30m", metavar="DUR", help="for expected ETTR (30m)")
    parser.add_argument("--restart-overhead", default="10m", metavar="DUR", help="for expected ETTR (10m)")
    parser.add_argument("--gpus-per-node", type=int, metavar="N", help="default: the most common among the runs")
    parser.add_argument("--alpha", type=float, default=0.05, help="false discovery rate of the lemon test (0.05)")
    # The floors' defaults are healthd.fleet.lemons.Floors': None here, so only a floor given replaces one.
    for option, kind, metavar, what in (
        ("--min-nodes", int, "N", "nodes observed in the fleet"),
        ("--min-days", float, "DAYS", "days in the window"),
        ("--min-incidents", int, "N", "incidents of a node for its incident test"),
        ("--min-failures", int, "N", "counted failed runs of a node for its failure test"),
    ):
        parser.add_argument(option, type=kind, metavar=metavar, help=f"lemon evidence floor: {what} (docs/fleet.md)")
    parser.add_argument(
        "--cause", action="append", default=[], metavar="PREFIX", help="another reason prefix that is a cause (repeat)"
    )
    parser.add_argument(
        "--engine",
        choices=("auto", "duckdb", "python"),
        default="auto",
        help="who counts the plain job runs: DuckDB where installed (the fleet extra) or Python (auto)",
    )
    parser.add_argument("--timeout", type=float, default=LIVE_TIMEOUT, help="--live: seconds for the whole read (300)")
    parser.add_argument(
        "--cache",
        type=Path,
        metavar="DIR",
        help="--live: keep what was read here, by day; read only the new day next time",
    )
    add_config_argument(parser)


def _seconds(text: str, option: str) -> float:
    value = parse_duration(text)
    if value is None:
        raise _Usage(f"{option} {text!r}: expected a duration such as 90s, 10m, 1h")
    return value


def _when(text: Optional[str], now: float, option: str) -> Optional[float]:
    if text is None:
        return None
    try:
        return parse_since(text, now)
    except ValueError as exc:
        raise _Usage(str(exc).replace("--since", option)) from None


def _floors(args: argparse.Namespace) -> Any:
    """The lemon test's floors: the defaults, with the ones given on the command line."""

    given = {
        name: value
        for name, value in (
            ("min_nodes", args.min_nodes),
            ("min_days", args.min_days),
            ("min_incidents", args.min_incidents),
            ("min_failures", args.min_failures),
        )
        if value is not None
    }
    for name, value in given.items():
        low = 0 if name == "min_days" else 1
        if not low <= value <= MAX_FLOOR:
            raise _Usage(f"--{name.replace('_', '-')} {value:g}: must be between {low} and {MAX_FLOOR}")
    return Floors(**given)


def _settings(args: argparse.Namespace, prefix: str, now: float) -> Any:
    if not 0 < args.alpha < 1:
        raise _Usage(f"--alpha {args.alpha:g}: must be between 0 and 1")
    if args.gpus_per_node is not None and args.gpus_per_node < 1:
        raise _Usage(f"--gpus-per-node {args.gpus_per_node}: must be at least 1")
    floors = _floors(args)
    since = _when(args.since if args.since is not None or not args.live else DEFAULT_LIVE_SINCE, now, "--since")
    until = _when(args.until, now, "--until")
    if since is not None and since >= (now if until is None else until):
        end = f"--until {args.until}" if args.until else "now"
        raise _Usage(f"--since {args.since or DEFAULT_LIVE_SINCE} is not before {end}: the window is empty")
    return FleetSettings(
        window_before=_seconds(args.window_before, "--window-before"),
        window_after=_seconds(args.window_after, "--window-after"),
        incident_gap=_seconds(args.incident_gap, "--incident-gap"),
        rules=CauseRules(prefix, (*DEFAULT_CAUSES, *args.cause)),
        checkpoint_interval=_seconds(args.checkpoint_interval, "--checkpoint-interval"),
        restart_overhead=_seconds(args.restart_overhead, "--restart-overhead"),
        gpus_per_node=args.gpus_per_node,
        alpha=args.alpha,
        since=since,
        until=until,
        floors=floors,
    )


def _load_config(args: argparse.Namespace) -> Config:
    """The config, validated in full; the state directory's cache is neither read nor written (a report only reads)."""

    return load_checks(args.config, use_cache=False, store=False)[0].config


def _analysis(args: argparse.Namespace) -> Any:
    """``analyze``, or for ``backtest`` the replay: one function of the inputs and the settings."""

    if args.fleet_command != "backtest":
        return analyze

    if not 1 <= args.min_gpus <= MAX_FLOOR:
        raise _Usage(f"--min-gpus {args.min_gpus}: must be between 1 and {MAX_FLOOR}")
    every = _seconds(args.every, "--every")
    if every < 3600:
        raise _Usage(f"--every {args.every}: at least an hour")
    options = BacktestSettings(every, args.min_gpus, args.drain_silent)

    def replay(
        jobs: Any, events: Any, settings: Any, sources: Any, submit: Any, job_names: Any = None, scripts: Any = None
    ) -> Any:
        return backtest(jobs, events, settings, options, sources, submit, job_names, scripts)

    return replay


def _report(args: argparse.Namespace, config: Any, now: float) -> Any:
    """Analyse the inputs the options name; raises _Usage, FleetInputError, OSError, SlurmError."""
    analyze = _analysis(args)
    prefix = config.slurm.reason_prefix if config is not None else "healthd:"
    settings = _settings(args, prefix, now)
    with _inputs_of(args, config, settings, now) as found:
        jobs = _shown(found.jobs, found.size, found.sources.jobs, found.weight)
        return analyze(
            jobs, found.events, settings, found.sources, found.submit, job_names=found.names, scripts=found.scripts
        )


def _inputs_of(args: argparse.Namespace, config: Any, settings: Any, now: float) -> Any:
    """``fleet.inputs.read_live`` or ``fleet.inputs.files`` of the options, checked together."""

    if args.live:
        if args.jobs is not None or args.events is not None or args.scripts is not None:
            raise _Usage("--live reads Slurm itself: give either --live or --jobs and --events")
        how = inputs.Live(config.slurm.bin_dir, config.slurm.conf, args.timeout, args.cache, args.engine)
        return inputs.read_live(how, settings, now)
    if args.cache is not None:
        raise _Usage("--cache keeps what --live read: it goes with --live")
    if args.jobs is None or args.events is None:
        raise _Usage("give --jobs FILE and --events FILE (the sacct and sacctmgr output), or --live")
    submit = args.submit_lines
    if submit is not None and str(submit) == "-":
        raise _Usage("--submit-lines is read twice: give a file, not -")
    if args.scripts is not None and submit is None:
        raise _Usage("--scripts goes with --submit-lines: a job's script is believed with its submit line")
    return inputs.files(inputs.InputFiles(args.jobs, args.events, submit, args.scripts, args.engine))


def _shown(lines: Any, total: float, label: str, weight: Any) -> Any:
    """``lines`` with a progress bar on standard error when it is a terminal (``progress.bar``)."""

    return bar(lines, total, f"reading {label}", sys.stderr, weight)


def run(args: argparse.Namespace) -> int:
    if args.fleet_command == "sample":
        return _sample(args)
    now = time.time()
    try:
        config = _load_config(args) if (args.live or args.config or getattr(args, "drain", False)) else None
        if getattr(args, "apply", False) and not args.drain:
            raise _Usage("--apply only goes with --drain")
        if getattr(args, "drain_silent", False) and not getattr(args, "drain", True):
            raise _Usage("--drain-silent only goes with --drain")
        report = _report(args, config, now)
    except (_Usage, FleetInputError, SlurmError) as exc:
        print(f"healthd fleet: {exc}", file=sys.stderr)
        # sysexits.h: a bad command line, bad input data, or Slurm not answering.
        if isinstance(exc, SlurmError):
            return EX_UNAVAILABLE
        return EX_USAGE if isinstance(exc, _Usage) else EX_DATAERR
    except OSError as exc:
        print(f"healthd fleet: cannot read {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return EX_NOINPUT
    if args.fleet_command == "report":
        return _print_report(args, report)
    if args.fleet_command == "backtest":
        return _print_backtest(args, report)
    return _lemons(args, report, config, now)


def _write_html(path: Path, report: Any, extra: str = "") -> bool:
    try:
        replace_file(path, page(report, extra).encode("utf-8"), 0o644)
    except OSError as exc:
        print(f"healthd fleet: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return False
    return True


def _print_report(args: argparse.Namespace, report: Any) -> int:
    if args.json:
        print(json.dumps(render.document(report), indent=2, sort_keys=True))
        return 0
    if args.html is not None and not _write_html(args.html, report):
        return EX_CANTCREAT
    print(render.table(report), end="")
    return 0


def _print_backtest(args: argparse.Namespace, replay: Any) -> int:
    if args.json:
        print(json.dumps(backtest_render.document(replay), indent=2, sort_keys=True))
        return 0
    if args.html is not None and not _write_html(args.html, replay.report, backtest_render.html_section(replay)):
        return EX_CANTCREAT
    print(backtest_render.text(replay), end="")
    return 0


def _lemons(args: argparse.Namespace, report: Any, config: Any, now: float) -> int:
    lemons = report.lemons
    steps: list[Any] = []
    if args.drain:
        from healthd.fleet.drain import drain_lemons

        try:
            steps = drain_lemons(config, lemons, now, apply=args.apply, silent=args.drain_silent)
        except SlurmError as exc:
            print(f"healthd fleet: {exc}", file=sys.stderr)
            return EX_UNAVAILABLE
    if args.json:
        full = render.document(report)
        out = {
            "lemon_nodes": full["lemon_nodes"],
            "lemon_test": full["lemon_test"],
            "drain": [
                {"node": s.node, "reason": s.reason, "drain": s.drain, "why": s.why, "applied": bool(args.apply)}
                for s in steps
            ],
        }
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    if not lemons:
        print(
            f"no lemon nodes flagged among {len(report.verdicts)} nodes "
            f"(false discovery rate {report.settings.alpha:g})"
        )
    for verdict in lemons:
        s = verdict.signals
        print(
            f"{one_line(verdict.node, 40)}  score {verdict.score:.1f}  incidents {s.out_count}  "
            f"single-node failures {s.single_node_failures}/{s.single_node_runs} "
            f"(expected {s.expected_single_node_failures:.1f})  failures caused {s.single_node_failures_caused}+"
            f"{s.multi_node_failures_caused}  xids {','.join(s.xids) or '-'}"
        )
    for line in render.lemon_lines(report):
        print(line.strip())
    for step in steps:
        verb = ("drained" if args.apply else "would drain") if step.drain else "not drained"
        print(f"{verb} {one_line(step.node, 40)}: {one_line(step.why, 200)} [{step.reason}]")
    return 0


SAMPLE_FILES = ("jobs.txt", "events.txt", "submit-lines.txt")


def _sample(args: argparse.Namespace) -> int:
    """``fleet sample DIR``: a planted fleet (``healthd.fleet.sample``) as the -P files, and the commands to try."""

    if not 3 <= args.nodes <= 10_000 or not 1 <= args.days <= 366:
        print("healthd fleet: --nodes is 3 to 10000 and --days 1 to 366", file=sys.stderr)
        return EX_USAGE
    # As many runs as a busy fleet starts: about three a node a day.
    spec = sample.FleetSpec(nodes=args.nodes, days=args.days, runs=int(3 * args.nodes * args.days), seed=args.seed)
    fleet = sample.plant(spec)
    try:
        args.dir.mkdir(parents=True, exist_ok=True)
        for name, lines in zip(
            SAMPLE_FILES, (sample.job_lines(fleet), sample.event_lines(fleet), sample.submit_lines(fleet))
        ):
            (args.dir / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    except OSError as exc:
        print(f"healthd fleet: cannot write {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return EX_CANTCREAT
    inputs = " ".join(
        f"--{flag} {shlex.quote(str(args.dir / name))}"
        for flag, name in zip(("jobs", "events", "submit-lines"), SAMPLE_FILES)
    )
    print(f"wrote a synthetic fleet of {spec.nodes} nodes over {spec.days:g} days to {args.dir}")
    print(
        f"planted (what the report should find): incident lemons {', '.join(fleet.incident_lemons)}; "
        f"silent lemons {', '.join(fleet.silent_lemons)}; buggy users' nodes {', '.join(fleet.buggy_nodes)}"
    )
    print("try:")
    print(f"  healthd fleet report {inputs} --html {shlex.quote(str(args.dir / 'report.html'))}")
    print(f"  healthd fleet lemons {inputs}")
    print(f"  healthd fleet backtest {inputs} --min-gpus 64")
    return 0
