"""Fixtures of the xid tests; their helpers live in healthd_xid_kit.py, next to this file.

With pytest's importlib import mode test modules cannot import each other, so this
folder goes on ``sys.path`` and they import the helpers as ``healthd_xid_kit``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from healthd_xid_kit import Node


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)
