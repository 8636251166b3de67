"""``healthd fleet report --live`` in a test of a real cluster: the failures it attributes, once accounting has them.

slurmctld hands job and node records to slurmdbd in the background, so the report is read
again until every job the test failed is attributed, or a minute has passed.
"""

from __future__ import annotations

import contextlib
import datetime
import json
from pathlib import Path
from typing import Any, Callable, Collection

from healthd_testkit.waiting import wait_for

Cli = Callable[..., tuple[int, str, str]]


def attributed_live(
    cli: Cli, config: Path, since: datetime.datetime, jobs: Collection[str], what: str
) -> dict[str, dict[str, Any]]:
    """The report's attributed failures by job id, once ``jobs`` are all among them; fails naming its inputs if not."""
    inputs: list[Any] = []

    def attributed() -> dict[str, dict[str, Any]]:
        argv = ("fleet", "report", "--live", "--since", since.isoformat(), "--json", "--config", str(config))
        code, out, err = cli(*argv)
        assert code == 0, err
        document = json.loads(out)
        inputs[:] = [document["inputs"]]
        return {a["job_id"]: a for a in document["attributed_failures"]}

    with contextlib.suppress(TimeoutError):
        wait_for(lambda: set(jobs) <= set(attributed()), 60, what, interval=1)
    found = attributed()
    assert set(jobs) <= set(found), f"{sorted(jobs)} not among the attributed failures {found}; inputs {inputs}"
    return found
