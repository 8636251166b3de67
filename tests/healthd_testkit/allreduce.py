"""A stand-in ``all_reduce_perf`` (a real program) replaying fixtures/nccl, and a sysfs with GPUs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from healthd.model import Finding
from healthd_testkit.checks import check_context

from .paths import FIXTURES

NCCL = FIXTURES / "nccl"


class AllReducePerf:
    """Run N prints ``runN.txt`` (else ``run.txt``) and exits ``rc``; each run's words and NCCL_ variables logged."""

    def __init__(self, root: Path, gpus: int = 8) -> None:
        self.root = root
        self.tool = root / "bin/all_reduce_perf"
        self.tool.parent.mkdir()
        self.tool.write_text(
            "#!/bin/sh\n"
            f'd="{root}"\n'
            'echo "$*" >> "$d/argv"\n'
            'env | grep ^NCCL_ | sort | tr "\\n" " " >> "$d/env"; echo >> "$d/env"\n'
            'n=$(( $(cat "$d/count" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$d/count"\n'
            '[ -f "$d/sleep" ] && sleep "$(cat "$d/sleep")"\n'
            'f="$d/run$n.txt"; [ -f "$f" ] || f="$d/run.txt"\n'
            'cat "$f"\n'
            'exit "$(cat "$d/rc" 2>/dev/null || echo 0)"\n'
        )
        self.tool.chmod(0o755)
        self.sysfs = root / "sys"
        for index in range(gpus):
            # An NVIDIA 3D controller (class 0x0302), as an H100 SXM shows itself on the PCI bus.
            function = self.sysfs / "bus/pci/devices" / f"0000:{0x18 + index:02x}:00.0"
            function.mkdir(parents=True)
            for name, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", "0x030200")):
                (function / name).write_text(value + "\n")
        self.memory: dict[str, Any] = {}

    def prints(self, fixture: str, run: str = "run", rc: int = 0) -> None:
        shutil.copy(NCCL / fixture, self.root / f"{run}.txt")
        (self.root / "rc").write_text(str(rc))

    def prints_text(self, text: str, run: str = "run", rc: int = 0) -> None:
        (self.root / f"{run}.txt").write_text(text)
        (self.root / "rc").write_text(str(rc))

    def _lines(self, name: str) -> list[str]:
        path = self.root / name
        return path.read_text().split("\n")[:-1] if path.exists() else []

    @property
    def argv(self) -> list[str]:
        """The words of each run, one string a run."""
        return self._lines("argv")

    @property
    def env(self) -> list[str]:
        """The NCCL_ variables of each run, one string a run."""
        return [line.strip() for line in self._lines("env")]

    def run(self, **settings: Any) -> list[Finding]:
        """The nccl check run once with this all_reduce_perf and ``settings``."""
        from healthd_checks.nccl.check import CHECK
        from healthd_checks.nccl.settings import NcclSettings

        ctx = check_context(
            "nccl",
            NcclSettings(**{"all_reduce_perf": self.tool, **settings}),
            self.root,
            memory=self.memory,
            sysfs=self.sysfs,
        )
        return list(CHECK.run(ctx))
