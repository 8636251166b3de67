"""Fixtures the fleet tests share."""

from __future__ import annotations

import os
import time
from typing import Iterator

import pytest


@pytest.fixture
def new_york() -> Iterator[None]:
    """The process's local zone is America/New_York (fall-back 2024-11-03 02:00 EDT -> 01:00 EST)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()
