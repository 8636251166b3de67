"""When an active pass may run: only on a node that Slurm reports idle and drained.

An active check (``CheckSpec.active``: a GPU diagnostic that loads every GPU) must
never run beside a job. Slurm starts no job on a node with the DRAIN flag, and IDLE
as its base state says none is left (not ALLOCATED, MIXED or COMPLETING), so a node
seen IDLE+DRAIN by one ``sinfo -n NAME`` stays without jobs until someone resumes
it. This module only judges that one read; ``healthd check --once --active`` makes
it (docs/active.md).
"""

from __future__ import annotations

from typing import Optional

from healthd.nodestate import NodeInfo


def refusal(node: NodeInfo) -> Optional[str]:
    """Why an active pass must not run on ``node`` now, or None when it is idle and drained."""
    if not node.drained:
        return f"{node.name} is {node.state_text}, not drained: active checks run only on an idle, drained node"
    if node.state != "IDLE":
        return f"{node.name} is {node.state_text}: jobs may still run on it (active checks wait until it is idle)"
    return None
