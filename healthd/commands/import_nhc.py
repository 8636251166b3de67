"""``healthd import-nhc``: convert an LBNL NHC config into healthd's TOML (healthd.config.nhcimport)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from healthd.config.nhcimport import convert
from healthd.config.tomlwrite import comment, dumps
from healthd.exitcodes import EX_CANTCREAT, EX_DATAERR, EX_NOINPUT, EX_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("nhc_conf", type=Path, metavar="NHC_CONF", help="the nhc.conf to convert")
    parser.add_argument(
        "-o", "--output", type=Path, help="write the TOML here (not overwriting a file) instead of to standard output"
    )
    parser.add_argument(
        "--allow-partial",
        action="store_true",
        help=f"exit 0 even when some lines or options were not converted (otherwise {EX_DATAERR})",
    )


def run(args: argparse.Namespace) -> int:
    try:
        text = args.nhc_conf.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        print(f"healthd: cannot read {args.nhc_conf}: {exc.strerror or exc}", file=sys.stderr)
        return EX_NOINPUT
    imported = convert(text)
    # The file's name is the user's: a newline in it must not end the comment.
    header = comment(
        f"Converted by `healthd import-nhc` from {args.nhc_conf.name}: {imported.converted} check(s);\n"
        f"{imported.lost} line(s) or option(s) not converted, printed when it ran. Review before deploying."
    )
    toml = "\n".join(header) + "\n" + dumps(imported.document)
    for note in imported.notes:
        print(f"{args.nhc_conf}: {note}", file=sys.stderr)
    if args.output is None:
        sys.stdout.write(toml)
    else:
        try:
            with open(args.output, "x", encoding="utf-8") as out:
                out.write(toml)
        except OSError as exc:
            print(f"healthd: cannot create {args.output}: {exc.strerror or exc}", file=sys.stderr)
            return EX_CANTCREAT
    print(
        f"healthd: converted {imported.converted} check(s) from {args.nhc_conf};"
        f" {imported.lost} line(s) or option(s) not converted (listed above)",
        file=sys.stderr,
    )
    if imported.lost and not args.allow_partial:
        print(
            f"healthd: exit {EX_DATAERR}: NHC judges what the lines above say and this config does not;"
            " review them, or accept with --allow-partial",
            file=sys.stderr,
        )
        return EX_DATAERR
    return EX_OK
