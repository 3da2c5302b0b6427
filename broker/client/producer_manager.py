"""ProducerManager: producer groups and their live channels (used for transaction check-backs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from broker.client.channel_info import ClientChannelInfo

log = structlog.get_logger(__name__)


class ProducerManager:
    def __init__(self, *, now_ms: Callable[[], int], channel_expired_ms: int) -> None:
        self.table: dict[str, dict[Any, ClientChannelInfo]] = {}
        self._now_ms = now_ms
        self._channel_expired_ms = channel_expired_ms
        self._rr = 0

    def register_producer(self, group: str, info: ClientChannelInfo) -> None:
        channels = self.table.setdefault(group, {})
        existing = channels.get(info.channel)
        if existing is None:
            channels[info.channel] = info
            log.info("new producer connected", group=group, client_id=info.client_id, remote=info.channel.remote_addr)
        else:
            existing.last_update_ms = info.last_update_ms

    def unregister_producer(self, group: str, channel: Any) -> None:
        channels = self.table.get(group)
        if channels and channels.pop(channel, None) is not None and not channels:
            del self.table[group]

    def do_channel_close_event(self, channel: Any) -> None:
        for group in list(self.table):
            self.unregister_producer(group, channel)

    def scan_not_active_channel(self) -> list[Any]:
        now = self._now_ms()
        expired = []
        for group, channels in list(self.table.items()):
            for channel, info in list(channels.items()):
                if now - info.last_update_ms > self._channel_expired_ms:
                    del channels[channel]
                    expired.append(channel)
                    log.warn("producer channel expired", group=group, client_id=info.client_id)
            if not channels:
                del self.table[group]
        return expired

    def get_available_channel(self, group: str) -> Any | None:
        """A live channel of the group, round robin, for CHECK_TRANSACTION_STATE."""
        channels = [c for c in self.table.get(group, {}) if c.is_active]
        if not channels:
            return None
        self._rr += 1
        return channels[self._rr % len(channels)]

    def connections(self, group: str) -> list[ClientChannelInfo]:
        return list(self.table.get(group, {}).values())
