"""AdminBrokerProcessor: topic admin, offsets, locks, runtime info, config, stats.

One method per admin code; broker/request_table.py maps each code to its method and queue. The answers are shaped for
upstream's ``mqadmin`` (clusterList, brokerStatus, topicStatus, statsAll, …): the same keys, the same
fastjson quirks for MessageQueue-keyed maps (protocol.md §4.5), the same refusals.

Two ``updateBrokerConfig`` keys are not broker.conf keys but run-time switches of ours:
``logLevel`` (DEBUG/INFO/WARNING/ERROR: the root log level) and ``requestLogEnable`` (true: one debug
line per request on logger ``broker.requests``). ``getBrokerConfig`` lists their current values.
"""

from __future__ import annotations

import math
import os
import shutil
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from broker import logging_setup
from broker.config import ConfigError
from broker.metrics import earliest_message_time
from broker.topic import TopicConfig, check_topic_name, parse_topic_attributes
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    FaultInjectRequestHeader,
    GetBrokerConfigResponseHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    decode_header,
    encode_header,
)

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)

BROKER_VERSION_DESC = "V4_9_8"
BROKER_VERSION = 409

#: Upstream's ``configBlackList`` default: keys updateBrokerConfig refuses with NO_PERMISSION.
CONFIG_BLACK_LIST = ("configBlackList", "brokerConfigPath")
#: updateBrokerConfig keys that are run-time switches, not broker.conf keys.
LOG_LEVEL_KEY = "logLevel"
REQUEST_LOG_KEY = "requestLogEnable"


def mq_key(topic: str, broker_name: str, queue_id: int) -> str:
    """A MessageQueue used as a JSON object key, the way fastjson writes it (protocol.md §4.5)."""
    return orjson.dumps(
        {"brokerName": broker_name, "queueId": queue_id, "topic": topic}, option=orjson.OPT_SORT_KEYS
    ).decode()


def fastjson_mq_map(entries: dict[str, Any]) -> str:
    """Serialize ``{mq_key: value}`` with object keys unquoted, as Java admin tools expect."""
    return (
        "{" + ",".join(f"{k}:{orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode()}" for k, v in entries.items()) + "}"
    )


class AdminBrokerProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.c = controller

    # -- topics ----------------------------------------------------------------------------
    def update_and_create_topic(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(CreateTopicRequestHeader, request.ext_fields)
        reason = check_topic_name(hdr.topic)
        if reason is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, reason)
        if hdr.topic == self.c.config.broker_cluster_name or self.c.topic_config_manager.is_system_topic(hdr.topic):
            return request.response(ResponseCode.SYSTEM_ERROR, f"The topic[{hdr.topic}] is conflict with system topic.")
        if (
            hdr.read_queue_nums <= 0
            or hdr.write_queue_nums <= 0
            or hdr.read_queue_nums > 1024
            or hdr.write_queue_nums > 1024
        ):
            return request.response(
                ResponseCode.SYSTEM_ERROR, "readQueueNums and writeQueueNums must be between 1 and 1024"
            )
        try:
            attributes = parse_topic_attributes(hdr.attributes)
        except ValueError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        tc = TopicConfig(
            hdr.topic,
            read_queue_nums=hdr.read_queue_nums,
            write_queue_nums=hdr.write_queue_nums,
            perm=hdr.perm,
            topic_filter_type=hdr.topic_filter_type,
            topic_sys_flag=hdr.topic_sys_flag or 0,
            order=hdr.order,
            attributes=attributes,
        )
        self.c.topic_config_manager.update_topic_config(tc)
        return request.response(ResponseCode.SUCCESS)

    def delete_topic(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(DeleteTopicRequestHeader, request.ext_fields)
        reason = check_topic_name(hdr.topic)
        if reason is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, reason)
        if self.c.topic_config_manager.is_system_topic(hdr.topic):
            return request.response(ResponseCode.SYSTEM_ERROR, f"The topic[{hdr.topic}] is conflict with system topic.")
        log.info("deleteTopic called", topic=hdr.topic, remote=getattr(channel, "remote_addr", None))
        self.c.topic_config_manager.delete_topic_config(hdr.topic)
        self.c.consumer_offset_manager.remove_topic(hdr.topic)
        self.c.store.delete_topics({hdr.topic})
        return request.response(ResponseCode.SUCCESS)

    def get_all_topic_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(self.c.topic_config_manager.to_json()))

    def get_topic_stats_info(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(GetTopicStatsInfoRequestHeader, request.ext_fields)
        tc = self.c.topic_config_manager.select_topic_config(hdr.topic)
        if tc is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{hdr.topic}] not exist")
        store = self.c.store
        entries = {}
        for qid in range(tc.write_queue_nums):
            max_offset = max(0, store.get_max_offset_in_queue(hdr.topic, qid))  # upstream clamps both at 0
            last = store.get_message_store_timestamp(hdr.topic, qid, max_offset - 1) if max_offset > 0 else 0
            entries[mq_key(hdr.topic, self.c.config.broker_name, qid)] = {
                "lastUpdateTimestamp": last,
                "maxOffset": max_offset,
                "minOffset": max(0, store.get_min_offset_in_queue(hdr.topic, qid)),
            }
        body = '{"offsetTable":' + fastjson_mq_map(entries) + "}"
        return request.response(ResponseCode.SUCCESS, body=body.encode())

    # -- offsets ---------------------------------------------------------------------------
    def get_max_offset(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(GetMaxOffsetRequestHeader, request.ext_fields)
        offset = self.c.store.get_max_offset_in_queue(hdr.topic, hdr.queue_id)
        return request.response(
            ResponseCode.SUCCESS, ext_fields=encode_header(GetMaxOffsetResponseHeader(offset=offset))
        )

    def get_min_offset(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(GetMinOffsetRequestHeader, request.ext_fields)
        offset = self.c.store.get_min_offset_in_queue(hdr.topic, hdr.queue_id)
        return request.response(
            ResponseCode.SUCCESS, ext_fields=encode_header(GetMinOffsetResponseHeader(offset=offset))
        )

    def search_offset_by_timestamp(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(SearchOffsetRequestHeader, request.ext_fields)
        offset = self.c.store.get_offset_in_queue_by_time(hdr.topic, hdr.queue_id, hdr.timestamp)
        return request.response(
            ResponseCode.SUCCESS, ext_fields=encode_header(SearchOffsetResponseHeader(offset=offset))
        )

    def get_earliest_msg_storetime(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(GetEarliestMsgStoretimeRequestHeader, request.ext_fields)
        ts = self.c.store.get_earliest_message_time(hdr.topic, hdr.queue_id)
        return request.response(
            ResponseCode.SUCCESS, ext_fields=encode_header(GetEarliestMsgStoretimeResponseHeader(timestamp=ts))
        )

    def get_all_consumer_offset(self, channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=self.c.consumer_offset_manager.snapshot())

    def _lock_body(self, request: RemotingCommand) -> tuple[str, str, list[tuple[str, str, int]]]:
        """(group, clientId, [(topic, brokerName, queueId)]) of a LOCK/UNLOCK_BATCH_MQ body; ValueError for a
        body of another shape (a client's mistake, answered, not a traceback)."""
        body = orjson.loads(bytes(request.body or b"{}"))
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        mq_set = body.get("mqSet") or []
        if not isinstance(mq_set, list) or not all(isinstance(m, dict) for m in mq_set):
            raise ValueError("mqSet must be a list of objects")
        mqs = []
        for m in mq_set:
            queue_id = m["queueId"]
            if isinstance(queue_id, bool) or not isinstance(queue_id, (int, str)):
                raise ValueError(f"queueId must be an integer, got {type(queue_id).__name__}")
            mqs.append((str(m["topic"]), str(m["brokerName"]), int(queue_id)))
        return str(body.get("consumerGroup", "")), str(body.get("clientId", "")), mqs

    def lock_batch_mq(self, channel, request: RemotingCommand) -> RemotingCommand:
        try:
            group, client_id, mqs = self._lock_body(request)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("bad lock batch body refused", remote=channel.remote_addr, error=str(exc)[:300])
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad lock batch body: {exc}")
        locked = self.c.rebalance_lock_manager.try_lock_batch(group, mqs, client_id)
        body = {"lockOKMQSet": [{"brokerName": b, "queueId": q, "topic": t} for t, b, q in locked]}
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    def unlock_batch_mq(self, channel, request: RemotingCommand) -> RemotingCommand:
        try:
            group, client_id, mqs = self._lock_body(request)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("bad unlock batch body refused", remote=channel.remote_addr, error=str(exc)[:300])
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad unlock batch body: {exc}")
        self.c.rebalance_lock_manager.unlock_batch(group, mqs, client_id)
        return request.response(ResponseCode.SUCCESS)

    # -- config and runtime ----------------------------------------------------------------
    def get_broker_runtime_info(self, channel, request: RemotingCommand) -> RemotingCommand:
        table = {k: str(v) for k, v in self.runtime_table().items()}
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"table": table}))

    def runtime_table(self) -> dict[str, Any]:
        """The controller's runtime info plus the keys upstream's clusterList/brokerStatus read."""
        c = self.c
        info = dict(c.runtime_info())
        windows = c.metrics.windows
        info["msgPutTotalYesterdayMorning"] = windows.put_total_yesterday_morning
        info["msgPutTotalTodayMorning"] = windows.put_total_today_morning
        info["msgGetTotalYesterdayMorning"] = windows.get_total_yesterday_morning
        info["msgGetTotalTodayMorning"] = windows.get_total_today_morning
        end_tx = c.executors.get("end_transaction")
        if end_tx is not None:  # upstream's spelling of these two
            info["EndTransactionQueueSize"] = end_tx.size
            info["EndTransactionThreadPoolQueueCapacity"] = end_tx.capacity
        info["earliestMessageTimeStamp"] = earliest_message_time(c.store) or -1  # upstream: -1 for an empty store
        root = c.config.store_path_root_dir
        if os.path.isdir(root):
            usage = shutil.disk_usage(root)
            info["commitLogDirCapacity"] = (
                f"Total : {human_readable_bytes(usage.total)}, Free : {human_readable_bytes(usage.free)}."
            )
        return info

    def get_broker_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        items = dict(self.c.config.wire_items())
        items[LOG_LEVEL_KEY] = logging_setup.get_level()
        items[REQUEST_LOG_KEY] = str(logging_setup.request_logging_enabled()).lower()
        text = "\n".join(f"{k}={v}" for k, v in sorted(items.items())) + "\n"
        version = orjson.dumps(self.c.config_data_version.to_json()).decode()
        return request.response(
            ResponseCode.SUCCESS,
            ext_fields=encode_header(GetBrokerConfigResponseHeader(version=version)),
            body=text.encode(),
        )

    def update_broker_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        if not request.body:
            # Upstream answers SUCCESS for an empty body (nothing to change); say why nothing happened.
            return request.response(ResponseCode.SYSTEM_ERROR, "updateBrokerConfig needs properties in the body")
        items = parse_properties(bytes(request.body).decode("utf-8", "replace"))
        keys = {k for k, _ in items}
        if keys & set(CONFIG_BLACK_LIST):
            return request.response(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
        switches = {k: v for k, v in items if k in (LOG_LEVEL_KEY, REQUEST_LOG_KEY)}
        items = [(k, v) for k, v in items if k not in switches]
        try:
            if LOG_LEVEL_KEY in switches:
                logging_setup.parse_level(switches[LOG_LEVEL_KEY])  # validate before changing anything
            if REQUEST_LOG_KEY in switches and switches[REQUEST_LOG_KEY].lower() not in ("true", "false"):
                raise ValueError(f"{REQUEST_LOG_KEY} must be true or false, got {switches[REQUEST_LOG_KEY]!r}")
            if items:
                self.c.update_config(items)
        except (ConfigError, ValueError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        if LOG_LEVEL_KEY in switches:
            level = logging_setup.set_level(switches[LOG_LEVEL_KEY])
            log.warning("log level changed", level=level, remote=getattr(channel, "remote_addr", None))
        if REQUEST_LOG_KEY in switches:
            enabled = switches[REQUEST_LOG_KEY].lower() == "true"
            logging_setup.set_request_logging(enabled)
            log.warning("request logging switched", enabled=enabled, remote=getattr(channel, "remote_addr", None))
        return request.response(ResponseCode.SUCCESS)

    # -- stats (mqadmin statsAll) ---------------------------------------------------------
    def view_broker_stats_data(self, channel, request: RemotingCommand) -> RemotingCommand:
        name, key = request.ext_fields.get("statsName"), request.ext_fields.get("statsKey")
        if not name or key is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, "the header fields 'statsName' and 'statsKey' are required"
            )
        data = self.c.metrics.windows.view(name, key)
        if data is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(data, option=orjson.OPT_SORT_KEYS))

    # -- groups and connections -----------------------------------------------------------
    def get_all_subscription_group_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(self.c.subscription_group_manager.to_json()))

    def delete_subscription_group(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(DeleteSubscriptionGroupRequestHeader, request.ext_fields)
        self.c.subscription_group_manager.delete_subscription_group_config(hdr.group_name)
        return request.response(ResponseCode.SUCCESS)

    def get_producer_connection_list(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(GetProducerConnectionListRequestHeader, request.ext_fields)
        conns = self.c.producer_manager.connections(hdr.producer_group)
        if not conns:
            return request.response(ResponseCode.SYSTEM_ERROR, f"the producer group[{hdr.producer_group}] not exist")
        body = {"connectionSet": [ci.to_connection_json() for ci in conns]}
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    # -- fault injection (ours) ------------------------------------------------------------
    def fault_inject(self, channel, request: RemotingCommand) -> RemotingCommand:
        if not self.c.config.fault_injection_enable:
            return request.response(
                ResponseCode.NO_PERMISSION,
                "fault injection is disabled; start the broker with faultInjectionEnable=true",
            )
        hdr = decode_header(FaultInjectRequestHeader, request.ext_fields)
        try:
            self.c.fault_injector.inject(hdr.kind, hdr.target, hdr.duration_ms or 0, hdr.value)
        except ValueError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        return request.response(ResponseCode.SUCCESS)


def parse_properties(text: str) -> list[tuple[str, str]]:
    """``key=value`` lines as Java's Properties writes them (``#`` comments, ``:`` also separates)."""
    items = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            items.append((line, ""))
            continue
        items.append((line[:cut].strip(), line[cut + 1 :].strip()))
    return items


def human_readable_bytes(n: int) -> str:
    """Upstream's MixAll.humanReadableByteCount(n, false): ``"512 B"``, ``"1.5 GiB"``."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), 6)
    return f"{n / 1024**exp:.1f} {'KMGTPE'[exp - 1]}iB"
