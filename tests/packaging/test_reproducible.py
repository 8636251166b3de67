"""The same commit builds the same packages, byte for byte: packaging/build.py run a second
time, in another directory, gives .deb and .rpm files with the same sha256 as the session's
build (reproducible-builds.org's definition; SOURCE_DATE_EPOCH is the last commit's time).

The second build (the ``healthd_packages_rebuilt`` fixture) starts when the first is done and
runs beside the tests that install the packages: still a whole build's time after the first,
so a clock that leaked into a package would show.
"""

from __future__ import annotations

import hashlib
from dataclasses import astuple
from pathlib import Path

import pytest
from healthd_testkit.packages import Packages

pytestmark = [pytest.mark.slow]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_second_build_of_the_same_commit_is_byte_identical(
    healthd_packages: Packages, healthd_packages_rebuilt: Packages
) -> None:
    for first, second in zip(astuple(healthd_packages), astuple(healthd_packages_rebuilt)):
        assert first.name == second.name
        assert _sha256(first) == _sha256(second), f"{first.name} differs between two builds of one commit"
