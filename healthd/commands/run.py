"""``healthd run``: the daemon (a pass at start, then one per interval) under systemd or by hand."""

from __future__ import annotations

import argparse
import logging

from healthd.commands import add_config_argument
from healthd.service.daemon import Daemon
from healthd.service.logs import setup_logging


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="decide but change nothing in Slurm")
    parser.add_argument("--debug", action="store_true", help="log at debug level")
    add_config_argument(parser)


def run(args: argparse.Namespace) -> int:
    setup_logging(logging.DEBUG if args.debug else logging.INFO)
    daemon = Daemon(args.config, dry_run=args.dry_run)
    daemon.install_signal_handlers()
    return daemon.run()
