"""QueueManifest: the list of consume queues the store knows, kept beside the queue folders.

A queue whose folder is lost (deleted, set aside after a load error) must be rebuilt from the CommitLog:
the manifest is how the store knows it existed (`CommitLogDispatcher` tells it of each queue created on
first use, recovery compares it with the queues found). Writes are atomic (temporary file, fsync,
rename) and coalesce: concurrent `save` calls leave one writer writing the latest set.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)


class QueueManifest:
    def __init__(self, path: str, run_blocking: Callable[..., Awaitable[Any]]) -> None:
        self.path = path
        self._run_blocking = run_blocking
        self.queues: set[tuple[str, int]] = set()
        self.dirty = False
        self._lock = asyncio.Lock()

    def load(self) -> None:
        """Read the file (blocking); a missing or unreadable one is an empty manifest."""
        try:
            with open(self.path, "rb") as f:
                data = json.load(f)
            self.queues = {(t, int(q)) for t, qs in data.get("queues", {}).items() for q in qs}
        except (OSError, ValueError, AttributeError, TypeError):
            self.queues = set()

    def add(self, topic: str, queue_id: int) -> bool:
        """True when the queue was new (the manifest needs a save)."""
        if (topic, queue_id) in self.queues:
            return False
        self.queues.add((topic, queue_id))
        self.dirty = True
        return True

    def discard(self, topic: str, queue_id: int) -> None:
        if (topic, queue_id) in self.queues:
            self.queues.discard((topic, queue_id))
            self.dirty = True

    def replace(self, queues: set[tuple[str, int]]) -> None:
        if queues != self.queues:
            self.queues = queues
            self.dirty = True

    async def save(self) -> None:
        """Write the manifest when dirty; concurrent calls coalesce (one writer, always the latest set)."""
        async with self._lock:
            if not self.dirty:
                return
            self.dirty = False
            try:
                await self._run_blocking(self._write_blocking, set(self.queues))
            except OSError as exc:
                self.dirty = True
                log.warning("cannot write the consume queue manifest", error=str(exc))

    def _write_blocking(self, queues: set[tuple[str, int]]) -> None:
        table: dict[str, list[int]] = {}
        for t, q in sorted(queues):
            table.setdefault(t, []).append(q)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"queues": table}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
