"""The configuration reference, generated from the settings models: every key's type, default, meaning and page.

The config's own tables (``healthd.config.sections``) carry no prose, to stay cheap to
import, so their meanings live here, beside the one function that renders them;
``reference`` raises ``KeyError`` for a key with no meaning, so a new setting cannot go
undocumented. Each check's keys come from its settings model (pydantic ``Field``
descriptions) and point at the check's own page. docs/configuration.md holds the output
for the built-in checks (``tests/config/test_reference.py`` keeps it equal), and
``healthd config reference`` prints it for the checks installed on a node, third-party
ones included.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Mapping

from healthd.config.sections import Config, ConfigTable

# (meaning, page) of each key of the config's own tables, by "table.key".
CORE: dict[str, tuple[str, str]] = {
    "paths.sysfs": ("root of sysfs; a captured tree for tests and post-mortems", "host.md"),
    "paths.procfs": ("root of procfs; a captured tree for tests and post-mortems", "host.md"),
    "paths.kmsg": ("the kernel log device (or a saved log) the kernel-log checks read", "xid.md"),
    "paths.state_dir": ("the node's state: last pass, policy memory, history, config cache", "service.md"),
    "slurm.enabled": ("false: decide and report, never call Slurm", "slurm.md"),
    "slurm.bin_dir": ("where scontrol and sinfo are (absolute); unset: the standard places", "slurm.md"),
    "slurm.conf": ("slurm.conf to use (SLURM_CONF for every call); unset: Slurm's default", "slurm.md"),
    "slurm.node_name": ("this node's Slurm name; unset: SLURMD_NODENAME, then the short hostname", "slurm.md"),
    "slurm.timeout": ("seconds one scontrol or sinfo call may take", "slurm.md"),
    "slurm.budget": ("seconds all Slurm calls of one pass may take together", "slurm.md"),
    "slurm.reason_prefix": ("the start of every reason healthd writes; only such nodes are resumed", "slurm.md"),
    "slurm.reconcile_interval": (
        "read the node's state at least this often when quiet (0: every pass)",
        "slurm.md",
    ),
    "slurm.lock_timeout": ("seconds to wait for the state directory's lock", "slurm.md"),
    "slurm.act_splay": ("the most a pass with a fault waits, per node, before its first Slurm call", "scale.md"),
    "policy.dry_run": ("decide and report, change nothing in Slurm", "policy.md"),
    "policy.unknown_action": ('what UNKNOWN does: "report" (nothing) or "drain" after unknown_passes', "policy.md"),
    "policy.unknown_passes": ("UNKNOWN passes in a row before unknown_action = drain acts", "policy.md"),
    "policy.fail_passes": ("failing passes in a row before a WARNING or CRITICAL acts", "policy.md"),
    "policy.clean_passes": ("clean passes in a row before a node healthd took out is resumed", "policy.md"),
    "policy.max_out_fraction": ("the circuit breaker: the most of a partition healthd takes out at once", "policy.md"),
    "policy.breaker_settle": ("seconds between a drain and the breaker's confirming read", "policy.md"),
    "policy.breaker_window": ("seconds a take-out holds its place under the breaker", "policy.md"),
    "policy.breaker_shard_above": ("partitions larger than this are counted shard by shard", "scale.md"),
    "runner.pass_timeout": ("seconds a whole pass may take; each check also has its own timeout", "checks.md"),
    "daemon.interval": ("seconds between the daemon's passes", "service.md"),
    "daemon.splay": (
        "spread the first pass over the interval, so a restart wave is no burst",
        "scale.md",
    ),
    "active.at_epilog": ("run the active checks after a job, once no other job is on the node", "active.md"),
    "active.epilog_timeout": ("seconds the epilog gives the active checks", "active.md"),
    "active.when_drained": ("the daemon runs the active checks on an idle node it drained", "active.md"),
    "active.interval": ("seconds between active runs on a node, whoever starts them", "active.md"),
    "metrics.listen": ('serve /metrics on "HOST:PORT" (healthd\'s port is 4584)', "metrics.md"),
    "metrics.textfile": ("write the metrics to this node_exporter textfile", "metrics.md"),
    "metrics.textfile_owner": (
        "the account node_exporter runs as, trusted to own the textfile's folder",
        "metrics.md",
    ),
    "escalation.repeats": ("the same hardware fault this often on one unit sends the node to repair", "escalation.md"),
    "escalation.window_days": ("days within which repeats are counted", "escalation.md"),
    "escalation.overrides": ("repeats per finding code (0: never escalate it)", "escalation.md"),
    "remediation.on_repair": ("a program (absolute path) given the node's history as JSON on repair", "remediation.md"),
    "remediation.on_repair_timeout": ("seconds on_repair may run", "remediation.md"),
    "remediation.reboot": ("let Slurm reboot a node whose finding's remedy is a reboot", "remediation.md"),
    "remediation.reset": ("reset a GPU whose finding's remedy is a GPU reset", "remediation.md"),
    "remediation.nvidia_smi": ("the nvidia-smi that resets GPUs (absolute path)", "remediation.md"),
}


def type_name(annotation: Any) -> str:
    """A person's name for a settings type: ``number``, ``path``, ``"a" or "b"``, ``list of text``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return " or ".join(f'"{arg}"' for arg in args)
    if origin is typing.Union:
        named = [type_name(arg) for arg in args if arg is not type(None)]
        return " or ".join(named) + (", or unset" if type(None) in args else "")
    if origin in (list, tuple, set, frozenset):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return "table"
    simple = {bool: "true/false", int: "integer", float: "number", str: "text", Path: "path"}
    return simple.get(annotation, getattr(annotation, "__name__", str(annotation)))


