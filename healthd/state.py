"""Durable state in ``[paths].state_dir``: one JSON document per owner, written atomically.

Cursors, counter baselines, sticky findings, pending actions and the last pass all
live here. A write goes to a temporary file in the same directory, is fsynced and
renamed over the old one, so a crash leaves either the old or the new document.
A file that cannot be parsed is renamed aside (``NAME.json.corrupt-<time>``) and
reported, never fatal: the owner starts from empty state.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KEEP_CORRUPT = 3  # corrupt copies kept per file for a post-mortem; older ones are removed


def _fsync_directory(directory: Path) -> None:
    """Make a rename durable: without this a power loss can bring the old file back."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _keep_newest(path: Path, keep: int) -> None:
    copies = sorted(path.parent.glob(f"{path.name}.corrupt-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in copies[keep:]:
        with contextlib.suppress(OSError):
            old.unlink()


class StateError(Exception):
    """The state directory or a state file could not be read or written."""


@dataclass
class StateFile:
    """One owner's JSON document (a check's, the policy's, the last pass's)."""

    directory: Path
    name: str
    problems: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def path(self) -> Path:
        return self.directory / f"{self.name}.json"

    def load(self) -> dict[str, Any]:
        """The stored document, or ``{}`` when there is none or it was corrupt."""
        with self._lock:
            try:
                raw = self.path.read_bytes()
            except FileNotFoundError:
                return {}
            except OSError as exc:
                self.problems.append(f"cannot read {self.path}: {exc.strerror or exc}")
                return {}
            try:
                data = json.loads(raw.decode("utf-8"))  # bad UTF-8 is corruption too (a ValueError)
                if not isinstance(data, dict):
                    raise ValueError("top level is not an object")
            except ValueError as exc:
                aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
                try:
                    os.replace(self.path, aside)
                    _keep_newest(self.path, KEEP_CORRUPT)
                    where = f"moved to {aside}"
                except OSError as move_exc:
                    where = f"could not move it aside: {move_exc}"
                self.problems.append(f"corrupt state file {self.path} ({exc}); {where}; starting empty")
                return {}
            return data

    def save(self, data: dict[str, Any]) -> None:
        """Replace the document atomically; raises ``StateError`` naming the file."""
        with self._lock:
            try:
                self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
                fd, tmp = tempfile.mkstemp(prefix=f".{self.name}.", suffix=".tmp", dir=self.directory)
                try:
                    with os.fdopen(fd, "w", encoding="utf-8") as handle:
                        json.dump(data, handle, sort_keys=True, separators=(",", ":"))
                        handle.flush()
                        os.fsync(handle.fileno())
                    os.replace(tmp, self.path)
                    _fsync_directory(self.directory)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise
            except OSError as exc:
                raise StateError(f"cannot write {self.path}: {exc.strerror or exc}") from exc


@dataclass
class StateDir:
    """Hands out ``StateFile``s under one directory and collects their problems."""

    directory: Path
    _files: dict[str, StateFile] = field(default_factory=dict)

    def file(self, name: str) -> StateFile:
        if name not in self._files:
            self._files[name] = StateFile(self.directory, name)
        return self._files[name]

    def drain_problems(self) -> list[str]:
        problems: list[str] = []
        for state_file in self._files.values():
            problems.extend(state_file.problems)
            state_file.problems.clear()
        return problems
