"""``healthd config validate``, ``show`` and ``reference``: load and validate the configuration, act on nothing.

``reference`` prints every setting of healthd and of the installed checks (healthd.config.reference).

``show`` prints the config a node runs with (its ``[[hosts]]`` sections merged in, keys
moved from ``[node]`` in their new place, every default filled in) as TOML that
``config validate`` accepts and that reads back to the same settings on any node.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from healthd.commands import add_config_argument
from healthd.config.sections import ConfigTable

if TYPE_CHECKING:
    from healthd.config.loaded import LoadedConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    validate = sub.add_parser("validate", help="exit 0 if the config is valid, 78 naming each bad key if not")
    add_config_argument(validate)
    validate.add_argument("--host", metavar="NODE", help="validate for this node: which [[hosts]] sections apply to it")
    show = sub.add_parser(
        "show", help="print the effective config of a node as TOML: host sections applied, defaults filled in"
    )
    add_config_argument(show)
    show.add_argument("--host", metavar="NODE", help="the node whose [[hosts]] sections apply (default: this node)")
    sub.add_parser(
        "reference", help="print every setting (type, default, meaning, page) of healthd and the installed checks"
    )


def run(args: argparse.Namespace) -> int:
    if args.action == "reference":
        from healthd.checks.plugin import discover, settings_models
        from healthd.config.reference import reference

        print(reference(settings_models(discover())), end="")
        return 0
    from healthd.config.cache import load_checks

    # Validated in full every time (it is what the command is for), and nothing written: it only reads.
    loaded, _ = load_checks(args.config, host=args.host, use_cache=False, store=False)
    if args.action == "show":
        print(effective_toml(loaded), end="")
        return 0
    from healthd.cycle.pipeline import one_shot_overrun
    from healthd.service.metrics import refuse_untrusted_textfile

    # The textfile directory `healthd run` would refuse (exit 78) is refused here by the same
    # check, with the same message (healthd.cli.main reports UntrustedPath), before "valid".
    refuse_untrusted_textfile(loaded.config.metrics)
    sections = ", ".join(loaded.host_sections) or "none"
    print(f"{loaded.source}: valid; for node {loaded.host} the host sections that apply: {sections}")
    # Valid for the daemon, whose watchdog budget grows with it; the hook has a fixed 60 s.
    overrun = one_shot_overrun(loaded.config)
    if overrun is not None:
        print(f"{loaded.source}: warning: as the hook (HealthCheckProgram): {overrun}", file=sys.stderr)
    return 0


def effective_toml(loaded: LoadedConfig) -> str:
    """``loaded`` as TOML: every table of the config, then ``[checks.NAME]`` for every installed check."""
    from healthd.config.tomlwrite import comment, dumps

    config = loaded.config
    document = {name: _plain(value) for name, value in config.values().items() if name != "checks"}
    document["checks"] = {name: _plain(loaded.check_settings[name]) for name in sorted(loaded.check_settings)}
    sections = ", ".join(loaded.host_sections) or "none"
    head = (
        f"The effective config of node {loaded.host}, from {loaded.source}: host sections applied ({sections}),"
        " defaults filled in.\nWritten by `healthd config show`; a setting left out is unset (it has no value)."
    )
    return "\n".join(comment(head)) + "\n\n" + dumps(document)


def _plain(value: Any) -> Any:
    """A validated setting as the TOML value that validates to it; None for an unset one, which is left out.

    A grade (``healthd.model.Status``) is written by name, as a config writes it; another
    enum by its value, a path as its text, a tuple or set as an array.
    """
    import enum
    from pathlib import PurePath

    from healthd.config.view import fields_of
    from healthd.model import Status

    if isinstance(value, ConfigTable):  # one of the config's own tables (healthd.config.sections)
        return _table(value.values())
    fields = fields_of(value)  # a check's settings: its model's values, or their view
    if fields is not None:
        return _table(fields)
    if isinstance(value, Status):
        return value.name
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return [_plain(item) for item in sorted(value)]
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return _table(value)
    return value


def _table(values: dict[Any, Any]) -> dict[str, Any]:
    plain = {str(key): _plain(item) for key, item in values.items()}
    return {key: item for key, item in plain.items() if item is not None}
