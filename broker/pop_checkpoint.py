"""popCheckpoint.json: the POP state (in-flight messages, attempts, acks) across a restart.

``PopService`` exports and imports the state; this file only reads and writes it, in order: a periodic
write still running in a worker thread never lands after the final one made at shutdown (as
consumerOffset.json, through config_file.OrderedWriter).
"""

from __future__ import annotations

from pathlib import Path

import structlog

from broker.config_file import OrderedWriter, dumps, read_config

log = structlog.get_logger(__name__)


class PopCheckpointFile:
    def __init__(self, store_path_root_dir: str) -> None:
        self.path = Path(store_path_root_dir) / "config" / "popCheckpoint.json"
        self._writer = OrderedWriter(self.path)

    def read(self) -> dict | None:
        data = read_config(self.path)
        if data is not None and not isinstance(data, dict):
            log.warning("pop checkpoint is not an object, ignored", file=str(self.path))
            return None
        return data

    def take(self, state: dict) -> tuple[int, bytes]:
        """Number and serialize a state now (on the event loop); write it with ``write``, in a thread."""
        return self._writer.take(dumps(state))

    def write(self, snap: tuple[int, bytes]) -> None:
        self._writer.write(snap)
