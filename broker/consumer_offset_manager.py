"""ConsumerOffsetManager: committed consume offsets per ``topic@group`` and queue, persisted to consumerOffset.json.

Offsets are kept in memory and written every ``flushConsumerOffsetInterval`` and at shutdown, as
upstream does; a crash can therefore replay up to that interval of messages (at-least-once).
"""

from __future__ import annotations

from pathlib import Path

import structlog

from broker.config_file import OrderedWriter, dumps, read_config

log = structlog.get_logger(__name__)

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    def __init__(self, store_path_root_dir: str) -> None:
        self._path = Path(store_path_root_dir) / "config" / "consumerOffset.json"
        self.offset_table: dict[str, dict[int, int]] = {}
        self._dirty = False
        self._writer = OrderedWriter(self._path)

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int, client: str = "") -> None:
        """(A pull with the commit flag calls `commit_offset_by_key` with the key it kept.)"""
        self.commit_offset_by_key(f"{topic}{TOPIC_GROUP_SEPARATOR}{group}", queue_id, offset)

    def commit_offset_by_key(self, key: str, queue_id: int, offset: int) -> None:
        """`commit_offset` of the group and topic whose ``key(topic, group)`` the caller kept (the pull processor,
        with the outcome of a pull's checks: a caught-up consumer commits on every pull)."""
        queues = self.offset_table.get(key)
        if queues is None:
            queues = self.offset_table[key] = {}
        queues[queue_id] = offset
        self._dirty = True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one for that queue."""
        queues = self.offset_table.get(self.key(topic, group))
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.offset_table.get(self.key(topic, group), {}))

    def which_topic_by_consumer(self, group: str) -> set[str]:
        return {
            k.split(TOPIC_GROUP_SEPARATOR, 1)[0]
            for k in self.offset_table
            if k.split(TOPIC_GROUP_SEPARATOR, 1)[1] == group
        }

    def which_group_by_topic(self, topic: str) -> set[str]:
        return {
            k.split(TOPIC_GROUP_SEPARATOR, 1)[1]
            for k in self.offset_table
            if k.split(TOPIC_GROUP_SEPARATOR, 1)[0] == topic
        }

    def remove_topic(self, topic: str) -> None:
        for k in [k for k in self.offset_table if k.split(TOPIC_GROUP_SEPARATOR, 1)[0] == topic]:
            del self.offset_table[k]
        self._dirty = True

    def reset_offset(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        self.offset_table.setdefault(self.key(topic, group), {}).update(offsets)
        self._dirty = True

    # -- persistence -----------------------------------------------------------------
    def load(self) -> None:
        data = read_config(self._path)
        if not data:
            return
        table = data.get("offsetTable") or {}
        for key, queues in table.items():
            if TOPIC_GROUP_SEPARATOR not in key or not isinstance(queues, dict):
                continue
            self.offset_table[key] = {int(q): int(o) for q, o in queues.items()}
        log.info("consumer offsets loaded", entries=len(self.offset_table), file=str(self._path))

    def snapshot(self) -> bytes:
        return dumps({"offsetTable": {k: {str(q): o for q, o in v.items()} for k, v in self.offset_table.items()}})

    def persist(self, force: bool = False) -> None:
        snap = self.take_snapshot(force)
        if snap is not None:
            self.write_snapshot(snap)

    def take_snapshot(self, force: bool = False) -> tuple[int, bytes] | None:
        """The table as it is now, numbered; None when nothing changed. Call it on the event loop (the
        table's owner) and hand the result to ``write_snapshot`` in a thread."""
        if not (self._dirty or force):
            return None
        self._dirty = False
        return self._writer.take(self.snapshot())

    def write_snapshot(self, snap: tuple[int, bytes]) -> None:
        """Write a snapshot unless a newer one is already on disk (``OrderedWriter``)."""
        self._writer.write(snap)
