"""The one-shot's quick look at slurmctld: whether every controller refused the connection (``scontrol -vvv ping``).

sinfo and scontrol retry a controller that refuses the connection once a second for
``MessageTimeout`` seconds (10 by default, slurm.conf(5)) before they give up, so a
one-shot command against a stopped slurmctld would wait that long, or until
``[slurm].timeout`` kills it. ``scontrol ping`` tries each controller once, and at
``-vvv`` (debug2) prints why a connection failed:
``scontrol: debug2: Error connecting slurm stream socket at 127.0.0.1:6999: Connection refused``
(seen with 22.05, 24.11 and 26.05), then one ``Slurmctld(primary) at HOST is DOWN`` line per controller.
Only that answer is definitive: every controller DOWN and as many distinct addresses
refused. Anything else (a controller UP, DOWN for another reason, no answer within the
probe's deadline) says nothing, and the real read runs with its full timeout.
"""

from __future__ import annotations

import re
from typing import Optional

# scontrol(1) ping; scontrol.c prints "Slurmctld(primary) at HOST is UP" (or DOWN), one line per controller.
_STATE = re.compile(r"^Slurmctld\([^)]*\) at \S+ is (UP|DOWN)$")
# slurm_protocol_socket.c, debug2: the address as IP:PORT, then strerror.
_REFUSED = re.compile(r"^scontrol: debug2: Error connecting slurm stream socket at (\S+): Connection refused$")

# scontrol ping's arguments: debug2 names the refused address.
PING_ARGS = ("-vvv", "ping")
# How long the probe may take: a refused connection answers in milliseconds; a slower
# answer is no answer and the read runs as it would have without the probe.
PROBE_SECONDS = 1.5
# Refused twice, PROBE_GAP seconds apart, before a one-shot says Slurm is unreachable: a slurmctld
# restarting or failing over refuses for a moment, and sinfo's own retries would have reached it.
PROBE_ATTEMPTS = 2
PROBE_GAP = 1.0


def refused_everywhere(text: str) -> Optional[str]:
    """The refused addresses (``127.0.0.1:6999``, comma-joined) if ``text`` shows every controller refusing, else None.

    ``text`` is scontrol ping's stdout and stderr together; lines are split on "\\n" only.
    """
    states = [m[1] for m in (_STATE.match(line.strip()) for line in text.split("\n")) if m]
    refused = {m[1] for m in (_REFUSED.match(line.strip()) for line in text.split("\n")) if m}
    if not states or "UP" in states or len(refused) < len(states):
        return None
    return ", ".join(sorted(refused))
