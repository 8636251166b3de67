"""A Slurm failure as a value: what kind it is, the command, and what was said, from where it happens to the renderer.

``SlurmError`` (healthd.slurm.command) carries one; the pass keeps it in its action
section, and the pass document holds it under ``action.slurm_errors`` (docs/commands.md),
from which ``healthd.cycle.render`` makes the headline's one phrase without reading the
error's text back. Pure values: the plan holds them too.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

# How long a detail may be: short enough for the one phrase of a headline (the whole text stays in ``message``).
DETAIL_LIMIT = 160


class SlurmFailure(enum.Enum):
    """The kind of a Slurm failure (``action.slurm_errors[].kind``)."""

    UNREACHABLE = "unreachable"  # no usable answer: timed out, not run, slurm.conf or slurmctld unusable
    NOT_FOUND = "not_found"  # the command is not installed where healthd looks ([slurm].bin_dir)
    READ_FAILED = "read_failed"  # an answer healthd cannot use, or a node slurmctld does not know
    REJECTED = "rejected"  # slurmctld refused a change (``scontrol update``)
    TAKEN_OVER = "taken_over"  # after healthd's drain the node carries someone else's reason: left alone


class SlurmProblem(NamedTuple):
    """One Slurm failure: its ``kind``, the ``command`` ("" when none ran), a short ``detail``
    (what Slurm or the system said, at most ``DETAIL_LIMIT`` characters), and the whole ``message``
    (what ``action.errors`` and the logs show)."""

    kind: SlurmFailure
    command: str
    detail: str
    message: str

    def to_dict(self, index: int) -> dict[str, Any]:
        """The document's entry; ``index`` is where ``message`` stands in ``action.errors``."""
        return {"kind": self.kind.value, "command": self.command, "detail": self.detail, "error": index}
