"""One ladder from a failure of a command on the state directory to its message and exit code (healthd.exitcodes).

``healthd status``, ``healthd history`` and ``healthd ack`` meet the same failures (a config
that cannot be read, a state directory that fails the trust rule, a lock a pass holds, a
state file that cannot be written, a record that cannot be read), and each says them, and
exits for them, the same way through ``exit_for``.

Each rung names its exception class by module: a class whose module was never imported
has no instance, so the ladder imports nothing, and ``healthd status`` stays as cheap as
docs/configuration.md says (no lock module, no history module).
"""

from __future__ import annotations

import sys

from healthd.exitcodes import EX_CANTCREAT, EX_CONFIG, EX_NOINPUT, EX_TEMPFAIL, EX_UNKNOWN

_CONFIG = "configuration error, nothing was done:\n{exc}"
# (module, class, exit code, message): the first rung whose class the failure is an instance of.
# A subclass comes before its base (StatusConfigError before StatusError).
LADDER = (
    ("healthd.commands.status", "StatusConfigError", EX_CONFIG, _CONFIG),
    ("healthd.config.load", "ConfigError", EX_CONFIG, _CONFIG),
    ("healthd.store.trust", "UntrustedPath", EX_CONFIG, "{exc}; nothing was done"),
    ("healthd.store.lock", "LockTimeout", EX_TEMPFAIL, "{exc}; {undone}, try again"),
    ("healthd.store.state", "StateError", EX_CANTCREAT, "{exc}"),
    ("healthd.commands.status", "StatusError", EX_UNKNOWN, "UNKNOWN: {exc}"),
    ("healthd.store.historyschema", "HistoryError", EX_NOINPUT, "{exc}"),
)


def exit_for(exc: Exception, undone: str = "nothing was done") -> int:
    """Say why ``exc`` ended the command (on stderr) and return its exit code; raise it again when no rung is for it.

    Called from the command's ``except Exception`` clause: a failure no rung is for is a bug,
    which ``healthd.cli.main`` reports as one. ``undone`` says what a command that must be
    tried again left undone ("nothing acknowledged").
    """
    for module, name, code, message in LADDER:
        loaded = sys.modules.get(module)
        kind = getattr(loaded, name, None) if loaded is not None else None
        if isinstance(kind, type) and isinstance(exc, kind):
            print("healthd: " + message.format(exc=exc, undone=undone), file=sys.stderr)
            return code
    raise exc
