"""The real Slurm test cluster (session-scoped) and a healthd harness bound to one of its nodes.

Faults are injected through a tiny ``fault`` check registered directly with the
Engine: it reports whatever findings the test wrote to its JSON file, so each
scenario controls codes, severities and event ids exactly.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pytest
from healthd_testkit.faults import installed_hardware
from healthd_testkit.paths import Below

from healthd.checks.plugin import CheckContext, CheckSettings, CheckSpec
from healthd.config.models import parse_config
from healthd.cycle.engine import Engine
from healthd.cycle.outcome import PassOutcome
from healthd.cycle.pipeline import PassRequest, PassTools, run_pass
from healthd.model import Finding, Status
from healthd.slurm.adapter import SlurmClient


class FaultSettings(CheckSettings):
    file: str = ""


def _run_fault(ctx: CheckContext[FaultSettings]) -> list[Finding]:
    items = json.loads(Path(ctx.settings.file).read_text()) if ctx.settings.file else []
    return [
        ctx.finding(
            Status.parse(i["status"]), i["code"], i["subject"], i.get("message", "injected"), **i.get("details", {})
        )
        for i in items
    ]


FAULT = CheckSpec(
    name="fault",
    description="reports injected findings",
    settings=FaultSettings,
    run=_run_fault,
    hardware=installed_hardware,
)


@dataclass
class Healthd:
    """healthd as it would run on one node of the test cluster."""

    node: str
    root: Path
    conf: Path
    policy: str = "max_out_fraction = 1.0"
    slurm: str = ""
    # The cluster's client command wrappers, for a cluster of another release (its ``bin_dir``).
    bin_dir: Optional[Path] = None

    fault_file = Below("faults.json")
    state_dir = Below("state")

    def config_text(self, node_name: bool = True) -> str:
        name = f'node_name = "{self.node}"' if node_name else ""
        if self.bin_dir is not None:
            name += f'\nbin_dir = "{self.bin_dir}"'
        return f"""
[paths]
state_dir = "{self.state_dir}"
[slurm]
conf = "{self.conf}"
{name}
timeout = 8
# The race tests need simultaneous passes; the spread is tested in test_slurm_parse.py.
act_splay = 0
{self.slurm}
[policy]
{self.policy}
[checks.fault]
file = "{self.fault_file}"
"""

    def cli_config(self, mount: str, node_name: bool = True) -> Path:
        """A config for the real CLI (installed checks only): the mounts check expects ``mount``."""
        expect = f'[checks.mounts]\nexpect = [{{path = "{mount}"}}]\n'
        text = self.config_text(node_name).split("[checks.fault]")[0] + expect
        path = self.root / "cli.toml"
        path.write_text(text)
        return path

    def faults(self, *items: tuple[str, str, str] | dict[str, Any]) -> None:
        rows = [i if isinstance(i, dict) else {"status": i[0], "code": i[1], "subject": i[2]} for i in items]
        self.fault_file.write_text(json.dumps(rows))

    def engine(
        self, extra: str = "", checks: Sequence[CheckSpec[Any]] = (), clock: Callable[[], float] = time.time
    ) -> Engine:
        """An engine with the fault check, and ``checks`` configured by the tables in ``extra``."""
        models = {"fault": FaultSettings, **{c.name: c.settings_model() for c in checks}}
        loaded = parse_config(self.config_text() + extra, str(self.root / "healthd.toml"), models)
        return Engine(loaded, [FAULT, *checks], clock=clock)

    def cycle(
        self, *, dry_run: bool = False, client: Optional[SlurmClient] = None, now: Optional[float] = None
    ) -> PassOutcome:
        engine = self.engine()
        clock = (lambda: now) if now is not None else time.time
        return run_pass(engine, PassRequest(dry_run=dry_run), PassTools(client=client, clock=clock))

    def client(self) -> SlurmClient:
        return SlurmClient(self.engine().config.slurm)


@pytest.fixture
def healthd_on(cluster: Any, tmp_path: Path) -> Any:
    """``healthd_on("node1")``: a healthd harness with its own state dir and no faults."""

    def make(node: str, policy: str = "max_out_fraction = 1.0", slurm: str = "") -> Healthd:
        root = tmp_path / node
        root.mkdir(exist_ok=True)
        bin_dir = cluster.bin_dir if cluster.chroot is not None else None
        harness = Healthd(node=node, root=root, conf=cluster.conf, policy=policy, slurm=slurm, bin_dir=bin_dir)
        harness.faults()
        return harness

    return make
