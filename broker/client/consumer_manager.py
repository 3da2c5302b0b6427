"""ConsumerManager: consumer groups, their live channels and subscriptions; rebalance notifications.

When a group's membership changes (a heartbeat from a new client, an unregister, a closed or expired
channel) every member is told with NOTIFY_CONSUMER_IDS_CHANGED so it rebalances at once instead of
waiting for its 20 s timer, as upstream's DefaultConsumerIdsChangeListener does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from broker.client.channel_info import ClientChannelInfo
from broker.heartbeat import ConsumerData, SubscriptionData

log = structlog.get_logger(__name__)


@dataclass
class ConsumerGroupInfo:
    group_name: str
    consume_type: str
    message_model: str
    consume_from_where: str
    channels: dict[Any, ClientChannelInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    last_update_ms: int = 0

    def client_ids(self) -> list[str]:
        return [info.client_id for info in self.channels.values()]

    def find_channel(self, client_id: str) -> ClientChannelInfo | None:
        for info in self.channels.values():
            if info.client_id == client_id:
                return info
        return None

    def update_subscriptions(self, subs: list[SubscriptionData], now_ms: int) -> bool:
        changed = False
        for sub in subs:
            old = self.subscriptions.get(sub.topic)
            if old is None:
                changed = True
                self.subscriptions[sub.topic] = sub
            elif sub.sub_version > old.sub_version or (sub.sub_version == old.sub_version and sub != old):
                self.subscriptions[sub.topic] = sub
        wanted = {s.topic for s in subs}
        for topic in [t for t in self.subscriptions if t not in wanted]:
            del self.subscriptions[topic]
            changed = True
        self.last_update_ms = now_ms
        return changed


class ConsumerManager:
    def __init__(
        self,
        *,
        now_ms: Callable[[], int],
        channel_expired_ms: int,
        on_ids_changed: Callable[[str, list[Any]], None] | None = None,
        on_subscriptions_changed: Callable[[str, ConsumerGroupInfo], None] | None = None,
    ) -> None:
        self.table: dict[str, ConsumerGroupInfo] = {}
        self._now_ms = now_ms
        self._channel_expired_ms = channel_expired_ms
        self.on_ids_changed = on_ids_changed
        self.on_subscriptions_changed = on_subscriptions_changed
        # bumped by every call that may change a group, its model or its subscriptions: the pull processor reuses
        # the outcome of a pull's checks while this (and the topic and group tables' versions) stay put
        self.version = 0

    def get(self, group: str) -> ConsumerGroupInfo | None:
        return self.table.get(group)

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.table.get(group)
        return info.subscriptions.get(topic) if info else None

    def register_consumer(self, data: ConsumerData, channel_info: ClientChannelInfo, notify: bool = True) -> bool:
        """Add or refresh a consumer; returns True when the group's membership changed."""
        self.version += 1
        now = self._now_ms()
        info = self.table.get(data.group_name)
        if info is None:
            info = ConsumerGroupInfo(data.group_name, data.consume_type, data.message_model, data.consume_from_where)
            self.table[data.group_name] = info
        info.consume_type, info.message_model = data.consume_type, data.message_model
        info.consume_from_where = data.consume_from_where
        existing = info.channels.get(channel_info.channel)
        membership_changed = False
        if existing is None:
            info.channels[channel_info.channel] = channel_info
            membership_changed = True
            log.info(
                "new consumer connected",
                group=data.group_name,
                client_id=channel_info.client_id,
                remote=channel_info.channel.remote_addr,
            )
        else:
            if existing.client_id != channel_info.client_id:
                existing.client_id = channel_info.client_id
            existing.last_update_ms = now
        subs_changed = info.update_subscriptions(data.subscriptions, now)
        if subs_changed and self.on_subscriptions_changed is not None:
            self.on_subscriptions_changed(data.group_name, info)
        if membership_changed and notify:
            self._notify(info)
        return membership_changed

    def unregister_consumer(self, group: str, channel: Any, notify: bool = True) -> None:
        self.version += 1
        info = self.table.get(group)
        if info is None:
            return
        if info.channels.pop(channel, None) is not None:
            log.info("consumer unregistered", group=group, remote=channel.remote_addr)
            if not info.channels:
                del self.table[group]
            elif notify:
                self._notify(info)

    def do_channel_close_event(self, channel: Any) -> None:
        self.version += 1
        for group, info in list(self.table.items()):
            if info.channels.pop(channel, None) is not None:
                log.info("consumer channel closed", group=group, remote=channel.remote_addr)
                if not info.channels:
                    del self.table[group]
                else:
                    self._notify(info)

    def scan_not_active_channel(self) -> list[Any]:
        """Drop channels silent for longer than channelExpiredTimeout; returns the channels dropped."""
        self.version += 1
        now = self._now_ms()
        expired: list[Any] = []
        for group, info in list(self.table.items()):
            for channel, ci in list(info.channels.items()):
                if now - ci.last_update_ms > self._channel_expired_ms:
                    log.warn(
                        "consumer channel expired",
                        group=group,
                        client_id=ci.client_id,
                        remote=channel.remote_addr,
                        silent_ms=now - ci.last_update_ms,
                    )
                    del info.channels[channel]
                    expired.append(channel)
            if not info.channels:
                del self.table[group]
            elif expired:
                self._notify(info)
        return expired

    def groups_by_topic(self, topic: str) -> set[str]:
        return {g for g, info in self.table.items() if topic in info.subscriptions}

    def _notify(self, info: ConsumerGroupInfo) -> None:
        if self.on_ids_changed is not None:
            self.on_ids_changed(info.group_name, list(info.channels))
