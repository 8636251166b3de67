"""A ``healthd.fleet.live.spool`` stand-in made of a ``collect`` stand-in: its texts written as the spool's files."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Callable, Optional

from healthd.fleet.live import Accounting, Spooled

Collect = Callable[[Any, dt.datetime, dt.datetime, float, Optional[Path]], Accounting]


def spool_of(collect: Collect) -> Callable[..., Spooled]:
    """``spool(bin_dir, window, timeout, directory, conf=...)`` serving what ``collect`` returns (sacct -P texts)."""

    def spool(
        bin_dir: Any,
        window: tuple[dt.datetime, dt.datetime],
        timeout: float,
        directory: Path,
        *,
        conf: Any = None,
        deadline: Any = None,
    ) -> Spooled:
        texts = collect(bin_dir, *window, timeout, conf)
        jobs, submit = directory / "jobs.txt", directory / "submit.txt"
        jobs.write_bytes(texts.jobs.encode("utf-8"))
        submit.write_bytes(texts.submit_lines.encode("utf-8"))
        return Spooled(jobs, texts.events, submit, {})

    return spool
