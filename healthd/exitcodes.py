"""Every exit code a healthd command returns, in one place.

A command that reports what a pass found exits with the pass's grade, whose
``healthd.model.Status`` value is its Nagios plugin code (0 OK, 1 WARNING,
2 CRITICAL, 3 UNKNOWN): Nagios, LBNL NHC and slurmd's log read it that way.
Everything else exits with a sysexits.h code (64 and up), which cannot be
mistaken for a grade.
"""

from __future__ import annotations

# Each grade's name and Nagios code, as ``healthd.model.Status`` has them (a test holds them
# equal): the cheap commands (``status``, the hook from the daemon's pass) read saved
# documents without importing the model and its dataclasses.
STATUS_CODES = {"OK": 0, "WARNING": 1, "CRITICAL": 2, "UNKNOWN": 3}

EX_OK = 0
# Nagios UNKNOWN: healthd itself failed or has no fresh record, so nothing was observed.
EX_UNKNOWN = STATUS_CODES["UNKNOWN"]
# As grep(1): the command ran, but nothing matched what was asked for (``healthd ack``).
EX_NO_MATCH = 1

# sysexits.h
EX_USAGE = 64  # the command line was wrong (argparse's own 2 would read as CRITICAL)
EX_DATAERR = 65  # the input was read but not all of it could be used (a fleet report's accounting, import-nhc's lines)
EX_NOINPUT = 66  # an input it needs does not exist (no recorded pass to acknowledge)
EX_UNAVAILABLE = 69  # a service it needs is not there (NVML)
EX_SOFTWARE = 70  # an internal error: a bug
EX_CANTCREAT = 73  # an output file could not be written
EX_TEMPFAIL = 75  # try again later (a running pass holds the state directory's lock)
# A configuration (or a state or textfile directory) that must not be acted on; the unit's
# RestartPreventExitStatus keeps systemd from restarting into it again and again.
EX_CONFIG = 78

# 128 + SIGINT, what a shell reports for a command stopped with Ctrl-C.
EX_INTERRUPTED = 130
