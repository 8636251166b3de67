"""Which node a state directory belongs to: one node's bookkeeping must never steer another node.

``policy.json`` says which drains are healthd's own, ``acks.json`` silences findings,
``daemon-pass.json`` is what the hook reports: shared between nodes (a state directory
on a network filesystem, or one path for the whole cluster), they would make one
node resume, silence or report for another. So the first pass that can write the
directory leaves ``state_dir/node.json`` naming its node, and every entry point that
builds an engine (``healthd check --once``, the hook, ``healthd run`` and its reloads,
``healthd ack``) and ``healthd status`` refuse a directory that names another node,
as they refuse an untrusted one: exit 78, nothing done (docs/service.md).

The node's name is ``healthd.config.nodename.this_node``'s, the one Slurm knows it by; a node
renamed on purpose takes its directory over once an administrator removes ``node.json``.
"""

from __future__ import annotations

from pathlib import Path

from healthd.store.state import MARK, StateDir, StateError, state_owner
from healthd.store.trust import UntrustedPath


class ForeignStateDir(UntrustedPath):
    """The state directory names another node in ``node.json``; refused like an untrusted one (exit 78)."""

    def __init__(self, directory: Path, owner: str, node: str) -> None:
        mark = directory / f"{MARK}.json"
        reason = (
            f"it is node {owner}'s state directory ({mark}), not this node's ({node}): [paths].state_dir must be"
            f" node-local; if this node was renamed, remove {mark}"
        )
        super().__init__(directory, reason)
        self.args = (f"refusing {directory}: {reason}",)  # not "which others could have written"


def claim(state: StateDir, node: str, *, mark: bool) -> None:
    """Raise ``ForeignStateDir`` when ``state`` belongs to another node; with ``mark``, name ``node`` if none is named.

    A directory that cannot be written is not marked (each pass reports it); the next pass that can, marks it.
    """
    owner = state_owner(state.directory)
    if owner and owner != node:
        raise ForeignStateDir(state.directory, owner, node)
    if mark and not owner:
        try:
            state.file(MARK).save({"node": node})
        except StateError:
            return
