"""``healthd record-gpus OUT.json``: capture this node's NVML readings as a replayable snapshot.

The snapshot is read through the same code the ``gpu`` check uses on a live node and
can be replayed with ``[checks.gpu] snapshot = "OUT.json"`` (tests, post-mortems).
Exit 0 when NVML answered, 69 (EX_UNAVAILABLE) when it could not be initialised (the
file is still written: "no driver" is worth recording), 73 when the file cannot be written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EX_UNAVAILABLE = 69
EX_CANTCREAT = 73


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output", type=Path, metavar="OUT.json", help="where to write the snapshot")
    parser.add_argument("--source", help="the snapshot's source text (default: recorded on HOST by healthd VERSION)")


def _write_atomically(path: Path, text: str) -> None:
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(args: argparse.Namespace) -> int:
    import datetime as dt
    import json
    import socket

    from healthd import __version__

    # mypy sees the checks/ folder under its source name, not as the installed healthd_checks.
    from healthd_checks.nvml_source import (  # type: ignore[import-not-found]
        NvmlError,
        NvmlLibrary,
        snapshot_document,
    )

    reading = NvmlLibrary().read()
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    source = args.source or f"recorded on {socket.gethostname()} by healthd {__version__} record-gpus"
    document = snapshot_document(reading, source, recorded_at=now)
    try:
        _write_atomically(args.output, json.dumps(document, indent=1) + "\n")
    except OSError as exc:
        print(f"healthd: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return EX_CANTCREAT
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
