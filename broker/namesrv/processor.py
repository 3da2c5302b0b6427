"""NamesrvProcessor: the name server's requests (routes, registrations, cluster info, KV config).

One method per code; ``broker.request_table.namesrv_routes`` maps the codes to them.

With ``autoCreateTopicEnable`` the embedded name server invents a route for a topic nobody created,
by asking its in-process broker to create it: the Node client throws on TOPIC_NOT_EXIST instead of
falling back to TBW102 (protocol.md §8), and the C++ push consumer never retries a missing route.
"""

from __future__ import annotations

from typing import Callable

import orjson
import structlog

from broker.namesrv.route_info_manager import RouteInfoManager
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import (DeleteKVConfigRequestHeader, DeleteTopicFromNamesrvRequestHeader,
                              GetKVConfigRequestHeader, GetKVConfigResponseHeader, GetRouteInfoRequestHeader,
                              GetTopicsByClusterRequestHeader, PutKVConfigRequestHeader, RegisterBrokerRequestHeader,
                              RegisterBrokerResponseHeader, UnRegisterBrokerRequestHeader, decode_header,
                              encode_header)

log = structlog.get_logger(__name__)

FAQ_NO_TOPIC_ROUTE = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

_COMPACT_ROUTE_KEYS = orjson.OPT_SORT_KEYS


class NamesrvProcessor:
    def __init__(self, routes: RouteInfoManager, *,
                 topic_creator: Callable[[str], bool] | None = None) -> None:
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
            return request.response(ResponseCode.TOPIC_NOT_EXIST,
                                    f"No topic route info in name server for the topic: {hdr.topic}"
                                    + FAQ_NO_TOPIC_ROUTE)
        # Compact separators and quoted keys: Go parses brokerAddrs by hand (protocol.md §4.1).
        return request.response(ResponseCode.SUCCESS, body=orjson.dumps(route, option=_COMPACT_ROUTE_KEYS))

    def register_broker(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(RegisterBrokerRequestHeader, request.ext_fields)
        if hdr.compressed:
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    "compressed broker registration is not supported; set compressedRegister=false")
        topic_table, data_version = None, None
        if request.body:
            try:
                body = orjson.loads(bytes(request.body))
                wrapper = body.get("topicConfigSerializeWrapper") or {}
                topic_table = wrapper.get("topicConfigTable") or {}
                data_version = wrapper.get("dataVersion")
            except (orjson.JSONDecodeError, AttributeError) as exc:
                return request.response(ResponseCode.SYSTEM_ERROR, f"register broker body is not valid JSON: {exc}")
        self.routes.register_broker(hdr.cluster_name, hdr.broker_addr, hdr.broker_name, hdr.broker_id,
                                    hdr.ha_server_addr, topic_table, data_version)
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
        return request.response(ResponseCode.SUCCESS,
                                body=orjson.dumps({"topicList": self.routes.topics_by_cluster(hdr.cluster)}))

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
            return request.response(ResponseCode.QUERY_NOT_FOUND,
                                    f"No config item, Namespace: {hdr.namespace} Key: {hdr.key}")
        return request.response(ResponseCode.SUCCESS, ext_fields=encode_header(GetKVConfigResponseHeader(value=value)))

    def delete_kv_config(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(DeleteKVConfigRequestHeader, request.ext_fields)
        self.kv_config.get(hdr.namespace, {}).pop(hdr.key, None)
        return request.response(ResponseCode.SUCCESS)
