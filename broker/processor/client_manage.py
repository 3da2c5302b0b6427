"""ClientManageProcessor: HEART_BEAT (34), UNREGISTER_CLIENT (35), CHECK_CLIENT_CONFIG (46).

A heartbeat registers the channel in each producer and consumer group it names, auto-creates the
consumer's subscription group and its ``%RETRY%<group>`` topic, and triggers rebalance notifications
when a group's membership changes, as upstream's ClientManageProcessor does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson
import structlog

from broker.client.channel_info import ClientChannelInfo
from broker.heartbeat import HeartbeatError, parse_heartbeat
from broker.topic import PERM_READ, PERM_WRITE, retry_topic
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import UnregisterClientRequestHeader, decode_header

if TYPE_CHECKING:
    from broker.client.consumer_manager import ConsumerManager
    from broker.client.producer_manager import ProducerManager
    from broker.config import BrokerConfig
    from broker.subscription_group_manager import SubscriptionGroupManager
    from broker.topic_config_manager import TopicConfigManager

#: ``(expressionType, expression) -> predicate``; ValueError for an expression the broker cannot compile.
CompileExpression = Callable[[str, str], Callable[[dict[str, str]], bool]]

log = structlog.get_logger(__name__)


@dataclass(kw_only=True, eq=False)
class ClientManageProcessor:
    config: BrokerConfig  # live: updateBrokerConfig changes it in place
    consumer_manager: ConsumerManager
    producer_manager: ProducerManager
    subscription_group_manager: SubscriptionGroupManager
    topic_config_manager: TopicConfigManager
    compile_expression: CompileExpression
    now_ms: Callable[[], int]

    def reject_request(self) -> bool:
        return False

    async def process_request(self, channel, request: RemotingCommand) -> RemotingCommand | None:
        if request.code == RequestCode.HEART_BEAT:
            return self.heart_beat(channel, request)
        if request.code == RequestCode.UNREGISTER_CLIENT:
            return self.unregister_client(channel, request)
        if request.code == RequestCode.CHECK_CLIENT_CONFIG:
            return self.check_client_config(channel, request)
        return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported")

    def heart_beat(self, channel, request: RemotingCommand) -> RemotingCommand:
        if not request.body:
            return request.response(ResponseCode.SYSTEM_ERROR, "heartbeat without a body")
        try:
            data = parse_heartbeat(orjson.loads(bytes(request.body)))
        except (orjson.JSONDecodeError, HeartbeatError) as exc:
            log.warning("bad heartbeat refused", remote=channel.remote_addr, error=str(exc)[:300])
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad heartbeat body: {exc}")
        now = self.now_ms()
        channel.attrs["client_id"] = data.client_id
        channel.attrs["language"] = request.language
        channel.attrs["version"] = request.version
        for consumer in data.consumers:
            sgc = self.subscription_group_manager.find_subscription_group_config(consumer.group_name)
            notify = True
            if sgc is not None:
                notify = sgc.notify_consumer_ids_changed_enable
                if sgc.retry_queue_nums > 0:
                    self.topic_config_manager.create_topic_in_send_message_back_method(
                        retry_topic(consumer.group_name), sgc.retry_queue_nums, PERM_WRITE | PERM_READ
                    )
            info = ClientChannelInfo(channel, data.client_id, request.language, request.version, now)
            self.consumer_manager.register_consumer(
                consumer, info, notify=notify and self.config.notify_consumer_ids_changed_enable
            )
        for group in data.producer_groups:
            info = ClientChannelInfo(channel, data.client_id, request.language, request.version, now)
            self.producer_manager.register_producer(group, info)
        return request.response(ResponseCode.SUCCESS)

    def unregister_client(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(UnregisterClientRequestHeader, request.ext_fields)
        if hdr.producer_group:
            self.producer_manager.unregister_producer(hdr.producer_group, channel)
        if hdr.consumer_group:
            sgc = self.subscription_group_manager.table.get(hdr.consumer_group)
            notify = sgc.notify_consumer_ids_changed_enable if sgc else True
            self.consumer_manager.unregister_consumer(hdr.consumer_group, channel, notify=notify)
        return request.response(ResponseCode.SUCCESS)

    def check_client_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        if not request.body:
            return request.response(ResponseCode.SUCCESS)
        try:
            body = orjson.loads(bytes(request.body))
            sub = _client_config_subscription(body)
        except (orjson.JSONDecodeError, ValueError) as exc:
            log.warning("bad check client config refused", remote=channel.remote_addr, error=str(exc)[:300])
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad check client config body: {exc}")
        expr_type = (sub.get("expressionType") or "TAG").upper()
        if expr_type != "TAG":
            if not self.config.enable_property_filter:
                return request.response(
                    ResponseCode.SYSTEM_ERROR, f"The broker does not support consumer to filter message by {expr_type}"
                )
            try:
                self.compile_expression(expr_type, sub.get("subString") or "")
            except ValueError as exc:
                return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"parse expression failed: {exc}")
        return request.response(ResponseCode.SUCCESS)


def _client_config_subscription(body: object) -> dict:
    """The ``subscriptionData`` of a CHECK_CLIENT_CONFIG body with string fields, else ValueError."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    sub = body.get("subscriptionData") or {}
    if not isinstance(sub, dict):
        raise ValueError("subscriptionData must be a JSON object")
    for key in ("expressionType", "subString"):
        if sub.get(key) is not None and not isinstance(sub[key], str):
            raise ValueError(f"subscriptionData.{key} must be a string")
    return sub
