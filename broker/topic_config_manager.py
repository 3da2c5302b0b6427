"""TopicConfigManager: the broker's topic table, its system topics, auto-creation and topics.json.

Auto-creation follows upstream's send path: an unknown topic inherits from ``TBW102`` (which exists
only with ``autoCreateTopicEnable``), with min(client's defaultTopicQueueNums, TBW102's) queues. Every
change bumps the data version and calls ``on_change`` so the broker re-registers with name servers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import structlog

from broker.config import BrokerConfig
from broker.config_file import dumps, read_config, write_from_loop, write_if_changed
from broker.data_version import DataVersion
from broker.topic import (
    BENCHMARK_TOPIC,
    DEFAULT_TOPIC,
    OFFSET_MOVED_EVENT,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    REPLY_TOPIC_POSTFIX,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TopicConfig,
    check_topic_name,
    is_system_topic,
)

log = structlog.get_logger(__name__)

SCHEDULE_QUEUE_NUMS = 18


class TopicConfigManager:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        on_change: Callable[[TopicConfig | None], None] | None = None,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self._config = config
        self._path = Path(config.store_path_root_dir) / "config" / "topics.json"
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self.on_change = on_change
        self._now_ms = now_ms
        self._system_topics: set[str] = set()
        self._create_system_topics()

    # -- start-up -----------------------------------------------------------------------
    def _system(self, topic: str, read: int, write: int, perm: int = PERM_READ | PERM_WRITE) -> None:
        self.table[topic] = TopicConfig(topic, read_queue_nums=read, write_queue_nums=write, perm=perm)
        self._system_topics.add(topic)

    def _create_system_topics(self) -> None:
        c = self._config
        self._system(SELF_TEST_TOPIC, 1, 1)
        if c.auto_create_topic_enable:
            self._system(
                DEFAULT_TOPIC,
                c.default_topic_queue_nums,
                c.default_topic_queue_nums,
                PERM_INHERIT | PERM_READ | PERM_WRITE,
            )
        self._system(BENCHMARK_TOPIC, 1024, 1024)
        if c.cluster_topic_enable:
            self._system(c.broker_cluster_name, 16, 16, c.broker_permission | PERM_READ | PERM_WRITE)
        if c.broker_topic_enable:
            self._system(c.broker_name, 1, 1, c.broker_permission | PERM_READ | PERM_WRITE)
        self._system(OFFSET_MOVED_EVENT, 1, 1)
        self._system(SCHEDULE_TOPIC, SCHEDULE_QUEUE_NUMS, SCHEDULE_QUEUE_NUMS)
        self._system(f"{c.broker_cluster_name}_{REPLY_TOPIC_POSTFIX}", 1, 1)
        self._system(TRANS_HALF_TOPIC, 1, 1)
        self._system(TRANS_OP_HALF_TOPIC, 1, 1)
        if c.trace_topic_enable:
            self._system(c.msg_trace_topic_name, 1, 1)

    def load(self) -> None:
        data = read_config(self._path)
        if not data:
            return
        for name, raw in (data.get("topicConfigTable") or {}).items():
            reason = check_topic_name(name)
            if reason is not None:  # written by an older version that did not check every name
                log.warning("skipping a topic whose name is illegal", topic=name[:200], reason=reason)
                continue
            try:
                self.table[name] = TopicConfig.from_json(raw)
            except (KeyError, TypeError, ValueError) as exc:
                log.error("skipping unreadable topic config", topic=name, error=str(exc))
        self.data_version = DataVersion.from_json(data.get("dataVersion"))
        log.info("topics loaded", count=len(self.table), file=str(self._path))

    def persist(self, *, sync: bool = False) -> None:
        """Write the table; ``sync``: synced before returning (start and shutdown; a file that already holds
        the table is only synced, not rewritten: ``write_if_changed``), else the fsync
        runs in a worker thread (a change made by a request: ``write_from_loop``)."""
        (write_if_changed if sync else write_from_loop)(self._path, dumps(self.to_json()))

    def to_json(self) -> dict:
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {name: tc.to_json() for name, tc in self.table.items()},
        }

    # -- queries -----------------------------------------------------------------------
    def select_topic_config(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def is_system_topic(self, topic: str) -> bool:
        """Upstream's ``TopicValidator.isSystemTopic`` on a running broker: the fixed set and ``rmq_sys_``
        prefix (``broker.topic.is_system_topic``) plus every topic this broker created at start."""
        return topic in self._system_topics or is_system_topic(topic)

    # -- changes -----------------------------------------------------------------------
    def _changed(self, tc: TopicConfig | None) -> None:
        self.data_version.next_version(self._now_ms)
        self.persist()
        if self.on_change is not None:
            self.on_change(tc)

    def create_topic_in_send_message(
        self, topic: str, default_topic: str, remote: str, client_default_topic_queue_nums: int, topic_sys_flag: int
    ) -> TopicConfig | None:
        """Create ``topic`` by inheriting from ``default_topic``, as a producer's first send does upstream."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        if check_topic_name(topic) is not None:
            return None
        default = self.table.get(default_topic)
        if default is None:
            log.warn(
                "create new topic failed, default topic does not exist",
                topic=topic,
                default_topic=default_topic,
                remote=remote,
            )
            return None
        if default_topic == DEFAULT_TOPIC and not self._config.auto_create_topic_enable:
            default.perm = PERM_READ | PERM_WRITE
        if not (default.perm & PERM_INHERIT):
            log.warn(
                "create new topic failed, default topic has no inherit permission",
                topic=topic,
                default_topic=default_topic,
                perm=default.perm,
                remote=remote,
            )
            return None
        queue_nums = min(max(client_default_topic_queue_nums, 1), default.write_queue_nums)
        tc = TopicConfig(
            topic,
            read_queue_nums=queue_nums,
            write_queue_nums=queue_nums,
            perm=default.perm & ~PERM_INHERIT,
            topic_sys_flag=topic_sys_flag,
        )
        self.table[topic] = tc
        log.info("topic auto-created", topic=topic, queues=queue_nums, remote=remote)
        self._changed(tc)
        return tc

    def create_topic_in_send_message_back_method(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0
    ) -> TopicConfig | None:
        """Create a retry or DLQ topic on first use; None when its name could not be a topic (a group
        name too long or illegal for a folder), as upstream answers ``topic[...] not exist``."""
        existing = self.table.get(topic)
        if existing is not None:
            return existing
        reason = check_topic_name(topic)
        if reason is not None:
            log.warning("topic not created", reason=reason, topic=topic[:200])
            return None
        tc = TopicConfig(
            topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums, perm=perm, topic_sys_flag=topic_sys_flag
        )
        self.table[topic] = tc
        log.info("topic created", topic=topic, queues=queue_nums)
        self._changed(tc)
        return tc

    def update_topic_config(self, tc: TopicConfig) -> None:
        old = self.table.get(tc.topic_name)
        self.table[tc.topic_name] = tc
        log.info("topic config updated", topic=tc.topic_name, old=old.to_json() if old else None, new=tc.to_json())
        self._changed(tc)

    def delete_topic_config(self, topic: str) -> bool:
        if self.table.pop(topic, None) is None:
            return False
        log.info("topic deleted", topic=topic)
        self._changed(None)
        return True
