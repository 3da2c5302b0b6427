"""SubscriptionGroupManager: consumer group configs (subscriptionGroup.json), auto-created on first use."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import structlog

from broker.config_file import dumps, read_config, write_from_loop, write_if_changed
from broker.data_version import DataVersion
from broker.topic import check_group_name

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    _WIRE = {
        "group_name": "groupName",
        "consume_enable": "consumeEnable",
        "consume_from_min_enable": "consumeFromMinEnable",
        "consume_broadcast_enable": "consumeBroadcastEnable",
        "retry_queue_nums": "retryQueueNums",
        "retry_max_times": "retryMaxTimes",
        "broker_id": "brokerId",
        "which_broker_when_consume_slowly": "whichBrokerWhenConsumeSlowly",
        "notify_consumer_ids_changed_enable": "notifyConsumerIdsChangedEnable",
    }

    def to_json(self) -> dict[str, Any]:
        return {wire: getattr(self, name) for name, wire in self._WIRE.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SubscriptionGroupConfig:
        kwargs: dict[str, Any] = {}
        defaults = {f.name: f.default for f in fields(cls)}
        for name, wire in cls._WIRE.items():
            if wire in data:
                value = data[wire]
                default = defaults[name]
                if isinstance(default, bool):
                    value = value if isinstance(value, bool) else str(value).lower() == "true"
                elif isinstance(default, int):
                    value = int(value)
                kwargs[name] = value
        return cls(**kwargs)


class SubscriptionGroupManager:
    def __init__(self, store_path_root_dir: str, *, auto_create: bool = True, default_retry_max_times: int = 16):
        self._path = Path(store_path_root_dir) / "config" / "subscriptionGroup.json"
        self._auto_create = auto_create
        self._default_retry_max_times = default_retry_max_times
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()
        for system_group in (
            "TOOLS_CONSUMER",
            "FILTERSRV_CONSUMER",
            "SELF_TEST_C_GROUP",
            "CID_ONS-HTTP-PROXY",
            "CID_ONSAPI_PULL",
            "CID_ONSAPI_PERMISSION",
            "CID_ONSAPI_OWNER",
            "CID_RMQ_SYS_TRANS",
        ):
            self.table[system_group] = SubscriptionGroupConfig(system_group)

    def find_subscription_group_config(self, group: str) -> SubscriptionGroupConfig | None:
        sgc = self.table.get(group)
        if sgc is None and self._auto_create:
            reason = check_group_name(group)
            if reason is not None:
                # (upstream 5.x): a group with a name that cannot be a folder is never auto-created
                log.warning("subscription group not auto-created", reason=reason[:300])
                return None
            sgc = SubscriptionGroupConfig(group, retry_max_times=self._default_retry_max_times)
            self.table[group] = sgc
            log.info("auto create a subscription group", group=group)
            self.data_version.next_version()
            self.persist()
        return sgc

    def update_subscription_group_config(self, sgc: SubscriptionGroupConfig) -> None:
        self.table[sgc.group_name] = sgc
        self.data_version.next_version()
        self.persist()

    def delete_subscription_group_config(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            return False
        self.data_version.next_version()
        self.persist()
        return True

    def to_json(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json(),
            "subscriptionGroupTable": {g: c.to_json() for g, c in self.table.items()},
        }

    def load(self) -> None:
        data = read_config(self._path)
        if not data:
            return
        for group, raw in (data.get("subscriptionGroupTable") or {}).items():
            try:
                self.table[group] = SubscriptionGroupConfig.from_json({"groupName": group, **raw})
            except (TypeError, ValueError) as exc:
                log.error("skipping unreadable subscription group", group=group, error=str(exc))
        self.data_version = DataVersion.from_json(data.get("dataVersion"))

    def persist(self, *, sync: bool = False) -> None:
        """Write the table; ``sync``: synced before returning (start and shutdown; a file that already holds
        the table is only synced, not rewritten: ``write_if_changed``), else the fsync
        runs in a worker thread (a change made by a request: ``write_from_loop``)."""
        (write_if_changed if sync else write_from_loop)(self._path, dumps(self.to_json()))
