"""``healthd record-gpus OUT.json``: capture this node's NVML readings as a replayable snapshot.

The snapshot is read through the same code the ``gpu`` check uses on a live node and
can be replayed with ``[checks.gpu] snapshot = "OUT.json"`` (tests, post-mortems).
Exit 0 when NVML answered, 69 (EX_UNAVAILABLE) when it could not be initialised or did
not answer within ``--timeout`` seconds (the file is still written, with NVML's error or
``TIMEOUT`` as its ``init_error``: "no driver" and "NVML hangs" are worth recording), 73
when the file cannot be written.

NVML can block for minutes on a GPU that fell off the bus, which is exactly when this
command is run, so the reading runs in a daemon thread that is abandoned at the deadline
(a thread stuck inside the driver cannot be interrupted; the process exits without it).
A command the gpu plugin contributes (``healthd.commands`` entry point); NVML is
imported only when it runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import socket
import sys
import threading
from pathlib import Path
from typing import Any, Optional

from healthd import __version__
from healthd.checks.plugin import CommandSpec
from healthd.exitcodes import EX_CANTCREAT, EX_UNAVAILABLE
from healthd.store.atomicfile import replace_file
from healthd_checks.nvml.source import NodeReading, NvmlError, NvmlLibrary, snapshot_document

DEFAULT_TIMEOUT = 30.0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 3600 seconds, not {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output", type=Path, metavar="OUT.json", help="where to write the snapshot")
    parser.add_argument("--source", help="the snapshot's source text (default: recorded on HOST by healthd VERSION)")
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"give up on NVML after this long and record that it hung (default {DEFAULT_TIMEOUT:g})",
    )


def _read_within(timeout: float) -> Optional[Any]:
    """NVML's ``NodeReading``, or None when it has not answered after ``timeout`` seconds."""
    answer: list[Any] = []
    failure: list[BaseException] = []

    def read() -> None:
        try:
            answer.append(NvmlLibrary().read())
        except BaseException as exc:  # handed to the main thread, which raises it
            failure.append(exc)

    thread = threading.Thread(target=read, name="record-gpus-nvml", daemon=True)
    thread.start()
    thread.join(timeout)
    if failure:
        raise failure[0]
    return answer[0] if answer else None


def run(args: argparse.Namespace) -> int:
    reading = _read_within(args.timeout)
    hung = reading is None
    if reading is None:
        # NVML's own name for "timed out" (NVML_ERROR_TIMEOUT): a replay is judged NVML_UNAVAILABLE.
        error = NvmlError("TIMEOUT", f"NVML did not answer within {args.timeout:g} s")
        reading = NodeReading(init_error=error, driver_version=error, device_count=error, gpus=())
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    source = args.source or f"recorded on {socket.gethostname()} by healthd {__version__} record-gpus"
    document = snapshot_document(reading, source, recorded_at=now)
    try:
        # 0600, as the temporary file it replaced was: a snapshot names the node's hardware.
        replace_file(args.output, (json.dumps(document, indent=1) + "\n").encode("utf-8"), 0o600)
    except OSError as exc:
        print(f"healthd: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return EX_CANTCREAT
    if hung:
        print(
            f"healthd: NVML did not answer within {args.timeout:g} s (a GPU fallen off the bus or a hung driver?); "
            f"wrote {args.output} recording that",
            file=sys.stderr,
        )
        return EX_UNAVAILABLE
    if reading.init_error is not None:
        error = reading.init_error
        print(
            f"healthd: NVML unavailable ({error.code}: {error.message}); wrote {args.output} recording that",
            file=sys.stderr,
        )
        return EX_UNAVAILABLE
    driver = reading.driver_version if not isinstance(reading.driver_version, NvmlError) else "unknown"
    print(f"wrote {args.output}: {len(reading.gpus)} GPU(s), driver {driver}")
    return 0


COMMAND = CommandSpec(
    name="record-gpus",
    help="record this node's NVML readings as a snapshot for the gpu check",
    add_arguments=add_arguments,
    run=run,
)