def default_text(value: Any) -> str:
    """A default as TOML would spell it; unset for None."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, Path)):
        return f'`"{value}"`' if str(value) else '`""`'
    if isinstance(value, (list, tuple, dict, frozenset, set)) and not value:
        return "`[]`" if not isinstance(value, dict) else "`{}`"
    return f"`{value}`"


def _row(key: str, kind: str, default: str, meaning: str, page: str) -> str:
    cells = (f"`{key}`", kind, default, meaning, f"[{page}]({page})")
    return "| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in cells) + " |"


def _core_rows(name: str, table: type[ConfigTable]) -> list[str]:
    hints = typing.get_type_hints(table, include_extras=True)
    rows = []
    for key in table._names:
        meaning, page = CORE[f"{name}.{key}"]
        default = default_text(getattr(table, key))
        rows.append(_row(key, type_name(hints[key]), default, meaning, page))
    return rows


def _check_rows(model: Any, page: str) -> list[str]:
    rows = []
    for key, field in model.model_fields.items():
        default = "(required)" if field.is_required() else default_text(field.get_default(call_default_factory=True))
        meaning = field.description or f"see [{page}]({page})"
        rows.append(_row(key, type_name(field.annotation), default, meaning, page))
    return rows


HEADER = ("| key | type | default | meaning | page |", "|---|---|---|---|---|")


def reference(checks: Mapping[str, Any], page: str = "builtin-checks.md") -> str:
    """The reference as Markdown: the config's own tables, then ``[checks.NAME]`` for each model in ``checks``.

    ``page`` is where the checks' sections link: each built-in check's section there leads to
    its own page.
    """
    parts = []
    hints = typing.get_type_hints(Config, include_extras=True)
    for name in Config._names:
        table = hints[name]
        if isinstance(table, type) and issubclass(table, ConfigTable):
            parts += [f"### `[{name}]`", "", *HEADER, *_core_rows(name, table), ""]
    for name in sorted(checks):
        parts += [f"### `[checks.{name}]`", "", *HEADER, *_check_rows(checks[name], page), ""]
    return "\n".join(parts)
