"""NamesrvProcessor: the name server's requests (routes, registrations, cluster info, KV config).

One method per code; ``broker.request_table.namesrv_routes`` maps the codes to them.

With ``autoCreateTopicEnable`` the embedded name server invents a route for a topic nobody created,
by asking its in-process broker to create it: the Node client throws on TOPIC_NOT_EXIST instead of
falling back to TBW102 (protocol.md §8), and the C++ push consumer never retries a missing route.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
import structlog

from broker.namesrv.route_info_manager import RouteInfoManager
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import (
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    decode_header,
    encode_header,
)

log = structlog.get_logger(__name__)

FAQ_NO_TOPIC_ROUTE = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

_COMPACT_ROUTE_KEYS = orjson.OPT_SORT_KEYS


_QUEUE_DATA_FIELDS = ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag")


def parse_registration(body: bytes) -> tuple[dict[str, dict], dict | None]:
    """The topic config table and data version of a REGISTER_BROKER body (upstream's RegisterBrokerBody).

    Raises ValueError naming what is wrong: a registration with the wrong shape must be refused before
    it reaches the route table, where a wrong type would fail half-way through replacing a broker's topics.
    """
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"not a JSON object but {type(obj).__name__}")
    wrapper = obj.get("topicConfigSerializeWrapper")
    wrapper = {} if wrapper is None else wrapper
    if not isinstance(wrapper, dict):
        raise ValueError(f"topicConfigSerializeWrapper is not an object but {type(wrapper).__name__}")
    table = wrapper.get("topicConfigTable")
    table = {} if table is None else table
    if not isinstance(table, dict):
        raise ValueError(f"topicConfigTable is not an object but {type(table).__name__}")
    for topic, tc in table.items():
        if not isinstance(tc, dict):
            raise ValueError(f"the topic config of {topic!r} is not an object but {type(tc).__name__}")
        for name in _QUEUE_DATA_FIELDS:
            value = tc.get(name, 0)
            if type(value) is not int or not -(2**31) <= value < 2**31:
                raise ValueError(f"{name} of the topic {topic!r} is not an int32: {value!r}")
    version = wrapper.get("dataVersion")
    if version is not None and not isinstance(version, dict):
        raise ValueError(f"dataVersion is not an object but {type(version).__name__}")
    return table, version


class NamesrvProcessor:
    def __init__(self, routes: RouteInfoManager, *, topic_creator: Callable[[str], bool] | None = None) -> None:
        self.routes = routes
        self.kv_config: dict[str, dict[str, str]] = {}
        self.topic_creator = topic_creator

    # -- routes ---------------------------------------------------------------------------
    def get_route_info_by_topic(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(GetRouteInfoRequestHeader, request.ext_fields)
        route = self.routes.pickup_topic_route_data(hdr.topic)
        if route is None and self.topic_creator is not None and self.topic_creator(hdr.topic):
            route = self.routes.pickup_topic_route_data(hdr.topic)
        if route is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {hdr.topic}" + FAQ_NO_TOPIC_ROUTE,
            )
        # Compact separators and quoted keys: Go parses brokerAddrs by hand (protocol.md §4.1).
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(route, option=_COMPACT_ROUTE_KEYS))

    def register_broker(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(RegisterBrokerRequestHeader, request.ext_fields)
        if hdr.compressed:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                "compressed broker registration is not supported; set compressedRegister=false",
            )
        topic_table, data_version = None, None
        if request.body:
            try:
                topic_table, data_version = parse_registration(bytes(request.body))
            except ValueError as exc:
                log.warning(
                    "bad broker registration", broker_name=hdr.broker_name, broker_addr=hdr.broker_addr, error=str(exc)
                )
                return request.response(ResponseCode.SYSTEM_ERROR, f"register broker body: {exc}")
        self.routes.register_broker(
            hdr.cluster_name,
            hdr.broker_addr,
            hdr.broker_name,
            hdr.broker_id,
            hdr.ha_server_addr,
            topic_table,
            data_version,
        )
        answer = RegisterBrokerResponseHeader(ha_server_addr="", master_addr="")
        return request.response(ResponseCode.SUCCESS, ext_fields=encode_header(answer))

    def unregister_broker(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(UnRegisterBrokerRequestHeader, request.ext_fields)
        self.routes.unregister_broker(hdr.cluster_name, hdr.broker_addr, hdr.broker_name, hdr.broker_id)
        return request.response(ResponseCode.SUCCESS)

    def get_broker_cluster_info(self, channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(self.routes.cluster_info()))

    def get_all_topic_list(self, channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"topicList": self.routes.all_topics()}))

    def get_topics_by_cluster(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(GetTopicsByClusterRequestHeader, request.ext_fields)
        return request.response(
            ResponseCode.SUCCESS, body=orjson.dumps({"topicList": self.routes.topics_by_cluster(hdr.cluster)})
        )

    def delete_topic_in_namesrv(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(DeleteTopicFromNamesrvRequestHeader, request.ext_fields)
        self.routes.delete_topic(hdr.topic, getattr(hdr, "cluster_name", None))
        return request.response(ResponseCode.SUCCESS)

    # -- KV config ------------------------------------------------------------------------
    def put_kv_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(PutKVConfigRequestHeader, request.ext_fields)
        self.kv_config.setdefault(hdr.namespace, {})[hdr.key] = hdr.value
        return request.response(ResponseCode.SUCCESS)

    def get_kv_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(GetKVConfigRequestHeader, request.ext_fields)
        value = self.kv_config.get(hdr.namespace, {}).get(hdr.key)
        if value is None:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {hdr.namespace} Key: {hdr.key}"
            )
        return request.response(ResponseCode.SUCCESS, ext_fields=encode_header(GetKVConfigResponseHeader(value=value)))

    def delete_kv_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(DeleteKVConfigRequestHeader, request.ext_fields)
        self.kv_config.get(hdr.namespace, {}).pop(hdr.key, None)
        return request.response(ResponseCode.SUCCESS)
