"""``healthd config validate``, ``show`` and ``reference``: load and validate the configuration, act on nothing.

``reference`` prints every setting of healthd and of the installed checks (healthd.config.reference).

``show`` prints the config a node runs with (its ``[[hosts]]`` sections merged in, keys
moved from ``[node]`` in their new place, every default filled in) as TOML that
``config validate`` accepts and that reads back to the same settings on any node. Each
value carries a comment saying where it came from and, when it is another, its default
(healthd.config.provenance); ``--plain`` leaves the comments out, ``--annotate`` adds each
setting's meaning from the reference.
"""

from __future__ import annotations

import argparse
import enum
import sys
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Mapping, Optional

from healthd.checks.plugin import discover, settings_models
from healthd.commands import add_config_argument
from healthd.config.cache import load_checks
from healthd.config.hosts import host_sections
from healthd.config.load import BUILT_IN, ConfigError, decode_config, parse_toml, read_config, sha256_hex
from healthd.config.loaded import LoadedConfig
from healthd.config.provenance import Provenance, origins
from healthd.config.reference import CORE, reference
from healthd.config.sections import Config, ConfigTable
from healthd.config.tomlwrite import NO_NOTES, Notes, comment, dumps
from healthd.config.view import fields_of
from healthd.cycle.pipeline import one_shot_overrun
from healthd.model import Status
from healthd.service.metrics import refuse_untrusted_textfile

if TYPE_CHECKING:
    from pathlib import Path

    from healthd.config.loaded import LoadedConfig
    from healthd.config.tomlwrite import Notes


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
    comments = show.add_mutually_exclusive_group()
    comments.add_argument(
        "--plain", action="store_true", help="no comments: not where each value came from nor its default"
    )
    comments.add_argument(
        "--annotate", action="store_true", help="also each setting's meaning, from the config reference, above it"
    )
    sub.add_parser(
        "reference", help="print every setting (type, default, meaning, page) of healthd and the installed checks"
    )


def run(args: argparse.Namespace) -> int:
    if args.action == "reference":
        print(reference(settings_models(discover())), end="")
        return 0

    # Validated in full every time (it is what the command is for), and nothing written: it only reads.
    loaded, checks = load_checks(args.config, host=args.host, use_cache=False, store=False)
    if args.action == "show":
        models = settings_models(checks)
        notes = None if args.plain else show_notes(args.config, loaded, models, meanings=args.annotate)
        print(effective_toml(loaded, notes), end="")
        return 0

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


def effective_toml(loaded: LoadedConfig, notes: Optional[Notes] = None) -> str:
    """``loaded`` as TOML: every table of the config, then ``[checks.NAME]`` for every installed check.

    With ``notes`` (``show_notes``), each value carries its comment.
    """
    sections = ", ".join(loaded.host_sections) or "none"
    head = (
        f"The effective config of node {loaded.host}, from {loaded.source}: host sections applied ({sections}),"
        " defaults filled in.\nWritten by `healthd config show`; a setting left out is unset (it has no value)."
    )
    if notes is not None:
        head += (
            "\nEach value's comment says where it came from (default, set in FILE:LINE, from [[hosts]],"
            " moved from [node])\nand, when it is not the default, the default; `--plain` leaves them out."
        )
    return "\n".join(comment(head)) + "\n\n" + dumps(document(loaded), notes or NO_NOTES)


def document(loaded: LoadedConfig) -> dict[str, Any]:
    """The effective config as TOML's values: the config's tables, then ``checks`` with every check's settings."""
    config = loaded.config
    tables = {name: _plain(value) for name, value in config.values().items() if name != "checks"}
    tables["checks"] = {name: _plain(loaded.check_settings[name]) for name in sorted(loaded.check_settings)}
    return tables


def show_notes(path: Optional[Path], loaded: LoadedConfig, models: Mapping[str, Any], meanings: bool = False) -> Notes:
    """Where each value of ``loaded`` came from and its default; with ``meanings``, what each setting means.

    ``models`` are the settings models ``loaded`` was validated with. The file is read
    again for its text (the lines keys are on) and parsed as the load parsed it; the
    defaults are the effective config of no file at all.
    """
    from healthd.config.models import moved_settings

    source, raw = read_config(path)
    if loaded.sha256 and sha256_hex(raw) != loaded.sha256:  # replaced between the two reads: lines would lie
        raise ConfigError(source, ["changed while healthd config show read it; run it again"])
    text = decode_config(raw, source)
    parsed = parse_toml(text, source)
    sections, _ = host_sections(parsed)
    applied = [section for section in sections if section.label in loaded.host_sections]
    sources = Provenance(source, text, parsed, applied, moved_settings(models))
    shown = document(loaded)
    # Every setting has a default (a config of no file is valid): the tables' own, each check model's.
    defaults = LoadedConfig(BUILT_IN, Config(), {name: model() for name, model in models.items()})
    trailing = origins(shown, document(defaults), sources)
    return Notes(trailing, _meanings(shown, models) if meanings else {})


def _meanings(shown: dict[str, Any], models: Mapping[str, Any]) -> dict[tuple[str, ...], str]:
    """Each setting of the config's own tables and of the checks -> its meaning, as the reference gives it."""
    meanings: dict[tuple[str, ...], str] = {}
    for table, values in shown.items():
        for name in values:
            if table != "checks":
                meanings[(table, name)] = CORE[f"{table}.{name}"][0]
                continue
            for setting in values[name]:
                model = models.get(name)
                field = model.model_fields.get(setting) if model is not None else None
                if field is not None and field.description:
                    meanings[(table, name, setting)] = field.description
    return meanings


def _plain(value: Any) -> Any:
    """A validated setting as the TOML value that validates to it; None for an unset one, which is left out.

    A grade (``healthd.model.Status``) is written by name, as a config writes it; another
    enum by its value, a path as its text, a tuple or set as an array.
    """
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
