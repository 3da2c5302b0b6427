"""AdminBrokerProcessor: the admin codes about topics, queue offsets, queue locks, groups and producers.

One method per admin code; broker/request_table.py maps each code to its method and queue (the codes about
the broker process itself, its runtime info, config, stats and fault injection, are RuntimeAdminProcessor's).
The answers are shaped for upstream's ``mqadmin`` (topicStatus, topicList, consumerProgress, …): the same
keys, the same fastjson quirks for MessageQueue-keyed maps (protocol.md §4.5), the same refusals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from broker.topic import TopicConfig, check_topic_name, parse_topic_attributes
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
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
    from broker.client.producer_manager import ProducerManager
    from broker.client.rebalance_lock_manager import RebalanceLockManager
    from broker.config import BrokerConfig
    from broker.consumer_offset_manager import ConsumerOffsetManager
    from broker.subscription_group_manager import SubscriptionGroupManager
    from broker.topic_config_manager import TopicConfigManager
    from store.message_store import MessageStore

log = structlog.get_logger(__name__)


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


@dataclass(kw_only=True, eq=False)
class AdminBrokerProcessor:
    config: BrokerConfig  # live: updateBrokerConfig changes it in place
    store: MessageStore
    topic_config_manager: TopicConfigManager
    consumer_offset_manager: ConsumerOffsetManager
    subscription_group_manager: SubscriptionGroupManager
    producer_manager: ProducerManager
    rebalance_lock_manager: RebalanceLockManager

    # -- topics ----------------------------------------------------------------------------
    def update_and_create_topic(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(CreateTopicRequestHeader, request.ext_fields)
        reason = check_topic_name(hdr.topic)
        if reason is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, reason)
        if hdr.topic == self.config.broker_cluster_name or self.topic_config_manager.is_system_topic(hdr.topic):
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
        self.topic_config_manager.update_topic_config(tc)
        return request.response(ResponseCode.SUCCESS)

    def delete_topic(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(DeleteTopicRequestHeader, request.ext_fields)
        reason = check_topic_name(hdr.topic)
        if reason is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, reason)
        if self.topic_config_manager.is_system_topic(hdr.topic):
            return request.response(ResponseCode.SYSTEM_ERROR, f"The topic[{hdr.topic}] is conflict with system topic.")
        log.info("deleteTopic called", topic=hdr.topic, remote=getattr(channel, "remote_addr", None))
        self.topic_config_manager.delete_topic_config(hdr.topic)
        self.consumer_offset_manager.remove_topic(hdr.topic)
        self.store.delete_topics({hdr.topic})
        return request.response(ResponseCode.SUCCESS)

    def get_all_topic_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(self.topic_config_manager.to_json()))

    def get_topic_stats_info(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(GetTopicStatsInfoRequestHeader, request.ext_fields)
        tc = self.topic_config_manager.select_topic_config(hdr.topic)
        if tc is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{hdr.topic}] not exist")
        store = self.store
        entries = {}
        for qid in range(tc.write_queue_nums):
            max_offset = max(0, store.get_max_offset_in_queue(hdr.topic, qid))  # upstream clamps both at 0
            last = store.get_message_store_timestamp(hdr.topic, qid, max_offset - 1) if max_offset > 0 else 0
            entries[mq_key(hdr.topic, self.config.broker_name, qid)] = {
                "lastUpdateTimestamp": last,
                "maxOffset": max_offset,
                "minOffset": max(0, store.get_min_offset_in_queue(hdr.topic, qid)),
            }
        body = '{"offsetTable":' + fastjson_mq_map(entries) + "}"
        return request.response(ResponseCode.SUCCESS, body=body.encode())

    # -- offsets ---------------------------------------------------------------------------
    def get_max_offset(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(GetMaxOffsetRequestHeader, request.ext_fields)
        offset = self.store.get_max_offset_in_queue(hdr.topic, hdr.queue_id)
        return _answer(request, GetMaxOffsetResponseHeader(offset=offset))

    def get_min_offset(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(GetMinOffsetRequestHeader, request.ext_fields)
        offset = self.store.get_min_offset_in_queue(hdr.topic, hdr.queue_id)
        return _answer(request, GetMinOffsetResponseHeader(offset=offset))

    def search_offset_by_timestamp(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(SearchOffsetRequestHeader, request.ext_fields)
        offset = self.store.get_offset_in_queue_by_time(hdr.topic, hdr.queue_id, hdr.timestamp)
        return _answer(request, SearchOffsetResponseHeader(offset=offset))

    def get_earliest_msg_storetime(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(GetEarliestMsgStoretimeRequestHeader, request.ext_fields)
        timestamp = self.store.get_earliest_message_time(hdr.topic, hdr.queue_id)
        return _answer(request, GetEarliestMsgStoretimeResponseHeader(timestamp=timestamp))

    def get_all_consumer_offset(self, channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=self.consumer_offset_manager.snapshot())

    # -- queue locks (orderly consumers) ----------------------------------------------------
    def lock_batch_mq(self, channel, request: RemotingCommand) -> RemotingCommand:
        parsed = _lock_body(channel, request, "lock")
        if isinstance(parsed, RemotingCommand):
            return parsed
        group, client_id, mqs = parsed
        locked = self.rebalance_lock_manager.try_lock_batch(group, mqs, client_id)
        body = {"lockOKMQSet": [{"brokerName": b, "queueId": q, "topic": t} for t, b, q in locked]}
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    def unlock_batch_mq(self, channel, request: RemotingCommand) -> RemotingCommand:
        parsed = _lock_body(channel, request, "unlock")
        if isinstance(parsed, RemotingCommand):
            return parsed
        group, client_id, mqs = parsed
        self.rebalance_lock_manager.unlock_batch(group, mqs, client_id)
        return request.response(ResponseCode.SUCCESS)

    # -- groups and connections -----------------------------------------------------------
    def get_all_subscription_group_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(self.subscription_group_manager.to_json()))

    def delete_subscription_group(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(DeleteSubscriptionGroupRequestHeader, request.ext_fields)
        self.subscription_group_manager.delete_subscription_group_config(hdr.group_name)
        return request.response(ResponseCode.SUCCESS)

    def get_producer_connection_list(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(GetProducerConnectionListRequestHeader, request.ext_fields)
        conns = self.producer_manager.connections(hdr.producer_group)
        if not conns:
            return request.response(ResponseCode.SYSTEM_ERROR, f"the producer group[{hdr.producer_group}] not exist")
        body = {"connectionSet": [ci.to_connection_json() for ci in conns]}
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(body))


def _answer(request: RemotingCommand, header: Any) -> RemotingCommand:
    """SUCCESS carrying one typed response header (the offset and store-time queries)."""
    return request.response(ResponseCode.SUCCESS, ext_fields=encode_header(header))


def _lock_body(
    channel: Any, request: RemotingCommand, what: str
) -> tuple[str, str, list[tuple[str, str, int]]] | RemotingCommand:
    """(group, clientId, [(topic, brokerName, queueId)]) of a LOCK/UNLOCK_BATCH_MQ body, or the refusal of a
    body of another shape (a client's mistake: answered with one warning, not a traceback)."""
    try:
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
    except (KeyError, TypeError, ValueError) as exc:
        log.warning(f"bad {what} batch body refused", remote=channel.remote_addr, error=str(exc)[:300])
        return request.response(ResponseCode.SYSTEM_ERROR, f"bad {what} batch body: {exc}")
    return str(body.get("consumerGroup", "")), str(body.get("clientId", "")), mqs
