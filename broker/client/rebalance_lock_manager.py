"""RebalanceLockManager: one owner per message queue per group for orderly consumption.

A lock lives ``rebalanceLockMaxLiveTime`` (60 s) unless its owner renews it (clients renew every 20 s);
an expired lock may be taken by another client of the group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

MessageQueueKey = tuple[str, str, int]  # (topic, brokerName, queueId)


@dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update_ms: int


class RebalanceLockManager:
    def __init__(self, *, now_ms: Callable[[], int], max_live_ms: int) -> None:
        self._now_ms = now_ms
        self._max_live_ms = max_live_ms
        self.table: dict[str, dict[MessageQueueKey, LockEntry]] = {}

    def _expired(self, entry: LockEntry, now: int) -> bool:
        return now - entry.last_update_ms > self._max_live_ms

    def is_locked(self, group: str, mq: MessageQueueKey, client_id: str) -> bool:
        entry = self.table.get(group, {}).get(mq)
        now = self._now_ms()
        if entry is not None and entry.client_id == client_id and not self._expired(entry, now):
            entry.last_update_ms = now
            return True
        return False

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueueKey], client_id: str) -> list[MessageQueueKey]:
        now = self._now_ms()
        group_table = self.table.setdefault(group, {})
        locked: list[MessageQueueKey] = []
        for mq in mqs:
            entry = group_table.get(mq)
            if entry is None or entry.client_id == client_id or self._expired(entry, now):
                group_table[mq] = LockEntry(client_id, now)
                locked.append(mq)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueueKey], client_id: str) -> None:
        group_table = self.table.get(group)
        if not group_table:
            return
        for mq in mqs:
            entry = group_table.get(mq)
            if entry is not None and entry.client_id == client_id:
                del group_table[mq]
