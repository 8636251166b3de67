"""``healthd config validate``: load and validate the configuration, act on nothing."""

from __future__ import annotations

import argparse
import sys

from healthd.cli import add_config_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    validate = sub.add_parser("validate", help="exit 0 if the config is valid, 78 naming each bad key if not")
    add_config_argument(validate)
    validate.add_argument("--host", metavar="NODE", help="validate for this node: which [[hosts]] sections apply to it")


def run(args: argparse.Namespace) -> int:
    from healthd.config import load_config
    from healthd.engine import settings_models
    from healthd.metrics import refuse_untrusted_textfile
    from healthd.pipeline import one_shot_overrun
    from healthd.plugin import discover

    loaded = load_config(args.config, settings_models(discover()), args.host)
    # The textfile directory `healthd run` would refuse (exit 78) is refused here by the same
    # check, with the same message (healthd.cli reports UntrustedPath), before "valid".
    refuse_untrusted_textfile(loaded.config.metrics)
    sections = ", ".join(loaded.host_sections) or "none"
    print(f"{loaded.source}: valid; for node {loaded.host} the host sections that apply: {sections}")
    # Valid for the daemon, whose watchdog budget grows with it; the hook has a fixed 60 s.
    overrun = one_shot_overrun(loaded.config)
    if overrun is not None:
        print(f"{loaded.source}: warning: as the hook (HealthCheckProgram): {overrun}", file=sys.stderr)
    return 0
