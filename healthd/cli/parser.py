"""The ``healthd`` argument parser (argparse): the built-in commands' options and the plugins' commands.

Imported by ``healthd.cli.main`` only for a command line that needs parsing, and by ``healthd.cli.hook``
for a person's options.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn, Optional, Sequence

from healthd import __version__
from healthd.checks.plugin import discover_commands
from healthd.commands import COMMANDS, command_module
from healthd.exitcodes import EX_USAGE
from healthd.text import did_you_mean


class Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error, which Nagios would read as CRITICAL; use EX_USAGE.

    An unknown option gets a guess from the options of the parser that read it and of the
    command being run (``command_parser``), as a misspelt config key does.
    """

    command_parser: Optional[argparse.ArgumentParser] = None

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}{self._guess(message)}\n")

    def _guess(self, message: str) -> str:
        # argparse's own wording, the same from 3.9 to 3.13: "unrecognized arguments: A B".
        prefix = "unrecognized arguments: "
        if not message.startswith(prefix):
            return ""
        known = set(self._option_string_actions)
        if self.command_parser is not None:
            known |= set(self.command_parser._option_string_actions)
        guesses = [did_you_mean(arg.partition("=")[0], known) for arg in message[len(prefix) :].split()]
        return "".join(guess for guess in guesses if guess)


def build_parser(argv: Sequence[str] = ()) -> Parser:
    """The parser; only the command named in ``argv`` has its module imported for its options."""
    parser = Parser(prog="healthd", description="Node health checks for GPU clusters run by Slurm.")
    parser.add_argument("--version", action="version", version=f"healthd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    # A parser costs a millisecond or two: `healthd status` builds only its own. The full list
    # is built when it is shown (top-level --help) or when the command is not a known one.
    only = None
    if chosen in COMMANDS and not any(arg in ("-h", "--help") for arg in argv[: list(argv).index(chosen)]):
        only = chosen
    for name, (module, help_text) in COMMANDS.items():
        if only is not None and name != only:
            continue
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        command_parser.set_defaults(_module=module)
        if name == chosen:
            command_module(module).add_arguments(command_parser)
            parser.command_parser = command_parser
    if chosen not in COMMANDS:
        parser.command_parser = _add_plugin_commands(sub, chosen)
        if chosen is not None and chosen not in sub.choices:
            parser.error(f"unknown command {chosen!r}{did_you_mean(chosen, sub.choices)} (healthd --help lists them)")
    return parser


def _add_plugin_commands(sub: Any, chosen: Optional[str]) -> Optional[argparse.ArgumentParser]:
    """The commands plugins contribute, none replacing a built-in one; the parser of ``chosen`` if it is one."""
    found = None
    for command in discover_commands():
        if command.name in COMMANDS:
            continue
        command_parser = sub.add_parser(command.name, help=command.help, description=command.help)
        command_parser.set_defaults(_module=None, _run=command.run)
        if command.name == chosen:
            command.add_arguments(command_parser)
            found = command_parser
    return found
