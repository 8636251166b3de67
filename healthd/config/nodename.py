"""The node's name as healthd knows it, cheaply: the hook's report of the daemon's pass needs it too.

Kept apart from ``healthd.config.hosts`` (host sections), which imports ``dataclasses``:
the hook that reports the running daemon's pass
(``healthd.cycle.daemonpass``) compares the pass's node with this one, and must stay cheap.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional


def this_node(configured: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> str:
    """The node's name: SLURMD_NODENAME (set by slurmd for its programs), then ``[slurm] node_name``, then the
    short host name. Host sections match it, so they select what the node is called in Slurm.
    """
    env = os.environ if environ is None else environ
    if env.get("SLURMD_NODENAME"):
        return env["SLURMD_NODENAME"]
    if configured:
        return configured
    # uname(2)'s nodename is what gethostname(2) returns on Linux (glibc's gethostname reads it); os.uname
    # spares the hook, status and a cold check importing socket for it (about 1.5 ms: bench/README.md).
    return os.uname().nodename.split(".", 1)[0]
