"""The built-in subcommands, one module each, imported only when run (``healthd.cli.main``)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

# ``typing`` is not imported at run time: ``healthd status`` would pay for it (bench/README.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

# name -> (module under healthd.commands, one-line help). Order is the order of --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("check", "run the checks once, report, and act through Slurm"),
    "ack": ("ack", "acknowledge the findings of the last pass so they no longer drain the node"),
    "list-checks": ("list_checks", "list the installed checks"),
    "config": ("config_cmd", "validate the configuration, or show a node's effective config"),
    "run": ("run", "run as a daemon: a pass at start, then one every [daemon].interval"),
    "status": ("status", "show the daemon's last recorded pass without running checks"),
    "history": ("history", "show the node's history: findings raised and cleared, actions, acks, boots"),
    "baseline": ("baseline", "write a config that expects what this known-good node has (GPUs, ports, mounts, ...)"),
    "import-nhc": ("import_nhc", "convert an LBNL NHC config (nhc.conf) into healthd's TOML, naming what it cannot"),
    "fleet": ("fleet", "fleet reliability from Slurm accounting: failure causes, MTTF, ETTR, lemon nodes"),
}


def command_module(name: str) -> ModuleType:
    # __import__ with a fromlist returns the submodule; importlib would cost `healthd status` an import.
    return __import__(f"healthd.commands.{name}", fromlist=["run"])


def add_config_argument(
    parser: argparse.ArgumentParser, help: str = "config file (default /etc/healthd/healthd.toml)"
) -> None:
    """The ``-c``/``--config PATH`` option every command that reads the config takes."""
    parser.add_argument("-c", "--config", type=Path, default=None, metavar="PATH", help=help)
