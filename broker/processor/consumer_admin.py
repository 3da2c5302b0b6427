"""ConsumerAdminProcessor: the admin requests about consumer groups (registered on the admin queue).

GET_CONSUME_STATS (208), GET_CONSUMER_CONNECTION_LIST (203), QUERY_TOPIC_CONSUME_BY_WHO (300),
INVOKE_BROKER_TO_RESET_OFFSET (222, which sends RESET_CONSUMER_CLIENT_OFFSET (220) to every live
consumer of the group), and GET_CONSUMER_RUNNING_INFO (307) / CONSUME_MESSAGE_DIRECTLY (309), which
the broker forwards to one live client and whose answer it returns, as upstream's AdminBrokerProcessor
and Broker2Client do. Bodies keyed by message queue use fastjson's object keys (protocol.md §4.5).

One deliberate difference: upstream picks the RESET_CONSUMER_CLIENT_OFFSET body form by the language
of the *admin* request (the C++ client parses only the ``[{topic, brokerName, queueId, offset}]`` list
form, Java/Go read the map form). We pick it per consumer channel, by the language of that client,
so a reset reaches C++ consumers whatever tool asked for it. Upstream also refuses a reset when any
queue of the topic has no committed offset for the group; clients never commit offset 0, so we only
refuse when the group has no offset for the topic at all. The broker also records the new offsets
itself, so consume stats show them at once and a consumer that reconnects starts from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from broker.processor.admin import fastjson_mq_map, mq_key
from broker.topic import retry_topic
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError, RemotingTimeoutError
from remoting.headers import (
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsRequestHeader,
    ResetOffsetRequestHeader,
    decode_header,
    encode_header,
)

if TYPE_CHECKING:
    from broker.client.consumer_manager import ConsumerManager
    from broker.config import BrokerConfig
    from broker.consumer_offset_manager import ConsumerOffsetManager
    from broker.stats import BrokerStats
    from broker.topic_config_manager import TopicConfigManager
    from store.message_store import MessageStore

log = structlog.get_logger(__name__)

CALL_CLIENT_TIMEOUT_S = 10.0  # upstream Broker2Client.callClient


@dataclass(kw_only=True, eq=False)
class ConsumerAdminProcessor:
    config: BrokerConfig  # live: updateBrokerConfig changes it in place
    store: MessageStore
    topic_config_manager: TopicConfigManager
    consumer_manager: ConsumerManager
    consumer_offset_manager: ConsumerOffsetManager
    stats: BrokerStats

    def get_consume_stats(self, channel, request: RemotingCommand) -> RemotingCommand:
        """ConsumeStats: per queue the broker's max offset, the group's offset and the store time of the
        last consumed message; topics the group has offsets for, minus those its online members no
        longer subscribe (upstream's rule), plus its retry topic."""
        hdr = decode_header(GetConsumeStatsRequestHeader, request.ext_fields)
        group = hdr.consumer_group
        offsets = self.consumer_offset_manager
        if hdr.topic:
            topics = [hdr.topic]
        else:
            topics = sorted(offsets.which_topic_by_consumer(group))
        online = self.consumer_manager.get(group)
        entries: dict[str, Any] = {}
        store = self.store
        broker_name = self.config.broker_name
        for topic in topics:
            tc = self.topic_config_manager.select_topic_config(topic)
            if tc is None:
                continue
            if (
                online is not None
                and online.subscriptions
                and topic not in online.subscriptions
                and topic != retry_topic(group)
            ):
                continue
            for qid in range(tc.write_queue_nums):
                broker_offset = max(store.get_max_offset_in_queue(topic, qid), 0)
                consumer_offset = max(offsets.query_offset(group, topic, qid), 0)
                last = 0
                if consumer_offset > 0:
                    last = max(store.get_message_store_timestamp(topic, qid, consumer_offset - 1), 0)
                entries[mq_key(topic, broker_name, qid)] = {
                    "brokerOffset": broker_offset,
                    "consumerOffset": consumer_offset,
                    "lastTimestamp": last,
                }
        tps = float(self.stats.consume_tps(group))
        body = '{"consumeTps":' + orjson.dumps(tps).decode() + ',"offsetTable":' + fastjson_mq_map(entries) + "}"
        return request.response(ResponseCode.SUCCESS, body=body.encode())

    def get_consumer_connection_list(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(GetConsumerConnectionListRequestHeader, request.ext_fields)
        info = self.consumer_manager.get(hdr.consumer_group)
        if info is None or not info.channels:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{hdr.consumer_group}] not online"
            )
        body = {
            "connectionSet": [ci.to_connection_json() for ci in info.channels.values()],
            "consumeFromWhere": info.consume_from_where,
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "subscriptionTable": {t: s.to_json() for t, s in info.subscriptions.items()},
        }
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    def query_topic_consume_by_who(self, channel, request: RemotingCommand) -> RemotingCommand:
        topic = request.ext_fields.get("topic")
        if not topic:
            return request.response(ResponseCode.SYSTEM_ERROR, "the header field 'topic' is missing")
        groups = self.consumer_manager.groups_by_topic(topic) | self.consumer_offset_manager.which_group_by_topic(topic)
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"groupList": sorted(groups)}))

    # -- reset offsets -------------------------------------------------------------------------
    def reset_offset(self, channel, request: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET: offsets by time (-1 = the end) for every queue of the topic; a
        queue only moves back unless ``isForce``. Every live consumer of the group is told (220)."""
        hdr = decode_header(ResetOffsetRequestHeader, request.ext_fields)
        tc = self.topic_config_manager.select_topic_config(hdr.topic)
        if tc is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] reset offset failed, no topic in this broker. topic={hdr.topic}",
            )
        offsets = self.consumer_offset_manager
        store = self.store
        table: dict[int, int] = {}
        committed = {qid: offsets.query_offset(hdr.group, hdr.topic, qid) for qid in range(tc.write_queue_nums)}
        if all(offset == -1 for offset in committed.values()):
            return request.response(ResponseCode.SYSTEM_ERROR, f"THe consumer group <{hdr.group}> not exist")
        for qid, current in committed.items():
            if hdr.timestamp == -1:
                target = store.get_max_offset_in_queue(hdr.topic, qid)
            else:
                target = store.get_offset_in_queue_by_time(hdr.topic, qid, hdr.timestamp)
            target = max(target, 0)
            # A queue the group never committed (clients skip offset 0) takes the target; upstream
            # refuses the whole reset in that case, which makes resets of young groups fail.
            table[qid] = target if hdr.is_force or current == -1 or target < current else current
        info = self.consumer_manager.get(hdr.group)
        if info is None or not info.channels:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {hdr.group} "
                f"Topic: {hdr.topic} Timestamp: {hdr.timestamp}",
            )
        broker_name = self.config.broker_name
        header = encode_header(
            ResetOffsetRequestHeader(topic=hdr.topic, group=hdr.group, timestamp=hdr.timestamp, is_force=hdr.is_force)
        )
        map_body = self._map_body(hdr.topic, broker_name, table)
        list_body = orjson.dumps(
            {
                "offsetTable": [
                    {"brokerName": broker_name, "offset": off, "queueId": q, "topic": hdr.topic}
                    for q, off in sorted(table.items())
                ]
            }
        )
        told = 0
        for client_channel, ci in list(info.channels.items()):
            body = list_body if _is_cpp(ci.language) else map_body
            try:
                client_channel.invoke_oneway(
                    RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, dict(header), body, oneway=True)
                )
                told += 1
            except RemotingError as exc:
                log.warning(
                    "cannot tell a consumer to reset its offsets",
                    group=hdr.group,
                    client_id=ci.client_id,
                    error=str(exc),
                )
        offsets.reset_offset(hdr.group, hdr.topic, table)
        log.info(
            "consumer offsets reset",
            group=hdr.group,
            topic=hdr.topic,
            timestamp=hdr.timestamp,
            force=hdr.is_force,
            offsets=table,
            clients=told,
        )
        return request.response(ResponseCode.SUCCESS, body=map_body)

    @staticmethod
    def _map_body(topic: str, broker_name: str, table: dict[int, int]) -> bytes:
        entries = {mq_key(topic, broker_name, q): off for q, off in sorted(table.items())}
        return ('{"offsetTable":' + fastjson_mq_map(entries) + "}").encode()

    # -- calls through to a client ---------------------------------------------------------------
    async def call_consumer(self, channel, request: RemotingCommand) -> RemotingCommand:
        """Forward to the named client of the group and return its answer (upstream callConsumer)."""
        hdr = decode_header(GetConsumerRunningInfoRequestHeader, request.ext_fields)
        info = self.consumer_manager.get(hdr.consumer_group)
        ci = info.find_channel(hdr.client_id) if info is not None else None
        if ci is None or not ci.channel.is_active:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"The Consumer <{hdr.consumer_group}> <{hdr.client_id}> not online"
            )
        body = request.body
        if request.code == RequestCode.CONSUME_MESSAGE_DIRECTLY and request.ext_fields.get("msgId"):
            # upstream sends the client the message itself, looked up by its offset message id
            try:
                record = self.store.select_one_message_by_offset(int(request.ext_fields["msgId"][-16:], 16))
            except ValueError:
                record = None
            if record is None:
                return request.response(
                    ResponseCode.SYSTEM_ERROR, f"no message with the offset message id {request.ext_fields['msgId']}"
                )
            body = bytes(record)
        forward = RemotingCommand.request(request.code, dict(request.ext_fields), body)
        try:
            answer = await ci.channel.invoke(forward, CALL_CLIENT_TIMEOUT_S)
        except RemotingTimeoutError as exc:
            return request.response(
                ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{hdr.consumer_group}> <{hdr.client_id}> Timeout: {exc}"
            )
        except RemotingError as exc:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"invoke consumer <{hdr.consumer_group}> <{hdr.client_id}> Exception: {exc}"
            )
        return request.response(answer.code, answer.remark, dict(answer.ext_fields), answer.body)


def _is_cpp(language: Any) -> bool:
    return str(language).upper() in ("CPP", "1")
