"""Helpers for the fabric tests: fixture trees with overlays, a config, and one CLI pass as JSON."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
from healthd_testkit.checks import check_context
from healthd_testkit.paths import FIXTURES as ALL_FIXTURES
from healthd_testkit.paths import Below

from healthd.checks.plugin import CheckContext, CheckSettings
from healthd.cli.main import main

FIXTURES = ALL_FIXTURES / "sysfs"
IB_PORTS = [f"mlx5_{i}:1" for i in range(8)]
GPUS = [
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
]
NICS = [
    "0000:17:00.0",
    "0000:29:00.0",
    "0000:39:00.0",
    "0000:5c:00.0",
    "0000:99:00.0",
    "0000:aa:00.0",
    "0000:b9:00.0",
    "0000:da:00.0",
]


@dataclass(frozen=True)
class PassOutput:
    """One ``healthd check --once --json`` run: its exit code and parsed document."""

    code: int
    document: dict[str, Any]

    def findings(self) -> set[tuple[str, str, str]]:
        """(status, code, subject) of every finding."""
        return {(f["status"], f["code"], f["subject"]) for c in self.document["checks"] for f in c["findings"]}

    def finding(self, code: str, subject: str) -> dict[str, Any]:
        matches = [
            f
            for check in self.document["checks"]
            for f in check["findings"]
            if f["code"] == code and f["subject"] == subject
        ]
        assert len(matches) == 1, matches
        found: dict[str, Any] = matches[0]
        return found

    def state(self, check: str) -> str:
        return str(next(c["state"] for c in self.document["checks"] if c["name"] == check))


@dataclass
class Node:
    """A temporary node: a sysfs tree (base plus overlays), a procfs with a boot id, a state dir."""

    root: Path
    infiniband_toml: str = ""
    pcie_toml: str = ""
    checks_toml: str = ""
    passes: list[dict[str, Any]] = field(default_factory=list)

    sysfs = Below("sys")
    procfs = Below("proc")
    state_dir = Below("state")

    def overlay(self, name: str) -> None:
        shutil.copytree(FIXTURES / "overlays" / name, self.sysfs, dirs_exist_ok=True, symlinks=True)

    def write(self, relative: str, text: str) -> Path:
        path = self.sysfs / relative
        path.write_text(text)
        return path

    def reboot(self, boot_id: str) -> None:
        (self.procfs / "sys/kernel/random/boot_id").write_text(boot_id + "\n")

    def config(self) -> Path:
        path = self.root / "healthd.toml"
        path.write_text(
            f'[paths]\nsysfs = "{self.sysfs}"\nprocfs = "{self.procfs}"\nstate_dir = "{self.state_dir}"\n'
            f"[slurm]\nenabled = false\n[checks.infiniband]\n{self.infiniband_toml}\n"
            f"[checks.pcie]\n{self.pcie_toml}\n{self.checks_toml}\n"
        )
        return path

    def check_once(self, capsys: pytest.CaptureFixture[str]) -> PassOutput:
        """One ``healthd check --once --json --only infiniband,pcie`` pass in this process."""
        argv = ["check", "--once", "--json", "--dry-run", "--only", "infiniband,pcie", "--config", str(self.config())]
        code = main(argv)
        return PassOutput(code, json.loads(capsys.readouterr().out))

    def context(self, name: str, settings: CheckSettings, clock: Callable[[], float]) -> CheckContext[Any]:
        return check_context(name, settings, self.root, clock=clock, sysfs=self.sysfs, procfs=self.procfs)


def make_node(root: Path, *overlays: str) -> Node:
    node = Node(root)
    # The fabric checks never read devices/system (CPUs, EDAC): leaving out its 900 files
    # halves the copy, the larger part of each test's time; nor file times (copyfile, not copy2).
    system = FIXTURES / "base/devices/system"
    shutil.copytree(
        FIXTURES / "base",
        node.sysfs,
        symlinks=True,
        ignore=lambda d, _: ["system"] if Path(d) == system.parent else [],
        copy_function=shutil.copyfile,
    )
    (node.procfs / "sys/kernel/random").mkdir(parents=True)
    node.reboot("5b1c2a9e-0d6f-4a57-9c0e-3f1e2d4c5b6a")
    for name in overlays:
        node.overlay(name)
    return node


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return make_node(tmp_path)


@pytest.fixture
def node_with(tmp_path: Path) -> Callable[..., Node]:
    """A factory: ``node_with("ib-port-down", ...)`` is the base tree with those overlays applied."""
    return lambda *overlays: make_node(tmp_path, *overlays)


@pytest.fixture
def ports() -> list[str]:
    return list(IB_PORTS)


@pytest.fixture
def gpus() -> list[str]:
    return list(GPUS)


@pytest.fixture
def nics() -> list[str]:
    return list(NICS)
