"""A stand-in ``ib_write_bw`` (a real program, server and client) that replays the outputs under fixtures/perftest."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from healthd.model import Finding
from healthd_testkit.checks import check_context

from .paths import FIXTURES

PERFTEST = FIXTURES / "perftest"


class IbWriteBw:
    """The server waits for its client (``listening`` while it does); the client prints ``HCA.txt`` (else
    ``run.txt``) and ``HCA.err`` and exits with ``HCA.rc``, or fails to connect while no server listens.

    Every start's words are logged; ``delay`` holds a server back before it listens, ``HCA.dead`` makes
    its server and client exit at once with ``HCA.err``, ``sleep`` makes a client hang.
    """

    def __init__(self, root: Path, hcas: dict[str, str]) -> None:
        self.root = root
        self.tool = root / "bin/ib_write_bw"
        self.tool.parent.mkdir()
        self.tool.write_text(
            "#!/bin/sh\n"
            f'd="{root}"\n'
            'echo "$*" >> "$d/calls"\n'
            'dev=""; prev=""; last=""\n'
            'for a; do [ "$prev" = "-d" ] && dev="$a"; prev="$a"; last="$a"; done\n'
            'if [ -f "$d/$dev.dead" ]; then cat "$d/$dev.err" >&2; exit 1; fi\n'
            'if [ "$last" != localhost ]; then\n'
            '  [ -f "$d/delay" ] && sleep "$(cat "$d/delay")"\n'
            '  touch "$d/listening"\n'
            '  while [ ! -f "$d/done" ]; do sleep 0.05; done\n'
            '  rm -f "$d/listening" "$d/done"; exit 0\n'
            "fi\n"
            '[ -f "$d/listening" ] || { echo " Couldn\'t connect to localhost" >&2; exit 1; }\n'
            '[ -f "$d/sleep" ] && sleep "$(cat "$d/sleep")"\n'
            'f="$d/$dev.txt"; [ -f "$f" ] || f="$d/run.txt"\n'
            'cat "$f"; [ -f "$d/$dev.err" ] && cat "$d/$dev.err" >&2\n'
            'touch "$d/done"\n'
            'exit "$(cat "$d/$dev.rc" 2>/dev/null || echo 0)"\n'
        )
        self.tool.chmod(0o755)
        self.sysfs = root / "sys"
        for hca, layer in hcas.items():
            port = self.sysfs / "class/infiniband" / hca / "ports/1"
            port.mkdir(parents=True)
            (port / "link_layer").write_text(layer + "\n")
        self.memory: dict[str, Any] = {}

    def prints(self, fixture: str, hca: str = "run") -> None:
        shutil.copy(PERFTEST / fixture, self.root / f"{hca}.txt")

    def fails(self, hca: str, stderr_fixture: str, rc: int = 1, server_too: bool = False) -> None:
        """``hca``'s client (with ``server_too``, its server as well, at once) says ``stderr_fixture``, exits ``rc``."""
        (self.root / f"{hca}.txt").write_text("")
        shutil.copy(PERFTEST / stderr_fixture, self.root / f"{hca}.err")
        (self.root / f"{hca}.rc").write_text(str(rc))
        if server_too:
            (self.root / f"{hca}.dead").write_text("")

    @property
    def calls(self) -> list[str]:
        path = self.root / "calls"
        return path.read_text().split("\n")[:-1] if path.exists() else []

    def run(self, **settings: Any) -> list[Finding]:
        """The ib_bandwidth check run once with this ib_write_bw and ``settings``."""
        from healthd_checks.ib_bandwidth.check import CHECK
        from healthd_checks.ib_bandwidth.settings import IbBandwidthSettings

        ctx = check_context(
            "ib_bandwidth",
            IbBandwidthSettings(**{"ib_write_bw": self.tool, **settings}),
            self.root,
            memory=self.memory,
            sysfs=self.sysfs,
        )
        return list(CHECK.run(ctx))
