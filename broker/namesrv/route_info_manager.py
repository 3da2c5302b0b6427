"""RouteInfoManager: which broker serves which topic, as brokers registered it.

It holds upstream's four tables (topic → queue data per broker, broker name → addresses, cluster →
broker names, live brokers with their last registration) and builds TopicRouteData. A broker that
has not re-registered for 120 s is dropped, as upstream's name server does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

log = structlog.get_logger(__name__)

BROKER_CHANNEL_EXPIRED_MS = 120_000


@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        # Quoted integer keys: valid JSON for every client (the Go client parses this object by hand).
        return {
            "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update_ms: int
    data_version: dict[str, Any]
    ha_server_addr: str = ""


class RouteInfoManager:
    def __init__(self, *, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}

    def register_broker(
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_config_table: dict[str, dict[str, Any]] | None,
        data_version: dict[str, Any] | None,
    ) -> None:
        """Record a broker and (for a master) the topics it serves; replaces that broker's topics."""
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)
        broker_data = self.broker_addr_table.get(broker_name)
        first = broker_data is None
        if broker_data is None:
            broker_data = BrokerData(cluster, broker_name)
            self.broker_addr_table[broker_name] = broker_data
        # One address per broker id: a restarted broker on a new port replaces the old entry.
        for bid, addr in list(broker_data.broker_addrs.items()):
            if addr == broker_addr and bid != broker_id:
                del broker_data.broker_addrs[bid]
        broker_data.broker_addrs[broker_id] = broker_addr
        if broker_id == 0 and topic_config_table is not None:
            for queues in self.topic_queue_table.values():
                queues.pop(broker_name, None)
            for topic, tc in topic_config_table.items():
                self.topic_queue_table.setdefault(topic, {})[broker_name] = QueueData(
                    broker_name,
                    int(tc.get("readQueueNums", 0)),
                    int(tc.get("writeQueueNums", 0)),
                    int(tc.get("perm", 6)),
                    int(tc.get("topicSysFlag", 0)),
                )
            for topic in [t for t, q in self.topic_queue_table.items() if not q]:
                del self.topic_queue_table[topic]
        self.broker_live_table[broker_addr] = BrokerLiveInfo(self._now_ms(), data_version or {}, ha_server_addr)
        if first:
            log.info(
                "new broker registered",
                cluster=cluster,
                broker_name=broker_name,
                broker_addr=broker_addr,
                broker_id=broker_id,
            )

    def register_topic(self, broker_name: str, topic: str, tc: dict[str, Any]) -> None:
        """Incremental registration of one topic (an in-process broker creating a topic)."""
        self.topic_queue_table.setdefault(topic, {})[broker_name] = QueueData(
            broker_name,
            int(tc.get("readQueueNums", 0)),
            int(tc.get("writeQueueNums", 0)),
            int(tc.get("perm", 6)),
            int(tc.get("topicSysFlag", 0)),
        )

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        self.broker_live_table.pop(broker_addr, None)
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is not None:
            if broker_data.broker_addrs.get(broker_id) == broker_addr:
                del broker_data.broker_addrs[broker_id]
            if not broker_data.broker_addrs:
                del self.broker_addr_table[broker_name]
                names = self.cluster_addr_table.get(cluster)
                if names is not None:
                    names.discard(broker_name)
                    if not names:
                        del self.cluster_addr_table[cluster]
                for topic, queues in list(self.topic_queue_table.items()):
                    queues.pop(broker_name, None)
                    if not queues:
                        del self.topic_queue_table[topic]
        log.info("broker unregistered", broker_name=broker_name, broker_addr=broker_addr, broker_id=broker_id)

    def scan_not_active_broker(self) -> list[str]:
        now = self._now_ms()
        dropped = []
        for addr, live in list(self.broker_live_table.items()):
            if now - live.last_update_ms > BROKER_CHANNEL_EXPIRED_MS:
                dropped.append(addr)
                for bd in list(self.broker_addr_table.values()):
                    for bid, a in list(bd.broker_addrs.items()):
                        if a == addr:
                            log.warn("broker expired", broker_addr=addr, silent_ms=now - live.last_update_ms)
                            self.unregister_broker(bd.cluster, addr, bd.broker_name, bid)
                self.broker_live_table.pop(addr, None)
        return dropped

    def pickup_topic_route_data(self, topic: str) -> dict[str, Any] | None:
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        broker_datas = [
            self.broker_addr_table[name].to_json() for name in sorted(queues) if name in self.broker_addr_table
        ]
        if not broker_datas:
            return None
        return {
            "brokerDatas": broker_datas,
            "filterServerTable": {},
            "queueDatas": [queues[name].to_json() for name in sorted(queues)],
        }

    def cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {name: bd.to_json() for name, bd in self.broker_addr_table.items()},
            "clusterAddrTable": {c: sorted(names) for c, names in self.cluster_addr_table.items()},
        }

    def all_topics(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr_table.get(cluster, set())
        return sorted(t for t, q in self.topic_queue_table.items() if names & q.keys())

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        if cluster is None:
            self.topic_queue_table.pop(topic, None)
            return
        queues = self.topic_queue_table.get(topic, {})
        for name in self.cluster_addr_table.get(cluster, set()):
            queues.pop(name, None)
        if not queues:
            self.topic_queue_table.pop(topic, None)
