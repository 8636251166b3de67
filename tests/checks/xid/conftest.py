"""Fixtures of the xid tests; their helpers live in ``healthd_testkit.xid``."""

from __future__ import annotations

from pathlib import Path

import pytest
from healthd_testkit.xid import Node


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)
