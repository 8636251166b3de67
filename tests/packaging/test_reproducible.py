"""The same commit builds the same packages, byte for byte: packaging/build.py run a second
time, in another directory, gives .deb and .rpm files with the same sha256 as the session's
build (reproducible-builds.org's definition; SOURCE_DATE_EPOCH is the last commit's time)."""

from __future__ import annotations

import hashlib
from dataclasses import astuple
from pathlib import Path

import pytest
from healthd_testkit.packages import Packages, build_packages

pytestmark = [pytest.mark.slow]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_second_build_of_the_same_commit_is_byte_identical(healthd_packages: Packages, tmp_path: Path) -> None:
    again = build_packages(tmp_path)
    for first, second in zip(astuple(healthd_packages), astuple(again)):
        assert first.name == second.name
        assert _sha256(first) == _sha256(second), f"{first.name} differs between two builds of one commit"
