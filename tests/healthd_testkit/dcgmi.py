"""A stand-in dcgmi (a real program) that prints the modelled ``dcgmi diag -j`` outputs under fixtures/dcgm."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from healthd.model import Finding
from healthd_testkit.checks import check_context

from .paths import FIXTURES

DCGM = FIXTURES / "dcgm"


class Dcgmi:
    """A stand-in dcgmi: run N prints ``runN.json`` (else ``run.json``) and exits with ``rc``; it logs each level."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tool = root / "bin/dcgmi"
        self.tool.parent.mkdir()
        self.tool.write_text(
            "#!/bin/sh\n"
            '[ "$1 $2 $4" = "diag -r -j" ] || exit 64\n'
            f'd="{root}"\n'
            'echo "$3" >> "$d/levels"\n'
            'n=$(( $(cat "$d/count" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$d/count"\n'
            '[ -f "$d/sleep" ] && sleep "$(cat "$d/sleep")"\n'
            'f="$d/run$n.json"; [ -f "$f" ] || f="$d/run.json"\n'
            'cat "$f"\n'
            'exit "$(cat "$d/rc" 2>/dev/null || echo 0)"\n'
        )
        self.tool.chmod(0o755)
        self.memory: dict[str, Any] = {}

    def prints(self, fixture: str, run: str = "run", rc: int = 0) -> None:
        shutil.copy(DCGM / fixture, self.root / f"{run}.json")
        (self.root / "rc").write_text(str(rc))

    def prints_text(self, text: str, rc: int = 0) -> None:
        (self.root / "run.json").write_text(text)
        (self.root / "rc").write_text(str(rc))

    @property
    def levels(self) -> list[str]:
        path = self.root / "levels"
        return path.read_text().split() if path.exists() else []

    def run(self, **settings: Any) -> list[Finding]:
        """The dcgm check run once with this dcgmi and ``settings``."""
        from healthd_checks.dcgm.check import CHECK
        from healthd_checks.dcgm.settings import DcgmSettings

        ctx = check_context("dcgm", DcgmSettings(**{"dcgmi": self.tool, **settings}), self.root, memory=self.memory)
        return list(CHECK.run(ctx))
